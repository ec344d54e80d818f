import Foundation
import SessionEngine
import SessionEngineBackend
import SessionEngineExplorer
import SessionEngineModel
import SessionEngineTestKit
import Synchronization

/// What the race backend answers to one fetch.
enum RaceAnswer: Sendable, CustomStringConvertible {
    /// A credential for the account asked for, living `lifetime` seconds.
    case credential(lifetime: Int)
    /// A transient failure.
    case failTransiently
    /// ``SessionError/backendSessionEnded(_:)``: the engine signs out.
    case failTerminally
    /// No answer until the engine cancels the fetch.
    case hang
    /// A credential for the account asked for, delivered even when the engine cancelled the fetch meanwhile, like a
    /// response already on the wire.
    case late

    var description: String {
        switch self {
        case .credential(let lifetime): "credential(\(lifetime) s)"
        case .failTransiently: "failTransiently"
        case .failTerminally: "failTerminally"
        case .hang: "hang"
        case .late: "late"
        }
    }
}

/// A backend whose every fetch answers, after a few scheduling points, as the program scripted it.
///
/// The answer is not given by a driver once the engine is idle: it arrives while the engine's other jobs run, in
/// whatever order the schedule picks, since the fetch yields before it answers. A fetch that hangs has no job,
/// so the engine counts as idle while it waits. Every credential it issues is recorded with the
/// epoch and account it was issued for.
/// Kept apart from the kit's fetcher: its answers yield at the explorer's scheduling points, which no host needs.
final class RaceFetcher: CredentialFetcher {
    private struct Waiting {
        var continuation: CheckedContinuation<IdentityCredential, any Error>
        var epoch: UInt64
    }

    private struct State {
        var script: [RaceAnswer] = []
        var total = 0
        var cancelled = 0
        var waiting: [Int: Waiting] = [:]
        var requests: [(account: AccountID, epoch: UInt64)] = []
        var inFlight: [UInt64: Int] = [:]
        var failing = false
    }

    private let state = Mutex(State())
    private let clock: ManualClock
    private let signer: IdentitySigner
    private let probe: RaceProbe
    /// How many scheduling points a fetch passes before it answers.
    let latency: Int

    init(clock: ManualClock, signer: IdentitySigner, probe: RaceProbe, latency: Int) {
        self.clock = clock
        self.signer = signer
        self.probe = probe
        self.latency = latency
    }

    /// Scripts the answers of the next fetches; once they are spent every fetch gets a 900-second credential.
    func script(_ answers: RaceAnswer...) {
        state.withLock { $0.script.append(contentsOf: answers) }
    }

    /// While set, every unscripted fetch fails transiently.
    var failing: Bool {
        get { state.withLock { $0.failing } }
        set { state.withLock { $0.failing = newValue } }
    }

    var total: Int { state.withLock { $0.total } }
    var cancelled: Int { state.withLock { $0.cancelled } }
    var pending: Int { state.withLock { $0.waiting.count } }
    var requests: [(account: AccountID, epoch: UInt64)] { state.withLock { $0.requests } }

    func fetchCredential(for account: AccountID) async throws -> IdentityCredential {
        preconditionFailure("the engine always says which fetch it starts")
    }

    func fetchCredential(_ request: FetchRequest) async throws -> IdentityCredential {
        let (id, answer) = state.withLock { state -> (Int, RaceAnswer) in
            state.total += 1
            state.requests.append((request.account, request.epoch))
            let unscripted = state.failing ? RaceAnswer.failTransiently : .credential(lifetime: 900)
            let answer = state.script.isEmpty ? unscripted : state.script.removeFirst()
            if probe.hooksRunning {
                probe.violation("a fetch for \(request.account) started while account-change hooks ran")
            }
            state.inFlight[request.epoch, default: 0] += 1
            if state.inFlight[request.epoch, default: 0] > 1 {
                probe.violation(
                    "\(state.inFlight[request.epoch, default: 0]) fetches in flight in epoch \(request.epoch)")
            }
            return (state.total, answer)
        }
        defer { state.withLock { $0.inFlight[request.epoch, default: 1] -= 1 } }
        switch answer {
        case .hang:
            return try await hang(id: id, epoch: request.epoch)
        case .late:
            for _ in 0..<latency { await Waypoint.pass() }
            return issue(for: request, lifetime: 300)
        case .credential(let lifetime):
            for _ in 0..<latency { await Waypoint.pass() }
            try checkCancellation()
            return issue(for: request, lifetime: lifetime)
        case .failTransiently:
            for _ in 0..<latency { await Waypoint.pass() }
            try checkCancellation()
            throw SessionError.fetchFailed("the race backend timed out")
        case .failTerminally:
            for _ in 0..<latency { await Waypoint.pass() }
            try checkCancellation()
            throw SessionError.backendSessionEnded()
        }
    }

