import Synchronization

/// An event of a ``SessionPool``: one account's engine event, the account's eviction, or an outage of the backend that
/// the account's fetch began or ended.
public struct SessionPoolEvent: Sendable, CustomStringConvertible {
    /// Why the pool signed an account out by itself.
    public enum EvictionReason: String, Sendable, Hashable {
        /// The pool was at ``SessionPoolConfiguration/maximumAccounts`` and this was the least recently used account
        /// with no work running, no caller waiting and no sign-in under way.
        case capacity
        /// The account was not used for ``SessionPoolConfiguration/idleTimeout``.
        case idle
    }

    /// What happened.
    public enum Kind: Sendable {
        /// The account's engine published this event (its ``SessionEvent/epoch`` and ``SessionEvent/sequence`` count
        /// within the account).
        case session(SessionEvent)
        /// The pool signed the account out by itself; its hooks ran and its engine's events ended.
        case evicted(EvictionReason)
        /// The account's fetch was the last of ``SessionPoolConfiguration/Budget/outageThreshold`` in a row, across
        /// the pool, to fail as an outage: the pool holds every account's fetches and sends one probe at a time.
        case outageBegan
        /// The backend answered the account's fetch: the outage is over, and the held fetches go through the budget.
        case outageEnded
        /// The budget let the account's proactive renewal start only after the credential it renews had expired: the
        /// pool owes more renewals than ``SessionPoolConfiguration/Budget`` can start, and identities expire while
        /// they wait. Reported once until the budget's queue next empties, and logged at warning; size the budget as
        /// ``SessionPoolConfiguration/Budget`` says. ``SessionPoolMetrics/renewalsPastDeadline`` counts every such
        /// renewal.
        case budgetBehind
        /// A call to the fleet's coordinator (``FleetCoordination``) for the account's fetch failed or passed its
        /// deadline, for `reason`: the pool's fetches decide locally, as without a coordinator, and one of them asks
        /// again after ``FleetCoordination/retryInterval``. Logged at warning.
        case coordinatorUnavailable(reason: String)
        /// The fleet's coordinator answered the account's fetch again after it was unavailable.
        case coordinatorAvailable
    }

    /// The account the event is about.
    public let account: AccountID
    /// What happened.
    public let kind: Kind

    /// Creates an event.
    ///
    /// - Parameters:
    ///   - account: The account.
    ///   - kind: What happened.
    public init(account: AccountID, kind: Kind) {
        self.account = account
        self.kind = kind
    }

    /// The account and what happened, without credentials.
    public var description: String {
        switch kind {
        case .session(let event): "\(account): \(event)"
        case .evicted(let reason): "\(account): evicted (\(reason.rawValue))"
        case .outageBegan: "\(account): the backend's outage began; the pool holds every account's fetches"
        case .outageEnded: "\(account): the backend answered; the outage is over"
        case .budgetBehind: "\(account): renewed only after expiry; the budget cannot keep up with the renewals it owes"
        case .coordinatorUnavailable(let reason): "\(account): the fleet's coordinator is unavailable (\(reason))"
        case .coordinatorAvailable: "\(account): the fleet's coordinator answers again"
        }
    }
}

/// The pool's events, each naming its account; it ends when the pool shuts down.
public typealias SessionPoolEvents = AsyncStream<SessionPoolEvent>

/// Fans the pool's events out to its subscribers, each with a bounded buffer that drops the oldest, and counts what
/// the buffers drop.
final class PoolEventBroadcaster: Sendable {
    private struct State {
        var subscribers: [UInt64: AsyncStream<SessionPoolEvent>.Continuation] = [:]
        var nextID: UInt64 = 0
        var finished = false
    }

    private let state = SanitizedMutex(State())
    private let bufferLimit: Int
    /// Events dropped over all subscribers, over the broadcaster's life.
    private let dropped = Atomic<Int>(0)

    init(bufferLimit: Int) {
        self.bufferLimit = max(1, bufferLimit)
    }

    func subscribe(bufferLimit: Int?) -> SessionPoolEvents {
        let limit = max(1, bufferLimit ?? self.bufferLimit)
        let (stream, continuation) = AsyncStream.makeStream(
            of: SessionPoolEvent.self, bufferingPolicy: limit == .max ? .unbounded : .bufferingNewest(limit))
        let id = state.withLock { state -> UInt64? in
            guard !state.finished else { return nil }
            state.nextID += 1
            state.subscribers[state.nextID] = continuation
            return state.nextID
        }
        guard let id else {
            continuation.finish()
            return stream
        }
        continuation.onTermination = { [weak self] _ in
            _ = self?.state.withLock { $0.subscribers.removeValue(forKey: id) }
        }
        return stream
    }

