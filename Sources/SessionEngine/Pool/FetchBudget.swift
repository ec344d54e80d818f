import Synchronization

/// How urgently a fetch is needed, for the order a shared ``FetchBudget`` admits fetches in.
enum FetchUrgency: Sendable, Hashable, Comparable {
    /// A caller waits for it, or the account has no usable identity (a first credential, an expired or rejected
    /// one): identified work is blocked until it lands.
    case needed
    /// A proactive renewal while the credential is still usable.
    case proactive
}

/// The one budget toward the backend that every account of a ``SessionPool`` fetches through: at most
/// ``SessionPoolConfiguration/Budget/maximumInFlight`` fetches in flight, fetch starts refilled at
/// ``SessionPoolConfiguration/Budget/startsPerSecond`` (a token bucket holding at most
/// ``SessionPoolConfiguration/Budget/burst``), and a pause the backend asked for (`Retry-After`) that holds for every
/// account.
///
/// Fetches that cannot start at once queue by urgency: needed fetches first, then proactive renewals, earlier
/// deadlines first within each, and a proactive renewal whose deadline has passed counts as needed, so no account
/// waits behind a stream of others for ever. The queue and the counters live behind one lock; a single task sleeps on
/// the clock until the next token, the pause's end or the next probe, and none runs while nothing waits.
///
/// After ``SessionPoolConfiguration/Budget/outageThreshold`` fetches in a row, from at least
/// ``SessionPoolConfiguration/Budget/outageAccounts`` accounts, end as an outage (``release(_:outcome:waited:)``),
/// the budget holds every queued fetch but one probe at a time, the first in urgency order that is not of the
/// account whose probe failed last, admitted once ``SessionPoolConfiguration/Budget/outageProbeInterval`` has passed
/// since the last probe failed. A pause the backend asked for holds the same way, without counting as an outage: at
/// its end one probe goes first. The first fetch the backend answers ends the hold, and the bucket holds at most one
/// start then, so the held fetches go at the budget's rate.
final class FetchBudget: Sendable {
    /// A queued fetch's place: its urgency, its deadline on the monotonic clock, and the order it queued in.
    struct Key: Sendable, Comparable {
        var deadline: Duration
        var order: UInt64
        /// The account the fetch is for, so that an outage's probes go to accounts in turn.
        var account: AccountID

        static func < (a: Key, b: Key) -> Bool {
            (a.deadline, a.order) < (b.deadline, b.order)
        }
    }

    /// One fetch's claim on the budget, made on the engine's actor when it starts the fetch.
    struct Ticket: Sendable {
        fileprivate let order: UInt64
        fileprivate let urgency: FetchUrgency
        fileprivate let deadline: Duration
        /// The account the fetch is for, which an outage's report names.
        let account: AccountID
    }

    /// A change the budget reports in the lock step that makes it: its outage state, or that it fell behind the
    /// renewals it owes.
    enum Change: Sendable, Equatable {
        /// The fetch for `account` was the last of ``SessionPoolConfiguration/Budget/outageThreshold`` in a row to
        /// fail as an outage: the budget holds fetches from now on.
        case began(AccountID)
        /// The backend answered the fetch for `account`: the budget holds nothing any longer.
        case ended(AccountID)
        /// The budget admitted `account`'s proactive renewal only after the credential it renews had expired: it owes
        /// more renewals than it can start. Reported once until its queue next empties.
        case behind(AccountID)
    }

    /// How a fetch the budget admitted ended, as the budget's outage detection counts it.
    enum Outcome: Sendable {
        /// The backend answered: a credential, or a refusal that is not an outage.
        case answered
        /// The fetch failed as an outage (``SessionError/FailureClass/outage``) with no `Retry-After`.
        case outage
        /// Neither: the fetch was cancelled or never reached the backend, or the backend asked for a pause, which
        /// ``pause(for:)`` handles.
        case neither
    }