    private func checkCancellation() throws {
        guard Task.isCancelled else { return }
        state.withLock { $0.cancelled += 1 }
        throw CancellationError()
    }

    private func issue(for request: FetchRequest, lifetime: Int) -> IdentityCredential {
        let now = Int64(clock.now.timeIntervalSince1970.rounded(.down))
        let credential = try! signer.sign(
            email: exampleEmail(for: request.account),
            properties: nil,
            expiresAt: now + Int64(lifetime)
        )
        probe.issued(credential, account: request.account, epoch: request.epoch)
        return credential
    }

    private func hang(id: Int, epoch: UInt64) async throws -> IdentityCredential {
        try await withTaskCancellationHandler {
            try await withCheckedThrowingContinuation { continuation in
                let cancelled = state.withLock { state -> Bool in
                    if Task.isCancelled {
                        state.cancelled += 1
                        return true
                    }
                    state.waiting[id] = Waiting(continuation: continuation, epoch: epoch)
                    return false
                }
                if cancelled { continuation.resume(throwing: CancellationError()) }
            }
        } onCancel: {
            let waiting = state.withLock { state -> Waiting? in
                guard let waiting = state.waiting.removeValue(forKey: id) else { return nil }
                state.cancelled += 1
                return waiting
            }
            guard let waiting else { return }
            waiting.continuation.resume(throwing: CancellationError())
        }
    }
}

/// What a race program's tasks observe: the engine's events in the step it publishes them, the hooks, the origin of
/// every credential the backend issued, the calls in progress and the rules they saw broken.
final class RaceProbe: Sendable {
    struct Origin: Hashable, Sendable {
        var account: AccountID
        var epoch: UInt64
    }

    private struct State {
        var violations: [String] = []
        var states: [SessionState] = []
        /// The epoch of the engine's last event.
        var epoch: UInt64 = 0
        var hooks: [AccountChange] = []
        /// Hooks that have begun and not returned.
        var hooksRunning = 0
        var origins: [String: Origin] = [:]
        var outcomes: [String] = []
    }

    private let state = Mutex(State())

    func observe(_ event: SessionEvent) {
        state.withLock { state in
            state.epoch = event.epoch
            if let new = event.state { state.states.append(new) }
        }
    }

    /// The epoch of the engine's last published event: the account session the engine is in.
    var epoch: UInt64 { state.withLock { $0.epoch } }
    var states: [SessionState] { state.withLock { $0.states } }
    var hooks: [AccountChange] { state.withLock { $0.hooks } }
    var violations: [String] { state.withLock { $0.violations } }
    /// What each call ended with, in the order they ended.
    var outcomes: [String] { state.withLock { $0.outcomes } }

    func violation(_ message: String) {
        state.withLock { $0.violations.append(message) }
    }

    /// A hook began: hooks run one at a time, so no other may be running.
    func hookBegan(_ change: AccountChange) {
        state.withLock { state in
            state.hooks.append(change)
            state.hooksRunning += 1
            if state.hooksRunning > 1 {
                state.violations.append("the hooks of \(change) began while another change's hooks ran")
            }
        }
    }

    func hookEnded() {
        state.withLock { $0.hooksRunning -= 1 }
    }

    /// Whether a hook is running.
    var hooksRunning: Bool { state.withLock { $0.hooksRunning > 0 } }

    func issued(_ credential: IdentityCredential, account: AccountID, epoch: UInt64) {
        state.withLock { $0.origins[credential.signature] = Origin(account: account, epoch: epoch) }
    }

