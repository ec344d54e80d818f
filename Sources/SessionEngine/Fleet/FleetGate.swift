import Foundation

/// A replica's side of its fleet's coordination: asks the ``FleetCoordinator`` about each fetch the replica's own
/// budget let go, within the call's deadline, waits as the coordinator says, and tells it how each fetch ended. Shared
/// by an engine's account, or by every account of a pool.
///
/// It fails open: a call that throws or passes ``FleetCoordination/callTimeout`` decides locally (the fetch starts as
/// without a coordinator), the coordinator counts as unavailable, and for ``FleetCoordination/retryInterval`` every
/// fetch decides locally at once; then the first fetch asks again, alone, and the first call that answers makes it
/// available again. Each change of availability is reported once (`onChange`).
final class FleetGate: Sendable {
    /// What the fleet let a fetch do.
    enum Admission: Sendable {
        /// Fetch, reporting the end with the lease, or with none when decided locally.
        case start(FleetLease?)
        /// Install another replica's credential, which the gate found the pinned user's and newer than the held one.
        case shared(IdentityCredential)
        /// The fetch's task was cancelled while it asked or waited.
        case cancelled
    }

    /// A change of the coordinator's availability, reported in the lock step that makes it.
    enum Change: Sendable, Equatable {
        /// A call for the account failed, for the reason given; the replica decides locally for a while.
        case unavailable(AccountID, reason: String)
        /// A call for the account answered again.
        case available(AccountID)
    }

    private struct State {
        /// Until when on the clock's monotonic time fetches decide locally without asking; `nil` while available.
        var quietUntil: Duration?
        /// Counts the changes of availability and the tries again, so that a call's outcome changes the availability
        /// only if nothing changed it since the call began.
        var generation: UInt64 = 0
        var metrics = FleetMetrics()
    }

    let coordination: FleetCoordination
    private let clock: any SessionClock
    private let timers: DeadlineQueue<AccountShard.TimerTarget>
    private let taskExecutor: (any TaskExecutor)?
    /// The longest a hold is waited for before the coordinator is asked again.
    private let maximumHold: Duration
    /// The longest a fetch waits for another replica's credential, in all.
    private let maximumPeerWait: Duration
    private let state = SanitizedMutex(State())
    /// Receives each change of availability in the lock step that makes it; it must return quickly.
    private let onChange: @Sendable (Change) -> Void

    /// Creates the gate of an engine or a pool.
    ///
    /// - Parameters:
    ///   - coordination: The coordinator and its bounds.
    ///   - configuration: The accounts' policies: the longest pause (``SessionConfiguration/maximumRetryAfter``) and
    ///     the fetch's deadline, the default of the longest wait for a peer.
    ///   - clock: The clock the deadlines and waits are on.
    ///   - timers: The deadline queue they wait in.
    ///   - taskExecutor: The executor the calls' tasks prefer.
    ///   - onChange: Receives each change of availability.
    init(
        _ coordination: FleetCoordination, configuration: SessionConfiguration, clock: any SessionClock,
        timers: DeadlineQueue<AccountShard.TimerTarget>, taskExecutor: (any TaskExecutor)?,
        onChange: @escaping @Sendable (Change) -> Void
    ) {
        self.coordination = coordination
        self.clock = clock
        self.timers = timers
        self.taskExecutor = taskExecutor
        maximumHold = max(.milliseconds(10), configuration.maximumRetryAfter)
        maximumPeerWait = coordination.maximumPeerWait ?? configuration.fetchTimeout
        self.onChange = onChange
    }

    /// The gate's counters.
    var metrics: FleetMetrics {
        state.withLock { state in
            var metrics = state.metrics
            metrics.isAvailable = state.quietUntil == nil
            return metrics
        }
    }

    /// The shortest wait the gate keeps between two questions about one fetch, whatever the coordinator says.
    static let shortestWait = Duration.milliseconds(10)

