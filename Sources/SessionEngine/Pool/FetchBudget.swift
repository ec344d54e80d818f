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
/// waits behind a stream of others for ever. Every decision is made by a value, ``StateMachine``
/// (`FetchBudget+StateMachine.swift`), that lives behind one lock with the waiting fetches' continuations; each lock
/// step feeds it one input and then performs what it returns: changes reported and the sleeper set or stopped inside
/// it, waiters resumed after the lock. The sleeper is one deadline in the pool's deadline queue, which waits until the
/// next token, the pause's end or the next probe; none is set while nothing waits.
///
/// After ``SessionPoolConfiguration/Budget/outageThreshold`` fetches in a row, from at least
/// ``SessionPoolConfiguration/Budget/outageAccounts`` accounts, end as an outage (``release(_:outcome:waited:started:)``),
/// the budget holds every queued fetch but one probe at a time, the first in urgency order that is not of the
/// account whose probe failed last, admitted once ``SessionPoolConfiguration/Budget/outageProbeInterval`` has passed
/// since the last probe failed. A pause the backend asked for holds the same way, without counting as an outage: at
/// its end one probe goes first. The first fetch the backend answers ends the hold, and the bucket holds at most one
/// start then, so the held fetches go at the budget's rate.
///
/// A pool with a fleet's coordinator (``FleetCoordination``) splits the budget in two instances of the machine, as the
/// fleet sits between admission and the backend: this one gives out the slots alone, in the same order, and the
/// second, ``starts``, the starts: its rate, holds, probes and pauses, taken (``leave(_:)``) when the fleet lets the
/// fetch go or reserves a start for it. A fetch another replica's credential answers at once, or one cancelled
/// first, then spends no start; every request the backend sees took one, and the starts taken stay within
/// `burst + rate × T` whatever the fleet held and let go together. A reserved fetch leaves at its reserved time (or
/// once it has its start, if that comes later), so where the fleet's rate exceeds the replica's own, its requests may
/// come closer together than its starts, within the reservations' wait.
final class FetchBudget: Sendable {
    /// One fetch's claim on the budget, made on the engine's actor when it starts the fetch.
    struct Ticket: Sendable {
        /// The order the budget issued it in, which names the fetch in the budget's actions.
        let order: UInt64
        let urgency: FetchUrgency
        /// When the fetch is needed by, on the clock's monotonic time.
        let deadline: Duration
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

    private enum Start {
        case now
        case cancelled
        case queued([UnsafeContinuation<Bool, Never>])
    }

    /// What the lock guards: the budget's decisions, and the waiters of the fetches they queued, by ticket order.
    private struct Locked {
        var machine: StateMachine
        var parked: [UInt64: UnsafeContinuation<Bool, Never>] = [:]
        /// The sleeper's slot in the deadline queue, while the machine's sleeper sleeps.
        var sleeper: DeadlineQueue<AccountShard.TimerTarget>.Token?
    }

    private let clock: any SessionClock
    /// The deadline queue the sleeper waits in: the pool's, which its accounts' timers wait in too.
    private let timers: DeadlineQueue<AccountShard.TimerTarget>
    private let state: SanitizedMutex<Locked>
    /// The budget of starts that a fetch takes when it leaves for the backend, for a pool whose fleet may answer a
    /// fetch without it; `nil` when admission takes the start.
    let starts: FetchBudget?
    /// Receives each change in the lock step that makes it, so in order; it must return quickly and must not call the
    /// budget.
    private let onChange: (@Sendable (Change) -> Void)?

    /// Creates a budget with nothing in flight and a full bucket.
    ///
    /// - Parameters:
    ///   - limits: The budget's limits.
    ///   - clock: The clock the budget's rate, pauses and probes are on.
    ///   - timers: The deadline queue the sleeper waits in: a pool's, on `clock`.
    ///   - startsWhenLeaving: Whether a fetch takes its start when it leaves (``leave(_:)``) rather than when it is
    ///     admitted: a pool with a fleet's coordinator.
    ///   - onChange: Receives each change in the lock step that makes it.
    convenience init(
        limits: SessionPoolConfiguration.Budget,
        clock: any SessionClock,
        timers: DeadlineQueue<AccountShard.TimerTarget>,
        startsWhenLeaving: Bool = false,
        onChange: (@Sendable (Change) -> Void)? = nil
    ) {
        let now = clock.uptime
        guard startsWhenLeaving else {
            self.init(
                StateMachine(limits: limits, now: now), starts: nil, clock: clock, timers: timers, onChange: onChange)
            return
        }
        // The starts report the outage; the slots, where a coordinated pool's renewals wait, the late renewals.
        let starts = FetchBudget(
            StateMachine(limits: limits, now: now, countsLateRenewals: false), starts: nil, clock: clock,
            timers: timers, onChange: onChange)
        self.init(
            StateMachine(slots: limits.maximumInFlight, now: now), starts: starts, clock: clock, timers: timers,
            onChange: onChange)
    }

