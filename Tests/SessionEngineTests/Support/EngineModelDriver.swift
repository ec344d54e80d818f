import Foundation
import Synchronization

@testable import SessionEngine

/// The reference model: what a host may rely on after each step, predicted from the operations and the backend's
/// answers alone, without the engine's internals (renewal and backoff times are left to the engine).
struct EngineModel {
    enum Phase: Equatable {
        case signedOut
        /// An account change to `account` began and no credential has been installed since.
        case awaitingFirst
        /// The account session has installed a credential.
        case established
    }

    var epoch: UInt64 = 0
    var account: AccountID?
    /// The account (or target) the current change left, as `switching(from:to:)` shows it.
    var from: AccountID?
    var phase = Phase.signedOut
    var installed: IdentityCredential?
    var pinnedEmail: String?
    /// The installed credential's signature once a rejection of it was reported.
    var rejected: String?
    /// The hooks the changes run, in order: each change's target, and whether a change racing the next one may
    /// have been superseded before its hooks ran.
    var hookPlan: [(to: AccountID?, optional: Bool)] = []

    /// Begins an account change; returns its epoch, or `nil` when the target is already current.
    ///
    /// - Parameter superseding: How many of the latest changes may not have run their hooks yet (they race this
    ///   one, or wait for work to drain); a change superseded before its hooks run skips them.
    mutating func beginChange(to target: AccountID?, superseding: Int = 0) -> UInt64? {
        guard target != account else { return nil }
        for index in hookPlan.indices.suffix(superseding) { hookPlan[index].optional = true }
        epoch += 1
        from = account
        account = target
        phase = target == nil ? .signedOut : .awaitingFirst
        installed = nil
        pinnedEmail = nil
        rejected = nil
        hookPlan.append((target, false))
        return epoch
    }

    /// Whether the engine installs a fetched credential: the contract's checks, nothing else.
    func accepts(_ credential: IdentityCredential, at now: Date) -> Bool {
        if let pinnedEmail, pinnedEmail != credential.email { return false }
        guard credential.isValid(at: now) else { return false }
        let maximum = IdentitySigner.maximumLifetime.timeInterval + 60
        return credential.expirationDate.timeIntervalSince(now) <= maximum
    }

    mutating func install(_ credential: IdentityCredential) {
        installed = credential
        pinnedEmail = pinnedEmail ?? credential.email
        phase = .established
        rejected = nil
    }
}

/// Runs one program against a real engine with a manual clock and a scripted backend, and checks the engine after
/// every step.
///
/// Every step waits until the engine has reacted: until each of the engine's tasks is asleep on the clock or waiting
/// for the backend, every call is waiting for an outcome or for its sleeping work, and every subscriber has received
/// every state the engine logged. It yields while it waits and never sleeps on real time.
final class EngineModelDriver {
    static let configuration = SessionConfiguration(
        retry: RetryPolicy(initial: .seconds(1), multiplier: 2, cap: .seconds(60)),
        minimumFetchInterval: .seconds(5)
    )
    static let projectID = "proj_model"
    static let settleRounds = 100_000

    private struct Subscriber {
        let log: SubscriberLog
        let task: Task<Void, Never>
        /// How many state changes the engine had logged when the subscriber subscribed.
        let baseline: Int
        var active = true
    }

    let clock = ManualClock()
    let probe = ModelProbe()
    let fetcher: ModelFetcher
    let engine: SessionEngine
    let verifier: ServiceVerifier
    private var signer: IdentitySigner
    private var secretIndex = 0
    private var model = EngineModel()
    private var subscribers: [Subscriber] = []
    /// Every installed credential, oldest first.
    private var history: [IdentityCredential] = []
    /// How many of the first subscriber's states have been checked against the transition table.
    private var checkedStates = 1
    /// The backend succeeds from now on, for the liveness check.
    private var recovering = false

