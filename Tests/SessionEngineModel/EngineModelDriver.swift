import Foundation
package import SessionEngine
package import SessionEngineBackend
package import SessionEngineTestKit
import Synchronization

/// Runs one program against a real engine with a manual clock and a scripted backend, and checks the engine after
/// every step.
///
/// The driver learns what the engine did only from typed values: the events it publishes (through the engine's
/// observer, in the step that publishes them), its metrics and state. Every task of the program and of the engine runs
/// where the program's ``WorkOwner`` sees it (the clock's executor, or the schedule explorer), and a call of the
/// program is made only once the previous one has done all it can, so the engine receives calls in program order.
/// After each step the driver waits until the engine is idle (every task and call parked on the clock, the backend, a
/// gate, an outcome or draining work), answers the backend's
/// due fetches, and waits again, until nothing is due; then every subscriber has received every event. It never
/// polls and never sleeps on real time.
package final class EngineModelDriver {
    package static let configuration = {
        var configuration = SessionConfiguration(
            retry: RetryPolicy(initial: .seconds(1), multiplier: 2, cap: .seconds(60)),
            // Misconfigurations (another user's credential, a malformed one) retry slower, within the same cap, so
            // the liveness bounds hold for both.
            misconfigurationRetry: RetryPolicy(initial: .seconds(10), multiplier: 2, cap: .seconds(60)),
            minimumFetchInterval: .seconds(5)
        )
        // The reference model knows no fetch deadline: its slow and hanging fetches outlast any program. The
        // deadline is proven by the pool's model programs and by named tests (FetchDeadlineTests).
        configuration.fetchTimeout = .seconds(7 * 86_400)
        return configuration
    }()
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

    package let clock: ManualClock
    package let probe = ModelProbe()
    package let fetcher: ModelFetcher
    package let engine: SessionEngine
    /// Runs the engine's and the program's tasks and says when none can run: the clock's executor, or the schedule
    /// explorer, so that every hop of every task is a step it schedules.
    package let owner: WorkOwner
    package let verifier: ServiceVerifier
    /// The backend: its signer and clocks, shared with the fetches that answer by themselves.
    package let backend: ModelBackend
    package var signer: IdentitySigner {
        get { backend.signer }
        set { backend.signer = newValue }
    }
    package var secretIndex = 0
    package var model = EngineModel()
    package var subscribers: [Subscriber] = []
    /// Every installed credential, oldest first.
    package var history: [IdentityCredential] = []
    /// How many of the first subscriber's states have been checked against the transition table.
    package var checkedStates = 1
    /// The backend succeeds from now on, for the liveness check.
    package var recovering = false
    /// The program shut the engine down gracefully: the operations after it are not run.
    package var shutDownGracefully = false
    /// The program cancelled the task that runs `run()`: the operations after it are not run, and the engine shuts
    /// down through that cancellation instead of ``SessionEngine/shutdown()``.
    package var stoppedRunning = false
    /// The task that runs ``SessionEngine/run()`` from the program's start, and the gate it opens once `run()`
    /// returns, which it must once the engine has shut down, however that came about.
    package var running: (task: Task<Void, Never>, returned: Gate)?

    /// Creates a driver.
    ///
    /// - Parameters:
    ///   - seed: The engine's random seed.
    ///   - log: The engine's log hook; the driver never reads it.
    ///   - explorer: The schedule explorer's owner of the program's work; `nil` runs it on the clock's executor,
    ///     where the engine's and the program's tasks run on real threads at the same time, beside the engine's actor.
    package init(seed: UInt64, log: (@Sendable (SessionLogRecord) -> Void)? = nil, explorer: WorkOwner? = nil) {
        let probe = self.probe
        let clock = ManualClock(executor: ManualExecutor(tasksRunInParallel: explorer == nil))
        self.clock = clock
        let owner = explorer ?? WorkOwner(clock: clock)
        var configuration = Self.configuration
        configuration.randomSeed = seed
        configuration.log = log
        configuration.taskExecutor = owner.configuredExecutor
        self.owner = owner
        fetcher = ModelFetcher(
            clock: clock, minimumInterval: configuration.minimumFetchInterval, taskExecutor: owner.taskExecutor)
        engine = SessionEngine(
            fetcher: fetcher,
            configuration: configuration,
            clock: clock,
            observer: { probe.observe($0) }
        )
        backend = ModelBackend(
            signer: try! IdentitySigner(projectID: Self.projectID, secret: Self.secret(0), clock: clock),
            clock: clock,
            probe: probe
        )
        let backend = self.backend
        fetcher.answerOnItsOwn { request, answer in backend.result(for: request, behaviour: answer.scripted) }
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
    package func run(_ program: [EngineOperation]) async -> Violation? {
        await start()
        trace("program \(program)")
        var step = 0
        do {
            for operation in program {
                step += 1
                trace("step \(step) \(operation) | \(activity)")
                try await perform(operation)
                if shutDownGracefully || stoppedRunning { break }
                try await settle()
                try check()
            }
            step = program.count + 1
            if !shutDownGracefully && !stoppedRunning { try await checkLiveness() }
            try await shutDownAndCheckLeaks()
            return nil
        } catch {
            trace("failed: \(error)")
            let events = probe.recentEvents.map { "\n      \($0)" }.joined()
            await tearDown()
            let place = step <= program.count ? "step \(step) \(program[step - 1])" : "after the program"
            return Violation("\(place): \(error)\n    the engine's last events:\(events)")
        }
    }

    private func start() async {
        let probe = self.probe
        await engine.addAccountChangeHook { [weak engine] change in
            await probe.hook(change, scopedWork: engine?.metrics.scopedWork ?? 0)
        }
        let (engine, returned) = (self.engine, Gate())
        let run = owner.start {
            try? await engine.run()
            if !probe.shuttingDown && !probe.gracefulShutdown { probe.violation("run() returned before any shutdown") }
            returned.open()
        }
        running = (run, returned)
        subscribe()
    }

    private func perform(_ operation: EngineOperation) async throws {
        switch operation {
        case .signIn(let account):
            await beginChange(to: account, via: .signIn(timeout: nil))
        case .switchAccount(let account):
            await beginChange(to: account)
        case .signInWithin(let account, let seconds):
            await beginChange(to: account, via: .signIn(timeout: .seconds(seconds)))
        case .switchWithin(let account, let seconds):
            await beginChange(to: account, via: .switchAccount(timeout: .seconds(seconds)))
        case .signInExpecting(let account, let seconds):
            try await signIn(account, expectingItsUserWithin: seconds.map { .seconds($0) })
        case .addHook:
            await addHook()
        case .signOut:
            await beginChange(to: nil)
        case .advance(let seconds):
            _ = try await advance(by: .seconds(seconds))
        case .advancePastExpiry(let seconds):
            var delay = 300.0
            if let expiry = model.localExpiry {
                delay = max(0, expiry.timeIntervalSince(clock.now))
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
        case .backendClock(let setup):
            backend.clock = setup
        case .push(let kind):
            try await push(kind)
        case .signInWith(let account):
            try await signIn(account, pushing: true)
        case .cancelled(.renew):
            try await cancelledRenew()
        case .cancelled(.signIn(let account)):
            try await signIn(account, cancelled: true)
        case .cancelled(.rejectedWork):
            try await cancelledRejectedWork()
        case .gracefulShutdown(let grace):
            try await shutDownGracefully(grace: .seconds(grace))
        case .stopRunning:
            stoppedRunning = true
        }
    }

    // MARK: - Calls

    /// Starts `call` in a task of its own and returns once it has done all it can (it has entered the engine and
    /// waits there, or returned), so the engine receives the program's calls in program order; the call runs on.
    @discardableResult
    package func enter(_ call: @escaping @Sendable () async -> Void) async -> Task<Void, Never> {
        let task = owner.start { await call() }
        await owner.waitUntilIdle()
        return task
    }

    /// Which public call begins an account change, with its deadline.
    enum ChangeCall {
        case switchAccount(timeout: Duration?)
        case signIn(timeout: Duration?)
        /// ``SessionEngine/signIn(_:expecting:timeout:)`` with the user as the host spells it.
        case signInExpecting(String, timeout: Duration?)

        var timeout: Duration? {
            switch self {
            case .switchAccount(let timeout), .signIn(let timeout), .signInExpecting(_, let timeout): timeout
            }
        }

        func name(_ target: AccountID) -> String {
            let deadline = timeout.map { ", timeout: \($0)" } ?? ""
            return switch self {
            case .switchAccount: "switchAccount(to: \(target)\(deadline))"
            case .signIn: "signIn(\(target)\(deadline))"
            case .signInExpecting(let email, _): "signIn(\(target), expecting: \"\(email)\"\(deadline))"
            }
        }

        func perform(on engine: SessionEngine, _ target: AccountID) async throws {
            switch self {
            case .switchAccount(nil): try await engine.switchAccount(to: target)
            case .switchAccount(let timeout?): try await engine.switchAccount(to: target, timeout: timeout)
            case .signIn(nil): try await engine.signIn(target)
            case .signIn(let timeout?): try await engine.signIn(target, timeout: timeout)
            case .signInExpecting(let email, let timeout):
                try await engine.signIn(target, expecting: email, timeout: timeout)
            }
        }
    }

    /// Begins an account change in the model and calls the engine; the call runs on in its own task.
    ///
    /// A call with a deadline that fails with `SIGN_IN_TIMED_OUT` must do so at its deadline or later; the change
    /// goes on without it, so the model goes on as if the call still waited.
    ///
    /// - Parameters:
    ///   - call: The public call that begins it.
    ///   - racing: The change follows another one that may not have run its hooks yet.
    ///   - pushed: A credential the host hands over with the sign-in (``SessionEngine/signIn(_:with:)``).
    ///   - cancelled: Set once the program cancels the call: it must then fail with cancellation.
    /// - Returns: The call's task.
    @discardableResult
    func beginChange(
        to target: AccountID?,
        via call: ChangeCall = .switchAccount(timeout: nil),
        racing: Bool = false,
        pushing pushed: IdentityCredential? = nil,
        cancelled: Locked<Bool>? = nil
    ) async -> Task<Void, Never> {
        // Work of an earlier epoch that the racing change's predecessor cancelled may be ending right now, so only a
        // change that follows an idle engine knows which predecessors are still held.
        let began = model.beginChange(to: target, superseded: racing ? [] : probe.heldEpochs, racing: racing)
        if case .signInExpecting(let email, _) = call, began != nil || model.pinnedEmail == nil {
            // The expectation pins the account session to the user from the start, or pins one not pinned yet.
            model.pinnedEmail = IdentityEmail.normalize(email)
        }
        if began != nil, let pushed { model.deferredPush = pushed }
        syncBackend()
        let epoch = began ?? model.epoch
        let engine = self.engine
        let probe = self.probe
        let name = target.map { call.name($0) } ?? "signOut()"
        let ticket = probe.calls.started(name)
        // A sign-out that finds one under way waits for it, so it is held by the same work.
        let change = began != nil || target == nil ? probe.changeStarted(epoch: epoch) : nil
        let (clock, deadline) = (self.clock, call.timeout.map { self.clock.uptime + $0 })
        return await enter {
            var timedOut = false
            defer {
                if let change { timedOut ? probe.changeOutlivedItsCall(change) : probe.changeFinished(change) }
                probe.calls.finished(ticket)
            }
            do {
                if let target {
                    if let pushed {
                        try await engine.signIn(target, with: pushed)
                    } else {
                        try await call.perform(on: engine, target)
                    }
                    probe.resumed(name, promised: .installedIn(epoch), engine: engine)
                    if !probe.wasInstalled(in: epoch) {
                        probe.violation("\(name) returned without a credential installed in epoch \(epoch)")
                    }
                    if cancelled?.withLock({ $0 }) == true {
                        probe.violation("\(name), cancelled while it waited, returned instead of failing")
                    }
                } else {
                    await engine.signOut()
                }
            } catch is CancellationError where cancelled?.withLock({ $0 }) == true {
                // The program cancelled the call while it waited: the sign-in goes on without it.
            } catch let error as SessionError where error.code == .signInTimedOut && deadline != nil {
                timedOut = true
                if let deadline, clock.uptime < deadline {
                    probe.violation("\(name) timed out at \(clock.uptime), before its deadline \(deadline)")
                }
                return
            } catch {
                probe.callFailed(name, error, allowed: [.accountChanged, .backendSessionEnded])
            }
            // A sign-out that found one under way is done only once that one is: both leave no work behind.
            if began != nil || target == nil { probe.checkDrained(before: epoch, after: name) }
        }
    }

    /// Runs scoped work; the credential it receives must belong to the current epoch (or to `alsoAllowing`).
    func launchWork(_ kind: WorkKind, alsoAllowing laterEpoch: UInt64? = nil) async {
        let engine = self.engine
        let probe = self.probe
        let clock = self.clock
        let verifier = self.verifier
        let epochs: Set<UInt64> = [model.epoch, laterEpoch ?? model.epoch]
        let call = probe.calls.started("withIdentity(\(kind))")
        // Set when a `.rejectedWhenCancelled` body was cancelled: only the engine cancels bodies here.
        let cancelledByEngine = Locked(false)
        await enter {
            defer { probe.calls.finished(call) }
            do {
                _ = try await engine.withIdentity { credential -> String in
                    probe.resumed(
                        "withIdentity(\(kind))",
                        promised: .credential(email: credential.email, expiresAt: credential.expiresAt, epoch: nil),
                        engine: engine
                    )
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
                        probe.stubbornBodySleeps(1)
                        defer { probe.stubbornBodySleeps(-1) }
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

    func launchRenew() async {
        let engine = self.engine
        let probe = self.probe
        let clock = self.clock
        let epoch = model.epoch
        let call = probe.calls.started("renew()")
        await enter {
            defer { probe.calls.finished(call) }
            do {
                let credential = try await engine.renew()
                probe.resumed(
                    "renew()",
                    promised: .credential(email: credential.email, expiresAt: credential.expiresAt, epoch: epoch),
                    engine: engine
                )
                let origins = probe.origins(of: credential)
                if !origins.contains(epoch) {
                    probe.violation(
                        "invariant 1: renew() in epoch \(epoch) returned a credential of epochs \(origins.sorted())"
                    )
                }
                probe.checkUnexpired("renew()", credential, at: clock.now)
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
        let installs = probe.installCount
        let statesBefore = probe.stateCount
        await engine.credentialRejected(credential)
        let after = engine.state
        guard credential == model.installed else {
            if after != before {
                throw Violation("a rejection of a credential that is not installed changed \(before) to \(after)")
            }
            return
        }
        model.rejected = credential.signature
        // A renewal that answers by itself may already have installed the next credential, on another thread, while
        // this check reads: an identical credential issued again in the same second is a new install, published as a
        // state before its install is counted. The rejection took effect if its step published a state that hands
        // nothing out, or if the credential was not usable when it was reported.
        guard before.isIdentified || before.isRenewing else { return }
        switch after {
        case .identified(let identity), .renewing(let identity):
            let handsNothingOut = probe.states.dropFirst(statesBefore).contains { !$0.isIdentified && !$0.isRenewing }
            if identity.expiresAt == credential.expiresAt && identity.email == credential.email && !handsNothingOut
                && probe.installCount == installs
            {
                throw Violation("the rejected credential is still usable: \(after)")
            }
        case .signedOut, .switching, .expired:
            break
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
        await owner.waitUntilIdle()
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
        await owner.waitUntilIdle()
        probe.releaseHooks()
    }

    private func subscribe() {
        // The engine is idle: nothing is published between reading its last sequence number and subscribing.
        let log = SubscriberLog(startSequence: probe.lastSequence)
        let events = engine.events(bufferLimit: .max)
        let baseline = probe.stateCount
        let engine = self.engine
        let probe = self.probe
        let startSequence = log.startSequence
        let task = owner.start {
            for await event in events {
                switch event.kind {
                case .stateChanged, .renewed:
                    // What the event says already holds when the subscriber receives it.
                    if event.sequence > startSequence {
                        probe.resumed("a subscriber", promised: .event(event.sequence), engine: engine)
                    }
                default:
                    break
                }
                log.record(event)
            }
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
        repeat {
            await owner.waitUntilIdle()
            reconcileDeliveries()
            applyDeferredPush()
        } while answerLiveRequests()
    }

    /// A credential handed over during its account's change is installed once the change is prepared, if it is
    /// still valid then; otherwise the engine fetches as usual.
    private func applyDeferredPush() {
        guard let pushed = model.deferredPush, !probe.heldEpochs.contains(model.epoch) else { return }
        model.deferredPush = nil
        if model.acceptsPush(pushed, pinned: model.pinnedEmail, at: clock.now) { install(pushed) }
    }

    package var activity: String {
        let metrics = engine.metrics
        return "tasks \(metrics.liveTasks), sleepers \(clock.sleeperCount), "
            + "fetches \(fetcher.pendingCount), calls \(probe.calls.outstanding), waiters \(metrics.waiters), "
            + "scoped work \(metrics.scopedWork), changes held by work \(probe.changesHeldByWork), "
            + "subscribers \(metrics.subscribers), states \(probe.stateCount), state \(engine.state), "
            + "calls in progress \(probe.calls.inProgress)"
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
