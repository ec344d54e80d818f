import Dispatch
import Synchronization
import Testing

@testable import SessionEngine

/// The one queue every place of the package parks callers in (``WaiterQueue``), and the one-shot built on it
/// (``OneShot``): order, values that come before a caller parks, cancellation, storage, and real threads racing them.
@Suite struct WaiterQueueTests {
    /// A queue of integers behind a lock, as an owner keeps one.
    private final class Owner: Sendable {
        let queue = SanitizedMutex(WaiterQueue<Int, String>())

        func enqueue(_ key: Int) -> WaiterQueue<Int, String>.Ticket { queue.withLock { $0.enqueue(key) } }

        func wait(_ ticket: WaiterQueue<Int, String>.Ticket) async -> String {
            await withParkedContinuation { continuation in
                let now = queue.withLock { $0.park(ticket, continuation) }
                if let now { continuation.resume(returning: now) }
            }
        }

        @discardableResult
        func resolve(where selected: @Sendable (Int) -> Bool, with value: String) -> Int {
            let (count, wakeups) = queue.withLock { queue -> (Int, WaiterQueue<Int, String>.Wakeups) in
                var wakeups = WaiterQueue<Int, String>.Wakeups()
                let count = queue.resolve(where: selected, with: value, into: &wakeups)
                return (count, wakeups)
            }
            wakeups.resume()
            return count
        }

        func resolve(_ ticket: WaiterQueue<Int, String>.Ticket, with value: String) -> Bool {
            let (resolved, wakeups) = queue.withLock { queue -> (Bool, WaiterQueue<Int, String>.Wakeups) in
                var wakeups = WaiterQueue<Int, String>.Wakeups()
                return (queue.resolve(ticket, with: value, into: &wakeups), wakeups)
            }
            wakeups.resume()
            return resolved
        }

        var waiting: Int { queue.withLock { $0.waiting } }
        var isEmpty: Bool { queue.withLock { $0.isEmpty } }
        var holdsStorage: Bool { queue.withLock { $0.holdsStorage } }
    }

    @Test func aValueThatComesBeforeTheCallerParksIsKeptForIt() async {
        let owner = Owner()
        let ticket = owner.enqueue(7)
        #expect(owner.resolve(where: { $0 == 7 }, with: "early") == 1)
        #expect(owner.waiting == 0)
        #expect(!owner.isEmpty, "the value waits in the queue until the caller collects it")
        #expect(await owner.wait(ticket) == "early")
        #expect(owner.isEmpty)
        #expect(!owner.holdsStorage, "the last caller gone gives the storage back")
    }

    @Test func onlySelectedCallersAreWokenAndInTheOrderTheyEntered() async {
        let owner = Owner()
        var tasks: [Task<String, Never>] = []
        for key in 0..<6 {
            let ticket = owner.enqueue(key)
            tasks.append(Task { await owner.wait(ticket) })
        }
        while owner.queue.withLock({ queue in queue.waitingKeys.count }) < 6 { await Task.yield() }
        #expect(owner.queue.withLock { $0.waitingKeys } == [0, 1, 2, 3, 4, 5])
        #expect(owner.resolve(where: { $0 % 2 == 1 }, with: "odd") == 3)
        #expect(owner.waiting == 3)
        #expect(owner.queue.withLock { $0.waitingKeys } == [0, 2, 4])
        #expect(owner.resolve(where: { _ in true }, with: "rest") == 3)
        var values: [String] = []
        for task in tasks { values.append(await task.value) }
        #expect(values == ["rest", "odd", "rest", "odd", "rest", "odd"])
        #expect(owner.isEmpty)
    }

    @Test func aTicketResolvedTwiceKeepsItsFirstValue() async {
        let owner = Owner()
        let ticket = owner.enqueue(1)
        #expect(owner.resolve(ticket, with: "first"))
        #expect(!owner.resolve(ticket, with: "second"), "a caller that has its value is left alone")
        #expect(owner.resolve(where: { _ in true }, with: "all") == 0)
        #expect(await owner.wait(ticket) == "first")
        #expect(!owner.resolve(ticket, with: "after"), "a caller that left is left alone")
    }