    func origin(of credential: IdentityCredential) -> Origin? {
        state.withLock { $0.origins[credential.signature] }
    }

    func outcome(_ text: String) {
        state.withLock { $0.outcomes.append(text) }
    }

    /// The program's calls that have begun and not finished.
    let calls = CallTracker()
}

/// One race program's engine: a manual clock, the race backend, the probe, a subscriber, and the checks every race
/// ends with.
final class RaceRig: Sendable {
    static let projectID = "proj_races"
    static let configuration = SessionConfiguration(
        retry: RetryPolicy(initial: .seconds(1), multiplier: 2, cap: .seconds(30)),
        misconfigurationRetry: RetryPolicy(initial: .seconds(10), multiplier: 2, cap: .seconds(60)),
        minimumFetchInterval: .seconds(5),
        randomSeed: 7
    )
    /// Whether ``launch(_:enters:_:)`` starts its calls without the explorer's task executor as their preference, so
    /// that a call leaving the engine's actor runs on inline: the variant of each race named `NAME/inline`.
    @TaskLocal static var callsFollowTheirThread = false
    /// How many times a race program may move the clock to let the engine's timers fire before it counts as hung.
    static let clockSteps = 60

    let clock = ManualClock()
    let probe = RaceProbe()
    let signer: IdentitySigner
    let fetcher: RaceFetcher
    let engine: SessionEngine
    private let subscriber: Task<[SessionState], Never>
    /// Where the program's main task is, for a deadlock's report.
    let phase = Mutex("setting up")
    /// The calls launched that do not call the engine (they move the clock, read the fast path, cancel a task).
    private let launched = Mutex<[Task<Void, Never>]>([])

    init(latency: Int = 1) {
        let probe = self.probe
        signer = try! IdentitySigner(projectID: Self.projectID, secret: "race-secret", clock: clock)
        fetcher = RaceFetcher(clock: clock, signer: signer, probe: probe, latency: latency)
        var configuration = Self.configuration
        // Every hop of the engine's own tasks is then a step the explorer schedules, not only their first job.
        configuration.taskExecutor = Explorer.taskExecutor
        engine = SessionEngine(
            fetcher: fetcher,
            configuration: configuration,
            clock: clock,
            observer: { probe.observe($0) }
        )
        let events = engine.events(bufferLimit: .max)
        let diagnostics = Unchecked<RaceRig?>(nil)
        Diagnostics.current = { diagnostics.value.map { "\($0.activity); outcomes \($0.probe.outcomes)" } ?? "" }
        subscriber = Task(executorPreference: Explorer.taskExecutor) {
            var states: [SessionState] = []
            for await event in events {
                if let state = event.state { states.append(state) }
            }
            return states
        }
        diagnostics.value = self
    }

    /// Registers the hook recorder; call once, before the first change.
    func start() async {
        let probe = self.probe
        await engine.addAccountChangeHook { change in
            probe.hookBegan(change)
            // One scheduling point inside the hook, so that whatever may overlap it gets the chance to.
            await Waypoint.pass()
            probe.hookEnded()
        }
    }

    // MARK: Calls

    /// Starts `call` in a task of its own, racing whatever else runs; its outcome is recorded by name.
    ///
    /// - Parameters:
    ///   - name: The call's name in outcomes and violations.
    ///   - enters: How many of the engine's asynchronous methods the call begins with (0 for a call that only moves
    ///     the clock, reads the fast path or cancels a task), so ``settle()`` knows when every call is inside.
    ///   - priority: The call's task priority; the engine's actor runs its queued jobs in priority order.
    ///   - call: The call.
    @discardableResult
    func launch(
        _ name: String,
        enters: UInt64 = 1,
        priority: TaskPriority? = nil,
        _ call: @escaping @Sendable (RaceRig) async throws -> String
    ) -> Task<Void, Never> {
        let ticket = probe.calls.started(name)
        let body: @Sendable () async -> Void = {
            defer { self.probe.calls.finished(ticket) }
            do {
                let value = try await call(self)
                self.probe.outcome("\(name): \(value)")
            } catch let error as SessionError {
                self.probe.outcome("\(name): \(error.code)")
            } catch is CancellationError {
                self.probe.outcome("\(name): cancelled")
            } catch let violation as Violation {
                self.probe.violation("\(name): \(violation)")
            } catch {
                self.probe.violation("\(name) threw \(type(of: error)), not a SessionError")
            }
        }
        // Preferring the explorer's executor, the call's hop off the engine's actor is a step the explorer schedules.
        // Without a preference the call runs on inline when it leaves the actor, as a pool thread that follows its
        // task does, and whatever else the actor had queued waits for a processing job of its own.
        let task =
            Self.callsFollowTheirThread
            ? Task(priority: priority, operation: body)
            : Task(executorPreference: Explorer.taskExecutor, priority: priority, operation: body)
        if enters == 0 { launched.withLock { $0.append(task) } }
        return task
    }