    /// Asks the coordinator about `fetch` until it may start, a credential comes from another replica, or the task is
    /// cancelled.
    ///
    /// - Parameters:
    ///   - fetch: The fetch, as the coordinator hears it.
    ///   - email: The user every credential of the account session must name: the held credential's, or before the
    ///     first one the user the host named (``SessionPool/signIn(_:expecting:timeout:)``); `nil` when there is none,
    ///     and then no shared credential is installed.
    ///   - held: The credential the account holds, which a shared one must outlive; `nil` when it holds none.
    ///   - followsRejection: Whether the service has rejected the held credential by now, asked before each question:
    ///     a fetch under way when a rejection comes becomes the renewal after it (`FleetFetch/followsRejection`).
    ///   - takeStart: Takes the fetch's start of the replica's own budget, waiting for it; `false` when the task was
    ///     cancelled first. Called when the fleet reserves a start for the fetch (``FleetDecision/reserved(_:retryIn:)``)
    ///     and it holds none, so that it leaves at the reserved time.
    ///   - giveUpStart: Gives up the start taken, unused, when the fleet then holds the fetch or makes it wait for a
    ///     peer after all: a start held through the fleet's hold could be the replica's one probe, which the fetch the
    ///     fleet lets probe would wait for.
    /// - Returns: What the fetch does, and whether it took its start on the way (release it then, whatever the fetch
    ///   does).
    func admit(
        _ fetch: FleetFetch, pinnedTo email: String?, holding held: IdentityCredential?,
        followsRejection: @Sendable () async -> Bool, takeStart: @Sendable () async -> Bool,
        giveUpStart: @Sendable () -> Void
    ) async -> (Admission, tookStart: Bool) {
        var fetch = fetch
        var tookStart = false
        let admission = await admitting(
            &fetch, pinnedTo: email, holding: held, followsRejection: followsRejection, takeStart: takeStart,
            giveUpStart: giveUpStart, tookStart: &tookStart)
        // A start reserved for a fetch that does not go to the backend (it was cancelled, or took another replica's
        // credential) would hold the account's other replicas until it lapsed: the coordinator hears it was abandoned,
        // and frees the account. One that goes ahead on its own keeps holding them, for the credential it will share.
        switch admission {
        case .cancelled, .shared:
            if fetch.reservation != nil { ended(fetch, lease: nil, outcome: .abandoned) }
        case .start:
            break
        }
        return (admission, tookStart)
    }

    /// ``admit(_:pinnedTo:holding:followsRejection:)``'s questions; `fetch` ends with the reservation it holds, if any.
    private func admitting(
        _ fetch: inout FleetFetch, pinnedTo email: String?, holding held: IdentityCredential?,
        followsRejection: @Sendable () async -> Bool, takeStart: @Sendable () async -> Bool,
        giveUpStart: @Sendable () -> Void, tookStart: inout Bool
    ) async -> Admission {
        var peerWaitStarted: Duration?
        var refusals = 0
        while true {
            if !fetch.followsRejection, await followsRejection() {
                fetch = FleetFetch(
                    account: fetch.account, isNeeded: true, heldExpiry: fetch.heldExpiry, followsRejection: true,
                    reservation: fetch.reservation)
            }
            let asked = fetch
            // A lease granted after the replica stopped waiting is given back, not left to lapse.
            let giveBack: @Sendable (Result<FleetDecision, any Error>) -> Void = { [weak self] answer in
                if case .success(.start(let lease)) = answer { self?.ended(asked, lease: lease, outcome: .abandoned) }
            }
            let decision = await call(for: fetch.account, changingAvailability: true, late: giveBack) {
                try await self.coordination.coordinator.decide(asked)
            }
            if Task.isCancelled {
                // A lease granted to a fetch that no longer goes is given back at once, not when it lapses; so is a
                // start reserved for it (by the caller).
                switch decision {
                case .start(let lease):
                    // The lease took the reserved start, if there was one: its report is the one report.
                    ended(fetch, lease: lease, outcome: .abandoned)
                    fetch.reservation = nil
                case .reserved(let reservation, _): fetch.reservation = reservation
                default: break
                }
                return .cancelled
            }
            let wait: Duration
            switch decision {
            case nil:
                count { $0.decidedLocally += 1 }
                return .start(nil)
            case .start(let lease):
                count { $0.started += 1 }
                return .start(lease)
            case .shared(let credential):
                guard Self.accepts(credential, pinnedTo: email, holding: held, now: clock.now) else {
                    count { $0.sharesRefused += 1 }
                    refusals += 1
                    guard refusals < 2 else { return .start(nil) }
                    // Asked again as holding one at least as new as the refused credential: the coordinator does
                    // not offer it again, and the fetch goes through the fleet's budget and holds.
                    fetch = FleetFetch(
                        account: fetch.account, isNeeded: fetch.isNeeded,
                        heldExpiry: max(fetch.heldExpiry ?? credential.expirationDate, credential.expirationDate),
                        followsRejection: fetch.followsRejection, reservation: fetch.reservation)
                    continue
                }
                count { $0.sharesInstalled += 1 }
                return .shared(credential)
            case .awaitPeer(let retryIn):
                let now = clock.uptime
                let started = peerWaitStarted ?? now
                peerWaitStarted = started
                wait = max(Self.shortestWait, retryIn)
                // In all, on the clock: the calls' own time counts. A hold in between ends the wait: the fleet's
                // budget or outage held the fetch, and the peer it waits for after it is another fetch.
                guard now - started + wait <= maximumPeerWait else {
                    count { $0.peerWaitsGivenUp += 1 }
                    return .start(nil)
                }
                count { $0.peerWaits += 1 }
                if tookStart {
                    giveUpStart()
                    tookStart = false
                }
            case .hold(let retryIn, _):
                peerWaitStarted = nil
                if tookStart {
                    giveUpStart()
                    tookStart = false
                }
                wait = min(maximumHold, max(Self.shortestWait, retryIn))
                count { $0.holds += 1 }
            case .reserved(let reservation, let retryIn):
                // Asked again when the start comes, with the reservation: the fetch keeps its place in the queue.
                peerWaitStarted = nil
                fetch.reservation = reservation
                let due = clock.uptime + min(maximumHold, max(Self.shortestWait, retryIn))
                count { $0.holds += 1 }
                // The fleet will start it then: it takes its start of the replica's budget while it waits, so that
                // it leaves on time, and the fleet's spacing of its starts is what the backend sees.
                if !tookStart {
                    guard await takeStart() else { return .cancelled }
                    tookStart = true
                }
                wait = due - clock.uptime
            }
            // A start that came later than the reserved one is asked for at once.
            guard wait > .zero else { continue }
            guard await FetchRace.sleep(for: wait, clock: clock, timers: timers) else { return .cancelled }
        }
    }