    @Test func resolveFirstWakesTheLongestWaitingCallerOnly() {
        var queue = WaiterQueue<Int, Int>()
        let first = queue.enqueue(10)
        _ = queue.enqueue(20)
        var wakeups = WaiterQueue<Int, Int>.Wakeups()
        #expect(queue.resolveFirst(with: 1, into: &wakeups))
        #expect(queue.waitingKeys == [20])
        #expect(!queue.isEmpty, "a caller not yet parked keeps its value in the queue")
        var again = WaiterQueue<Int, Int>.Wakeups()
        #expect(!queue.resolve(first, with: 2, into: &again))
    }

    @Test func aQueueWithOneLongWaiterStaysSmallWhileManyComeAndGo() async {
        let owner = Owner()
        let long = owner.enqueue(-1)
        for key in 0..<20_000 {
            let ticket = owner.enqueue(key)
            #expect(owner.resolve(ticket, with: "done \(key)"))
            _ = await owner.wait(ticket)
        }
        // The removed entries are compacted away: the queue holds the long waiter alone.
        #expect(owner.queue.withLock { $0.waitingKeys } == [-1])
        #expect(owner.waiting == 1)
        #expect(owner.resolve(long, with: "end"))
        #expect(await owner.wait(long) == "end")
        #expect(!owner.holdsStorage)
    }

    @Test func aOneShotKeepsItsFirstValueForEveryWaiterEarlierOrLater() async {
        let shot = OneShot<Int>()
        let early = Task { await shot.value() }
        while shot.waiting == 0 { await Task.yield() }
        #expect(shot.open(with: 1))
        #expect(!shot.open(with: 2), "a one-shot opens once")
        #expect(await early.value == 1)
        #expect(await shot.value() == 1)
        #expect(await shot.valueUnlessCancelled() == 1)
    }

    @Test func aCancelledWaiterOfAOneShotLeavesAndTheOthersStay() async {
        let shot = OneShot<Void>()
        let leaving = Task { await shot.valueUnlessCancelled() }
        let staying = Task { await shot.value() }
        while shot.waiting < 2 { await Task.yield() }
        leaving.cancel()
        #expect(await leaving.value == nil)
        staying.cancel()
        #expect(shot.waiting == 1, "a wait that ignores cancellation stays")
        shot.open()
        await staying.value
        #expect(shot.waiting == 0)
    }

    private static let resumer = DispatchQueue(label: "WaiterQueueTests.resumer")

    /// Another thread resumes a caller between its parking and its suspension, round after round: the caller goes
    /// on without suspending, with its value, and nothing stays in the queue. Under the thread sanitizer, the caller's
    /// next frames reuse the memory the resumer last read (``withParkedContinuation(isolation:_:)`` says why that
    /// needs an annotation the runtime leaves out).
    @Test func aCallerResumedBeforeItSuspendsGoesOnWithItsValue() async {
        let owner = Owner()
        let rounds = RealThreadRounds.scaled(2_000)
        var total = 0
        var early = 0
        for round in 0..<rounds {
            let (value, resumedFirst) = await Self.waitResumedFromAnotherThread(owner, round: round)
            total += await Self.nextFrame(Int(value) ?? -1)
            if resumedFirst { early += 1 }
        }
        #expect(total == rounds * (rounds - 1))
        #expect(owner.isEmpty)
        // The resume came before the suspension in most rounds; a machine too busy to run the resumer within the
        // spin may leave a few rounds to the ordinary path, never all of them.
        #expect(early > 0)
    }