    /// What the budget's counters show, for metrics.
    struct Snapshot: Sendable, Equatable {
        var inFlight: Int
        var queuedNeeded: Int
        var queuedProactive: Int
        /// Fetches that had to queue, over the budget's life.
        var waits: Int
        /// Fetches admitted, over the budget's life.
        var admitted: Int
        /// Whether the budget holds fetches for an outage now.
        var holdsForOutage: Bool
        /// How many outages the budget has held fetches for.
        var outages: Int
        /// How long admitted fetches waited for the budget, recently (the last ``LatencySummary/window``).
        var waited: [Duration]
        /// Proactive renewals admitted after the credential they renew had expired, over the budget's life.
        var lateRenewals: Int
    }

    /// A hold on fetches, for an outage or for a pause the backend asked for: when the next probe may start, the
    /// probe at the backend, and the account whose probe failed last, which the next probe avoids.
    private struct Hold {
        var probeAt: Duration
        var probe: UInt64?
        var lastProbeAccount: AccountID?
        /// Whether the hold is an outage (reported and counted), not only a pause that ends with a probe.
        var isOutage: Bool
    }

    private enum Start {
        case now
        case cancelled
        case queued([UnsafeContinuation<Bool, Never>], sleep: Duration?)
    }

    private struct State {
        var inFlight = 0
        var tokens: Double
        var refilledAt: Duration
        var needed = Heap<Key>()
        var proactive = Heap<Key>()
        var parked: [UInt64: UnsafeContinuation<Bool, Never>] = [:]
        /// The urgency of each queued fetch; change it only through `setQueued`, which keeps the counts.
        var queued: [UInt64: FetchUrgency] = [:]
        var queuedNeeded = 0
        var queuedProactive = 0

        /// Sets (or, with `nil`, clears) a fetch's queued urgency and keeps the counts per urgency.
        mutating func setQueued(_ order: UInt64, _ urgency: FetchUrgency?) {
            switch queued[order] {
            case .needed?: queuedNeeded -= 1
            case .proactive?: queuedProactive -= 1
            case nil: break
            }
            queued[order] = urgency
            switch urgency {
            case .needed?: queuedNeeded += 1
            case .proactive?: queuedProactive += 1
            case nil: break
            }
        }
        /// Tickets promoted to needed before their fetch queued.
        var promoted: Set<UInt64> = []
        var nextOrder: UInt64 = 0
        var sleeping = false
        var waits = 0
        var admitted = 0
        /// Admitted fetches that ended as an outage since the last one the backend answered, and their accounts.
        var outageFailures = 0
        var outageAccounts: Set<AccountID> = []
        var hold: Hold?
        var outages = 0
        var waited = LatencyRing(capacity: LatencySummary.window)
        var lateRenewals = 0
        /// Whether a late renewal was reported since the queue last emptied.
        var behind = false
    }

    private let limits: SessionPoolConfiguration.Budget
    private let clock: any SessionClock
    private let ledger: ActivityLedger?
    private let taskExecutor: (any TaskExecutor)?
    private let state: Mutex<State>
    /// Receives each change in the lock step that makes it, so in order; it must return quickly and must not call the
    /// budget.
    private let onChange: (@Sendable (Change) -> Void)?

    init(
        limits: SessionPoolConfiguration.Budget,
        clock: any SessionClock,
        ledger: ActivityLedger?,
        taskExecutor: (any TaskExecutor)?,
        onChange: (@Sendable (Change) -> Void)? = nil
    ) {
        self.limits = limits
        self.clock = clock
        self.ledger = ledger
        self.taskExecutor = taskExecutor
        self.onChange = onChange
        state = Mutex(State(tokens: Double(limits.burst), refilledAt: clock.uptime))
    }

    var snapshot: Snapshot {
        state.withLock { state in
            Snapshot(
                inFlight: state.inFlight,
                queuedNeeded: state.queuedNeeded,
                queuedProactive: state.queuedProactive,
                waits: state.waits,
                admitted: state.admitted,
                holdsForOutage: state.hold?.isOutage == true,
                outages: state.outages,
                waited: state.waited.durations,
                lateRenewals: state.lateRenewals
            )
        }
    }

