extension FetchBudget {
    /// A queued fetch's place: its deadline on the monotonic clock and the order it queued in (its urgency is the heap
    /// it sits in).
    struct Key: Sendable, Comparable {
        var deadline: Duration
        var order: UInt64
        /// The account the fetch is for, so that an outage's probes go to accounts in turn.
        var account: AccountID

        static func < (a: Key, b: Key) -> Bool {
            (a.deadline, a.order) < (b.deadline, b.order)
        }
    }

    /// Every decision of the budget, as a value: which fetch starts, which queues, which goes next, when time must
    /// pass, when the budget holds for an outage or a pause and when it stops.
    ///
    /// It reads no clock (each input carries `now`, the monotonic time of its lock step), takes no lock, holds no
    /// continuation and starts no task. Each input returns what its owner, ``FetchBudget``, must do: the waiting
    /// fetches to resume, whether to start the sleeper and for how long, and the ``Change``s to report. A fetch is
    /// named by its ticket's order, which the owner keys its waiters by.
    struct StateMachine: Sendable {
        /// What the owner does after a step that may admit queued fetches.
        struct Action: Sendable, Equatable {
            /// The queued fetches admitted, in the order they were admitted: resume each one's waiter with `true`.
            var resume: [UInt64] = []
            /// Start the one sleeper for this long; `nil` when no sleeper is needed or one sleeps already.
            var startSleeper: Duration?
            /// Stop the sleeper: no fetch waits in the queue any more, so nothing waits for time to pass.
            var stopSleeper = false
            /// The changes to report, in order, in the lock step that made them.
            var report: [Change] = []
        }

        /// What the owner does with a fetch that asks to start.
        enum AcquireAction: Sendable, Equatable {
            /// The calling task was cancelled before the fetch could queue: resume it with `false`.
            case resumeCancelled
            /// Nothing was queued ahead of it and the budget allows it: resume it with `true`, it is in flight.
            case startNow
            /// The fetch queued; then the queue was pumped, which may have admitted it too (its order is then in
            /// `resume`).
            case queued(Action)
        }

        /// What the owner does with a waiting fetch whose task was cancelled.
        enum CancelAction: Sendable, Equatable {
            /// It was queued and has left the queue: resume it with `false`, and stop the sleeper when it was the
            /// last fetch waiting.
            case resumeCancelled(stopsSleeper: Bool)
            /// It is not queued (admitted already, or not queued yet): nothing.
            case none
        }

        /// A hold on fetches, for an outage or for a pause the backend asked for: when the next probe may start, the
        /// probe at the backend, and the account whose probe failed last, which the next probe avoids.
        private struct Hold: Sendable {
            var probeAt: Duration
            var probe: UInt64?
            var lastProbeAccount: AccountID?
            /// Whether the hold is an outage (reported and counted), not only a pause that ends with a probe.
            var isOutage: Bool
        }

        private struct State: Sendable {
            var inFlight = 0
            var tokens: Double
            var refilledAt: Duration
            var needed = Heap<Key>()
            var proactive = Heap<Key>()
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
            /// Tickets promoted to needed before their fetch queued, with when their caller came.
            var promoted: [UInt64: Duration] = [:]
            /// Tickets handed out whose fetch has not asked to start yet: only these can be promoted before they
            /// queue (a caller may join a fetch that was admitted, or has ended, and must leave nothing behind).
            var unacquired: Set<UInt64> = []
            var nextOrder: UInt64 = 0
            /// Whether the owner's sleeper is sleeping: at most one sleeps.
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
        /// Whether an admission takes a start from the bucket too; `false` for the slots of a budget whose fetches
        /// take their start when they leave (``FetchBudget/leave(_:)``).
        private let limitsStarts: Bool
        /// Whether it counts and reports the proactive renewals it admits late; `false` for the starts of a budget
        /// whose slots count them, where a renewal waits in a coordinated pool.
        private let countsLateRenewals: Bool
        private var state: State

        /// The longest the sleeper sleeps before it looks again: a day.
        static let longestSleep = Duration.seconds(86_400)

        /// A budget with a full bucket at `now`, nothing queued and nothing in flight; `countsLateRenewals` says
        /// whether it counts the proactive renewals it admits late.
        init(limits: SessionPoolConfiguration.Budget, now: Duration, countsLateRenewals: Bool = true) {
            self.limits = limits
            self.countsLateRenewals = countsLateRenewals
            limitsStarts = true
            state = State(tokens: Double(limits.burst), refilledAt: now)
        }

        /// A budget of `slots` fetches in flight alone, at `now`: no rate, no hold, no outage; it admits queued
        /// fetches in the same order as a budget with every limit does.
        init(slots: Int, now: Duration) {
            limits = SessionPoolConfiguration.Budget(maximumInFlight: slots, outageThreshold: nil)
            limitsStarts = false
            countsLateRenewals = true
            state = State(tokens: Double(limits.burst), refilledAt: now)
        }

        // MARK: - What it shows

