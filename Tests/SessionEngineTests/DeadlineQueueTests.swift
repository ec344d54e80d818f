import Foundation
import SessionEngineBackend
import SessionEngineModel
import SessionEngineTestKit
import Synchronization
import Testing

@testable import SessionEngine

/// The deadline queue every timer of an engine or a pool waits in, driven by a manual clock.
@Suite struct DeadlineQueueTests {
    /// A queue on a manual clock whose owners are numbers, and the firings it delivered, in order.
    private struct Rig {
        let clock = ManualClock()
        let fired = Locked<[(owner: Int, timer: TimerID)]>()
        let queue: DeadlineQueue<Int>

        init() {
            let fired = self.fired
            queue = DeadlineQueue(
                clock: clock, taskExecutor: clock.executor,
                delivery: { owner, timer in fired.withLock { $0.append((owner, timer)) } })
        }

        /// The timer `id`, due once the monotonic clock has moved `after` from now.
        func timer(_ id: TimerID, after: Duration) -> TimerSpec {
            TimerSpec(id: id, uptimeDeadline: clock.uptime + after)
        }

        /// The timer `id`, due once the wall clock has moved `after` from now.
        func wallTimer(_ id: TimerID, after: Duration) -> TimerSpec {
            TimerSpec(id: id, wallDeadline: clock.now.addingTimeInterval(after.timeInterval))
        }

        /// Moves the clock by `step` and waits until the queue's work has run.
        func advance(by step: Duration) async {
            clock.advance(by: step)
            await clock.executor.waitUntilIdle()
        }

        /// The owners whose timers fired, in order.
        var owners: [Int] { fired.value.map(\.owner) }
    }

    @Test func theEarliestDeadlineFiresFirstAndOneSleeperServesThemAll() async {
        let rig = Rig()
        let owners = (0..<3).map { rig.queue.register($0) }
        rig.queue.schedule(rig.timer(1, after: .seconds(30)), for: owners[0])
        rig.queue.schedule(rig.timer(2, after: .seconds(10)), for: owners[1])
        rig.queue.schedule(rig.wallTimer(3, after: .seconds(20)), for: owners[2])
        await rig.clock.executor.waitUntilIdle()
        #expect(rig.clock.sleeperCount == 1, "one task sleeps for every timer")
        #expect(rig.clock.nextDeadline == .seconds(10))
        await rig.advance(by: .seconds(10))
        #expect(rig.owners == [1])
        await rig.advance(by: .seconds(10))
        #expect(rig.owners == [1, 2])
        await rig.advance(by: .seconds(10))
        #expect(rig.fired.value.map(\.timer) == [2, 3, 1])
        #expect(rig.queue.count == 0)
        #expect(rig.clock.sleeperCount == 0 && !rig.queue.isSleeping)
    }

    @Test func reArmingReplacesTheTimer() async {
        let rig = Rig()
        let owner = rig.queue.register(7)
        rig.queue.schedule(rig.timer(1, after: .seconds(10)), for: owner)
        rig.queue.schedule(rig.timer(2, after: .seconds(20)), for: owner)
        #expect(rig.queue.count == 1)
        await rig.advance(by: .seconds(10))
        #expect(rig.fired.value.isEmpty, "the replaced timer never fires")
        await rig.advance(by: .seconds(10))
        #expect(rig.fired.value.map(\.timer) == [2])
        // Re-armed earlier, the sleeper wakes earlier.
        rig.queue.schedule(rig.timer(3, after: .seconds(25)), for: owner)
        rig.queue.schedule(rig.timer(4, after: .seconds(5)), for: owner)
        await rig.clock.executor.waitUntilIdle()
        #expect(rig.clock.nextDeadline == rig.clock.uptime + .seconds(5))
        await rig.advance(by: .seconds(5))
        #expect(rig.fired.value.map(\.timer) == [2, 4])
        await rig.advance(by: .seconds(30))
        #expect(rig.fired.value.map(\.timer) == [2, 4])
    }

