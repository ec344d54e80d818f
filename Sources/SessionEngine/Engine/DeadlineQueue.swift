import Foundation
import Synchronization

/// Timers of many owners in one deadline structure, with one task that sleeps until the earliest.
///
/// Every timer of the engines goes through a queue: an engine of its own on the ``SystemClock`` shares the process's
/// one queue (``AccountShard/systemTimers``), any other engine of its own has one, and a ``SessionPool`` has one for
/// all its accounts. An idle engine's timer is then a slot in an array and a key in a heap, not a task, and a queue's
/// timers cost one sleeping task whatever their number.
///
/// An owner takes a slot for its life (``register(_:)``, ``release(_:)``) and holds at most one timer in it at a time:
/// a new one replaces it, and cancelling frees it. The slot keeps the owner's *target*, a value the queue hands back
/// with the timer's ID when the timer fires (``deliver(to:)``): it names the owner and never holds it, so a queue
/// keeps nobody alive. Freed slots are reused, so the array is as long as the most owners ever registered at once.
///
/// A timer is due at a wall-clock time, a monotonic time or whichever comes first (``TimerSpec``). The heap orders
/// the timers by when each is expected to be due on the clock's monotonic time: a wall-clock deadline is moved there
/// by the offset between the two clocks when it is scheduled. The sleeper wakes for the earliest key, and at least
/// every 30 s, so a wall-clock jump or a suspended machine is noticed within one slice: a move of the offset re-keys
/// every timer, and a timer woken early by a jump back, not yet due, is re-keyed and waits again. A due timer is
/// handed to the delivery, whose owner's state machine ignores a timer it has replaced or cancelled meanwhile, so a
/// firing that races a replacement is harmless. The last timer cancelled stops the sleeper: an empty queue sleeps in
/// no task.
final class DeadlineQueue<Target: Sendable>: Sendable {
    /// An owner's slot, from ``register(_:)`` to ``release(_:)``.
    typealias Token = Int

    /// Where a due timer goes: the target of its slot and its ID.
    typealias Delivery = @Sendable (Target, TimerID) -> Void

    /// A scheduled timer.
    fileprivate struct Armed {
        /// The scheduling's generation, which orders timers due at once; before the spec, so that no padding follows
        /// the spec's last field and the slot's `place` fits in the room left (a pool's slot is 80 bytes).
        var generation: UInt64
        var spec: TimerSpec
    }

    fileprivate struct Slot {
        /// The owner's target; `nil` until it is attached.
        var target: Target?
        var timer: Armed?
        /// Where the timer's key sits in the heap, or -1 while the slot has no timer with a deadline; 32 bits, in
        /// the room the slot's last field leaves (a pool's slot stays 80 bytes).
        var place: Int32 = -1
    }

    /// A timer's key in the heap. Each slot's timer with a deadline has exactly one, which moves with the timer: a
    /// replaced timer's key is changed where it sits and a cancelled one's taken out, so the heap holds as many keys
    /// as timers, not a key for every timer ever scheduled.
    ///
    /// The generation takes 32 bits and wraps, and two generations compare by their difference: of two timers due at
    /// once, the one scheduled first fires first as long as fewer than 2^31 generations (each scheduling and each plan
    /// of the sleeper takes one) came between them. A wrap changes only the order of timers due at the same instant,
    /// never whether or when one fires, since the deadline is compared first. A key takes 24 bytes, not 32.
    fileprivate struct Key: Comparable {
        var due: Duration
        /// The scheduling's generation: of two timers due at once, the one scheduled first fires first.
        var generation: UInt32
        var slot: Int32

        /// Whether `one` comes before `other`: it is due earlier, or at once and was scheduled first.
        static func < (one: Key, other: Key) -> Bool {
            if one.due != other.due { return one.due < other.due }
            return Int32(bitPattern: one.generation &- other.generation) < 0
        }
    }