    /// Starts a reader of the fast path beside the racing calls: it checks the headers, passes one scheduling point
    /// and checks them again.
    func launchFastPathReader() {
        launch("headers", enters: 0) { rig in
            for _ in 0..<2 {
                try rig.checkFastPath()
                await Waypoint.pass()
            }
            return "read"
        }
    }

    /// `renew()`, checked: the credential belongs to an epoch the call lived through, to that epoch's account, and
    /// has not expired; a failure is one of `allowed`.
    func renew(allowed: Set<SessionError.Code>) async throws -> String {
        let before = probe.epoch
        let start = clock.now
        do {
            let credential = try await engine.renew()
            try checkHandedOut(credential, by: "renew()", from: before, validAt: start)
            return "credential of epoch \(probe.origin(of: credential)?.epoch ?? 0)"
        } catch let error as SessionError {
            if !allowed.contains(error.code) { probe.violation("renew() threw \(error.code): \(error.reason)") }
            throw error
        }
    }

    /// `withIdentity`, checked: each body receives a credential of the engine's current epoch and account unless
    /// the engine has already cancelled the body, and a failure is one of `allowed`.
    func work(
        _ name: String,
        allowed: Set<SessionError.Code>,
        body: @escaping @Sendable (IdentityCredential) async throws -> Void = { _ in }
    ) async throws -> String {
        let before = probe.epoch
        // The clock may move between the handout and the body's first step (a racing call moves it), so the
        // credential must be valid when the call began; the fast path's checks catch a late handout exactly.
        let start = clock.now
        let runs = Mutex<[UInt64]>([])
        do {
            try await engine.withIdentity { credential in
                let epoch = self.probe.origin(of: credential)?.epoch ?? 0
                let epochs = runs.withLock { runs -> [UInt64] in
                    runs.append(epoch)
                    return runs
                }
                if epochs.count > 2 { self.probe.violation("\(name): the body ran \(epochs.count) times") }
                if Set(epochs).count > 1 {
                    self.probe.violation("\(name): the body ran again in another account session: epochs \(epochs)")
                }
                if !Task.isCancelled {
                    try self.checkCurrent(credential, by: name)
                }
                try self.checkHandedOut(credential, by: name, from: before, validAt: start)
                try await body(credential)
            }
            return "finished"
        } catch let error as SessionError {
            if !allowed.contains(error.code) { probe.violation("\(name) threw \(error.code): \(error.reason)") }
            throw error
        }
    }

    /// A credential handed out by a call that began in epoch `before`: issued by the backend for an epoch the call
    /// lived through, for that epoch's account, not expired.
    func checkHandedOut(
        _ credential: IdentityCredential,
        by call: String,
        from before: UInt64,
        validAt time: Date? = nil
    ) throws {
        guard let origin = probe.origin(of: credential) else {
            throw Violation("\(call) handed out a credential the backend never issued")
        }
        if origin.epoch < before {
            throw Violation(
                "\(call) began in epoch \(before) and received a credential of epoch \(origin.epoch) (\(origin.account))"
            )
        }
        if credential.email != exampleEmail(for: origin.account) {
            throw Violation("\(call) received \(credential.email)'s credential for \(origin.account)")
        }
        if !credential.isValid(at: time ?? clock.now) {
            throw Violation("\(call) received a credential that expired at \(credential.expiresAt)")
        }
    }

