/// An account's timer: one slot in a deadline queue, and how a firing finds the account without the queue holding it.
extension AccountShard {
    /// How a firing of an account's timer finds the account, kept in the account's slot of its deadline queue.
    ///
    /// The queue never holds an account: a pool's member is named by its account and serial, which the pool looks up
    /// in its members (a weak reference to each would give every member a side table for its reference counts, and
    /// slow every retain of it); an engine's account, whose sign-in deadline and grace period's deadline hold its
    /// slot weakly too, is named by a weak reference to its slot.
    enum TimerTarget: Sendable {
        /// An engine's account.
        case engine(WeakSlot)
        /// A pool's member: the pool finds it by its account, and the serial tells it from a later member of the
        /// same account.
        case member(AccountID, serial: UInt64)
        /// A caller's or a fetch's deadline (a sign-in's `timeout`, ``SessionConfiguration/fetchTimeout``): its
        /// firing runs the action, which must return at once (it decides a race or starts a task). The slot lives as
        /// long as the wait it bounds, and is given back when the wait ends, whatever ended it.
        case deadline(@Sendable () -> Void)

        /// The delivery of a queue whose engines are their own, and of a pool's queue for every target but its
        /// members: each firing goes to its engine, if it is still there, or runs its deadline's action.
        static let deliver: DeadlineQueue<TimerTarget>.Delivery = { target, timer in
            switch target {
            case .engine(let reference):
                if let slot = reference.slot { slot.shard.fireTimer(timer, for: slot) }
            case .deadline(let action): action()
            case .member: break
            }
        }
    }

    /// A weak reference to an engine's account, for its slot of the deadline queue.
    struct WeakSlot: Sendable {
        weak var slot: Slot?

        init(_ slot: Slot) {
            self.slot = slot
        }
    }

    /// The one deadline queue of every engine of its own on the ``SystemClock`` with no task executor of its own: the
    /// process wakes once per 30 s slice for all of them, plus once per deadline, whatever their number.
    static let systemTimers = DeadlineQueue<TimerTarget>(
        clock: SystemClock(), taskExecutor: nil, delivery: TimerTarget.deliver)

    /// Fires the timer `id` of `slot`'s account, which the deadline queue found due, in a task of the account's own.
    nonisolated func fireTimer(_ id: TimerID, for slot: Slot) {
        _ = startTask(slot) { await self.timerFired(id, for: slot) }
    }

    private func timerFired(_ id: TimerID, for slot: Slot) {
        step(slot) { $0.timerFired(id, at: $1) }
    }

    /// Takes a slot of the shard's deadline queue whose firing runs `action` once `timeout` has passed on the
    /// shard's clock; give it back with `timers.release(_:)` when the wait it bounds has ended.
    ///
    /// A deadline in the queue costs a slot while it is set, and nothing once it is given back; a task sleeping on the
    /// clock, cancelled early, would keep its timer in the runtime until it was due. A timeout beyond a year sets
    /// no deadline: the monotonic clock cannot hold every duration a caller can pass.
    nonisolated func setDeadline(
        after timeout: Duration, _ action: @escaping @Sendable () -> Void
    ) -> DeadlineQueue<TimerTarget>.Token {
        Self.setDeadline(in: timers, on: clock, after: timeout, action)
    }

    /// ``setDeadline(after:_:)`` in `timers`, on `clock`, counted from `start` (the clock's monotonic time) when
    /// given: a lock step that read the clock sets its deadline from that reading, not from a later one.
    static func setDeadline(
        in timers: DeadlineQueue<TimerTarget>, on clock: any SessionClock, after timeout: Duration,
        from start: Duration? = nil, _ action: @escaping @Sendable () -> Void
    ) -> DeadlineQueue<TimerTarget>.Token {
        let token = timers.register(.deadline(action))
        scheduleDeadline(token, in: timers, on: clock, after: timeout, from: start)
        return token
    }

    /// Sets the deadline of the slot `token`, a slot that lives longer than one wait (a pool's idle sweeper),
    /// `timeout` from now on `clock` (or from `start`), replacing the slot's earlier one; a timeout beyond a year sets
    /// none.
    static func scheduleDeadline(
        _ token: DeadlineQueue<TimerTarget>.Token, in timers: DeadlineQueue<TimerTarget>, on clock: any SessionClock,
        after timeout: Duration, from start: Duration? = nil
    ) {
        guard timeout <= .seconds(365 * 86_400) else { return }
        timers.schedule(TimerSpec(id: 0, uptimeDeadline: (start ?? clock.uptime) + timeout), for: token)
    }
}