    /// Parks a caller and has another thread resume it while the caller is still inside its parking closure, which
    /// waits (a bounded while) until the resume has returned: the task then reaches its suspension already resumed
    /// and goes on without suspending. The flag is relaxed, so it orders nothing for the sanitizer. A function of its
    /// own, so the continuation's context lives in a frame that the next call reuses. The resumer is a serial queue
    /// of its own, which gets a thread even while the suite's tests hold every thread of the shared ones.
    @inline(never)
    private static func waitResumedFromAnotherThread(_ owner: Owner, round: Int) async -> (String, Bool) {
        let ticket = owner.enqueue(round)
        let resumed = RealThreadRounds.Count()
        let early = RealThreadRounds.Count()
        let value = await withParkedContinuation { (continuation: UnsafeContinuation<String, Never>) in
            let now = owner.queue.withLock { $0.park(ticket, continuation) }
            if let now { return continuation.resume(returning: now) }
            Self.resumer.async {
                _ = owner.resolve(ticket, with: String(round))
                resumed.value.store(1, ordering: .relaxed)
            }
            for _ in 0..<200_000 where resumed.value.load(ordering: .relaxed) == 0 {}
            early.value.store(resumed.value.load(ordering: .relaxed), ordering: .relaxed)
        }
        return (value, early.value.load(ordering: .relaxed) == 1)
    }

    /// Writes frames of its own in the task's memory, where the last continuation's context was, `depth` deep, and
    /// returns twice `value`.
    @inline(never)
    private static func nextFrame(_ value: Int, depth: Int = 3) async -> Int {
        var parts = (value, value, 0, 0, 0, 0, 0, 0)
        await Task.yield()
        parts.2 = parts.0 &+ parts.1
        parts.7 = parts.2
        return depth == 0 ? parts.7 : await nextFrame(value, depth: depth - 1) &+ parts.7 &- parts.2
    }

    /// Real threads race a one-shot's opening, a wait, a cancellable wait and its cancellation, round after round: no
    /// caller is lost between the check of whether it opened and the parking, and none is woken twice (the queue's
    /// unchecked continuations would trap).
    @Test func realThreadsRacingAOneShotNeverLoseACaller() async {
        let stuck = await RealThreadRounds.run(RealThreadRounds.scaled(4_000)) { round in
            let shot = OneShot<Int>()
            async let opened: Bool = Task.detached(executorPreference: RealThreadRounds.threads) {
                shot.open(with: round)
            }.value
            async let waited: Int = Task.detached(executorPreference: RealThreadRounds.threads) { await shot.value() }
                .value
            let cancellable = Task.detached(executorPreference: RealThreadRounds.threads) {
                await shot.valueUnlessCancelled()
            }
            async let cancelled: Void = Task.detached(executorPreference: RealThreadRounds.threads) {
                cancellable.cancel()
            }.value
            let (didOpen, value, _) = await (opened, waited, cancelled)
            #expect(didOpen)
            #expect(value == round)
            // Cancelled first, the wait ends with nothing; opened first, with the value. Either way it ends.
            if let value = await cancellable.value { #expect(value == round) }
            #expect(shot.waiting == 0)
        }
        #expect(stuck == nil, "a caller of the one-shot was never woken in round \(stuck ?? -1)")
    }

    /// Real threads register callers for an outcome, resolve them and cancel them, round after round: every caller
    /// ends exactly once, with the outcome or its cancellation, and the waiters end empty.
    @Test func realThreadsRacingOutcomeWaitersEndEveryCallerOnce() async {
        let failure = SessionError(.signedOut, reason: "resolved")
        let stuck = await RealThreadRounds.run(RealThreadRounds.scaled(3_000)) { _ in
            let waiters = OutcomeWaiters()
            let first = waiters.register(epoch: 1, kind: .identity)
            let second = waiters.register(epoch: 1, kind: .identity)
            let waiting = Task.detached(executorPreference: RealThreadRounds.threads) { try await waiters.wait(first) }
            let cancelled = Task.detached(executorPreference: RealThreadRounds.threads) {
                try await waiters.wait(second)
            }
            async let resolved: Void = Task.detached(executorPreference: RealThreadRounds.threads) {
                waiters.resolve(epoch: 1, kinds: [.identity], outcome: .failed(failure))
            }.value
            async let cancelling: Void = Task.detached(executorPreference: RealThreadRounds.threads) {
                cancelled.cancel()
            }.value
            _ = await (resolved, cancelling)
            await #expect(throws: SessionError.self) { try await waiting.value }
            do {
                _ = try await cancelled.value
                Issue.record("a caller received a credential nobody installed")
            } catch {
                #expect(error is SessionError || error is CancellationError)
            }
            #expect(waiters.isEmpty)
        }
        #expect(stuck == nil, "a caller of the outcome waiters was never woken in round \(stuck ?? -1)")
    }
}

/// Rounds of a race on real threads, watched so that a lost wake-up fails the test instead of hanging the run.
enum RealThreadRounds {
    private final class Progress: Sendable {
        let rounds = Atomic<Int>(0)
    }