    /// Tells the coordinator how a fetch ended, in a task of its own with the call's deadline: nobody waits for it.
    /// Sent also while the coordinator counts as unavailable, so that it hears every outcome it can; its answer or
    /// failure does not change the availability, which the decisions alone track.
    ///
    /// - Parameters:
    ///   - fetch: The fetch, as the coordinator heard it.
    ///   - lease: The lease that admitted it; `nil` for a fetch decided locally.
    ///   - outcome: How it ended. A credential is handed over only when ``FleetCoordination/sharesCredentials`` is
    ///     on; otherwise the coordinator hears its expiry alone.
    func ended(_ fetch: FleetFetch, lease: FleetLease?, outcome: FleetOutcome) {
        var outcome = outcome
        if !coordination.sharesCredentials, case .credential(let credential) = outcome {
            outcome = .issued(expiresAt: credential.expirationDate)
        }
        let told = outcome
        _ = Task.start(preferring: taskExecutor) {
            _ = await self.call(for: fetch.account, changingAvailability: false) {
                try await self.coordination.coordinator.fetchEnded(fetch, lease: lease, outcome: told)
            }
        }
    }

    /// Whether a credential another replica fetched may be installed for an account pinned to `email` and holding
    /// `held`: the pinned user's, byte for byte (as every install checks it), expiring later than the held one and
    /// after `now`. With no user pinned (a first sign-in that names none) there is none to match, and the replica
    /// fetches its own.
    static func accepts(
        _ credential: IdentityCredential, pinnedTo email: String?, holding held: IdentityCredential?, now: Date
    ) -> Bool {
        guard let email, credential.email.utf8.elementsEqual(email.utf8) else { return false }
        return (held.map { credential.expiresAt > $0.expiresAt } ?? true) && credential.expirationDate > now
    }

