import Dispatch
import SessionEngine

/// The executor that a ``ManualClock`` owns: every engine and pool on the clock runs its actor and its tasks here, so
/// the test sees all of their work in one queue and knows when none is left.
///
/// Jobs run one at a time, in the order they were enqueued, on a serial dispatch queue of the executor's own: the
/// executor is both the serial executor of the engines' actors and the task executor their tasks prefer. A test
/// starts work with ``ManualClock/advance(by:)``, a scripted fetch's answer, a ``Gate`` or a call to the engine, each
/// of which enqueues a job before it returns; ``waitUntilIdle()`` then returns once the queue is empty and no job
/// runs. A task asleep on the clock, held by a script or waiting for another task has no job, so it does not count.
///
/// The shape of swift-nio's `NIOAsyncTestingEventLoop` and swift-async-algorithms' manual executor: the test owns
/// the executor, and the code under test counts nothing for it.
public final class ManualExecutor: SerialExecutor, TaskExecutor {
    private struct State {
        var jobs: [UnownedJob] = []
        /// The index of the next job in `jobs`.
        var next = 0
        /// Whether a drain of the queue is scheduled or running.
        var draining = false
        var idleWaiters: [CheckedContinuation<Void, Never>] = []
        var jobsRun: UInt64 = 0
        /// Work under way outside the executor that counts as running (``runOutside(_:)``).
        var outside = 0

        var isIdle: Bool { !draining && outside == 0 }

        /// The next job, or `nil` when the queue is empty: the drain then ends and the idle waiters are returned.
        mutating func take() -> (job: UnownedJob?, idle: [CheckedContinuation<Void, Never>]) {
            if next < jobs.count {
                let job = jobs[next]
                next += 1
                jobsRun += 1
                if next >= 256 && next * 2 >= jobs.count {
                    jobs.removeFirst(next)
                    next = 0
                }
                return (job, [])
            }
            jobs.removeAll(keepingCapacity: true)
            next = 0
            draining = false
            return (nil, takeIdleWaiters())
        }

        /// The idle waiters to resume, when the executor is idle.
        mutating func takeIdleWaiters() -> [CheckedContinuation<Void, Never>] {
            guard isIdle else { return [] }
            defer { idleWaiters.removeAll() }
            return idleWaiters
        }
    }

    private let state = Mutex(State())
    private let queue = DispatchQueue(label: "SessionEngineTestKit.ManualExecutor")

    /// Creates an executor with an empty queue.
    public init() {}

    /// Whether no job is queued or running and no work runs outside (``runOutside(_:)``).
    public var isIdle: Bool { state.withLock { $0.isIdle } }

    /// How many jobs the executor has run.
    public var jobsRun: UInt64 { state.withLock { $0.jobsRun } }

    /// Queues `job` and schedules a drain of the queue if none is under way.
    ///
    /// - Parameter job: The job to run.
    public func enqueue(_ job: consuming ExecutorJob) {
        let job = UnownedJob(job)
        let schedule = state.withLock { state -> Bool in
            state.jobs.append(job)
            guard !state.draining else { return false }
            state.draining = true
            return true
        }
        if schedule { queue.async { self.drain() } }
    }

    /// Runs queued jobs until none is left, then wakes the callers of ``waitUntilIdle()``.
    private func drain() {
        while true {
            let (job, idle) = state.withLock { $0.take() }
            guard let job else {
                for waiter in idle { waiter.resume() }
                return
            }
            job.runSynchronously(isolatedTo: asUnownedSerialExecutor(), taskExecutor: asUnownedTaskExecutor())
        }
    }

    /// Suspends until no job is queued or running: nothing on this executor can run until something outside it
    /// enqueues a job.
    ///
    /// Call it from a task that does not run on this executor (a test's own task): a task on the executor that waits
    /// here is itself the job that keeps it busy once it is woken.
    public func waitUntilIdle() async {
        await withCheckedContinuation { (continuation: CheckedContinuation<Void, Never>) in
            let idle = state.withLock { state -> Bool in
                guard !state.isIdle else { return true }
                state.idleWaiters.append(continuation)
                return false
            }
            if idle { continuation.resume() }
        }
    }

    /// Runs `body`, work that waits on something outside the executor (a real server, a real thread), as work the
    /// executor counts as running: ``waitUntilIdle()`` does not return while it runs.
    ///
    /// A job on the executor that waits for a real backend's answer has no job meanwhile, and the executor alone
    /// would read idle; ``RealTimeFetcher`` runs each fetch through here.
    ///
    /// - Parameter body: The work.
    /// - Returns: What `body` returns.
    /// - Throws: What `body` throws.
    public func runOutside<T>(_ body: () async throws -> T) async rethrows -> T {
        state.withLock { $0.outside += 1 }
        defer {
            let idle = state.withLock { state in
                state.outside -= 1
                return state.takeIdleWaiters()
            }
            for waiter in idle { waiter.resume() }
        }
        return try await body()
    }

    /// This executor as the serial executor of an actor.
    public func asUnownedSerialExecutor() -> UnownedSerialExecutor {
        UnownedSerialExecutor(ordinary: self)
    }
}