    /// Owners schedule, replace and cancel timers, come and go (now and then all at once, the next taking the slots
    /// afresh) while the clock moves, in random order: after every call the heap holds one key for each timer with a
    /// deadline (a replaced or cancelled timer's key moves or goes where it sits, so none is left behind), and each
    /// move of the clock fires exactly the timers due by then, in the order of their deadlines and, for one deadline,
    /// of their scheduling.
    @Test(arguments: [1, 2, 3, 4] as [UInt64])
    func theHeapHoldsOneKeyPerTimerAndFiresThemInOrder(seed: UInt64) async {
        let rig = Rig()
        var random = SplitMix64(seed: seed)
        var slots: [Int: DeadlineQueue<Int>.Token] = [:]
        // Each owner's timer: its deadline on the monotonic clock (none for a timer without one), and when it was
        // scheduled.
        var timers: [Int: (due: Duration?, scheduled: Int, id: TimerID)] = [:]
        var firings = 0
        for call in 0..<3_000 {
            let owner = Int(random.next() % 24)
            let choice = random.next() % 16
            if choice == 0 {
                // The executor runs the queue's sleeper at once, on a thread of its own: it reads the clock, then
                // sleeps for what is left. Moved in between, the clock would wake it late by the move, as a clock
                // moved by another thread would; a test moves it only once the queue's work is done.
                await rig.clock.executor.waitUntilIdle()
                await rig.advance(by: .seconds(Int(random.next() % 6)))
                let now = rig.clock.uptime
                let due = timers.compactMap { owner, timer in
                    timer.due.flatMap { $0 <= now ? (owner, $0, timer.scheduled, timer.id) : nil }
                }
                let expected = due.sorted { ($0.1, $0.2) < ($1.1, $1.2) }.map(\.3)
                for fired in due { timers[fired.0] = nil }
                #expect(rig.fired.value.dropFirst(firings).map(\.timer) == expected, "call \(call)")
                firings = rig.fired.value.count
            } else if choice == 1, random.next() % 8 == 0 {
                for slot in slots.values.sorted() { rig.queue.release(slot) }
                slots = [:]
                timers = [:]
                #expect(rig.queue.slotCount == 0 && rig.queue.keyCount == 0 && rig.queue.count == 0)
            } else if let slot = slots[owner] {
                switch choice % 8 {
                case 0:
                    rig.queue.release(slot)
                    slots[owner] = nil
                    timers[owner] = nil
                case 1:
                    rig.queue.cancel(for: slot)
                    timers[owner] = nil
                case let kind:
                    // Whole seconds a few apart, so that many fall together; one timer in six has no deadline.
                    let due: Duration? = kind == 2 ? nil : rig.clock.uptime + .seconds(Int(random.next() % 12) + 1)
                    rig.queue.schedule(TimerSpec(id: TimerID(call), uptimeDeadline: due), for: slot)
                    timers[owner] = (due, call, TimerID(call))
                }
            } else {
                slots[owner] = rig.queue.register(owner)
            }
            let keyed = timers.values.filter { $0.due != nil }.count
            #expect(rig.queue.keyCount == keyed && rig.queue.count == timers.count, "call \(call)")
            if rig.queue.keyCount != keyed { return }
        }
        #expect(firings > 200, "the clock's moves fired \(firings) timers")
        for slot in slots.values { rig.queue.release(slot) }
        #expect(rig.queue.slotCount == 0 && !rig.queue.isSleeping)
    }

    /// Timers due at one instant fire in the order they were scheduled; a replaced one counts from its replacement.
    @Test func timersDueAtOnceFireInTheOrderTheyWereScheduled() async {
        let rig = Rig()
        let owners = (0..<12).map { rig.queue.register($0) }
        for (id, owner) in [5, 2, 9, 0, 11, 7, 3, 8, 1, 10, 4, 6].enumerated() {
            rig.queue.schedule(rig.timer(TimerID(id), after: .seconds(10)), for: owners[owner])
        }
        rig.queue.schedule(rig.timer(100, after: .seconds(10)), for: owners[2])
        rig.queue.schedule(rig.timer(101, after: .seconds(10)), for: owners[7])
        await rig.advance(by: .seconds(10))
        #expect(rig.fired.value.map(\.timer) == [0, 2, 3, 4, 6, 7, 8, 9, 10, 11, 100, 101])
    }