    fileprivate struct State {
        /// The owners' slots by token; `nil` for a free one.
        var slots: [Slot?] = []
        var freeSlots: [Int] = []
        /// How many slots an owner holds.
        var registered = 0
        /// How many slots hold a timer.
        var scheduled = 0
        /// The keys in a min-heap, each slot's `place` its index (``State/setKey(_:)``).
        var heap = Heap<Key>()
        var nextGeneration: UInt64 = 0
        /// The sleeping task (`nil` until it is made), when it will wake and its identity.
        var sleeper: (task: Task<Void, Never>?, wakesAt: Duration, id: UInt64)?
        /// The wall clock minus the monotonic clock when the keys were computed, in seconds.
        var offset: TimeInterval?
        /// Times the sleeper woke, for benchmarks.
        var wakeUps = 0
        var delivery: Delivery?
    }

    private let clock: any SessionClock
    private let taskExecutor: (any TaskExecutor)?
    private let state: SanitizedMutex<State>

    /// How long the sleeper sleeps at most, so that wall-clock jumps are noticed.
    static var slice: Duration { .seconds(30) }

    /// The farthest a wall deadline is put from the monotonic clock's zero, in seconds: a million years.
    private static var farthest: Double { 1e6 * 365.25 * 86_400 }
    /// How far the offset between the clocks may move before every key is computed again.
    private static var jumpTolerance: TimeInterval { 1 }

    /// Creates an empty queue.
    ///
    /// - Parameters:
    ///   - clock: The clock the deadlines are on and the sleeper sleeps on.
    ///   - taskExecutor: The executor the sleeper prefers: its owner's.
    ///   - delivery: Where due timers go; `nil` until the owner names it with ``deliver(to:)``.
    init(
        clock: any SessionClock, taskExecutor: (any TaskExecutor)?,
        delivery: Delivery? = nil
    ) {
        self.clock = clock
        self.taskExecutor = taskExecutor
        self.state = SanitizedMutex(State(delivery: delivery))
    }

    /// How many timers are scheduled.
    var count: Int { state.withLock { $0.scheduled } }

    /// How many slots the array holds, free ones included.
    var slotCount: Int { state.withLock { $0.slots.count } }

    /// How many keys the heap holds: one for each timer with a deadline.
    var keyCount: Int { state.withLock { $0.heap.count } }

    /// How many times the sleeper has woken.
    var wakeUps: Int { state.withLock { $0.wakeUps } }

    /// Whether a sleeper is planned or sleeping.
    var isSleeping: Bool { state.withLock { $0.sleeper != nil } }

    /// Names where due timers go, for an owner that can name it only once the queue is made.
    func deliver(to delivery: @escaping Delivery) {
        state.withLock { $0.delivery = delivery }
    }

    /// Takes a slot for an owner, with its target if it can name it now (else ``attach(_:to:)`` names it).
    ///
    /// - Returns: The slot's token, which the owner keeps until ``release(_:)``.
    func register(_ target: Target?) -> Token {
        state.withLock { state in
            state.registered += 1
            if let free = state.freeSlots.popLast() {
                state.slots[free] = Slot(target: target)
                return free
            }
            precondition(state.slots.count < Int32.max, "a deadline queue holds fewer than 2^31 slots")
            state.slots.append(Slot(target: target))
            return state.slots.count - 1
        }
    }

    /// Names the target of the slot `token`.
    func attach(_ target: Target, to token: Token) {
        state.withLock { $0.slots[token]?.target = target }
    }

    /// Gives the slot `token` back, cancelling its timer; the owner is going.
    func release(_ token: Token) {
        let sleeper = state.withLock { state -> Task<Void, Never>? in
            guard state.slots.indices.contains(token), state.slots[token] != nil else { return nil }
            if state.slots[token]?.timer != nil { state.scheduled -= 1 }
            state.removeKey(of: token)
            state.slots[token] = nil
            state.freeSlots.append(token)
            state.registered -= 1
            if state.registered == 0 {
                // No owner left: the array goes too.
                state.slots = []
                state.freeSlots = []
            }
            return Self.stopIfEmpty(&state)
        }
        sleeper?.cancel()
    }

