public import Foundation
public import SessionEngine
import Synchronization

/// A clock that moves only when told to, for deterministic tests of the engine and of hosts.
///
/// ``advance(by:)`` moves both the monotonic and the wall clock and resumes every sleeper whose deadline has come.
/// ``jumpWallClock(by:)`` moves only the wall clock, as an NTP correction or a suspended machine does; sleepers
/// are not woken by it, just as a monotonic sleep is not.
///
/// The clock also owns the ``executor`` that runs every engine and pool on it, so that
/// ``SessionEngine/SessionEngine/waitUntilIdle()`` knows when none of their work can run: a task asleep on the clock has
/// no job until ``advance(by:)`` wakes it. Nothing here waits on real time.
public final class ManualClock: SessionClock, ExecutingClock {
    /// A sleeper waits for its deadline, woken with `true`, or for its cancellation, woken with `false`.
    private typealias Sleepers = WaiterQueue<Duration, Bool>

    private struct State {
        var elapsed: Duration = .zero
        var wall: Date
        var sleepers = Sleepers()
        /// Callers of ``waitForSleepers(count:)``, each with the count it waits for.
        var waiters = WaiterQueue<Int, Void>()

        /// Takes the callers of ``waitForSleepers(count:)`` whose count of sleepers is reached.
        mutating func readyWaiters() -> WaiterQueue<Int, Void>.Wakeups {
            var ready = WaiterQueue<Int, Void>.Wakeups()
            let sleeping = sleepers.waiting
            waiters.resolve(where: { sleeping >= $0 }, with: (), into: &ready)
            return ready
        }
    }

    private let state: SanitizedMutex<State>

    /// The executor that runs the actor and the tasks of every engine and pool on this clock, unless their
    /// configuration names a task executor of its own; ``SessionEngine/SessionEngine/waitUntilIdle()`` waits until it
    /// has nothing left to run.
    public let executor: ManualExecutor

    /// ``executor``, as the engines' actors see it.
    package var actorExecutor: any SerialExecutor { executor }

    /// The executor the engines' tasks prefer: ``executor``, or the one it runs tasks in parallel with.
    package var taskExecutor: any TaskExecutor { executor.taskExecutor }

    /// Creates a manual clock.
    ///
    /// - Parameter now: The initial wall-clock time; by default 2027-01-15T08:00:00Z.
    public convenience init(now: Date = Date(timeIntervalSince1970: 1_800_000_000)) {
        self.init(now: now, executor: ManualExecutor())
    }

    /// Creates a manual clock whose engines run on `executor`.
    ///
    /// - Parameters:
    ///   - now: The initial wall-clock time; by default 2027-01-15T08:00:00Z.
    ///   - executor: The executor of the engines and pools on the clock; one whose tasks run in parallel
    ///     (``ManualExecutor/init(tasksRunInParallel:)``) lets a test see the engine's actor and tasks race on real
    ///     threads.
    public init(now: Date = Date(timeIntervalSince1970: 1_800_000_000), executor: ManualExecutor) {
        state = SanitizedMutex(State(wall: now))
        self.executor = executor
    }

    /// The current wall-clock time.
    public var now: Date { state.withLock { $0.wall } }

    /// The monotonic time elapsed since the clock was created; moved only by ``advance(by:)``.
    public var uptime: Duration { state.withLock { $0.elapsed } }

    /// The number of tasks currently sleeping on this clock.
    public var sleeperCount: Int { state.withLock { $0.sleepers.waiting } }

    /// The earliest deadline among the sleepers, as monotonic time since creation, or `nil` when none sleeps.
    public var nextDeadline: Duration? { state.withLock { $0.sleepers.waitingKeys.min() } }

    /// Suspends until the clock has been advanced by `duration`.
    ///
    /// The sleeping task has no job for ``SessionEngine/SessionEngine/waitUntilIdle()`` to wait for until the clock wakes
    /// it.
    ///
    /// - Parameter duration: How long to sleep in the clock's monotonic time.
    /// - Throws: `CancellationError` when the calling task is cancelled.
    public func sleep(for duration: Duration) async throws {
        try Task.checkCancellation()
        guard duration > .zero else { return }
        try await park(for: duration, ignoringCancellation: false)
    }