    @Test func cancellingTheLastTimerStopsTheSleeper() async {
        let rig = Rig()
        let first = rig.queue.register(1)
        let second = rig.queue.register(2)
        rig.queue.schedule(rig.timer(1, after: .seconds(10)), for: first)
        rig.queue.schedule(rig.timer(2, after: .seconds(20)), for: second)
        await rig.clock.executor.waitUntilIdle()
        rig.queue.cancel(for: first)
        #expect(rig.queue.count == 1 && rig.queue.isSleeping)
        rig.queue.cancel(for: second)
        #expect(rig.queue.count == 0)
        #expect(!rig.queue.isSleeping && rig.clock.sleeperCount == 0, "no timer is left to sleep for")
        await rig.advance(by: .seconds(60))
        #expect(rig.fired.value.isEmpty)
    }

    @Test func anEmptyQueueSleepsInNoTask() async {
        let rig = Rig()
        let owner = rig.queue.register(1)
        await rig.clock.executor.waitUntilIdle()
        #expect(rig.clock.sleeperCount == 0 && !rig.queue.isSleeping)
        rig.queue.schedule(rig.timer(1, after: .seconds(90)), for: owner)
        await rig.clock.executor.waitUntilIdle()
        #expect(rig.clock.sleeperCount == 1)
        // An owner that goes takes its timer, and the last the sleeper, with it.
        rig.queue.release(owner)
        #expect(rig.queue.count == 0 && rig.queue.slotCount == 0)
        #expect(!rig.queue.isSleeping && rig.clock.sleeperCount == 0)
        // The cancelled sleeper's task ends: the clock's executor has nothing left to run.
        await rig.clock.executor.waitUntilIdle()
    }

    @Test func aWallClockJumpForwardIsNoticedWithinOneSlice() async {
        let rig = Rig()
        let owner = rig.queue.register(1)
        rig.queue.schedule(rig.wallTimer(1, after: .seconds(3600)), for: owner)
        await rig.clock.executor.waitUntilIdle()
        // Only the wall clock moves: a monotonic sleep would not see it.
        rig.clock.jumpWallClock(by: .seconds(3600))
        var waited = Duration.zero
        while rig.fired.value.isEmpty && waited < .seconds(120) {
            await rig.advance(by: .seconds(1))
            waited += .seconds(1)
        }
        #expect(rig.owners == [1])
        #expect(waited <= DeadlineQueue<Int>.slice, "the jump was noticed after \(waited)")
        #expect(rig.queue.wakeUps <= 2)
    }

    @Test func aWallClockJumpBackDelaysAWallClockTimerButNotAMonotonicOne() async {
        let rig = Rig()
        let wall = rig.queue.register(1)
        let monotonic = rig.queue.register(2)
        rig.queue.schedule(rig.wallTimer(1, after: .seconds(60)), for: wall)
        rig.queue.schedule(rig.timer(2, after: .seconds(90)), for: monotonic)
        await rig.clock.executor.waitUntilIdle()
        rig.clock.jumpWallClock(by: .seconds(-600))
        await rig.advance(by: .seconds(90))
        #expect(rig.owners == [2], "the monotonic deadline came; the wall-clock one is 10 minutes away again")
        await rig.advance(by: .seconds(560))
        #expect(rig.owners == [2])
        await rig.advance(by: .seconds(30))
        #expect(rig.owners == [2, 1])
    }