        var snapshot: Snapshot {
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

        /// The starts the bucket holds, as of its last refill.
        var tokens: Double { state.tokens }

        /// When the next probe may start while the budget holds fetches (an outage or a pause); `nil` when it holds
        /// nothing.
        var probeAt: Duration? { state.hold?.probeAt }

        /// Whether a probe of the hold is at the backend.
        var probing: Bool { state.hold?.probe != nil }

        /// Whether the owner's sleeper sleeps.
        var sleeping: Bool { state.sleeping }

        /// How many tickets will queue as needed when their fetch asks to start (promoted before they queued).
        var promotedCount: Int { state.promoted.count }

        // MARK: - Inputs

        /// A fetch is about to start: its claim, next in order.
        mutating func ticket(urgency: FetchUrgency, deadline: Duration, account: AccountID) -> Ticket {
            state.nextOrder += 1
            state.unacquired.insert(state.nextOrder)
            return Ticket(order: state.nextOrder, urgency: urgency, deadline: deadline, account: account)
        }

        /// A claim another budget issued will ask this one to start its fetch: it can be promoted until it does.
        /// Orders come from one issuer alone, so the owner expects here only tickets of the budget that issues them.
        mutating func expect(_ ticket: Ticket) {
            state.unacquired.insert(ticket.order)
        }

        /// The fetch of an expected ticket will not ask to start (it was answered without the backend, or
        /// cancelled): its claim is forgotten.
        mutating func forget(_ ticket: Ticket) {
            state.unacquired.remove(ticket.order)
            state.promoted.removeValue(forKey: ticket.order)
        }

        /// A caller now waits, since `now`, for the ticket's fetch: it is needed, whether it has queued yet or not, and
        /// goes as a fetch needed from the caller's arrival, not at the proactive renewal's later deadline.
        mutating func promote(_ ticket: Ticket, at now: Duration) {
            guard ticket.urgency == .proactive else { return }
            switch state.queued[ticket.order] {
            case .proactive?:
                // Queued as proactive: it joins the needed heap; its proactive key goes stale.
                state.setQueued(ticket.order, .needed)
                state.needed.insert(
                    Key(deadline: min(ticket.deadline, now), order: ticket.order, account: ticket.account))
            case .needed?:
                // Promoted already.
                break
            case nil:
                // Not queued yet: it queues as needed when it asks to start. Admitted or ended: nothing to promote.
                if state.unacquired.contains(ticket.order) { state.promoted[ticket.order] = now }
            }
        }

        /// The ticket's fetch asks to start at `now`; `cancelled` says whether its task was cancelled already.
        mutating func acquire(_ ticket: Ticket, cancelled: Bool, at now: Duration) -> AcquireAction {
            let order = ticket.order
            state.unacquired.remove(order)
            let promotedAt = state.promoted.removeValue(forKey: order)
            let urgency = promotedAt != nil ? .needed : ticket.urgency
            // Cancelled before it could queue: the owner's cancellation handler found nothing to resume.
            if cancelled { return .resumeCancelled }
            refill(at: now)
            // Nothing queued ahead of it: start at once if the budget allows.
            if state.queued.isEmpty, admit(order, at: now) { return .startNow }
            // A promoted renewal is needed since its caller came.
            let deadline = promotedAt.map { min(ticket.deadline, $0) } ?? ticket.deadline
            let key = Key(deadline: deadline, order: order, account: ticket.account)
            if urgency == .needed { state.needed.insert(key) } else { state.proactive.insert(key) }
            state.setQueued(order, urgency)
            state.waits += 1
            return .queued(pump(at: now))
        }

        /// The task of the ticket's fetch was cancelled while the fetch may wait in the queue.
        mutating func cancel(_ ticket: Ticket) -> CancelAction {
            // Its key stays in its heap, dropped when it comes up.
            guard state.queued[ticket.order] != nil else { return .none }
            state.setQueued(ticket.order, nil)
            return .resumeCancelled(stopsSleeper: stopSleeperIfNothingWaits())
        }

        /// The ticket's admitted fetch ended at `now` with `outcome`, after waiting `waited` for the budget.
        mutating func release(_ ticket: Ticket, outcome: Outcome, waited: Duration, at now: Duration) -> Action {
            state.inFlight -= 1
            state.waited.record(waited)
            let wasProbe = state.hold?.probe == ticket.order
            if wasProbe { state.hold?.probe = nil }
            let held = state.hold?.isOutage == true
            // Whether a sleeper set for the end of a hold (the next probe, the backend's pause) must give way to one
            // set for the budget's rate.
            var sleepsTooLong = false
            switch outcome {
            case .answered:
                state.outageFailures = 0
                state.outageAccounts = []
                if state.hold != nil {
                    // The held fetches go at the budget's rate, not as one full bucket: one now, the rest as the
                    // bucket refills.
                    refill(at: now)
                    state.hold = nil
                    state.tokens = min(state.tokens, 1)
                    sleepsTooLong = state.sleeping
                    state.sleeping = false
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
            var action = pump(at: now)
            // Stopped before the pump's sleeper starts, if it starts one.
            if sleepsTooLong { action.stopSleeper = true }
            // The outage's change comes first: it was made before the pump.
            if let change { action.report.insert(change, at: 0) }
            return action
        }

        /// The backend asked at `now` to be left alone for `duration`: no fetch starts before it has passed, and then
        /// one goes alone, as a probe.
        mutating func pause(for duration: Duration, at now: Duration) {
            guard duration > .zero else { return }
            let until = now + duration
            if let hold = state.hold {
                state.hold?.probeAt = max(hold.probeAt, until)
            } else {
                state.hold = Hold(probeAt: until, isOutage: false)
            }
        }

        /// The sleeper woke at `now`: time passed for the queued fetches (a token, a probe's time).
        mutating func sleeperFired(at now: Duration) -> Action {
            state.sleeping = false
            return pump(at: now)
        }

        // MARK: - Decisions

        private mutating func refill(at now: Duration) {
            let elapsed = (now - state.refilledAt).timeInterval
            guard elapsed > 0 else { return }
            state.tokens = min(Double(limits.burst), state.tokens + elapsed * limits.startsPerSecond)
            state.refilledAt = now
        }

        /// Takes a token and a slot for fetch `order` if both are free and no hold keeps it: during an outage or after
        /// the backend's pause, only as the probe, when none is at the backend and the probe's time has come.
        private mutating func admit(_ order: UInt64, at now: Duration) -> Bool {
            guard state.inFlight < limits.maximumInFlight, !limitsStarts || state.tokens >= 1 else { return false }
            if let hold = state.hold {
                guard hold.probe == nil, now >= hold.probeAt else { return false }
                state.hold?.probe = order
            }
            if limitsStarts { state.tokens -= 1 }
            state.inFlight += 1
            state.admitted += 1
            return true
        }

        /// Admits queued fetches in urgency order while the budget allows; when fetches still wait for time to pass (a
        /// token, the pause, the next probe) and no sleeper sleeps, asks for one.
        private mutating func pump(at now: Duration) -> Action {
            refill(at: now)
            var action = Action()
            while let key = nextQueued(at: now, avoiding: state.hold?.lastProbeAccount) {
                let order = key.order
                guard admit(order, at: now) else { break }
                if countsLateRenewals, state.queued[order] == .proactive, key.deadline <= now {
                    state.lateRenewals += 1
                    if !state.behind {
                        state.behind = true
                        action.report.append(.behind(key.account))
                    }
                }
                removeQueued(order)
                state.setQueued(order, nil)
                action.resume.append(order)
            }
            if state.queued.isEmpty { state.behind = false }
            action.stopSleeper = stopSleeperIfNothingWaits()
            guard !state.queued.isEmpty, state.inFlight < limits.maximumInFlight, !state.sleeping,
                state.hold?.probe == nil
            else {
                return action
            }
            // Waiting on time, not on a fetch to end: the next token, or the next probe (the backend's pause's end).
            // At most a day: a slower rate or a longer hold wakes the sleeper to look again, since a deadline in the
            // deadline queue holds up to a year, and a `Duration` not every `Double`.
            var wait = Duration.zero
            if state.tokens < 1 {
                wait = .seconds(min((1 - state.tokens) / limits.startsPerSecond, Self.longestSleep.timeInterval))
            }
            if let hold = state.hold { wait = max(wait, hold.probeAt - now) }
            state.sleeping = true
            action.startSleeper = min(max(wait, .nanoseconds(1)), Self.longestSleep)
            return action
        }

        /// Marks the sleeper stopped when no fetch waits in the queue: it would wake for nothing. Returns whether it
        /// slept.
        private mutating func stopSleeperIfNothingWaits() -> Bool {
            guard state.queued.isEmpty, state.sleeping else { return false }
            state.sleeping = false
            return true
        }

        /// The queued fetch to admit next, dropping the keys of fetches cancelled meanwhile; while a hold chooses a
        /// probe, not one of `avoiding` (the account whose probe failed last) if another account's fetch waits.
        private mutating func nextQueued(at now: Duration, avoiding: AccountID?) -> Key? {
            guard let first = nextKey(at: now) else { return nil }
            guard let avoiding, first.account == avoiding else { return first }
            // An account has at most one fetch queued, so the next key is another account's, if any.
            let heapOfFirst = state.queued[first.order]
            removeQueued(first.order)
            let second = nextKey(at: now)
            if heapOfFirst == .needed { state.needed.insert(first) } else { state.proactive.insert(first) }
            return second ?? first
        }

        /// The key of the queued fetch that goes first, dropping the keys of fetches cancelled meanwhile.
        private mutating func nextKey(at now: Duration) -> Key? {
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

        private mutating func removeQueued(_ order: UInt64) {
            if state.needed.min?.order == order {
                state.needed.removeMin()
            } else if state.proactive.min?.order == order {
                state.proactive.removeMin()
            }
        }
    }
}
