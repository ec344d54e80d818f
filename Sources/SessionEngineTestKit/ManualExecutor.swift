import Dispatch
import SessionEngine

/// The executor that a ``ManualClock`` owns: every engine and pool on the clock runs its actor and its tasks here, so
/// the test sees all of their work and knows when none is left.
///
/// By default jobs run one at a time, in the order they were enqueued, on a serial dispatch queue of the executor's
/// own: the executor is both the serial executor of the engines' actors and the task executor their tasks prefer.
/// Made with `tasksRunInParallel`, the actors' jobs still run one at a time on that queue, and the tasks' jobs run on
/// the system's threads at the same time (``taskExecutor``), as they do in a host: a test then sees the engine's
/// actor and its tasks race on real threads, and still knows exactly when none of their work is left.
///
/// A test starts work with ``ManualClock/advance(by:)``, a scripted fetch's answer, a ``Gate`` or a call to the
/// engine, each of which enqueues a job before it returns; ``waitUntilIdle()`` then returns once no job is queued or
/// running. A task asleep on the clock, held by a script or waiting for another task has no job, so it does not count.
///
/// The shape of swift-nio's `NIOAsyncTestingEventLoop` and swift-async-algorithms' manual executor: the test owns
/// the executor, and the code under test counts nothing for it.
public final class ManualExecutor: SerialExecutor, TaskExecutor {
    private struct State {
        var jobs: [UnownedJob] = []
        /// The index of the next job in `jobs`.
        var next = 0
        /// Whether a drain of the serial queue is scheduled or running.
        var draining = false
        /// Jobs enqueued on either side and not yet run to their end.
        var outstanding = 0
        var idleWaiters = WaiterQueue<Void, Void>()
        /// Work under way outside the executor that counts as running (``runOutside(_:)``).
        var outside = 0

        var isIdle: Bool { outstanding == 0 && outside == 0 }

        /// The serial queue's next job, or `nil` when it is empty: the drain then ends.
        mutating func take() -> UnownedJob? {
            guard next < jobs.count else {
                jobs.removeAll(keepingCapacity: true)
                next = 0
                draining = false
                return nil
            }
            let job = jobs[next]
            next += 1
            if next >= 256 && next * 2 >= jobs.count {
                jobs.removeFirst(next)
                next = 0
            }
            return job
        }

        /// A job ran to its end: the idle waiters to resume, when nothing is left.
        mutating func finished() -> WaiterQueue<Void, Void>.Wakeups {
            outstanding -= 1
            return takeIdleWaiters()
        }

        /// The idle waiters to resume, when the executor is idle.
        mutating func takeIdleWaiters() -> WaiterQueue<Void, Void>.Wakeups {
            var idle = WaiterQueue<Void, Void>.Wakeups()
            if isIdle { idleWaiters.resolveAll(with: (), into: &idle) }
            return idle
        }
    }

    /// The executor's state, shared with its parallel task executor.
    private final class Books: Sendable {
        let state = SanitizedMutex(State())

        /// Counts a job as run and wakes the callers of ``ManualExecutor/waitUntilIdle()`` when nothing is left.
        func finish() {
            state.withLock { $0.finished() }.resume()
        }
    }

    /// The task executor of an executor whose tasks run in parallel: it runs each job on the system's threads,
    /// counted in the books it shares with the executor it belongs to.
    private final class ParallelTasks: TaskExecutor {
        let books: Books

        init(books: Books) {
            self.books = books
        }

        func enqueue(_ job: consuming ExecutorJob) {
            let job = UnownedJob(job)
            books.state.withLock { $0.outstanding += 1 }
            DispatchQueue.global().async {
                job.runSynchronously(on: self.asUnownedTaskExecutor())
                self.books.finish()
            }
        }
    }

    private let books = Books()
    /// The serial queue, on the system's shared threads: a suite makes a manual clock per test, and queues of their
    /// own threads would add a thread for each clock with work at once.
    private let queue = DispatchQueue(label: "SessionEngineTestKit.ManualExecutor", target: .global())
    private let parallelTasks: ParallelTasks?

    /// Creates an executor with nothing to run.
    ///
    /// - Parameter tasksRunInParallel: Whether the tasks that prefer this executor (``taskExecutor``) run on the
    ///   system's threads at the same time, as in a host; by default every job runs on one serial queue, in order.
    public init(tasksRunInParallel: Bool = false) {
        parallelTasks = tasksRunInParallel ? ParallelTasks(books: books) : nil
    }

    /// The executor that the tasks of engines and pools on the clock prefer: this executor itself, or, when tasks run
    /// in parallel, an executor that runs them on the system's threads and counts them here.
    public var taskExecutor: any TaskExecutor { parallelTasks ?? self }

    /// Whether no job is queued or running and no work runs outside (``runOutside(_:)``).
    public var isIdle: Bool { books.state.withLock { $0.isIdle } }

    /// Queues `job` on the serial queue and schedules a drain of the queue if none is under way.
    ///
    /// - Parameter job: The job to run.
    public func enqueue(_ job: consuming ExecutorJob) {
        let job = UnownedJob(job)
        let schedule = books.state.withLock { state -> Bool in
            state.outstanding += 1
            state.jobs.append(job)
            guard !state.draining else { return false }
            state.draining = true
            return true
        }
        if schedule { queue.async { self.drain() } }
    }

    /// Runs the serial queue's jobs until none is left.
    private func drain() {
        while let job = books.state.withLock({ $0.take() }) {
            if parallelTasks == nil {
                job.runSynchronously(isolatedTo: asUnownedSerialExecutor(), taskExecutor: asUnownedTaskExecutor())
            } else {
                job.runSynchronously(on: asUnownedSerialExecutor())
            }
            books.finish()
        }
    }

    /// Suspends until no job is queued or running: nothing on this executor can run until something outside it
    /// enqueues a job.
    ///
    /// Call it from a task that does not run on this executor (a test's own task): a task on the executor that waits
    /// here is itself the job that keeps it busy once it is woken.
    public func waitUntilIdle() async {
        await withParkedContinuation { (continuation: UnsafeContinuation<Void, Never>) in
            let idle = books.state.withLock { state -> Bool in
                guard !state.isIdle else { return true }
                state.idleWaiters.park((), continuation)
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
        books.state.withLock { $0.outside += 1 }
        defer {
            books.state.withLock { state in
                state.outside -= 1
                return state.takeIdleWaiters()
            }.resume()
        }
        return try await body()
    }

    /// This executor as the serial executor of an actor.
    public func asUnownedSerialExecutor() -> UnownedSerialExecutor {
        UnownedSerialExecutor(ordinary: self)
    }
}