    /// Whether the thread sanitizer runs: it slows the rounds about tenfold, and the suite's CPU-bound property tests
    /// then hold both threads of the concurrency pool for minutes at a time.
    private static let sanitized = SanitizedMutex<Int>.annotatesForThreadSanitizer

    /// Runs the rounds' tasks on the dispatch queue's threads, not the concurrency pool's two, which the suite's
    /// CPU-bound tests may hold for a minute: the rounds race on threads of their own.
    final class Threads: TaskExecutor {
        func enqueue(_ job: consuming ExecutorJob) {
            let job = UnownedJob(job)
            DispatchQueue.global().async { job.runSynchronously(on: self.asUnownedTaskExecutor()) }
        }
    }

    /// The executor every task of the rounds prefers.
    static let threads = Threads()

    /// A count a round's tasks share (an `Atomic` cannot be captured by the tasks themselves).
    final class Count: Sendable {
        let value = Atomic<Int>(0)
    }

    /// Releases a round's threads together, so that a window of a few instructions in one of them meets the others'
    /// steps far more often than threads that start a task's creation apart: each thread arrives and spins until all
    /// have, or for a few hundred microseconds (a thread still missing then has no core to race on anyway).
    final class StartLine: Sendable {
        private let parties: Int
        private let arrived = Atomic(0)

        init(parties: Int) {
            self.parties = parties
        }

        func arriveAndWait() {
            arrived.add(1, ordering: .acquiringAndReleasing)
            for _ in 0..<200_000 where arrived.load(ordering: .acquiring) < parties {}
        }
    }

    /// `rounds`, or a tenth of them under the thread sanitizer, which is there to see races on the accesses, not to
    /// repeat them.
    static func scaled(_ rounds: Int) -> Int { sanitized ? rounds / 10 : rounds }

    /// How long no round may end before the run counts as stuck: a lost wake-up never ends, and a round costs well
    /// under a millisecond, but on a machine with both cores busy, and under the thread sanitizer, its threads may wait
    /// long for a core.
    static let stall: Duration = sanitized ? .seconds(600) : .seconds(90)

    /// Runs `rounds` rounds of `round`, one after another, off the calling task.
    ///
    /// - Parameters:
    ///   - rounds: How many rounds.
    ///   - stall: How long no round may end before the run counts as stuck.
    ///   - round: One round, given its number.
    /// - Returns: The round that never ended; `nil` when every round did. A stuck round's tasks stay suspended.
    static func run(
        _ rounds: Int, stall: Duration = Self.stall, _ round: @escaping @Sendable (Int) async -> Void
    ) async -> Int? {
        let progress = Progress()
        Task.detached(executorPreference: RealThreadRounds.threads) {
            for number in 0..<rounds {
                await round(number)
                progress.rounds.store(number + 1, ordering: .releasing)
            }
        }
        let clock = ContinuousClock()
        var seen = 0
        var lastProgress = clock.now
        while true {
            let done = progress.rounds.load(ordering: .acquiring)
            if done == rounds { return nil }
            if done != seen {
                seen = done
                lastProgress = clock.now
            } else if clock.now - lastProgress > stall {
                return done
            }
            try? await Task.sleep(for: .milliseconds(2))
        }
    }
}