    /// Hands the event to every subscriber; called in the step that publishes it.
    func publish(_ event: SessionPoolEvent) {
        let subscribers = state.withLock { Array($0.subscribers.values) }
        for subscriber in subscribers {
            if case .dropped = subscriber.yield(event) { dropped.add(1, ordering: .relaxed) }
        }
    }

    var subscriberCount: Int { state.withLock { $0.subscribers.count } }

    /// The number of events dropped over all subscribers so far.
    var droppedCount: Int { dropped.load(ordering: .relaxed) }

    func finish() {
        let subscribers = state.withLock { state -> [AsyncStream<SessionPoolEvent>.Continuation] in
            state.finished = true
            defer { state.subscribers.removeAll() }
            return Array(state.subscribers.values)
        }
        for subscriber in subscribers { subscriber.finish() }
    }
}

/// What a ``SessionPool`` holds and how its budget toward the backend is used.
public struct SessionPoolMetrics: Sendable, Hashable, CustomStringConvertible {
    /// Accounts in the pool.
    public var accounts: Int
    /// Fetches in flight across the pool; with a fleet's coordinator (``FleetCoordination``), also those the
    /// coordinator is asked about or holds, and those waiting to leave for the backend.
    public var fetchesInFlight: Int
    /// Fetches waiting for the budget that are needed now (a caller waits, or the identity is not usable).
    public var queuedNeeded: Int
    /// Proactive renewals waiting for the budget.
    public var queuedProactive: Int
    /// Fetches that had to wait for the budget, over the pool's life; with a fleet's coordinator, for a slot and to
    /// leave for the backend, each counted.
    public var budgetWaits: Int
    /// Fetches the budget let start, over the pool's life; with a fleet's coordinator, the starts taken (a fetch the
    /// fleet answered at once with another replica's credential took none; one it had reserved a start for did).
    public var fetchesAdmitted: Int
    /// Accounts the pool signed out by itself (capacity or idle), over its life.
    public var evictions: Int
    /// Accounts with a timer (renewal, expiry, retry) in the pool's one deadline structure.
    public var timers: Int
    /// Whether the pool holds its fetches for an outage now, sending only a probe at a time
    /// (``SessionPoolConfiguration/Budget/outageThreshold``).
    public var holdsForOutage: Bool
    /// How many outages the pool has held its fetches for, over its life.
    public var outages: Int
    /// How long the last fetches the budget let start (at most ``LatencySummary/window``) had waited for it: a full
    /// queue, an outage's hold or a `Retry-After` pause.
    ///
    /// This wait is the pool's, not the backend's: it counts neither in an account's
    /// ``SessionMetrics/fetchLatency`` nor toward the backend's clock offset, which are measured from the moment a
    /// fetch leaves.
    public var budgetWait = LatencySummary()
    /// Proactive renewals the budget let start only after the credential they renew had expired, over the pool's
    /// life: a budget too small for the renewals it owes (``SessionPoolEvent/Kind/budgetBehind``).
    public var renewalsPastDeadline = 0
    /// Events that subscribers of ``SessionPool/events(bufferLimit:)`` lost, over the pool's life: a subscriber more
    /// than its buffer limit behind loses its oldest events. An account's own stream
    /// (``SessionPool/events(for:bufferLimit:)``) says so in the stream, and counts in that account's
    /// ``SessionMetrics/eventsDropped``.
    public var eventsDropped = 0
    /// What the pool's coordination with other replicas has done; `nil` for a pool without a coordinator.
    public var fleet: FleetMetrics?

    /// The pool's counters on one line.
    public var description: String {
        "accounts \(accounts), in flight \(fetchesInFlight), queued \(queuedNeeded) needed and \(queuedProactive) "
            + "proactive, budget waits \(budgetWaits), fetches admitted \(fetchesAdmitted), evictions \(evictions), "
            + "timers \(timers), outage \(holdsForOutage ? "held" : "none") (\(outages) over the pool's life), "
            + "budget wait [\(budgetWait)], renewals past deadline \(renewalsPastDeadline), "
            + "events dropped \(eventsDropped)" + (fleet.map { ", \($0)" } ?? "")
    }
}