    private init(
        _ machine: StateMachine, starts: FetchBudget?, clock: any SessionClock,
        timers: DeadlineQueue<AccountShard.TimerTarget>, onChange: (@Sendable (Change) -> Void)?
    ) {
        self.clock = clock
        self.timers = timers
        self.starts = starts
        self.onChange = onChange
        state = SanitizedMutex(Locked(machine: machine))
    }

    /// The budget's counters. With ``starts``: fetches in flight hold a slot (at the fleet or at the backend), the
    /// queues and waits are for a slot and for a start together, late renewals are the slots', and the rest are the
    /// starts'.
    var snapshot: Snapshot {
        let slots = state.withLock { $0.machine.snapshot }
        guard let starts = starts?.snapshot else { return slots }
        var snapshot = starts
        snapshot.inFlight = slots.inFlight
        snapshot.queuedNeeded += slots.queuedNeeded
        snapshot.queuedProactive += slots.queuedProactive
        snapshot.waits += slots.waits
        snapshot.lateRenewals = slots.lateRenewals
        return snapshot
    }

    /// A claim for a fetch about to start.
    ///
    /// - Parameters:
    ///   - urgency: How urgently the fetch is needed.
    ///   - deadline: When it is needed by, on the clock's monotonic time: the credential's expiry for a renewal,
    ///     now for a caller waiting.
    ///   - account: The account the fetch is for.
    func ticket(urgency: FetchUrgency, deadline: Duration, account: AccountID) -> Ticket {
        let ticket = state.withLock { $0.machine.ticket(urgency: urgency, deadline: deadline, account: account) }
        starts?.state.withLock { $0.machine.expect(ticket) }
        return ticket
    }

    /// A caller now waits for the ticket's fetch: it is needed, whether it has queued yet or not, for a slot and to
    /// leave.
    func promote(_ ticket: Ticket) {
        guard ticket.urgency == .proactive else { return }
        state.withLock { $0.machine.promote(ticket, at: clock.uptime) }
        starts?.promote(ticket)
    }

    /// Waits until the ticket's fetch may start (with ``starts``, until it holds a slot), then counts it in flight;
    /// pair every `true` with one ``release(_:outcome:waited:started:)``.
    ///
    /// - Parameter ticket: The fetch's claim.
    /// - Returns: `false` when the calling task was cancelled before the fetch was admitted (nothing to release).
    func acquire(_ ticket: Ticket) async -> Bool {
        let admitted = await admission(ticket)
        if !admitted { starts?.state.withLock { $0.machine.forget(ticket) } }
        return admitted
    }

    /// Waits, for an admitted fetch that the fleet lets go or reserves a start for, until it takes its start: until the
    /// starts (``starts``) give it one, ahead of the fetches that wait for a slot; at once when admission took it.
    ///
    /// - Parameter ticket: The fetch's claim.
    /// - Returns: `false` when the calling task was cancelled first: release the ticket as not started.
    func leave(_ ticket: Ticket) async -> Bool {
        guard let starts else { return true }
        return await starts.admission(ticket)
    }

    /// A fetch that took its start (``leave(_:)``) while the fleet reserved one for it will not leave with it: the
    /// fleet holds it after all, or waits for another replica's fetch. The start goes unused, never back to the
    /// bucket, and a hold's probe it was is free for a fetch that goes; ``leave(_:)`` takes another when it goes.
    func giveUpStart(_ ticket: Ticket) {
        starts?.releasing(ticket, outcome: .neither, waited: .zero)
    }

    /// ``acquire(_:)``'s wait in this instance's machine.
    private func admission(_ ticket: Ticket) async -> Bool {
        let order = ticket.order
        return await withTaskCancellationHandler {
            await withParkedContinuation { (continuation: UnsafeContinuation<Bool, Never>) in
                let start = state.withLock { state -> Start in
                    let action: StateMachine.Action
                    let now = clock.uptime
                    switch state.machine.acquire(ticket, cancelled: Task.isCancelled, at: now) {
                    case .resumeCancelled: return .cancelled
                    case .startNow: return .now
                    case .queued(let queued): action = queued
                    }
                    state.parked[order] = continuation
                    return .queued(perform(action, at: now, &state))
                }
                switch start {
                case .now:
                    continuation.resume(returning: true)
                case .cancelled:
                    continuation.resume(returning: false)
                case .queued(let ready):
                    // `ready` may hold this fetch's own continuation.
                    for continuation in ready { continuation.resume(returning: true) }
                }
            }
        } onCancel: {
            let continuation = state.withLock { state -> UnsafeContinuation<Bool, Never>? in
                guard case .resumeCancelled(let stopsSleeper) = state.machine.cancel(ticket) else { return nil }
                if stopsSleeper { stopSleeper(&state) }
                return state.parked.removeValue(forKey: order)
            }
            continuation?.resume(returning: false)
        }
    }

