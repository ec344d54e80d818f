import Foundation
package import SessionEngine
package import SessionEngineBackend
package import SessionEngineTestKit
import Synchronization

/// Runs one program against a real engine with a manual clock and a scripted backend, and checks the engine after
/// every step.
///
/// The driver learns what the engine did only from typed values: the events it publishes (through the engine's
/// observer, in the step that publishes them), its metrics and state, and the ledger of runnable work behind
/// ``SessionEngine/waitUntilIdle()``. Every call of the program is counted as made only once it has entered the
/// engine, so the engine receives calls in program order. After each step the driver waits until the engine is idle
/// (every task and call parked on the clock, the backend, a gate, an outcome or draining work), answers the backend's
/// due fetches, and waits again, until nothing is due; then every subscriber has received every event. It never
/// polls and never sleeps on real time.
package final class EngineModelDriver {
    package static let configuration = SessionConfiguration(
        retry: RetryPolicy(initial: .seconds(1), multiplier: 2, cap: .seconds(60)),
        // Misconfigurations (another user's credential, a malformed one) retry slower, within the same cap, so the
        // liveness bounds hold for both.
        misconfigurationRetry: RetryPolicy(initial: .seconds(10), multiplier: 2, cap: .seconds(60)),
        minimumFetchInterval: .seconds(5)
    )
    package static let projectID = "proj_model"
    /// A bound on the steps of a teardown that cannot finish, so a broken engine fails its test instead of hanging.
    package static let teardownSteps = 10_000

    package struct Subscriber {
        package let log: SubscriberLog
        package let task: Task<Void, Never>
        /// How many states the engine had published when the subscriber subscribed.
        package let baseline: Int
        package var active = true
    }

    package let clock = ManualClock()
    package let probe = ModelProbe()
    package let fetcher: ModelFetcher
    package let engine: SessionEngine
    package let verifier: ServiceVerifier
    package var signer: IdentitySigner
    package var secretIndex = 0
    package var model = EngineModel()
    package var subscribers: [Subscriber] = []
    /// Every installed credential, oldest first.
    package var history: [IdentityCredential] = []
    /// How many of the first subscriber's states have been checked against the transition table.
    package var checkedStates = 1
    /// The backend succeeds from now on, for the liveness check.
    package var recovering = false

    /// Creates a driver.
    ///
    /// - Parameters:
    ///   - seed: The engine's random seed.
    ///   - log: The engine's log hook; the driver never reads it.
    package init(seed: UInt64, log: (@Sendable (SessionLogRecord) -> Void)? = nil) {
        let probe = self.probe
        var configuration = Self.configuration
        configuration.randomSeed = seed
        configuration.log = log
        fetcher = ModelFetcher(clock: clock, minimumInterval: configuration.minimumFetchInterval)
        engine = SessionEngine(
            fetcher: fetcher,
            configuration: configuration,
            clock: clock,
            observer: { probe.observe($0) }
        )
        signer = try! IdentitySigner(projectID: Self.projectID, secret: Self.secret(0), clock: clock)
        verifier = ServiceVerifier(
            try! IdentityVerifier(projectID: Self.projectID, secret: Self.secret(0), clock: clock))
    }

    /// Appends a line to the file `SESSIONENGINE_MODEL_TRACE` names, if it names one: each program and step as it
    /// starts, for finding a program that hangs.
    package func trace(_ line: String) {
        guard let path = ProcessInfo.processInfo.environment["SESSIONENGINE_MODEL_TRACE"] else { return }
        if let handle = FileHandle(forWritingAtPath: path) {
            handle.seekToEndOfFile()
            handle.write(Data((line + "\n").utf8))
            handle.closeFile()
        }
    }

    package static func secret(_ index: Int) -> String { "model-secret-\(index)" }

    package static func email(for account: AccountID) -> String { "\(account.rawValue)@example.com" }

    // MARK: - Running a program

    /// Runs the program, then lets the backend succeed and checks liveness, then shuts down and checks for leaks.
    ///
    /// - Returns: The first broken invariant, or `nil`.
    package func run(_ program: [EngineOperation]) async -> PropertyFailure? {
        await start()
        trace("program \(program)")
        var step = 0
        do {
            for operation in program {
                step += 1
                trace("step \(step) \(operation) | \(activity)")
                try await perform(operation)
                try await settle()
                try check()
            }
            step += 1
            try await checkLiveness()
            try await shutDownAndCheckLeaks()
            return nil
        } catch {
            trace("failed: \(error)")
            let events = probe.recentEvents.map { "\n      \($0)" }.joined()
            await tearDown()
            let place = step <= program.count ? "step \(step) \(program[step - 1])" : "after the program"
            return PropertyFailure("\(place): \(error)\n    the engine's last events:\(events)")
        }
    }

    private func start() async {
        let probe = self.probe
        await engine.addAccountChangeHook { [weak engine] change in
            await probe.hook(change, scopedWork: engine?.metrics.scopedWork ?? 0)
        }
        subscribe()
    }

    private func perform(_ operation: EngineOperation) async throws {
        switch operation {
        case .signIn(let account), .switchAccount(let account):
            await beginChange(to: account)
        case .signOut:
            await beginChange(to: nil)
        case .advance(let seconds):
            _ = try await advance(by: .seconds(seconds))
        case .advancePastExpiry(let seconds):
            var delay = 300.0
            if let installed = model.installed {
                delay = max(0, installed.expirationDate.timeIntervalSince(clock.now))
            }
            _ = try await advance(by: .seconds(min(delay, 4000) + Double(seconds)))
        case .jumpWallClock(let seconds):
            clock.jumpWallClock(by: .seconds(seconds))
        case .readHeaders(let report):
            try await readHeaders(reportingRejection: report)
        case .work(let kind):
            await launchWork(kind)
        case .reportRejection(let older):
            try await reportRejection(older: older)
        case .renew:
            await launchRenew()
        case .rotateSecret:
            secretIndex += 1
            signer = try! IdentitySigner(projectID: Self.projectID, secret: Self.secret(secretIndex), clock: clock)
            verifier.rotate(to: Self.secret(secretIndex))
        case .subscribe:
            subscribe()
        case .stopSubscriber(let index):
            let active = subscribers.indices.filter { $0 > 0 && subscribers[$0].active }
            guard !active.isEmpty else { return }
            let chosen = active[index % active.count]
            subscribers[chosen].active = false
            subscribers[chosen].task.cancel()
            await subscribers[chosen].log.waitUntilFinished()
        case .nextFetch(let behaviour):
            fetcher.enqueue(behaviour)
        case .stalledChange(let target, let partner):
            try await stalledChange(to: target, partner: partner)
        case .concurrentChanges(let first, let second):
            // The second change reaches the engine right after the first has begun, before its preparation is
            // known to have run: the model accepts either.
            await beginChange(to: first)
            await beginChange(to: second, racing: true)
        case .changeDuringWork(let target):
            // The work may start before the change begins or after it has installed the next credential.
            let next = target == model.account ? model.epoch : model.epoch + 1
            await launchWork(.long(seconds: 600), alsoAllowing: next)
            await beginChange(to: target)
        }
    }

    // MARK: - Calls

    /// Starts `call` in a task of its own and returns once it has entered the engine, so the engine receives the
    /// program's calls in program order; the call runs on.
    private func enter(_ call: @escaping @Sendable () async -> Void) async {
        let ledger = engine.ledger!
        let entered = ledger.callsEntered + 1
        Task { await call() }
        await ledger.waitUntilEntered(entered)
    }

    /// Begins an account change in the model and calls the engine; the call runs on in its own task.
    ///
    /// - Parameter racing: The change follows another one that may not have run its hooks yet.
    private func beginChange(to target: AccountID?, racing: Bool = false) async {
        let held = probe.changesHeldByWork
        let began = model.beginChange(to: target, superseding: held.calls + held.tasks + (racing ? 1 : 0))
        let epoch = began ?? model.epoch
        let engine = self.engine
        let probe = self.probe
        let name = target.map { "switchAccount(to: \($0))" } ?? "signOut()"
        let call = probe.callStarted(name)
        // A sign-out that finds one under way waits for it, so it is held by the same work.
        let change = began != nil || target == nil ? probe.changeStarted(epoch: epoch) : nil
        await enter {
            defer {
                if let change { probe.changeFinished(change) }
                probe.callFinished(call)
            }
            do {
                if let target {
                    try await engine.switchAccount(to: target)
                    if !probe.wasInstalled(in: epoch) {
                        probe.violation("\(name) returned without a credential installed in epoch \(epoch)")
                    }
                } else {
                    await engine.signOut()
                }
            } catch {
                probe.callFailed(name, error, allowed: [.accountChanged, .backendSessionEnded])
            }
            // A sign-out that found one under way is done only once that one is: both leave no work behind.
            if began != nil || target == nil { probe.checkDrained(before: epoch, after: name) }
        }
    }

    /// Runs scoped work; the credential it receives must belong to the current epoch (or to `alsoAllowing`).
    private func launchWork(_ kind: WorkKind, alsoAllowing laterEpoch: UInt64? = nil) async {
        let engine = self.engine
        let probe = self.probe
        let clock = self.clock
        let verifier = self.verifier
        let epochs: Set<UInt64> = [model.epoch, laterEpoch ?? model.epoch]
        let call = probe.callStarted("withIdentity(\(kind))")
        // Set when a `.rejectedWhenCancelled` body was cancelled: only the engine cancels bodies here.
        let cancelledByEngine = Locked(false)
        await enter {
            defer { probe.callFinished(call) }
            do {
                _ = try await engine.withIdentity { credential -> String in
                    let id = probe.workStarted(with: credential, at: clock.now, allowedEpochs: epochs)
                    defer { probe.workEnded(id) }
                    switch kind {
                    case .quick:
                        break
                    case .verifying:
                        if case .invalid = verifier.verify(credential) { throw SessionError.credentialRejected }
                    case .long(let seconds):
                        try await clock.sleep(for: .seconds(seconds))
                    case .stubborn(let seconds):
                        probe.bodySleeps(1, stubborn: true)
                        defer { probe.bodySleeps(-1, stubborn: true) }
                        await clock.sleepIgnoringCancellation(for: .seconds(seconds))
                        try Task.checkCancellation()
                    case .rejectedWhenCancelled(let seconds):
                        do {
                            try await clock.sleep(for: .seconds(seconds))
                        } catch {
                            cancelledByEngine.withLock { $0 = true }
                            throw SessionError.credentialRejected
                        }
                    }
                    return credential.email
                }
            } catch is CancellationError {
                // The work's own sleep was cancelled by the engine; withIdentity reports it as the error it threw.
            } catch {
                if cancelledByEngine.withLock({ $0 }), (error as? SessionError)?.code != .accountChanged {
                    probe.violation("withIdentity(\(kind)): the engine cancelled the work, which failed with \(error)")
                }
                probe.callFailed(
                    "withIdentity",
                    error,
                    allowed: [
                        .signedOut, .switching, .invalidIdentity, .accountChanged, .fetchFailed, .identityMismatch,
                        .credentialExpiredOnArrival, .lifetimeTooLong, .invalidCredential, .backendSessionEnded,
                    ]
                )
            }
        }
    }

    private func launchRenew() async {
        let engine = self.engine
        let probe = self.probe
        let clock = self.clock
        let epoch = model.epoch
        let call = probe.callStarted("renew()")
        await enter {
            defer { probe.callFinished(call) }
            do {
                let credential = try await engine.renew()
                let origins = probe.origins(of: credential)
                if !origins.contains(epoch) {
                    probe.violation(
                        "invariant 1: renew() in epoch \(epoch) returned a credential of epochs \(origins.sorted())"
                    )
                }
                if !credential.isValid(at: clock.now) {
                    probe.violation(
                        "invariant 2: renew() returned a credential that expired at \(credential.expiresAt)")
                }
            } catch {
                probe.callFailed(
                    "renew()",
                    error,
                    allowed: [
                        .signedOut, .accountChanged, .fetchFailed, .identityMismatch, .credentialExpiredOnArrival,
                        .lifetimeTooLong, .invalidCredential, .backendSessionEnded,
                    ]
                )
            }
        }
    }

    private func readHeaders(reportingRejection report: Bool) async throws {
        let headers = try checkFastPath()
        guard report, let headers, let credential = try? headers.credential() else { return }
        guard case .invalid = verifier.verify(credential) else { return }
        try await reject(credential)
    }

    private func reportRejection(older: Bool) async throws {
        var credential = model.installed
        if older { credential = history.last { $0 != model.installed } }
        guard let credential else { return }
        try await reject(credential)
    }

    /// Reports a rejection as a host would, and checks its immediate effect.
    private func reject(_ credential: IdentityCredential) async throws {
        let before = engine.state
        await engine.credentialRejected(credential)
        let after = engine.state
        guard credential == model.installed else {
            if after != before {
                throw Violation("a rejection of a credential that is not installed changed \(before) to \(after)")
            }
            return
        }
        model.rejected = credential.signature
        if after.isIdentified || after.isRenewing {
            throw Violation("the rejected credential is still usable: \(after)")
        }
    }

    /// Begins an account change whose hooks are held at a gate, lets everything else settle, begins the partner
    /// while the hooks are held, then opens the gate.
    private func stalledChange(to target: AccountID?, partner: Partner) async throws {
        guard target != model.account, probe.stubbornWork == 0 else {
            await beginChange(to: target)
            try await settle()
            try await perform(partner.operation)
            return
        }
        probe.stallNextHook(clock: clock)
        await beginChange(to: target)
        // Only the held change is neither waiting nor asleep: the engine is idle once its hooks wait at the gate.
        await engine.waitUntilIdle()
        guard probe.hookStalled else {
            throw Violation("the change's hooks did not run while the engine had nothing else to do: \(activity)")
        }
        switch partner {
        case .change(let next):
            await beginChange(to: next)
        case .renew:
            await launchRenew()
        case .work:
            await launchWork(.quick)
        case .readHeaders:
            _ = try checkFastPath()
        }
        await engine.waitUntilIdle()
        probe.releaseHooks()
    }

    private func subscribe() {
        // The engine is idle: nothing is published between reading its last sequence number and subscribing.
        let log = SubscriberLog(startSequence: probe.lastSequence)
        let events = engine.events(bufferLimit: .max)
        let baseline = probe.stateCount
        let task = Task {
            for await event in events { log.record(event) }
            log.finish()
        }
        subscribers.append(Subscriber(log: log, task: task, baseline: baseline))
    }

    // MARK: - Waiting for the engine

    /// Waits until the engine has reacted to everything, answering the backend's due fetches on the way, and until
    /// every subscriber has received every event; a stale answer is delivered on its own and must change nothing.
    package func settle() async throws {
        await settleLive()
        while let stale = dueStaleRequest {
            let events = probe.eventCount
            let state = engine.state
            answer(stale)
            await settleLive()
            if probe.eventCount != events || engine.state != state {
                throw Violation(
                    "invariant 6: a result of epoch \(stale.epoch) changed the engine in epoch \(model.epoch): "
                        + "\(state) → \(engine.state)"
                )
            }
        }
        let last = probe.lastSequence
        for subscriber in subscribers where subscriber.active { await subscriber.log.waitUntilReceived(last) }
    }

    /// Waits until the engine is idle with no live fetch due.
    private func settleLive() async {
        repeat { await engine.waitUntilIdle() } while answerLiveRequests()
        // Calls that have left the engine finish their checks before the program goes on: a check reads the clock.
        await probe.waitUntilCallsFinished(leaving: engine.ledger!.callsInside)
    }

    package var activity: String {
        let metrics = engine.metrics
        return "tasks \(metrics.liveTasks), runnable \(engine.ledger!.runnable), sleepers \(clock.sleeperCount), "
            + "fetches \(fetcher.pendingCount), calls \(probe.outstanding), waiters \(metrics.waiters), "
            + "scoped work \(metrics.scopedWork), changes held by work \(probe.changesHeldByWork), "
            + "subscribers \(metrics.subscribers), states \(probe.stateCount), state \(engine.state), "
            + "calls in progress \(probe.callsInProgress)"
    }

    /// Moves the clocks forward by `total`, stopping at every timer and every due answer to let the engine react,
    /// and checking the engine at each stop; returns early once `condition` holds.
    package func advance(by total: Duration, until condition: (() -> Bool)? = nil) async throws -> Bool {
        let target = clock.uptime + total
        var stops = 0
        while true {
            try await settle()
            try check()
            if let condition, condition() { return true }
            let now = clock.uptime
            guard now < target else { return false }
            var next = target
            if let deadline = clock.nextDeadline { next = min(next, deadline) }
            if let due = nextDue { next = min(next, due) }
            clock.advance(by: max(.zero, next - now))
            stops += 1
            if stops > 5000 { throw Violation("the engine woke more than 5000 times in \(total)") }
        }
    }
}