    /// Schedules `spec` in the slot `token`, replacing its timer.
    func schedule(_ spec: TimerSpec, for token: Token) {
        let now = SessionInstant(wall: clock.now, uptime: clock.uptime)
        let start = state.withLock { state -> (wakesAt: Duration, id: UInt64)? in
            guard state.slots.indices.contains(token), state.slots[token] != nil else { return nil }
            state.nextGeneration += 1
            let generation = state.nextGeneration
            if state.slots[token]?.timer == nil { state.scheduled += 1 }
            state.slots[token]?.timer = Armed(generation: generation, spec: spec)
            let offset = state.offset ?? Self.offset(at: now)
            state.offset = offset
            guard let due = Self.due(spec, offset: offset) else {
                state.removeKey(of: token)
                return nil
            }
            state.setKey(Key(due: due, generation: UInt32(truncatingIfNeeded: generation), slot: Int32(token)))
            return sleeperIfEarlier(&state, than: due, at: now)
        }
        if let start { startSleeper(start) }
    }

    /// Cancels the timer of the slot `token`, if it holds one.
    func cancel(for token: Token) {
        let sleeper = state.withLock { state -> Task<Void, Never>? in
            guard state.slots.indices.contains(token), state.slots[token]?.timer != nil else { return nil }
            state.slots[token]?.timer = nil
            state.removeKey(of: token)
            state.scheduled -= 1
            return Self.stopIfEmpty(&state)
        }
        sleeper?.cancel()
    }

    // MARK: - Under the lock

    /// With no timer left, forgets the keys and the sleeper, and returns the sleeper's task to cancel.
    private static func stopIfEmpty(_ state: inout State) -> Task<Void, Never>? {
        guard state.scheduled == 0 else { return nil }
        state.heap = Heap()
        defer { state.sleeper = nil }
        return state.sleeper?.task
    }

    /// The wall clock minus the monotonic clock at `now`, in seconds.
    private static func offset(at now: SessionInstant) -> TimeInterval {
        now.wall.timeIntervalSince1970 - now.uptime.timeInterval
    }

    /// When `spec` is expected to be due on the monotonic clock, with the clocks `offset` apart; `nil` for a timer
    /// with no deadline.
    ///
    /// A wall clock that reads no number (a clock may return anything, NaN included) puts a wall deadline as far as
    /// one goes, a million years on: the queue still looks every slice, reads the clocks again and keys the timer anew
    /// once they read numbers (``look(sleeper:)``). A `Duration` cannot hold every `Double`, so no deadline goes
    /// further either way.
    private static func due(_ spec: TimerSpec, offset: TimeInterval) -> Duration? {
        var due: Duration?
        if let wall = spec.wallDeadline {
            let seconds = wall.timeIntervalSince1970 - offset
            due = .seconds(seconds.isFinite ? min(max(seconds, -farthest), farthest) : farthest)
        }
        if let uptime = spec.uptimeDeadline {
            due = min(due ?? uptime, uptime)
        }
        return due
    }

    /// Computes every timer's key again at `now`.
    private static func rekey(_ state: inout State, at now: SessionInstant) {
        let offset = offset(at: now)
        state.offset = offset
        for index in state.slots.indices {
            guard let timer = state.slots[index]?.timer, let due = due(timer.spec, offset: offset) else { continue }
            state.setKey(
                Key(due: due, generation: UInt32(truncatingIfNeeded: timer.generation), slot: Int32(index)))
        }
    }

    /// A new sleeper's wake-up instant and identity when none sleeps or the one that does wakes after `due`,
    /// recorded in this lock step. The sleeper it replaces is cancelled.
    private func sleeperIfEarlier(_ state: inout State, than due: Duration, at now: SessionInstant) -> (
        wakesAt: Duration, id: UInt64
    )? {
        let wait = min(Self.slice, max(.zero, due - now.uptime))
        let wakesAt = now.uptime + wait
        if let sleeper = state.sleeper {
            guard wakesAt < sleeper.wakesAt else { return nil }
            sleeper.task?.cancel()
        }
        state.nextGeneration += 1
        let id = state.nextGeneration
        state.sleeper = (nil, wakesAt, id)
        return (wakesAt, id)
    }

    // MARK: - The sleeper