    /// One call to the coordinator, raced against its deadline; `nil` when it failed, passed its deadline, was
    /// cancelled, or was not made because the coordinator is unavailable for now.
    ///
    /// A call that changes the availability (a decision) is made only while the coordinator is available, or as the
    /// one call that tries it again once ``FleetCoordination/retryInterval`` has passed; its answer changes the
    /// availability only if no other call changed it meanwhile (the `generation` it started in), so an answer that
    /// comes late never undoes a later failure, nor a late failure a later answer.
    private func call<Value: Sendable>(
        for account: AccountID, changingAvailability: Bool,
        late: (@Sendable (Result<Value, any Error>) -> Void)? = nil,
        _ body: @escaping @Sendable () async throws -> Value
    ) async -> Value? {
        let generation = state.withLock { state -> UInt64? in
            guard changingAvailability else { return state.generation }
            let now = clock.uptime
            guard let quietUntil = state.quietUntil else { return state.generation }
            guard now >= quietUntil else { return nil }
            // This call tries the coordinator again; the others decide locally until it has answered or failed.
            state.quietUntil = now + coordination.retryInterval
            state.generation += 1
            return state.generation
        }
        guard let generation else { return nil }
        let outcome = await FetchRace.call(
            timeout: coordination.callTimeout, clock: clock, timers: timers, taskExecutor: taskExecutor, late: late
        ) { () -> Result<Value, any Error> in
            do {
                return .success(try await body())
            } catch {
                return .failure(error)
            }
        }
        let failure: String
        switch outcome {
        case .finished(.success(let value)):
            guard changingAvailability else { return value }
            state.withLock { state in
                guard state.quietUntil != nil, state.generation == generation else { return }
                state.quietUntil = nil
                state.generation += 1
                onChange(.available(account))
            }
            return value
        case .finished(.failure(let error)):
            // The error's type only: its message may carry what the coordinator's server said, or a password.
            failure = "the coordinator failed with \(type(of: error))"
        case .timedOut:
            failure = "the coordinator did not answer within \(coordination.callTimeout.readable)"
        case .cancelled:
            return nil
        }
        state.withLock { state in
            state.metrics.callsFailed += 1
            guard changingAvailability, state.generation == generation else { return }
            let wasAvailable = state.quietUntil == nil
            state.quietUntil = clock.uptime + coordination.retryInterval
            state.generation += 1
            if wasAvailable { onChange(.unavailable(account, reason: failure)) }
        }
        return nil
    }

    private func count(_ change: (inout FleetMetrics) -> Void) {
        state.withLock { change(&$0.metrics) }
    }
}

/// What a replica's coordination has done: ``SessionPoolMetrics/fleet`` and ``SessionMetrics/fleet``.
public struct FleetMetrics: Sendable, Hashable, CustomStringConvertible {
    /// Fetches the coordinator let start.
    public var started = 0
    /// Fetches that started without the coordinator's word: a call failed, passed its deadline or was not made
    /// while the coordinator was unavailable.
    public var decidedLocally = 0
    /// Credentials of other replicas handed to the accounts' validation in place of a fetch.
    public var sharesInstalled = 0
    /// Credentials of other replicas refused (another user's, or not newer than the one held, or expired); the
    /// account fetched its own.
    public var sharesRefused = 0
    /// Times a fetch waited for another replica's credential.
    public var peerWaits = 0
    /// Fetches that stopped waiting for another replica's credential at ``FleetCoordination/maximumPeerWait`` and
    /// fetched their own.
    public var peerWaitsGivenUp = 0
    /// Times a fetch waited because the fleet held it (its budget, an outage, a `Retry-After`).
    public var holds = 0
    /// Calls to the coordinator (decisions and reports) that threw or passed their deadline.
    public var callsFailed = 0
    /// Whether the replica asks the coordinator now (`false` for ``FleetCoordination/retryInterval`` after a call
    /// failed).
    public var isAvailable = true

    /// Creates empty counters.
    public init() {}

    /// Every counter, by name.
    public var description: String {
        "fleet started: \(started), decidedLocally: \(decidedLocally), sharesInstalled: \(sharesInstalled), "
            + "sharesRefused: \(sharesRefused), peerWaits: \(peerWaits), peerWaitsGivenUp: \(peerWaitsGivenUp), "
            + "holds: \(holds), callsFailed: \(callsFailed), available: \(isAvailable)"
    }
}

extension FleetMetrics {
    /// Adds another replica's counts to these (a fleet's total); whether the coordinator answers stays this one's.
    package mutating func add(_ other: FleetMetrics) {
        started += other.started
        decidedLocally += other.decidedLocally
        sharesInstalled += other.sharesInstalled
        sharesRefused += other.sharesRefused
        peerWaits += other.peerWaits
        peerWaitsGivenUp += other.peerWaitsGivenUp
        holds += other.holds
        callsFailed += other.callsFailed
    }
}