    /// A claim for a fetch about to start.
    ///
    /// - Parameters:
    ///   - urgency: How urgently the fetch is needed.
    ///   - deadline: When it is needed by, on the clock's monotonic time: the credential's expiry for a renewal,
    ///     now for a caller waiting.
    ///   - account: The account the fetch is for.
    func ticket(urgency: FetchUrgency, deadline: Duration, account: AccountID) -> Ticket {
        let order = state.withLock { state -> UInt64 in
            state.nextOrder += 1
            return state.nextOrder
        }
        return Ticket(order: order, urgency: urgency, deadline: deadline, account: account)
    }

    /// A caller now waits for the ticket's fetch: it is needed, whether it has queued yet or not.
    func promote(_ ticket: Ticket) {
        guard ticket.urgency == .proactive else { return }
        state.withLock { state in
            switch state.queued[ticket.order] {
            case .proactive?:
                state.setQueued(ticket.order, .needed)
                state.needed.insert(Key(deadline: ticket.deadline, order: ticket.order, account: ticket.account))
            case .needed?:
                break
            case nil:
                if state.parked[ticket.order] == nil { state.promoted.insert(ticket.order) }
            }
        }
    }

    /// Waits until the ticket's fetch may start, then counts it in flight; pair every `true` with one
    /// ``release(_:outcome:)``.
    ///
    /// - Parameter ticket: The fetch's claim.
    /// - Returns: `false` when the calling task was cancelled before the fetch was admitted (nothing to release).
    func acquire(_ ticket: Ticket) async -> Bool {
        let order = ticket.order
        let deadline = ticket.deadline
        return await withTaskCancellationHandler {
            await withUnsafeContinuation { (continuation: UnsafeContinuation<Bool, Never>) in
                let start = state.withLock { state -> Start in
                    let urgency = state.promoted.remove(order) != nil ? .needed : ticket.urgency
                    // Cancelled before it could queue: the cancellation handler found nothing to resume.
                    if Task.isCancelled { return .cancelled }
                    let now = clock.uptime
                    refill(&state, at: now)
                    // Nothing queued ahead of it: start at once if the budget allows.
                    if state.queued.isEmpty, admit(&state, order, at: now) { return .now }
                    let key = Key(deadline: deadline, order: order, account: ticket.account)
                    if urgency == .needed { state.needed.insert(key) } else { state.proactive.insert(key) }
                    state.setQueued(order, urgency)
                    state.parked[order] = continuation
                    state.waits += 1
                    let (ready, sleep) = pump(&state, at: now)
                    // The ledger's count only grows before this fetch parks, last, so it never reads zero while
                    // something admitted here, or the sleeper, is about to run.
                    let admittedItself = state.parked[order] == nil
                    ledger?.unpark(count: ready.count - (admittedItself ? 1 : 0))
                    if sleep != nil { ledger?.begin() }
                    if !admittedItself { ledger?.park() }
                    return .queued(ready, sleep: sleep)
                }
                switch start {
                case .now:
                    continuation.resume(returning: true)
                case .cancelled:
                    continuation.resume(returning: false)
                case .queued(let ready, let sleep):
                    // `ready` may hold this fetch's own continuation.
                    for continuation in ready { continuation.resume(returning: true) }
                    if let sleep { startSleeper(for: sleep) }
                }
            }
        } onCancel: {
            let continuation = state.withLock { state -> UnsafeContinuation<Bool, Never>? in
                guard let continuation = state.parked.removeValue(forKey: order) else { return nil }
                state.setQueued(order, nil)
                ledger?.unpark()
                return continuation
            }
            continuation?.resume(returning: false)
        }
    }