    init(seed: UInt64) {
        let probe = self.probe
        var configuration = Self.configuration
        configuration.randomSeed = seed
        configuration.log = { probe.log($0) }
        fetcher = ModelFetcher(clock: clock, minimumInterval: configuration.minimumFetchInterval)
        engine = SessionEngine(fetcher: fetcher, configuration: configuration, clock: clock)
        signer = try! IdentitySigner(projectID: Self.projectID, secret: Self.secret(0), clock: clock)
        verifier = ServiceVerifier(
            try! IdentityVerifier(projectID: Self.projectID, secret: Self.secret(0), clock: clock))
    }

    static func secret(_ index: Int) -> String { "model-secret-\(index)" }

    static func email(for account: AccountID) -> String { "\(account.rawValue)@example.com" }

    // MARK: - Running a program

    /// Runs the program, then lets the backend succeed and checks liveness, then shuts down and checks for leaks.
    ///
    /// - Returns: The first broken invariant, or `nil`.
    func run(_ program: [EngineOperation]) async -> PropertyFailure? {
        await start()
        var step = 0
        do {
            for operation in program {
                step += 1
                try await perform(operation)
                try await settle()
                try check()
            }
            step += 1
            try await checkLiveness()
            try await shutDownAndCheckLeaks()
            return nil
        } catch {
            let log = probe.recentLog.map { "\n      \($0)" }.joined()
            await tearDown()
            let place = step <= program.count ? "step \(step) \(program[step - 1])" : "after the program"
            return PropertyFailure("\(place): \(error)\n    the engine's last log records:\(log)")
        }
    }

    private func start() async {
        let probe = self.probe
        await engine.addAccountChangeHook { [weak engine] change in
            await probe.hook(change, scopedWork: engine?.diagnostics.scopedWork ?? 0)
        }
        subscribe()
    }

    private func perform(_ operation: EngineOperation) async throws {
        switch operation {
        case .signIn(let account), .switchAccount(let account):
            try await beginChange(to: account)
        case .signOut:
            try await beginChange(to: nil)
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
            launchWork(kind)
        case .reportRejection(let older):
            try await reportRejection(older: older)
        case .renew:
            launchRenew()
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
        case .nextFetch(let behaviour):
            fetcher.enqueue(behaviour)
        case .stalledChange(let target, let partner):
            try await stalledChange(to: target, partner: partner)
        case .concurrentChanges(let first, let second):
            try await beginChangeAndWaitForItsEffect(to: first)
            try await beginChange(to: second, racing: true)
        case .changeDuringWork(let target):
            // The work may start before the change begins or after it has installed the next credential.
            let next = target == model.account ? model.epoch : model.epoch + 1
            launchWork(.long(seconds: 600), alsoAllowing: next)
            try await beginChange(to: target)
        }
    }

    // MARK: - Operations

