package import Foundation
package import SessionEngine
package import SessionEngineBackend
package import SessionEngineTestKit
import Synchronization

/// What a program's tasks observe while they run: the engine's events as it publishes them, the calls in progress,
/// the scoped work that is running, the account-change hooks, and the invariants the tasks saw broken.
///
/// Everything here is shared between the driver and the tasks it starts, so it lives behind one lock.
package final class ModelProbe: Sendable {
    private struct State {
        package var violations: [String] = []
        /// Scoped work bodies sleeping through their cancellation; each blocks exactly one outstanding call.
        package var stubbornBodies = 0
        /// Running scoped work: the epoch of the credential each body received.
        package var work: [Int: UInt64] = [:]
        package var nextWork = 0
        /// Account changes in progress: the epoch each began, and whether a call of the program made it (or the
        /// engine's own task, when the backend ended the session).
        package var changes: [Int: (epoch: UInt64, isCall: Bool)] = [:]
        package var nextChange = 0
        package var hooks: [AccountChange] = []
        /// Every hook's runs in the order they began: the hook's index (0 is the one above) and its change.
        var hookRuns: [(hook: Int, change: AccountChange)] = []
        /// For each hook the program added, how many changes the first hook had run when it was registered.
        var hooksAdded: [Int] = []
        /// The gate the next hook waits at, when the program holds it.
        package var nextHookGate: Gate?
        package var heldHook: Gate?
        /// Every event the engine published, as it published it.
        package var events: [SessionEvent] = []
        /// The states the engine published, in order.
        package var states: [SessionState] = []
        /// The epochs of the account changes the engine has begun and published.
        package var begunEpochs: Set<UInt64> = []
        /// The epochs in which the backend issued each credential, by signature (the same email, expiry and secret
        /// give the same credential in any epoch).
        package var origins: [String: Set<UInt64>] = [:]
        /// Epochs in which the engine published an installed credential.
        package var installedEpochs: Set<UInt64> = []
        package var shuttingDown = false
        var gracefulShutdown = false
        /// The sequence number of each state in `states`.
        var stateSequences: [UInt64] = []
        /// The credentials the engine published as installed, in order.
        var installs: [(sequence: UInt64, epoch: UInt64, email: String, expiresAt: Int64)] = []
        /// When each installed credential expires on this host's clock (its expiry moved by the applied offset).
        var localExpiries: [String: Date] = [:]
        /// What resumed callers and subscribers read, checked once the engine has published everything.
        var resumes: [Resume] = []
        /// Per epoch, what the engine announced about its next fetch: backoff waits, their ends, Retry-After floors.
        var fetchRules: [UInt64: [FetchRule]] = [:]
        /// Credentials handed out, and when: checked against their expiry on this host's clock once the model knows
        /// the clock offset each was installed with (a fetch that answers by itself is brought into the model later).
        var expiryChecks: [(label: String, credential: IdentityCredential, at: Date)] = []
    }

    /// What a caller or subscriber was promised when it resumed, and what it read from the engine before anything
    /// else.
    package enum Promise: Sendable {
        /// The credential with this email and expiry, installed in this epoch.
        case credential(email: String, expiresAt: Int64, epoch: UInt64?)
        /// A credential installed in this epoch.
        case installedIn(UInt64)
        /// Everything the event with this sequence number says.
        case event(UInt64)
    }

    /// What the fast path answered.
    package enum HeadersReading: Sendable, Equatable {
        case credential(email: String, expiresAt: Int64)
        case refused(SessionError.Code)
    }

    struct Resume {
        var label: String
        var promise: Promise
        var state: SessionState
        var headers: HeadersReading
    }

    /// What the engine announced, in one step, about when its next fetch of an epoch may start.
    package enum FetchRule: Sendable {
        /// No fetch before this monotonic time (a failure's backoff, a repeated rejection's wait).
        case wait(at: Duration, until: Duration)
        /// The announced wait no longer holds: a credential was installed (`pushed`: one the host handed over), or
        /// a first rejection renews at once.
        case clear(at: Duration, pushed: Bool)
        /// No fetch before this monotonic time, whatever asks for one: the backend's `Retry-After`.
        case floor(at: Duration, until: Duration)

        package var time: Duration {
            switch self {
            case .wait(let at, _), .clear(let at, _), .floor(let at, _): at
            }
        }
    }

    private let state = SanitizedMutex(State())
    /// The program's calls to the engine that have begun and not finished.
    package let calls = CallTracker()

    /// Creates a probe that has observed nothing.
    package init() {}

    // MARK: Events

    /// Receives every event in the step the engine publishes it: the engine's own sequence of states and the epochs
    /// of the account changes it began.
    package func observe(_ event: SessionEvent) {
        state.withLock { state in
            if let last = state.events.last, event.sequence != last.sequence + 1 {
                state.violations.append("event \(event.sequence) followed event \(last.sequence)")
            }
            state.events.append(event)
            let time = event.time.uptime
            switch event.kind {
            case .renewed(let identity, let fetch):
                state.installedEpochs.insert(event.epoch)
                state.installs.append((event.sequence, event.epoch, identity.email, identity.expiresAt))
                state.fetchRules[event.epoch, default: []].append(.clear(at: time, pushed: fetch.pushed))
            case .fetchFailed(let failure):
                if let retryIn = failure.retryIn {
                    state.fetchRules[event.epoch, default: []].append(.wait(at: time, until: time + retryIn))
                }
                if let floor = failure.serverRetryAfter {
                    state.fetchRules[event.epoch, default: []].append(.floor(at: time, until: time + floor))
                }
            case .credentialRejected(let report):
                if report.renewing {
                    state.fetchRules[event.epoch, default: []].append(.clear(at: time, pushed: false))
                } else if let retryIn = report.retryIn {
                    state.fetchRules[event.epoch, default: []].append(.wait(at: time, until: time + retryIn))
                }
            default:
                break
            }
            guard let new = event.state else { return }
            state.states.append(new)
            state.stateSequences.append(event.sequence)
            // A change begins with a switching state of a new epoch (a sign-out from switching included).
            if case .switching = new { state.begunEpochs.insert(event.epoch) }
        }
    }

    /// How many credentials the engine has published as installed.
    package var installCount: Int { state.withLock { $0.installs.count } }

    /// The last credential the engine published as installed: its epoch, email and expiry.
    package var lastInstall: (epoch: UInt64, email: String, expiresAt: Int64)? {
        state.withLock { $0.installs.last.map { ($0.epoch, $0.email, $0.expiresAt) } }
    }

    /// The epoch of the engine's last event.
    package var recentEpoch: UInt64 { state.withLock { $0.events.last?.epoch ?? 0 } }

    /// How many events the engine has published.
    package var eventCount: Int { state.withLock { $0.events.count } }

    /// The sequence number of the engine's last event; 0 before any.
    package var lastSequence: UInt64 { state.withLock { $0.events.last?.sequence ?? 0 } }

    /// The engine's last events, oldest first.
    package var recentEvents: [String] { state.withLock { $0.events.suffix(12).map(\.description) } }

    /// The engine's state changes so far.
    package var states: [SessionState] { state.withLock { $0.states } }

    package var stateCount: Int { state.withLock { $0.states.count } }

    // MARK: Violations

    package func violation(_ message: String) {
        state.withLock { $0.violations.append(message) }
    }

    package var firstViolation: String? { state.withLock { $0.violations.first } }

    // MARK: Epochs and credentials

    package func noteOrigin(of credential: IdentityCredential, epoch: UInt64) {
        state.withLock { _ = $0.origins[credential.signature, default: []].insert(epoch) }
    }

    /// The epochs in which the backend issued `credential`.
    package func origins(of credential: IdentityCredential) -> Set<UInt64> {
        state.withLock { $0.origins[credential.signature] ?? [] }
    }

    /// Records when `credential` expires on this host's clock, once the model installs it.
    package func noteLocalExpiry(of credential: IdentityCredential, at expiry: Date) {
        state.withLock { $0.localExpiries[credential.signature] = expiry }
    }

    /// Checks, once the model knows the credential's clock offset, that `credential` had not expired at `now` when
    /// it was handed out (invariant 2).
    package func checkUnexpired(_ label: String, _ credential: IdentityCredential, at now: Date) {
        state.withLock { $0.expiryChecks.append((label, credential, now)) }
    }

    package func wasInstalled(in epoch: UInt64) -> Bool {
        state.withLock { $0.installedEpochs.contains(epoch) }
    }

    /// A graceful shutdown began: new work and account changes fail with `SHUT_DOWN`.
    package var gracefulShutdown: Bool {
        get { state.withLock { $0.gracefulShutdown } }
        set { state.withLock { $0.gracefulShutdown = newValue } }
    }

    package var shuttingDown: Bool {
        get { state.withLock { $0.shuttingDown } }
        set { state.withLock { $0.shuttingDown = newValue } }
    }

    // MARK: Calls

    /// Records what a call to the engine threw; codes outside `allowed` break the contract.
    package func callFailed(_ call: String, _ error: any Error, allowed: Set<SessionError.Code>) {
        guard let error = error as? SessionError else {
            violation("\(call) threw \(type(of: error))")
            return
        }
        if error.code == .shutDown && (shuttingDown || gracefulShutdown) { return }
        if !allowed.contains(error.code) { violation("\(call) threw \(error.code): \(error.reason)") }
    }

    // MARK: Scoped work

    /// A scoped work body began with `credential`: it must be a credential of one of `allowedEpochs` that has not
    /// expired.
    package func workStarted(with credential: IdentityCredential, at now: Date, allowedEpochs: Set<UInt64>) -> Int {
        state.withLock { state in
            let origins = state.origins[credential.signature] ?? []
            let epoch = origins.intersection(allowedEpochs).max()
            if epoch == nil {
                state.violations.append(
                    "invariant 1: work launched in epochs \(allowedEpochs.sorted()) received a credential of epochs "
                        + "\(origins.sorted())"
                )
            }
            state.expiryChecks.append(("work", credential, now))
            state.nextWork += 1
            state.work[state.nextWork] = epoch ?? origins.max() ?? 0
            return state.nextWork
        }
    }

    package func workEnded(_ id: Int) {
        state.withLock { _ = $0.work.removeValue(forKey: id) }
    }

    /// A body that sleeps through its cancellation began (`delta` 1) or ended (-1).
    package func stubbornBodySleeps(_ delta: Int) {
        state.withLock { $0.stubbornBodies += delta }
    }

    /// Work sleeping through its cancellation.
    package var stubbornWork: Int { state.withLock { $0.stubbornBodies } }

    /// An account change that began `epoch` returned: no work of an earlier epoch may still run.
    package func checkDrained(before epoch: UInt64, after call: String) {
        state.withLock { state in
            let left = state.work.values.filter { $0 < epoch }
            if !left.isEmpty {
                state.violations.append(
                    "invariant 5: \(call) returned while \(left.count) pieces of work of epochs \(left.sorted()) ran"
                )
            }
        }
    }

    package var runningWork: Int { state.withLock { $0.work.count } }

    /// An account change began: a call of the program, or the engine's own sign-out when the backend ended the
    /// session (that one is never finished: it matters only while it waits for work to drain).
    @discardableResult
    package func changeStarted(epoch: UInt64, isCall: Bool = true) -> Int {
        state.withLock { state in
            state.nextChange += 1
            state.changes[state.nextChange] = (epoch, isCall)
            return state.nextChange
        }
    }

    package func changeFinished(_ id: Int) {
        state.withLock { _ = $0.changes.removeValue(forKey: id) }
    }

    /// A call's deadline passed while its change waits: the change goes on as the engine's own, as far as
    /// ``changesHeldByWork`` is concerned.
    package func changeOutlivedItsCall(_ id: Int) {
        state.withLock { state in
            if let change = state.changes[id] { state.changes[id] = (change.epoch, false) }
        }
    }

    /// Account changes the engine has begun that cannot go on yet because work of an earlier epoch still runs: they
    /// wait for the work to drain, not for anything the engine decides.
    package var changesHeldByWork: (calls: Int, tasks: Int) {
        state.withLock { state in
            guard let oldest = state.work.values.min() else { return (0, 0) }
            let held = state.changes.values.filter { $0.epoch > oldest && state.begunEpochs.contains($0.epoch) }
            let calls = held.filter(\.isCall).count
            return (calls, held.count - calls)
        }
    }

    /// The epochs of the changes ``changesHeldByWork`` counts: their preparation is parked before its hooks.
    package var heldEpochs: Set<UInt64> {
        state.withLock { state in
            guard let oldest = state.work.values.min() else { return [] }
            return Set(
                state.changes.values.map(\.epoch).filter { $0 > oldest && state.begunEpochs.contains($0) })
        }
    }

    // MARK: Resumed callers and subscribers

    /// A caller or subscriber has just resumed with what `promise` describes: reads the engine's state and fast path
    /// at once, before anything else, for ``checkResumes()``.
    package func resumed(_ label: String, promised promise: Promise, engine: SessionEngine) {
        let state = engine.state
        let headers: HeadersReading
        do {
            let fields = try engine.identityHeaders()
            headers = .credential(
                email: fields[IdentityHeaders.emailName] ?? "",
                expiresAt: fields[IdentityHeaders.expiresAtName].flatMap { Int64($0) } ?? 0
            )
        } catch {
            headers = .refused(error.code)
        }
        self.state.withLock {
            $0.resumes.append(Resume(label: label, promise: promise, state: state, headers: headers))
        }
    }

    /// Invariant 9: what every resumed caller and subscriber read already held what it was promised. The engine's
    /// state at that moment must be the state of the step that made the promise or of a later step, and so must what
    /// its fast path answered: never an earlier one. Checked once the engine has published everything, since a
    /// caller may resume before the step that resumed it has published its events.
    package func checkResumes() -> String? {
        state.withLock { state in
            defer {
                state.resumes.removeAll()
                state.expiryChecks.removeAll()
            }
            for check in state.expiryChecks {
                let expiry = state.localExpiries[check.credential.signature] ?? check.credential.expirationDate
                if check.at >= expiry {
                    return "invariant 2: \(check.label) received a credential that expired at "
                        + "\(check.credential.expiresAt)"
                }
            }
            for resume in state.resumes {
                // The index of the first state the promise allows (-1 for the initial signed-out state).
                let bound: UInt64?
                switch resume.promise {
                case .event(let sequence):
                    bound = sequence
                case .installedIn(let epoch):
                    bound = state.installs.first { $0.epoch == epoch }?.sequence
                case .credential(let email, let expiresAt, let epoch):
                    bound =
                        state.installs.first {
                            $0.email == email && $0.expiresAt == expiresAt && (epoch == nil || $0.epoch == epoch)
                        }?.sequence
                }
                guard let bound else {
                    return "invariant 9: \(resume.label) resumed with \(resume.promise), which the engine never "
                        + "published"
                }
                let first = (state.stateSequences.lastIndex { $0 <= bound } ?? -1)
                let allowed = (first..<state.states.count).map { $0 < 0 ? SessionState.signedOut : state.states[$0] }
                if !allowed.contains(resume.state) {
                    return "invariant 9: \(resume.label) resumed with \(resume.promise) while the engine was still "
                        + "\(resume.state); by then it must be \(allowed.first!) or later"
                }
                if !allowed.contains(where: { Self.agree(resume.headers, with: $0) }) {
                    return "invariant 9: \(resume.label) resumed with \(resume.promise) while the fast path still "
                        + "answered \(resume.headers); by then the engine must be \(allowed.first!) or later"
                }
            }
            return nil
        }
    }

    /// Whether the fast path may answer `headers` in `state`.
    private static func agree(_ headers: HeadersReading, with state: SessionState) -> Bool {
        switch (headers, state) {
        case (.credential(let email, let expiresAt), .identified(let identity)),
            (.credential(let email, let expiresAt), .renewing(let identity)):
            return identity.email == email && identity.expiresAt == expiresAt
        case (.refused(.switching), .switching), (.refused(.signedOut), .signedOut), (.refused(.shutDown), .signedOut),
            (.refused(.invalidIdentity), .expired), (.refused(.invalidIdentity), .identified),
            (.refused(.invalidIdentity), .renewing):
            return true
        default:
            return false
        }
    }

    // MARK: Fetch rules

    /// What the engine announced about the next fetch of `epoch`, in order.
    package func fetchRules(of epoch: UInt64) -> [FetchRule] {
        state.withLock { $0.fetchRules[epoch] ?? [] }
    }

    /// Invariant 10 for one fetch start: `nil` when the engine's rules for `epoch` allowed a fetch at `start`, else
    /// the earliest time they allowed one. A rule announced at the same instant as the start may belong before or
    /// after it, so the start counts as allowed if either order allows it.
    package func earliestAllowedStart(in epoch: UInt64, ifNotAt start: Duration) -> Duration? {
        let rules = fetchRules(of: epoch)
        func earliest(_ rules: some Sequence<FetchRule>) -> Duration {
            var wait: Duration?
            var floor = Duration.zero
            for rule in rules {
                switch rule {
                case .wait(_, let until): wait = until
                case .clear: wait = nil
                case .floor(_, let until): floor = max(floor, until)
                }
            }
            return max(wait ?? .zero, floor)
        }
        let before = rules.filter { $0.time < start }
        let simultaneous = rules.filter { $0.time == start }
        if earliest(before) <= start { return nil }
        for count in simultaneous.indices where earliest(before + simultaneous[...count]) <= start { return nil }
        return earliest(before)
    }

    // MARK: Hooks

    /// The account-change hook: records the change, checks that the previous work has drained, and holds the
    /// change at a gate when the program asked for it; the engine counts the held hook as parked.
    package func hook(_ change: AccountChange, scopedWork: Int) async {
        let gate = state.withLock { state -> Gate? in
            state.hooks.append(change)
            state.hookRuns.append((0, change))
            if !state.work.isEmpty || scopedWork != 0 {
                state.violations.append(
                    "invariant 5: hooks of \(change.from?.rawValue ?? "nil") → \(change.to?.rawValue ?? "nil") ran "
                        + "while \(max(state.work.count, scopedWork)) pieces of work ran"
                )
            }
            defer { state.nextHookGate = nil }
            state.heldHook = state.nextHookGate
            return state.nextHookGate
        }
        await gate?.wait()
    }

    package var hooks: [AccountChange] { state.withLock { $0.hooks } }

    /// A hook is about to be registered; returns its index for ``hookRan(_:_:)``.
    package func hookRegistered() -> Int {
        state.withLock { state in
            state.hooksAdded.append(state.hooks.count)
            return state.hooksAdded.count
        }
    }

    /// The hook of `index` runs for `change`.
    package func hookRan(_ index: Int, _ change: AccountChange) {
        state.withLock { $0.hookRuns.append((index, change)) }
    }

    /// The order of hooks: a change runs its hooks one at a time in registration order, so every run of an added
    /// hook directly follows the previous hook's run for the same change; once nothing can run, every hook added
    /// before a change began has run for it. Returns what broke it.
    package func checkHookOrder(final: Bool) -> String? {
        state.withLock { state in
            let runs = state.hookRuns
            for (position, run) in runs.enumerated() where run.hook > 0 {
                let previous = position > 0 ? runs[position - 1] : nil
                if previous?.hook != run.hook - 1 || previous?.change != run.change {
                    let order = runs.map {
                        "hook \($0.hook): \($0.change.from?.rawValue ?? "nil") → \($0.change.to?.rawValue ?? "nil")"
                    }
                    return "hook \(run.hook) ran out of registration order: \(order)"
                }
            }
            guard final else { return nil }
            for (offset, before) in state.hooksAdded.enumerated() {
                let ran = runs.count { $0.hook == offset + 1 }
                if ran != state.hooks.count - before {
                    return
                        "hook \(offset + 1), added before \(state.hooks.count - before) changes ran their hooks, ran \(ran) times"
                }
            }
            return nil
        }
    }

    /// Holds the next hook at a gate of `clock`'s.
    package func stallNextHook(clock: ManualClock) {
        state.withLock { $0.nextHookGate = Gate(clock: clock) }
    }

    /// Whether a hook waits at its gate.
    package var hookStalled: Bool { state.withLock { $0.heldHook?.isHolding ?? false } }

    package func releaseHooks() {
        let gate = state.withLock { state -> Gate? in
            state.nextHookGate = nil
            defer { state.heldHook = nil }
            return state.heldHook
        }
        gate?.open()
    }
}