    /// Starts the sleeper planned by ``sleeperIfEarlier(_:than:at:)``.
    private func startSleeper(_ plan: (wakesAt: Duration, id: UInt64)) {
        let clock = self.clock
        // The sleeper holds the queue weakly: a queue whose owners are all gone goes with them.
        let task = Task.start(preferring: taskExecutor) { [weak self] in
            do {
                // Until the instant planned, not for the wait from whenever the task first runs: the clock may have
                // moved on meanwhile, and a sleep counted from then would wake late.
                try await clock.sleep(for: max(.zero, plan.wakesAt - clock.uptime))
            } catch {
                return  // Replaced by a sleeper that wakes earlier, or no timer is left.
            }
            self?.look(sleeper: plan.id)
        }
        let stale = state.withLock { state -> Bool in
            guard state.sleeper?.id == plan.id else { return true }
            state.sleeper?.task = task
            return false
        }
        if stale { task.cancel() }
    }

    /// Delivers the due timers and plans the next look; the sleeper `id` calls it when it wakes, so the deliveries start
    /// their work in its job.
    private func look(sleeper id: UInt64) {
        let now = SessionInstant(wall: clock.now, uptime: clock.uptime)
        let (due, delivery, next) = state.withLock {
            state -> ([(Target, TimerID)], Delivery?, (wakesAt: Duration, id: UInt64)?) in
            // A sleeper replaced just as its sleep ended leaves the looking to its replacement.
            guard state.sleeper?.id == id else { return ([], nil, nil) }
            state.sleeper = nil
            state.wakeUps += 1
            let offset = Self.offset(at: now)
            // Not `>`: an offset that is no number (a clock that read NaN, now or when the timers were keyed) keys
            // them anew too.
            if let keyed = state.offset, !(abs(offset - keyed) <= Self.jumpTolerance) { Self.rekey(&state, at: now) }
            var due: [(Target, TimerID)] = []
            while let key = state.heap.min, key.due <= now.uptime {
                let token = Int(key.slot)
                // Every key is its slot's timer's: a timer replaced or cancelled took its key along.
                guard let slot = state.slots[token], let timer = slot.timer else {
                    preconditionFailure("a deadline queue's key outlived its timer")
                }
                if timer.spec.isDue(at: now) {
                    state.removeKey(of: token)
                    state.slots[token]?.timer = nil
                    state.scheduled -= 1
                    if let target = slot.target { due.append((target, timer.spec.id)) }
                } else {
                    // Woken early by a jump of the wall clock back: wait again from the current offset (a key has a
                    // deadline, so `due` has one too), no earlier than a millisecond on, so the loop moves past it.
                    let again = Self.due(timer.spec, offset: offset) ?? key.due
                    state.setKey(
                        Key(due: max(again, now.uptime + .milliseconds(1)), generation: key.generation, slot: key.slot))
                }
            }
            let next = state.heap.min.flatMap { sleeperIfEarlier(&state, than: $0.due, at: now) }
            return (due, state.delivery, next)
        }
        if let delivery {
            for (target, timer) in due { delivery(target, timer) }
        }
        if let next { startSleeper(next) }
    }
}

// MARK: - The heap

extension DeadlineQueue.State {
    fileprivate typealias Key = DeadlineQueue<Target>.Key

    /// Puts `key` in the heap as its slot's key, in place of the one the slot had.
    fileprivate mutating func setKey(_ key: Key) {
        let place = slots[Int(key.slot)]?.place ?? -1
        if place < 0 {
            heap.insert(key, places: &slots, moved: Self.place)
        } else {
            heap.replace(at: Int(place), with: key, places: &slots, moved: Self.place)
        }
    }

    /// Takes the key of the slot `token` out of the heap, if it has one.
    fileprivate mutating func removeKey(of token: Int) {
        guard let place = slots[token]?.place, place >= 0 else { return }
        slots[token]?.place = -1
        heap.remove(at: Int(place), places: &slots, moved: Self.place)
    }

    /// Notes in its slot where `key` sits in the heap.
    private static func place(_ slots: inout [DeadlineQueue<Target>.Slot?], _ key: Key, _ index: Int) {
        slots[Int(key.slot)]?.place = Int32(index)
    }
}