    /// A wall clock that reads no number (a host's clock may return anything) traps nothing: a timer's monotonic
    /// deadline still fires, and a wall-clock deadline fires once the clock reads numbers again, within one slice.
    @Test func aWallClockThatReadsNaNTrapsNothingAndIsReadAgainEachSlice() async {
        let clock = LyingWallClock()
        let fired = Locked<[Int]>()
        let queue = DeadlineQueue<Int>(
            clock: clock, taskExecutor: clock.base.executor,
            delivery: { owner, _ in fired.withLock { $0.append(owner) } })
        let wall = queue.register(1)
        let monotonic = queue.register(2)
        let deadline = clock.base.now.addingTimeInterval(60)
        clock.readsNaN.withLock { $0 = true }
        queue.schedule(TimerSpec(id: 1, wallDeadline: deadline), for: wall)
        queue.schedule(TimerSpec(id: 2, uptimeDeadline: clock.uptime + .seconds(10)), for: monotonic)
        for _ in 0..<4 {
            clock.base.advance(by: .seconds(30))
            await clock.base.executor.waitUntilIdle()
        }
        #expect(fired.value == [2], "the monotonic deadline fired; the wall clock reads no time to compare")
        clock.readsNaN.withLock { $0 = false }
        var waited = Duration.zero
        while fired.value.count < 2 && waited < .seconds(120) {
            clock.base.advance(by: .seconds(1))
            await clock.base.executor.waitUntilIdle()
            waited += .seconds(1)
        }
        #expect(
            fired.value == [2, 1], "the wall deadline passed while the clock read NaN: it fires once it reads again")
        #expect(waited <= DeadlineQueue<Int>.slice)
    }

    @Test func anIdleQueueWakesOncePerSlice() async {
        let rig = Rig()
        for owner in 0..<100 {
            rig.queue.schedule(rig.wallTimer(TimerID(owner), after: .seconds(86_400)), for: rig.queue.register(owner))
        }
        await rig.clock.executor.waitUntilIdle()
        #expect(rig.clock.sleeperCount == 1)
        for _ in 0..<10 { await rig.advance(by: .seconds(30)) }
        #expect(rig.queue.wakeUps == 10, "100 idle timers wake the queue once per 30 s slice")
        #expect(rig.fired.value.isEmpty)
    }

    /// The queue names an engine without holding it: an engine dropped with its renewal timer armed is freed, gives
    /// its slot back and leaves no sleeper.
    @Test func anEngineDroppedWithItsTimerArmedIsFreedAndLeavesNoSleeper() async throws {
        let clock = ManualClock()
        let signer = try IdentitySigner(projectID: "proj_queue", secret: "queue-secret", clock: clock)
        let fetcher = ScriptedCredentialFetcher(responder: { account in
            try signer.sign(email: exampleEmail(for: account))
        })
        var engine: SessionEngine? = SessionEngine(fetcher: fetcher, clock: clock)
        try await engine?.signIn("alice")
        await engine?.waitUntilIdle()
        weak let dropped = engine?.shard
        let queue = try #require(engine?.shard.timers)
        #expect(queue.count == 1, "the renewal timer is armed")
        #expect(clock.sleeperCount == 1)
        engine = nil
        #expect(dropped == nil, "the queue does not keep the engine's shard")
        #expect(queue.count == 0 && queue.slotCount == 0)
        #expect(clock.sleeperCount == 0, "no sleeping task is left behind")
        await clock.executor.waitUntilIdle()
    }

    /// A graceful shutdown's grace period is a deadline of the engine's queue, not a sleeping task: while it lasts one
    /// task sleeps for it and the renewal, and the shutdown gives its slot back when the work ends first.
    @Test func aGracePeriodWaitsInTheEnginesQueueAndEndsWithTheShutdown() async throws {
        let clock = ManualClock()
        let signer = try IdentitySigner(projectID: "proj_queue", secret: "queue-secret", clock: clock)
        let fetcher = ScriptedCredentialFetcher(responder: { account in
            try signer.sign(email: exampleEmail(for: account))
        })
        var engine = SessionEngine(fetcher: fetcher, clock: clock)
        let queue = engine.shard.timers
        try await engine.signIn("alice")
        let gate = Gate(clock: clock)
        let work = await engine.startCall { engine in try await engine.withIdentity { _ in await gate.wait() } }
        let shutdown = await engine.startCall { engine in await engine.shutdown(gracePeriod: .seconds(3600)) }
        #expect(queue.count == 2, "the renewal and the grace period")
        #expect(clock.sleeperCount == 1, "one task sleeps for both")
        gate.open()
        try await work.value
        try await shutdown.value
        await engine.waitUntilIdle()
        #expect(queue.count == 0)
        #expect(clock.sleeperCount == 0, "no task sleeps out the grace period")
        engine = SessionEngine(fetcher: fetcher, clock: clock)
        #expect(queue.slotCount == 0, "every slot of the first engine was given back")
    }

    /// Engines of their own on the system clock share the process's queue; on any other clock each has its own.
    @Test func enginesOnTheSystemClockShareTheProcesssQueue() throws {
        let fetcher = ScriptedCredentialFetcher(responder: { _ in throw CancellationError() })
        let first = SessionEngine(fetcher: fetcher)
        let second = SessionEngine(fetcher: fetcher)
        #expect(first.shard.timers === AccountShard.systemTimers && second.shard.timers === AccountShard.systemTimers)
        let clock = ManualClock()
        let own = SessionEngine(fetcher: fetcher, clock: clock)
        let other = SessionEngine(fetcher: fetcher, clock: clock)
        #expect(own.shard.timers !== AccountShard.systemTimers && own.shard.timers !== other.shard.timers)
    }

    /// Owners schedule and cancel timers on two threads while a third moves the clock, round after round: every timer
    /// never cancelled fires once, none twice, and the queue ends with no timer. One owner schedules and cancels its
    /// timer again and again as the other schedules theirs, so the queue often empties in one thread's step while the
    /// other's timer goes in: a cancel that found the queue empty in one lock step and stopped the sleeper and dropped
    /// the keys in a second would drop that timer, and its round would wait for a firing that never comes.
    @Test func realThreadsSchedulingCancellingAndMovingTheClockFireEveryTimerOnce() async {
        let twice = RealThreadRounds.Count()
        let left = RealThreadRounds.Count()
        let stuck = await RealThreadRounds.run(RealThreadRounds.scaled(2_000)) { round in
            let clock = ManualClock()
            let fired = Locked<[TimerID: Int]>([:])
            let queue = DeadlineQueue<Int>(
                clock: clock, taskExecutor: RealThreadRounds.threads,
                delivery: { _, timer in fired.withLock { $0[timer, default: 0] += 1 } })
            let owners = (0..<4).map { queue.register($0) }
            let timer: @Sendable (Int) -> TimerSpec = { owner in
                TimerSpec(id: TimerID(owner), uptimeDeadline: clock.uptime + .seconds((round + owner) % 3 + 1))
            }
            let line = RealThreadRounds.StartLine(parties: 3)
            await withTaskGroup(of: Void.self) { group in
                group.addTask(executorPreference: RealThreadRounds.threads) {
                    line.arriveAndWait()
                    // Somewhere among the other owner's schedules and cancels, by the round.
                    for _ in 0..<(round % 64) * 4 where !Task.isCancelled {}
                    queue.schedule(timer(0), for: owners[0])
                    queue.schedule(timer(1), for: owners[1])
                }
                group.addTask(executorPreference: RealThreadRounds.threads) {
                    line.arriveAndWait()
                    // The last owner's timer, scheduled and cancelled again and again, empties the queue each time
                    // until the other owner's timers are in; it fires only if the clock got there first.
                    for _ in 0..<16 {
                        queue.schedule(timer(3), for: owners[3])
                        queue.cancel(for: owners[3])
                    }
                    queue.schedule(timer(2), for: owners[2])
                }
                group.addTask(executorPreference: RealThreadRounds.threads) {
                    line.arriveAndWait()
                    for _ in 0..<3 { clock.advance(by: .seconds(1)) }
                }
            }
            // Every timer never cancelled fires once the clock has passed it: move it on until they have.
            while (0..<3).contains(where: { fired.value[TimerID($0)] == nil }) {
                clock.advance(by: .seconds(10))
                await Task.yield()
            }
            if fired.value.values.contains(where: { $0 > 1 }) { twice.value.add(1, ordering: .relaxed) }
            if queue.count != 0 { left.value.add(1, ordering: .relaxed) }
            for owner in owners { queue.release(owner) }
        }
        #expect(stuck == nil, "a timer never fired in round \(stuck ?? -1)")
        #expect(twice.value.load(ordering: .relaxed) == 0, "rounds in which a timer fired twice")
        #expect(left.value.load(ordering: .relaxed) == 0, "rounds that ended with a timer still scheduled")
    }
}

/// A manual clock whose wall clock reads NaN while ``readsNaN`` is set, as a host's clock may.
private final class LyingWallClock: SessionClock {
    let base = ManualClock()
    let readsNaN = Locked(false)

    var now: Date { readsNaN.value ? Date(timeIntervalSince1970: .nan) : base.now }
    var uptime: Duration { base.uptime }

    func sleep(for duration: Duration) async throws {
        try await base.sleep(for: duration)
    }
}
