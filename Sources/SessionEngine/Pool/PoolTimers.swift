import Foundation
import Synchronization

/// Every timer of a pool's accounts in one deadline structure, with one task that sleeps until the earliest.
///
/// An engine of its own runs a task for its timer (renewal, expiry, backoff). A pool's accounts hand their timers
/// here instead, so an idle account costs an entry in an array and a key in a heap, not a task, and the pool's
/// timers cost one sleeping task whatever the number of accounts. Each account holds at most one timer; a new one
/// replaces it. An engine with a timer holds a slot of the array (``SessionEngine/timerSlot``) until its timer fires
/// or is cancelled; freed slots are reused, so the array is as long as the most timers ever scheduled at once.
///
/// A timer is due at a wall-clock time, a monotonic time or whichever comes first (``TimerSpec``). The heap orders
/// the timers by when each is expected to be due on the pool clock's monotonic time: a wall-clock deadline is moved
/// there by the offset between the two clocks at the moment it is scheduled. The sleeper wakes for the earliest key,
/// and at least every 30 s, as an engine's own timer does, so a wall-clock jump is noticed within one slice: a jump
/// forward (the offset grew) re-keys every timer, and a timer woken early by a jump back, not yet due, is re-keyed
/// and waits again. A due timer fires in a task of its own, which tells the account's engine; the engine's state
/// machine ignores a timer it has replaced or cancelled meanwhile, so a firing that races a replacement is harmless.
final class PoolTimers: Sendable {
    /// A scheduled timer: its spec and the engine it belongs to.
    ///
    /// The entry holds its engine strongly, until the timer fires or is cancelled, or the timers close: a weak
    /// reference would give every engine with a timer, a pool's one per account, a side table for its reference
    /// counts, and slow every retain of it.
    private struct Entry {
        var spec: TimerSpec
        var engine: SessionEngine
        /// Tells this scheduling apart from the engine's earlier and later ones.
        var generation: UInt64
    }

    /// A timer's place in the heap; stale once its slot holds another generation, or none.
    private struct Key: Comparable {
        var due: Duration
        var generation: UInt64
        var slot: Int

        static func < (lhs: Key, rhs: Key) -> Bool {
            (lhs.due, lhs.generation) < (rhs.due, rhs.generation)
        }
    }

    private struct State {
        /// The scheduled timers by slot; `nil` for a free slot.
        var entries: [Entry?] = []
        var freeSlots: [Int] = []
        /// How many slots hold a timer.
        var scheduled = 0
        var heap = Heap<Key>()
        var nextGeneration: UInt64 = 0
        /// The sleeping task (`nil` until it is made), when it will wake and its identity.
        var sleeper: (task: Task<Void, Never>?, wakesAt: Duration, id: UInt64)?
        /// The wall clock minus the monotonic clock when the keys were computed, in seconds.
        var offset: TimeInterval?
        /// Times the sleeper woke, for benchmarks.
        var wakeUps = 0
        /// Whether the pool is gone: no timer is scheduled any more.
        var closed = false
    }

    private let clock: any SessionClock
    private let taskExecutor: (any TaskExecutor)?
    private let state = Mutex(State())

    /// How long the sleeper sleeps at most, so that wall-clock jumps are noticed.
    static let slice = Duration.seconds(30)
    /// How far the offset between the clocks may move before every key is computed again.
    private static let jumpTolerance: TimeInterval = 1

    init(clock: any SessionClock, taskExecutor: (any TaskExecutor)?) {
        self.clock = clock
        self.taskExecutor = taskExecutor
    }

    /// How many timers are scheduled.
    var count: Int { state.withLock { $0.scheduled } }

    /// How many slots the timers' array holds, free ones included.
    var slotCount: Int { state.withLock { $0.entries.count } }

    /// How many times the sleeper has woken.
    var wakeUps: Int { state.withLock { $0.wakeUps } }

    /// Schedules `spec` for `engine`, replacing its timer.
    func schedule(_ spec: TimerSpec, for engine: SessionEngine) {
        let now = SessionInstant(wall: clock.now, uptime: clock.uptime)
        let start = state.withLock { state -> (wait: Duration, id: UInt64)? in
            guard !state.closed else { return nil }
            state.nextGeneration += 1
            let generation = state.nextGeneration
            let slot = Self.slot(of: engine, in: &state)
            state.entries[slot] = Entry(spec: spec, engine: engine, generation: generation)
            let offset = state.offset ?? Self.offset(at: now)
            state.offset = offset
            guard let due = Self.due(spec, offset: offset) else { return nil }
            state.heap.insert(Key(due: due, generation: generation, slot: slot))
            // Stale keys of replaced timers are dropped as they come up; past twice the timers, all at once.
            if state.heap.count > 2 * state.scheduled + 64 { Self.rekey(&state, at: now) }
            return sleeperIfEarlier(&state, than: due, at: now)
        }
        if let start { startSleeper(start) }
    }

    /// Cancels `engine`'s timer, if it has one.
    func cancel(for engine: SessionEngine) {
        let sleeper = state.withLock { state -> Task<Void, Never>? in
            let slot = engine.timerSlot.load(ordering: .relaxed)
            if slot >= 0 { Self.free(slot, of: engine, in: &state) }
            guard state.scheduled == 0 else { return nil }
            // No timer left: the sleeper has nothing to wake for, and no engine holds a slot.
            state.heap = Heap()
            state.entries = []
            state.freeSlots = []
            defer { state.sleeper = nil }
            return state.sleeper?.task
        }
        sleeper?.cancel()
    }