    /// Begins an account change in the model and calls the engine; the call runs on in its own task. A change that
    /// begins is waited for until the engine has published it, so the call is known to be inside the engine.
    @discardableResult
    private func beginChange(to target: AccountID?, racing: Bool = false) async throws -> UInt64? {
        let states = probe.stateCount
        let held = probe.changesHeldByWork
        let began = model.beginChange(to: target, superseding: held.calls + held.tasks + (racing ? 1 : 0))
        let epoch = began ?? model.epoch
        if began != nil {
            fetcher.setEpoch(epoch, for: target)
            probe.epoch = epoch
        }
        let engine = self.engine
        let probe = self.probe
        let name = target.map { "switchAccount(to: \($0))" } ?? "signOut()"
        let call = probe.callStarted(name)
        // A sign-out that finds one under way waits for it, so it is held by the same work.
        let change = began != nil || target == nil ? probe.changeStarted(epoch: epoch) : nil
        Task {
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
        if began != nil { try await waitUntil("the change to begin") { probe.stateCount > states } }
        return began
    }

    /// Begins an account change and waits until the engine has taken it in: the change was published, or the call
    /// (to the current account) waits for its identity or has returned. Only then may another call race it.
    ///
    /// A sign-out that finds one under way waits for it: with the hooks held it cannot return yet, otherwise the
    /// engine is let come to rest.
    private func beginChangeAndWaitForItsEffect(to target: AccountID?, hooksHeld: Bool = false) async throws {
        let waiters = engine.diagnostics.waiters
        let outstanding = probe.outstanding
        if try await beginChange(to: target) == nil {
            guard target != nil else {
                if !hooksHeld { try await settle() }
                return
            }
            try await waitUntil("the call to the current account to wait or return") {
                engine.diagnostics.waiters > waiters || probe.outstanding == outstanding
            }
        }
    }

    /// Runs scoped work; the credential it receives must belong to the current epoch (or to `alsoAllowing`).
    private func launchWork(_ kind: WorkKind, alsoAllowing laterEpoch: UInt64? = nil) {
        let engine = self.engine
        let probe = self.probe
        let clock = self.clock
        let verifier = self.verifier
        let epochs: Set<UInt64> = [model.epoch, laterEpoch ?? model.epoch]
        let call = probe.callStarted("withIdentity(\(kind))")
        Task {
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
                        probe.bodySleeps(1)
                        defer { probe.bodySleeps(-1) }
                        try await clock.sleep(for: .seconds(seconds))
                    case .stubborn(let seconds):
                        probe.bodySleeps(1, stubborn: true)
                        defer { probe.bodySleeps(-1, stubborn: true) }
                        // The sleep runs in a task of its own, which the work's cancellation does not reach.
                        await Task { try? await clock.sleep(for: .seconds(seconds)) }.value
                        try Task.checkCancellation()
                    }
                    return credential.email
                }
            } catch is CancellationError {
                // The work's own sleep was cancelled by the engine; withIdentity reports it as the error it threw.
            } catch {
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

    private func launchRenew() {
        let engine = self.engine
        let probe = self.probe
        let clock = self.clock
        let epoch = model.epoch
        let call = probe.callStarted("renew()")
        Task {
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

    private func stalledChange(to target: AccountID?, partner: Partner) async throws {
        guard target != model.account, probe.stubbornWork == 0 else {
            try await beginChange(to: target)
            try await settle()
            try await perform(partner.operation)
            return
        }
        probe.stallNextHook()
        try await beginChange(to: target)
        try await waitUntil("the change's hooks to run") { probe.hookStalled }
        // Every other call has settled: only the held change is neither waiting nor asleep.
        try await waitUntil("the engine to rest while the hooks are held") {
            let diagnostics = engine.diagnostics
            return diagnostics.liveTasks == clock.sleeperCount + fetcher.pendingCount
                && probe.outstanding == diagnostics.waiters + probe.sleepingBodies + probe.changesHeldByWork.calls + 1
        }
        let waiters = engine.diagnostics.waiters
        let outstanding = probe.outstanding
        switch partner {
        case .change(let next):
            try await beginChangeAndWaitForItsEffect(to: next, hooksHeld: true)
        case .renew:
            launchRenew()
            try await waitUntil("renew() to wait or return") {
                engine.diagnostics.waiters > waiters || probe.outstanding == outstanding
            }
        case .work:
            launchWork(.quick)
            try await waitUntil("the work to be refused") { probe.outstanding == outstanding }
        case .readHeaders:
            _ = try checkFastPath()
        }
        probe.releaseHooks()
    }

    private func subscribe() {
        let log = SubscriberLog()
        let events = engine.events(bufferLimit: .max)
        let baseline = probe.stateCount
        let task = Task {
            for await event in events { log.record(event) }
            log.finish()
        }
        subscribers.append(Subscriber(log: log, task: task, baseline: baseline))
    }

    // MARK: - The backend

    private func isLive(_ request: ModelFetcher.Request) -> Bool {
        !request.cancelled && request.epoch == model.epoch && request.account == model.account
            && !probe.shuttingDown
    }

    /// Answers the live fetches that are due; returns whether it answered any.
    private func answerLiveRequests() -> Bool {
        var answered = false
        for request in fetcher.pendingRequests where isLive(request) {
            if recovering || request.due.map({ $0 <= clock.uptime }) == true {
                answer(request)
                answered = true
            }
        }
        return answered
    }

    /// A fetch of an earlier epoch, or a cancelled one, whose answer is due.
    private var dueStaleRequest: ModelFetcher.Request? {
        fetcher.pendingRequests.first { !isLive($0) && $0.due.map { $0 <= clock.uptime } == true }
    }

    /// When the next scripted answer is due.
    private var nextDue: Duration? {
        fetcher.pendingRequests.compactMap(\.due).filter { $0 > clock.uptime }.min()
    }

    private func answer(_ request: ModelFetcher.Request) {
        let live = isLive(request)
        let now = clock.now
        let nowSeconds = Int64(now.timeIntervalSince1970.rounded(.down))
        let ownEmail = Self.email(for: request.account)
        let email = live ? model.pinnedEmail ?? ownEmail : ownEmail
        let behaviour = recovering && live ? .succeed(lifetime: 900) : request.behaviour
        let result: Result<IdentityCredential, any Error>
        switch behaviour {
        case .succeed(let lifetime), .succeedAfter(_, let lifetime):
            result = .success(sign(email, expiresAt: nowSeconds + Int64(lifetime)))
        case .lateSuccess:
            result = .success(sign(email, expiresAt: nowSeconds + 300))
        case .failTransiently, .hang:
            result = .failure(SessionError.fetchFailed("the backend timed out"))
        case .failTerminally:
            result = .failure(SessionError.backendSessionEnded())
        case .otherAccountEmail:
            let other = EngineOperation.accounts.map(Self.email(for:)).first { $0 != email }!
            result = .success(sign(other, expiresAt: nowSeconds + 300))
        case .alreadyExpired:
            result = .success(sign(email, expiresAt: nowSeconds - 30))
        case .lifetimeOver24Hours(let extra):
            let expiresAt = nowSeconds + 86_400 + Int64(extra)
            let payload = IdentityPayload.make(
                projectID: Self.projectID, expiresAt: expiresAt, email: email, properties: nil)
            result = .success(
                IdentityCredential(
                    validatedEmail: email,
                    expiresAt: expiresAt,
                    signature: signer.signature(of: payload),
                    properties: nil
                )
            )
        case .malformedSignature:
            result = .failure(
                CredentialError(.invalidSignature, reason: "the signature must be 64 lowercase hexadecimal characters")
            )
        }
        if case .success(let credential) = result { probe.noteOrigin(of: credential, epoch: request.epoch) }
        if live {
            switch result {
            case .success(let credential):
                if model.accepts(credential, at: now) {
                    model.install(credential)
                    history.append(credential)
                    probe.noteInstalled(epoch: model.epoch)
                }
            case .failure(let error as SessionError) where error.code == .backendSessionEnded:
                // The engine ends the session: it signs out, which is an account change.
                let held = probe.changesHeldByWork
                if let epoch = model.beginChange(to: nil, superseding: held.calls + held.tasks) {
                    probe.epoch = epoch
                    probe.changeStarted(epoch: epoch, isCall: false)
                }
            case .failure:
                break
            }
        }
        fetcher.answer(request.id, with: result)
    }

    private func sign(_ email: String, expiresAt: Int64) -> IdentityCredential {
        try! signer.sign(email: email, properties: nil, expiresAt: expiresAt)
    }

    // MARK: - Waiting for the engine

    /// Waits until the engine has reacted to everything, answering the backend's due fetches on the way; a stale
    /// answer is delivered on its own and must change nothing.
    private func settle() async throws {
        try await settleLive()
        while let stale = dueStaleRequest {
            let logCount = probe.logCount
            let state = engine.state
            answer(stale)
            try await settleLive()
            if probe.logCount != logCount || engine.state != state {
                throw Violation(
                    "invariant 6: a result of epoch \(stale.epoch) changed the engine in epoch \(model.epoch): "
                        + "\(state) → \(engine.state)"
                )
            }
        }
    }

    private func settleLive() async throws {
        var quiet = 0
        for _ in 0..<Self.settleRounds {
            if answerLiveRequests() {
                quiet = 0
            } else if isQuiescent {
                quiet += 1
                if quiet >= 3 { return }
            } else {
                quiet = 0
            }
            await Task.yield()
        }
        throw Violation("the engine never came to rest: \(activity)")
    }

    private var isQuiescent: Bool {
        let diagnostics = engine.diagnostics
        // Every fetch that is not waiting for an answer has been handled by the engine: an answered fetch whose
        // outcome is still on its way to the actor is activity, whatever the task counts below say.
        guard diagnostics.fetchesCompleted == fetcher.unsettledOrAnswered else { return false }
        let held = probe.changesHeldByWork
        guard diagnostics.liveTasks == clock.sleeperCount + fetcher.pendingCount + held.tasks else { return false }
        guard probe.outstanding == diagnostics.waiters + probe.sleepingBodies + held.calls else { return false }
        guard diagnostics.subscribers == subscribers.filter(\.active).count else { return false }
        let logged = probe.stateCount
        return subscribers.allSatisfy { !$0.active || $0.log.stateCount == logged - $0.baseline + 1 }
    }

    private var activity: String {
        let diagnostics = engine.diagnostics
        return "tasks \(diagnostics.liveTasks), sleepers \(clock.sleeperCount), fetches \(fetcher.pendingCount), "
            + "calls \(probe.outstanding), waiters \(diagnostics.waiters), sleeping work \(probe.sleepingBodies), "
            + "changes held by work \(probe.changesHeldByWork), "
            + "subscribers \(diagnostics.subscribers), states \(probe.stateCount), state \(engine.state), "
            + "calls in progress \(probe.callsInProgress)"
    }

    private func waitUntil(_ what: String, _ condition: () -> Bool) async throws {
        for _ in 0..<Self.settleRounds {
            if condition() { return }
            _ = answerLiveRequests()
            await Task.yield()
        }
        throw Violation("waited in vain for \(what): \(activity)")
    }

    /// Moves the clocks forward by `total`, stopping at every timer and every due answer to let the engine react,
    /// and checking the engine at each stop; returns early once `condition` holds.
    private func advance(by total: Duration, until condition: (() -> Bool)? = nil) async throws -> Bool {
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

    // MARK: - Checks

    private func check() throws {
        if let violation = probe.firstViolation ?? fetcher.violation { throw Violation(violation) }
        try checkStates()
        try checkModel()
        try checkHooks()
        _ = try checkFastPath()
        let diagnostics = engine.diagnostics
        switch engine.state {
        case .signedOut, .identified:
            if diagnostics.waiters > 0 {
                throw Violation(
                    "\(diagnostics.waiters) callers wait in \(engine.state.name) for an outcome that never comes: "
                        + activity
                )
            }
        case .switching, .renewing, .expired:
            break
        }
        if diagnostics.fetchesStarted != fetcher.total {
            throw Violation(
                "the engine started \(diagnostics.fetchesStarted) fetches, the backend saw \(fetcher.total)")
        }
    }

    /// Invariant 4: the unbounded subscribers saw exactly the engine's sequence of states, each an edge of the table.
    private func checkStates() throws {
        let states = subscribers[0].log.states
        let logged = probe.states
        guard states.count == logged.count + 1, states.first == .signedOut else {
            throw Violation(
                "invariant 4: the subscriber saw \(states.count) states, the engine logged \(logged.count + 1)")
        }
        while checkedStates < states.count {
            let index = checkedStates
            let (previous, state) = (states[index - 1], states[index])
            let name = "\(state.name) \(state.account?.rawValue ?? "none")"
            if name != logged[index - 1] {
                throw Violation("invariant 4: the subscriber saw \(state) where the engine logged \(logged[index - 1])")
            }
            if state == previous { throw Violation("invariant 4: \(state) was published twice in a row") }
            if !StateEdges.isLegal(from: previous, to: state) {
                throw Violation("invariant 4: illegal transition \(previous) → \(state)")
            }
            checkedStates += 1
        }
        if engine.state != states.last {
            throw Violation("invariant 4: the engine is \(engine.state), its subscriber last saw \(states.last!)")
        }
        for subscriber in subscribers.dropFirst() where subscriber.active {
            if subscriber.log.states != Array(states[subscriber.baseline...]) {
                throw Violation("invariant 4: a subscriber since state \(subscriber.baseline) saw another sequence")
            }
        }
        if subscribers.contains(where: { $0.log.dropped }) { throw Violation("an unbounded subscriber lost events") }
    }

    private func checkModel() throws {
        let state = engine.state
        var expected: Bool
        switch model.phase {
        case .signedOut:
            expected = state == .signedOut
        case .awaitingFirst:
            if case .expired(let expired) = state {
                expected =
                    expired
                    == ExpiredIdentity(
                        account: model.account!,
                        reason: .unavailable,
                        lastExpiresAt: nil,
                        epoch: model.epoch
                    )
            } else {
                expected = state == .switching(from: model.from, to: model.account)
            }
        case .established:
            let installed = model.installed!
            let identity = SessionIdentity(account: model.account!, credential: installed, epoch: model.epoch)
            switch state {
            case .identified(let current), .renewing(let current):
                expected = current == identity && model.rejected != installed.signature
            case .expired(let expired):
                expected =
                    expired.account == model.account && expired.epoch == model.epoch
                    && expired.lastExpiresAt == installed.expiresAt
            case .signedOut, .switching:
                expected = false
            }
        }
        if probe.changesHeldByWork != (0, 0) {
            // The change waits for work that ignores cancellation: it stays switching until the work ends.
            expected = state == .switching(from: model.from, to: model.account)
        }
        if !expected {
            throw Violation(
                "the engine is \(state) in epoch \(model.epoch); the model expects \(model.phase) for "
                    + "\(model.account?.rawValue ?? "nil")\(model.installed.map { " with \($0)" } ?? "")"
            )
        }
    }

    /// Invariant 5: the hooks ran once per change, in order, each from the previous hook's account.
    private func checkHooks() throws {
        let hooks = probe.hooks
        // The hooks of changes held by work that has not ended yet have not run yet.
        let held = probe.changesHeldByWork.calls + probe.changesHeldByWork.tasks
        let plan = model.hookPlan.enumerated().map { position, entry in
            (to: entry.to, optional: entry.optional || position >= model.hookPlan.count - held)
        }
        // Whether plan[i...] explains hooks[j...]: every entry that must run ran, in order, and nothing else did.
        var explains = Array(repeating: Array(repeating: false, count: hooks.count + 1), count: plan.count + 1)
        explains[plan.count][hooks.count] = true
        for i in plan.indices.reversed() {
            for j in (0...hooks.count).reversed() {
                let skipped = plan[i].optional && explains[i + 1][j]
                let ran = j < hooks.count && hooks[j].to == plan[i].to && explains[i + 1][j + 1]
                explains[i][j] = skipped || ran
            }
        }
        if !explains[0][0] {
            let expected = plan.map { "\($0.to?.rawValue ?? "nil")\($0.optional ? "?" : "")" }
            let ran = hooks.map { "\($0.from?.rawValue ?? "nil") → \($0.to?.rawValue ?? "nil")" }
            throw Violation("invariant 5: the hooks ran as \(ran), the changes were \(expected)")
        }
        for (previous, hook) in zip([nil] + hooks.map(\.to), hooks) where hook.from != previous {
            throw Violation(
                "invariant 5: a hook ran from \(hook.from?.rawValue ?? "nil"), not from \(previous?.rawValue ?? "nil")")
        }
    }

    /// Invariants 1 and 2 on the fast path: headers only of the current epoch's installed credential, only before it
    /// expires, and otherwise an error that says why, never anonymous.
    private func checkFastPath() throws -> IdentityHeaders? {
        let state = engine.state
        let now = clock.now
        let valid = engine.hasValidIdentity(at: now)
        let usable = (state.isIdentified || state.isRenewing) && model.installed?.isValid(at: now) == true
        do {
            let headers = try engine.identityHeaders()
            guard let credential = try? headers.credential() else {
                throw Violation("invariant 2: the fast path handed out headers that are not a credential: \(headers)")
            }
            let origins = probe.origins(of: credential)
            if !origins.contains(model.epoch) || credential != model.installed {
                throw Violation(
                    "invariant 1: the fast path handed out a credential of epochs \(origins.sorted()) in epoch "
                        + "\(model.epoch) (\(state))"
                )
            }
            if !credential.isValid(at: now) {
                throw Violation(
                    "invariant 2: the fast path handed out a credential that expired at \(credential.expiresAt)")
            }
            if !usable || !valid { throw Violation("the fast path handed out a credential in \(state)") }
            return headers
        } catch let error as SessionError {
            let expected: SessionError.Code
            switch state {
            case .signedOut: expected = .signedOut
            case .switching: expected = .switching
            case .identified, .renewing, .expired: expected = .invalidIdentity
            }
            if error.code != expected { throw Violation("the fast path said \(error.code) in \(state)") }
            if usable { throw Violation("the fast path refused a valid credential in \(state): \(error)") }
            if valid { throw Violation("hasValidIdentity(at:) accepted what the fast path refused in \(state)") }
            return nil
        }
    }

    // MARK: - Liveness and shutdown

    /// Invariant 7: once the backend succeeds, the engine is identified within the backoff cap (plus the minimum
    /// interval and one 30-second timer slice) of virtual time.
    private func checkLiveness() async throws {
        guard model.account != nil else { return }
        recovering = true
        fetcher.recover()
        let retry = Self.configuration.retry
        let bound = retry.cap + Self.configuration.minimumFetchInterval + .seconds(31)
        let start = clock.uptime
        let engine = self.engine
        let identified = try await advance(by: bound) {
            engine.state.isIdentified && (try? engine.identityHeaders()) != nil
        }
        if !identified {
            throw Violation(
                "invariant 7: not identified \(clock.uptime - start) after the backend began to succeed: "
                    + "\(engine.state)"
            )
        }
    }

    /// Invariant 8: after shutdown no task, timer, waiter, scoped work or subscriber remains.
    private func shutDownAndCheckLeaks() async throws {
        probe.shuttingDown = true
        let engine = self.engine
        let probe = self.probe
        let shutDown = Mutex(false)
        Task {
            await engine.shutdown()
            if probe.runningWork > 0 || engine.diagnostics.scopedWork > 0 {
                probe.violation("invariant 8: shutdown returned while scoped work ran")
            }
            shutDown.withLock { $0 = true }
        }
        for _ in 0..<Self.settleRounds {
            // Answers still on the wire arrive after shutdown and are discarded; work that ignores cancellation
            // ends when its sleep does.
            for request in fetcher.pendingRequests where request.behaviour.ignoresCancellation { answer(request) }
            if !shutDown.withLock({ $0 }), probe.stubbornWork > 0, let deadline = clock.nextDeadline {
                clock.advance(by: max(.zero, deadline - clock.uptime))
            }
            let diagnostics = engine.diagnostics
            let done =
                shutDown.withLock { $0 } && diagnostics.liveTasks == 0 && diagnostics.subscribers == 0
                && diagnostics.waiters == 0 && diagnostics.scopedWork == 0 && probe.outstanding == 0
                && subscribers.allSatisfy { $0.log.finished }
            if done { break }
            await Task.yield()
        }
        if let violation = probe.firstViolation ?? fetcher.violation { throw Violation(violation) }
        let diagnostics = engine.diagnostics
        guard shutDown.withLock({ $0 }), diagnostics.liveTasks == 0, diagnostics.subscribers == 0,
            diagnostics.waiters == 0, diagnostics.scopedWork == 0, probe.outstanding == 0
        else {
            throw Violation("invariant 8: after shutdown: \(activity)")
        }
        for subscriber in subscribers where subscriber.active && subscriber.log.states.last != .signedOut {
            throw Violation("a subscriber's last state was \(String(describing: subscriber.log.states.last))")
        }
    }

    /// Ends a failed program without leaving tasks behind.
    private func tearDown() async {
        probe.shuttingDown = true
        probe.releaseHooks()
        let engine = self.engine
        let done = Mutex(false)
        Task {
            await engine.shutdown()
            done.withLock { $0 = true }
        }
        for _ in 0..<Self.settleRounds {
            probe.releaseHooks()
            fetcher.failAll()
            if let deadline = clock.nextDeadline { clock.advance(by: max(.zero, deadline - clock.uptime)) }
            if done.withLock({ $0 }) && engine.diagnostics.liveTasks == 0 { break }
            await Task.yield()
        }
        for subscriber in subscribers { subscriber.task.cancel() }
    }
}