    /// A fetch admitted by ``acquire(_:)`` for `ticket`, after waiting `waited` for the budget, has ended with
    /// `outcome`, or was abandoned (its deadline passed, its account session ended) whether or not its fetcher has
    /// returned.
    ///
    /// - Parameter started: Whether the fetch took its start (``leave(_:)`` returned `true`); with ``starts``, only
    ///   such a fetch is released there, where its outcome counts toward an outage. A start taken never goes back to
    ///   the bucket.
    func release(_ ticket: Ticket, outcome: Outcome, waited: Duration = .zero, started: Bool = true) {
        if let starts {
            if started {
                starts.releasing(ticket, outcome: outcome, waited: waited)
            } else {
                starts.state.withLock { $0.machine.forget(ticket) }
            }
        }
        releasing(ticket, outcome: outcome, waited: waited)
    }

    /// ``release(_:outcome:waited:started:)`` in this instance's machine.
    private func releasing(_ ticket: Ticket, outcome: Outcome, waited: Duration) {
        let ready = state.withLock { state -> [UnsafeContinuation<Bool, Never>] in
            let now = clock.uptime
            return perform(state.machine.release(ticket, outcome: outcome, waited: waited, at: now), at: now, &state)
        }
        for continuation in ready { continuation.resume(returning: true) }
    }

    /// The backend asked to be left alone for `duration` (a 429 or 503 with `Retry-After`): no account's fetch
    /// starts before it has passed, and then one goes alone, as a probe, before the others follow at the budget's
    /// rate.
    func pause(for duration: Duration) {
        guard duration > .zero else { return }
        if let starts { return starts.pause(for: duration) }
        state.withLock { $0.machine.pause(for: duration, at: clock.uptime) }
    }

    // MARK: - Under the lock

    /// Performs what a lock step decided, in that step: reports the changes, so that reports of racing steps arrive in
    /// the order of their changes; stops or sets the sleeper's deadline; takes the admitted fetches' waiters out, for
    /// the caller to resume after the lock.
    ///
    /// The sleeper's deadline is set and given back inside the lock step that decided it, so a sleeper one step stops
    /// is never set again by an earlier step that comes late: the deadline queue's lock is taken inside the budget's,
    /// the one place it is, and the queue never calls the budget while it holds its own.
    private func perform(
        _ action: StateMachine.Action, at now: Duration, _ state: inout Locked
    ) -> [UnsafeContinuation<Bool, Never>] {
        for change in action.report { onChange?(change) }
        if action.stopSleeper { stopSleeper(&state) }
        if let sleep = action.startSleeper {
            // The machine starts a sleeper only when none sleeps, so no slot is held here. The slot holds the budget
            // weakly: a pool dropped with a sleeper set leaves a firing that finds nobody. Set from the step's time:
            // a clock that moved since the step read it would set it late.
            assert(state.sleeper == nil, "a second sleeper")
            state.sleeper = AccountShard.setDeadline(in: timers, on: clock, after: sleep, from: now) {
                [weak self] in self?.sleeperFired()
            }
        }
        return action.resume.compactMap { state.parked.removeValue(forKey: $0) }
    }

    /// Gives the sleeper's slot back, with its deadline, if one is set.
    private func stopSleeper(_ state: inout Locked) {
        if let token = state.sleeper.take() { timers.release(token) }
    }

    // MARK: - The sleeper

    /// The sleeper's deadline passed, and the deadline queue's job calls this: the machine hears it, its slot is given
    /// back, and the fetches it admits go. The machine has at most one sleeper, set again if fetches still wait.
    private func sleeperFired() {
        let ready = state.withLock { state -> [UnsafeContinuation<Bool, Never>] in
            stopSleeper(&state)
            let now = clock.uptime
            return perform(state.machine.sleeperFired(at: now), at: now, &state)
        }
        for continuation in ready { continuation.resume(returning: true) }
    }

    /// A budget that goes gives back its sleeper's slot, if one is set.
    deinit {
        state.withLock { stopSleeper(&$0) }
    }
}