    /// Suspends until the clock has been advanced by `duration`, whether or not the calling task is cancelled.
    ///
    /// Models work that cannot stop half-way: it notices cancellation only once it wakes.
    ///
    /// - Parameter duration: How long to sleep in the clock's monotonic time.
    public func sleepIgnoringCancellation(for duration: Duration) async {
        guard duration > .zero else { return }
        try? await park(for: duration, ignoringCancellation: true)
    }

    private func park(for duration: Duration, ignoringCancellation: Bool) async throws {
        // Entered in one lock step with the check of cancellation, so the cancellation handler has a ticket to resolve.
        let entered = state.withLock { state -> (Sleepers.Ticket, WaiterQueue<Int, Void>.Wakeups)? in
            if Task.isCancelled && !ignoringCancellation { return nil }
            let ticket = state.sleepers.enqueue(state.elapsed + duration)
            return (ticket, state.readyWaiters())
        }
        guard let (ticket, ready) = entered else { throw CancellationError() }
        ready.resume()
        let woken = await withTaskCancellationHandler {
            await withParkedContinuation { (continuation: UnsafeContinuation<Bool, Never>) in
                let now = state.withLock { $0.sleepers.park(ticket, continuation) }
                if let now { continuation.resume(returning: now) }
            }
        } onCancel: {
            guard !ignoringCancellation else { return }
            state.withLock { state in
                var wakeups = Sleepers.Wakeups()
                state.sleepers.resolve(ticket, with: false, into: &wakeups)
                return wakeups
            }.resume()
        }
        if !woken { throw CancellationError() }
    }

    /// Moves the monotonic and the wall clock forward and wakes every sleeper whose deadline has come, earliest
    /// deadline first.
    ///
    /// - Parameter duration: How far to move; must not be negative.
    public func advance(by duration: Duration) {
        precondition(duration >= .zero, "a monotonic clock cannot go backwards")
        state.withLock { state in
            state.elapsed += duration
            state.wall += duration.timeInterval
            let now = state.elapsed
            var due = Sleepers.Wakeups()
            for deadline in Set(state.sleepers.waitingKeys.filter { $0 <= now }).sorted() {
                state.sleepers.resolve(where: { $0 == deadline }, with: true, into: &due)
            }
            return due
        }.resume()
    }

    /// Advances the clock to the earliest sleeper's deadline, if any sleeps, and wakes the sleepers due then.
    ///
    /// - Parameter limit: Advance at most this far.
    /// - Returns: How far the clock moved; `.zero` when nothing sleeps.
    @discardableResult
    public func advanceToNextDeadline(limit: Duration? = nil) -> Duration {
        guard let deadline = nextDeadline else { return .zero }
        var step = max(.zero, deadline - uptime)
        if let limit { step = min(step, limit) }
        advance(by: step)
        return step
    }

    /// Moves only the wall clock, forwards or backwards, as a clock correction or a suspended machine does.
    ///
    /// No sleeper is woken; the engine notices the jump when its current sleep slice (at most 30 seconds) ends.
    ///
    /// - Parameter offset: How far to move the wall clock; negative moves it back.
    public func jumpWallClock(by offset: Duration) {
        state.withLock { $0.wall += offset.timeInterval }
    }

    /// Suspends until at least `count` tasks are sleeping on this clock.
    ///
    /// - Parameter count: The number of sleepers to wait for.
    public func waitForSleepers(count: Int) async {
        await withParkedContinuation { (continuation: UnsafeContinuation<Void, Never>) in
            let ready = state.withLock { state -> Bool in
                if state.sleepers.waiting >= count { return true }
                state.waiters.park(count, continuation)
                return false
            }
            if ready { continuation.resume() }
        }
    }
}