    /// Drops every timer and schedules none from now on, for a pool that is gone without shutting down: the
    /// entries hold their engines, and the engines these timers, so without it a dropped pool's engines would keep
    /// each other, and their renewals, alive.
    func close() {
        let (sleeper, entries) = state.withLock { state -> (Task<Void, Never>?, [Entry?]) in
            state.closed = true
            let entries = state.entries
            for case let entry? in entries { entry.engine.timerSlot.store(-1, ordering: .relaxed) }
            defer { state = State(closed: true) }
            return (state.sleeper?.task, entries)
        }
        sleeper?.cancel()
        // The engines are released here, outside the lock: an engine freed now takes nothing of the timers.
        _ = entries
    }

    // MARK: - Under the lock

    /// `engine`'s slot, given one from the free slots or the end of the array when it has none.
    private static func slot(of engine: SessionEngine, in state: inout State) -> Int {
        let held = engine.timerSlot.load(ordering: .relaxed)
        if held >= 0 { return held }
        let slot: Int
        if let free = state.freeSlots.popLast() {
            slot = free
        } else {
            slot = state.entries.count
            state.entries.append(nil)
        }
        state.scheduled += 1
        engine.timerSlot.store(slot, ordering: .relaxed)
        return slot
    }

    /// Frees `slot`, and takes it from `engine`.
    private static func free(_ slot: Int, of engine: SessionEngine, in state: inout State) {
        state.entries[slot] = nil
        state.freeSlots.append(slot)
        state.scheduled -= 1
        engine.timerSlot.store(-1, ordering: .relaxed)
    }

    /// The wall clock minus the monotonic clock at `now`, in seconds.
    private static func offset(at now: SessionInstant) -> TimeInterval {
        now.wall.timeIntervalSince1970 - now.uptime.timeInterval
    }

    /// When `spec` is expected to be due on the monotonic clock, with the clocks `offset` apart; `nil` for a timer
    /// with no deadline.
    private static func due(_ spec: TimerSpec, offset: TimeInterval) -> Duration? {
        var due: Duration?
        if let wall = spec.wallDeadline {
            due = .seconds(wall.timeIntervalSince1970 - offset)
        }
        if let uptime = spec.uptimeDeadline {
            due = min(due ?? uptime, uptime)
        }
        return due
    }

    /// Computes every live timer's key again at `now`, dropping stale keys.
    private static func rekey(_ state: inout State, at now: SessionInstant) {
        let offset = offset(at: now)
        state.offset = offset
        var heap = Heap<Key>()
        for (slot, entry) in state.entries.enumerated() {
            guard let entry, let due = due(entry.spec, offset: offset) else { continue }
            heap.insert(Key(due: due, generation: entry.generation, slot: slot))
        }
        state.heap = heap
    }

    /// A new sleeper's wait and identity when none sleeps or the one that does wakes after `due`, recorded in
    /// this lock step. The sleeper it replaces is cancelled.
    private func sleeperIfEarlier(_ state: inout State, than due: Duration, at now: SessionInstant) -> (
        wait: Duration, id: UInt64
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
        return (wait, id)
    }

    // MARK: - The sleeper

    /// Starts the sleeper planned by ``sleeperIfEarlier(_:than:at:)``.
    private func startSleeper(_ plan: (wait: Duration, id: UInt64)) {
        let clock = self.clock
        let task = Task(executorPreference: taskExecutor) { [weak self] in
            do {
                try await clock.sleep(for: plan.wait)
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

    /// Fires the due timers and plans the next look; the sleeper `id` calls it when it wakes.
    private func look(sleeper id: UInt64) {
        let now = SessionInstant(wall: clock.now, uptime: clock.uptime)
        let (due, next) = state.withLock { state -> ([(SessionEngine, TimerID)], (wait: Duration, id: UInt64)?) in
            // A sleeper replaced just as its sleep ended leaves the looking to its replacement.
            guard state.sleeper?.id == id else { return ([], nil) }
            state.sleeper = nil
            state.wakeUps += 1
            let offset = Self.offset(at: now)
            if let keyed = state.offset, abs(offset - keyed) > Self.jumpTolerance { Self.rekey(&state, at: now) }
            var due: [(SessionEngine, TimerID)] = []
            var early: [Key] = []
            while let key = state.heap.min, key.due <= now.uptime {
                state.heap.removeMin()
                guard let entry = state.entries[key.slot], entry.generation == key.generation else { continue }
                let engine = entry.engine
                if entry.spec.isDue(at: now) {
                    Self.free(key.slot, of: engine, in: &state)
                    due.append((engine, entry.spec.id))
                } else {
                    // Woken early by a jump of the wall clock back: wait again from the current offset.
                    if let again = Self.due(entry.spec, offset: offset) {
                        let due = max(again, now.uptime + .milliseconds(1))
                        early.append(Key(due: due, generation: key.generation, slot: key.slot))
                    }
                }
            }
            for key in early { state.heap.insert(key) }
            // Each firing is runnable from this lock step on.
            var next: (wait: Duration, id: UInt64)?
            while let key = state.heap.min {
                if let entry = state.entries[key.slot], entry.generation == key.generation {
                    next = sleeperIfEarlier(&state, than: key.due, at: now)
                    break
                }
                state.heap.removeMin()
            }
            return (due, next)
        }
        for (engine, timer) in due { engine.fireTimer(timer) }
        if let next { startSleeper(next) }
    }
}