/// The service's verifier, shared with scoped work that sends credentials to the service.
package final class ServiceVerifier: Sendable {
    private let verifier: SanitizedMutex<IdentityVerifier>

    package init(_ verifier: IdentityVerifier) {
        self.verifier = SanitizedMutex(verifier)
    }

    package func rotate(to secret: String) {
        verifier.withLock { try! $0.rotateSecret(to: secret) }
    }

    package func verify(_ credential: IdentityCredential) -> IdentityVerification {
        verifier.withLock { $0.verify(credential) }
    }
}

/// The states and events one subscriber received.
package final class SubscriberLog: Sendable {
    private struct Waiter {
        /// Resume once this sequence number was received, or the subscription finished.
        package var sequence: UInt64
        package var continuation: CheckedContinuation<Void, Never>
    }

    private struct State {
        package var states: [SessionState] = []
        package var dropped = false
        package var finished = false
        /// The sequence number of the last event received; `nil` before the first (the state at subscription).
        package var lastSequence: UInt64?
        package var waiters: [Waiter] = []

        package mutating func ready() -> [CheckedContinuation<Void, Never>] {
            var ready: [CheckedContinuation<Void, Never>] = []
            waiters.removeAll { waiter in
                guard finished || (lastSequence.map { $0 >= waiter.sequence } ?? false) else { return false }
                ready.append(waiter.continuation)
                return true
            }
            return ready
        }
    }

    private let state = SanitizedMutex(State())
    /// The engine's last sequence number when the subscriber subscribed: its first event, the state current then,
    /// may carry an earlier one.
    package let startSequence: UInt64

    /// Creates the log of a subscriber that subscribes while the engine's last event is `startSequence`.
    package init(startSequence: UInt64) {
        self.startSequence = startSequence
    }

    package func record(_ event: SessionEvent) {
        let startSequence = self.startSequence
        let ready = state.withLock { state in
            switch event.kind {
            case .stateChanged(let session): state.states.append(session)
            case .eventsDropped: state.dropped = true
            default: break
            }
            state.lastSequence = max(state.lastSequence ?? startSequence, event.sequence)
            return state.ready()
        }
        for continuation in ready { continuation.resume() }
    }

    package func finish() {
        let ready = state.withLock { state in
            state.finished = true
            return state.ready()
        }
        for continuation in ready { continuation.resume() }
    }

    /// Waits until the subscriber has received the event with this sequence number, or its subscription ended.
    package func waitUntilReceived(_ sequence: UInt64) async {
        await withCheckedContinuation { (continuation: CheckedContinuation<Void, Never>) in
            let now = state.withLock { state -> Bool in
                if state.finished || (state.lastSequence.map { $0 >= sequence } ?? false) { return true }
                state.waiters.append(Waiter(sequence: sequence, continuation: continuation))
                return false
            }
            if now { continuation.resume() }
        }
    }

    /// Waits until the subscription has ended.
    package func waitUntilFinished() async {
        await waitUntilReceived(.max)
    }

    package var states: [SessionState] { state.withLock { $0.states } }
    package var stateCount: Int { state.withLock { $0.states.count } }
    package var dropped: Bool { state.withLock { $0.dropped } }
    package var finished: Bool { state.withLock { $0.finished } }
}