    /// A fetch admitted by ``acquire(_:)`` for `ticket`, after waiting `waited` for the budget, has ended with
    /// `outcome`, or was abandoned (its deadline passed, its account session ended) whether or not its fetcher has
    /// returned.
    func release(_ ticket: Ticket, outcome: Outcome, waited: Duration = .zero) {
        let (ready, sleep) = state.withLock { state -> ([UnsafeContinuation<Bool, Never>], Duration?) in
            state.inFlight -= 1
            state.waited.record(waited)
            let wasProbe = state.hold?.probe == ticket.order
            if wasProbe { state.hold?.probe = nil }
            let held = state.hold?.isOutage == true
            let now = clock.uptime
            switch outcome {
            case .answered:
                state.outageFailures = 0
                state.outageAccounts = []
                if state.hold != nil {
                    // The held fetches go at the budget's rate, not as one full bucket: one now, the rest as the
                    // bucket refills.
                    refill(&state, at: now)
                    state.hold = nil
                    state.tokens = min(state.tokens, 1)
                }
            case .outage:
                state.outageFailures += 1
                state.outageAccounts.insert(ticket.account)
                if wasProbe {
                    state.hold?.probeAt = now + limits.outageProbeInterval
                    state.hold?.lastProbeAccount = ticket.account
                }
                if state.hold?.isOutage != true, let threshold = limits.outageThreshold,
                    state.outageFailures >= threshold,
                    state.outageAccounts.count >= min(threshold, limits.outageAccounts)
                {
                    if state.hold == nil {
                        state.hold = Hold(probeAt: now + limits.outageProbeInterval, isOutage: true)
                    } else {
                        state.hold?.isOutage = true
                    }
                    state.outages += 1
                }
            case .neither:
                break
            }
            let change: Change? =
                switch (held, state.hold?.isOutage == true) {
                case (false, true): .began(ticket.account)
                case (true, false): .ended(ticket.account)
                default: nil
                }
            // Reported in the lock step, so that reports of racing releases arrive in the order of their changes.
            if let change { onChange?(change) }
            return wake(&state)
        }
        for continuation in ready { continuation.resume(returning: true) }
        if let sleep { startSleeper(for: sleep) }
    }

    /// The backend asked to be left alone for `duration` (a 429 or 503 with `Retry-After`): no account's fetch
    /// starts before it has passed, and then one goes alone, as a probe, before the others follow at the budget's
    /// rate.
    func pause(for duration: Duration) {
        guard duration > .zero else { return }
        state.withLock { state in
            let until = clock.uptime + duration
            if let hold = state.hold {
                state.hold?.probeAt = max(hold.probeAt, until)
            } else {
                state.hold = Hold(probeAt: until, isOutage: false)
            }
        }
    }

    // MARK: - Under the lock

    private func refill(_ state: inout State, at now: Duration) {
        let elapsed = (now - state.refilledAt).timeInterval
        guard elapsed > 0 else { return }
        state.tokens = min(Double(limits.burst), state.tokens + elapsed * limits.startsPerSecond)
        state.refilledAt = now
    }

    /// Takes a token and a slot for fetch `order` if both are free and no hold keeps it: during an outage or after
    /// the backend's pause, only as the probe, when none is at the backend and the probe's time has come.
    private func admit(_ state: inout State, _ order: UInt64, at now: Duration) -> Bool {
        guard state.inFlight < limits.maximumInFlight, state.tokens >= 1 else { return false }
        if let hold = state.hold {
            guard hold.probe == nil, now >= hold.probeAt else { return false }
            state.hold?.probe = order
        }
        state.tokens -= 1
        state.inFlight += 1
        state.admitted += 1
        return true
    }

    /// Pumps for a runnable caller (a fetch that ended, the sleeper) and counts what it made runnable on the ledger.
    private func wake(_ state: inout State) -> ([UnsafeContinuation<Bool, Never>], Duration?) {
        let (ready, sleep) = pump(&state, at: clock.uptime)
        ledger?.unpark(count: ready.count)
        if sleep != nil { ledger?.begin() }
        return (ready, sleep)
    }