    /// A credential used now must be of the epoch and account the engine is in now.
    func checkCurrent(_ credential: IdentityCredential, by call: String) throws {
        let epoch = probe.epoch
        guard let origin = probe.origin(of: credential), origin.epoch == epoch else {
            throw Violation(
                "\(call) holds a credential of epoch \(probe.origin(of: credential)?.epoch ?? 0) in epoch \(epoch) "
                    + "(\(engine.state))"
            )
        }
    }

    /// Reads the fast path: headers only of the current epoch's credential, in `identified` or `renewing`.
    func checkFastPath(by call: String = "identityHeaders()") throws {
        guard let headers = try? engine.identityHeaders() else { return }
        guard let credential = try? headers.credential() else {
            throw Violation("\(call): the fast path handed out headers that are not a credential")
        }
        let state = engine.state
        if !(state.isIdentified || state.isRenewing) {
            throw Violation("\(call): the fast path handed out a credential in \(state)")
        }
        try checkCurrent(credential, by: call)
        if !credential.isValid(at: clock.now) {
            throw Violation("\(call): the fast path handed out an expired credential")
        }
    }

    /// `switchAccount(to:)`, checked: once it returns, the engine holds a credential of the account, handed out on
    /// the fast path, unless a later change has begun.
    func change(to account: AccountID, allowed: Set<SessionError.Code> = []) async throws -> String {
        do {
            try await engine.switchAccount(to: account)
        } catch let error as SessionError {
            if !allowed.contains(error.code) { probe.violation("switchAccount(\(account)) threw \(error.code)") }
            throw error
        }
        try checkEstablished(account, by: "switchAccount(\(account))")
        return "returned"
    }

    /// After a sign-in or switch returned: the account's credential is installed and the fast path hands it out,
    /// unless another change has begun meanwhile.
    func checkEstablished(_ account: AccountID, by call: String) throws {
        let state = engine.state
        // A later change to another account may have begun since; a change to this account must be done.
        guard state.account == account else { return }
        guard state.isIdentified || state.isRenewing, let headers = try? engine.identityHeaders() else {
            throw Violation("\(call) returned with the engine \(state), its credential not handed out")
        }
        try checkCurrent(try headers.credential(), by: call)
    }

    // MARK: Waiting and ending

    /// Waits until every call of the program has returned, moving the clock to the engine's next timer whenever the
    /// engine is idle with calls still waiting.
    func settle() async throws {
        var steps = 0
        let side = launched.withLock { launched in
            defer { launched = [] }
            return launched
        }
        phase.withLock { $0 = "settling: waiting for the calls that do not enter the engine" }
        for task in side { await task.value }
        while true {
            phase.withLock { $0 = "settling: waiting until idle" }
            // The explorer runs every job, so nothing can run now: every launched call has returned or waits.
            await Explorer.waitUntilIdle()
            phase.withLock { $0 = "settling" }
            if probe.calls.outstanding == 0 { return }
            if engine.state.isIdentified && engine.metrics.waiters > 0 {
                throw Violation(
                    "\(engine.metrics.waiters) callers wait in identified for an outcome that never comes: \(activity)"
                )
            }
            steps += 1
            guard steps <= Self.clockSteps else {
                throw Violation("calls still wait after \(steps) timers: \(activity); outcomes \(probe.outcomes)")
            }
            guard clock.nextDeadline != nil else {
                // No timer can wake them: the calls must finish on their own, or the explorer reports the deadlock
                // with what is parked.
                phase.withLock { $0 = "settling: waiting for calls no timer can wake" }
                await probe.calls.waitUntilNone()
                return
            }
            _ = clock.advanceToNextDeadline()
        }
    }

    /// Moves the clock `seconds` forward through every timer, letting the engine react at each.
    func advance(seconds: Int) async {
        let target = clock.uptime + .seconds(seconds)
        while true {
            await Explorer.waitUntilIdle()
            let now = clock.uptime
            guard now < target else { return }
            let next = min(target, clock.nextDeadline ?? target)
            clock.advance(by: max(.zero, next - now))
        }
    }