    /// Admits queued fetches in urgency order while the budget allows; returns the continuations to resume and, when
    /// fetches still wait for time to pass (a token, the pause), how long the sleeper should sleep. The caller counts
    /// them on the ledger, in the same lock step: each admitted fetch unparked, a new sleeper begun.
    private func pump(_ state: inout State, at now: Duration) -> ([UnsafeContinuation<Bool, Never>], Duration?) {
        refill(&state, at: now)
        var ready: [UnsafeContinuation<Bool, Never>] = []
        while let key = nextQueued(&state, at: now, avoiding: state.hold?.lastProbeAccount) {
            let order = key.order
            guard admit(&state, order, at: now) else { break }
            if state.queued[order] == .proactive, key.deadline <= now {
                state.lateRenewals += 1
                if !state.behind {
                    state.behind = true
                    // Reported in the lock step, as the outage's changes are.
                    onChange?(.behind(key.account))
                }
            }
            removeQueued(&state, order)
            if let continuation = state.parked.removeValue(forKey: order) {
                state.setQueued(order, nil)
                ready.append(continuation)
            }
        }
        if state.queued.isEmpty { state.behind = false }
        guard !state.queued.isEmpty, state.inFlight < limits.maximumInFlight, !state.sleeping,
            state.hold?.probe == nil
        else {
            return (ready, nil)
        }
        // Waiting on time, not on a fetch to end: the next token, or the next probe (the backend's pause's end).
        var wait = Duration.zero
        if state.tokens < 1 { wait = .seconds((1 - state.tokens) / limits.startsPerSecond) }
        if let hold = state.hold { wait = max(wait, hold.probeAt - now) }
        state.sleeping = true
        return (ready, max(wait, .nanoseconds(1)))
    }

    /// The queued fetch to admit next, dropping the keys of fetches cancelled meanwhile; while a hold chooses a
    /// probe, not one of `avoiding` (the account whose probe failed last) if another account's fetch waits.
    private func nextQueued(_ state: inout State, at now: Duration, avoiding: AccountID?) -> Key? {
        guard let first = nextKey(&state, at: now) else { return nil }
        guard let avoiding, first.account == avoiding else { return first }
        // An account has at most one fetch queued, so the next key is another account's, if any.
        let heapOfFirst = state.queued[first.order]
        removeQueued(&state, first.order)
        let second = nextKey(&state, at: now)
        if heapOfFirst == .needed { state.needed.insert(first) } else { state.proactive.insert(first) }
        return second ?? first
    }

    /// The key of the queued fetch that goes first, dropping the keys of fetches cancelled meanwhile.
    private func nextKey(_ state: inout State, at now: Duration) -> Key? {
        // A key is stale once its fetch was admitted or cancelled, or (in the proactive heap) promoted.
        while let key = state.needed.min, state.queued[key.order] != .needed { state.needed.removeMin() }
        while let key = state.proactive.min, state.queued[key.order] != .proactive { state.proactive.removeMin() }
        switch (state.needed.min, state.proactive.min) {
        case (nil, nil): return nil
        case (let needed?, nil): return needed
        case (nil, let proactive?): return proactive
        case (let needed?, let proactive?):
            // A proactive renewal past its deadline is needed now; the earlier deadline goes first.
            return proactive.deadline <= now && proactive < needed ? proactive : needed
        }
    }

    private func removeQueued(_ state: inout State, _ order: UInt64) {
        if state.needed.min?.order == order {
            state.needed.removeMin()
        } else if state.proactive.min?.order == order {
            state.proactive.removeMin()
        }
    }

    // MARK: - The sleeper

    /// Starts the sleeper, already begun on the ledger by the lock step that asked for it.
    private func startSleeper(for duration: Duration) {
        let clock = self.clock
        Task(executorPreference: taskExecutor) { [self] in
            defer { ledger?.end() }
            try? await clock.sleep(for: duration)
            let (ready, sleep) = state.withLock { state -> ([UnsafeContinuation<Bool, Never>], Duration?) in
                state.sleeping = false
                return wake(&state)
            }
            for continuation in ready { continuation.resume(returning: true) }
            if let sleep { startSleeper(for: sleep) }
        }
    }
}