    var activity: String {
        let metrics = engine.metrics
        return
            "\(phase.withLock { $0 }); state \(engine.state), tasks \(metrics.liveTasks), waiters \(metrics.waiters), "
            + "scoped work \(metrics.scopedWork), fetches pending \(fetcher.pending), calls \(probe.calls.outstanding), "
            + "sleepers \(clock.sleeperCount)"
    }

    /// The checks every race ends with: the rules its tasks saw broken, the published states against the transition
    /// table, the hooks once per change and in order, then a shutdown that leaves nothing behind.
    ///
    /// - Parameters:
    ///   - changes: How many account changes the program asked for.
    ///   - finalAccount: The account the engine must end at; `.some(nil)` for signed out, `nil` for whichever
    ///     account it is at (two changes raced).
    ///   - hooksEndAt: The accounts the last hook may enter, when it is not `finalAccount`.
    func finish(changes: Int, finalAccount: AccountID??, hooksEndAt: [AccountID?]? = nil) async throws {
        try await settle()
        if let first = probe.violations.first { throw Violation(first) }
        try checkFastPath()
        let states = [SessionState.signedOut] + probe.states
        for (previous, next) in zip(states, states.dropFirst()) where !StateEdges.isLegal(from: previous, to: next) {
            throw Violation("illegal transition \(previous) → \(next)")
        }
        for case .identified(let identity) in states where identity.email != exampleEmail(for: identity.account) {
            throw Violation("\(identity.account) was identified with \(identity.email)'s credential")
        }
        let finalAccount = finalAccount ?? engine.state.account
        if engine.state.account != finalAccount || engine.state.isSwitching {
            throw Violation("the engine ended in \(engine.state), not at \(finalAccount?.rawValue ?? "nil")")
        }
        if !engine.state.isRenewing && !engine.state.isExpired && engine.metrics.waiters > 0 {
            throw Violation(
                "\(engine.metrics.waiters) callers wait in \(engine.state) for an outcome that never comes")
        }
        try checkHooks(changes: changes, endingAt: hooksEndAt ?? [finalAccount])
        await engine.shutdown()
        await Explorer.waitUntilIdle()
        let streamed = await subscriber.value
        if Array(streamed.dropFirst()) != probe.states || streamed.first != .signedOut {
            throw Violation(
                "the subscriber saw \(streamed.count) states, the engine published \(probe.states.count)")
        }
        let metrics = engine.metrics
        if metrics.liveTasks != 0 || metrics.waiters != 0 || metrics.scopedWork != 0 || metrics.subscribers != 0
            || fetcher.pending != 0 || clock.sleeperCount != 0
        {
            throw Violation("after shutdown: \(activity), subscribers \(metrics.subscribers)")
        }
        if metrics.fetchesStarted != fetcher.total {
            throw Violation(
                "the engine counted \(metrics.fetchesStarted) fetches, the backend saw \(fetcher.total)")
        }
        if let first = probe.violations.first { throw Violation(first) }
    }

    /// Hooks once per change that took effect, in order, each from the previous hook's account, never more than the
    /// changes asked for, and the last one entering the account the engine ended at.
    func checkHooks(changes: Int, endingAt finalAccounts: [AccountID?]) throws {
        let hooks = probe.hooks
        let described = hooks.map(\.description)
        if hooks.count > changes {
            throw Violation("\(hooks.count) hooks ran for \(changes) account changes: \(described)")
        }
        var previous: AccountID?
        for hook in hooks {
            if hook.from != previous || hook.from == hook.to {
                throw Violation("the hooks ran as \(described)")
            }
            previous = hook.to
        }
        if !finalAccounts.contains(previous) {
            let accounts = finalAccounts.map { $0?.rawValue ?? "nil" }.joined(separator: " or ")
            throw Violation("the hooks ran as \(described), and must end at \(accounts)")
        }
    }
}

/// A scheduling point: a hop onto a fresh actor and back, which the explorer sees as two enqueues.
///
/// The explorer's first version did not capture `Task.yield()` (a run that yielded deadlocked), so the programs pass
/// through an actor instead; a fresh one each time, so that the reduction does not see two unrelated waypoints as
/// touching the same actor. The race counts in the report are measured with it.
actor Waypoint {
    func pass() {}

    /// Passes one scheduling point.
    static func pass() async {
        await Waypoint().pass()
    }
}
