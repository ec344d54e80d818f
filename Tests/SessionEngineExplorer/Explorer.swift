import CSessionEngineExplorer
import Synchronization
@_spi(ExperimentalScheduling) import _Concurrency

/// Runs every job of a program on one thread it controls, in an order a strategy chooses.
///
/// ## API (package access; the client is `SessionEngineSchedules`)
///
/// ```swift
/// try Explorer.install()                   // first, from main.swift's synchronous top level, before any Task
/// let proof = try Explorer.selfTest(lockProbe: { lock.withLock { _ in } })  // SelfTestReport; ExplorerError(reason)
/// var chooser = RandomChooser(seed: 7)     // or PCTChooser(depth:seed:expectedChoicePoints:), ReplayChooser(s),
///                                          // any ScheduleChooser; Strategy.x.chooser(expectedChoicePoints:)
/// let report = Explorer.run(&chooser, stepLimit: 200_000, diagnostics: { "parked: ..." }, { try await program() })
/// Explorer.run(.random(seed: 7), { ... })  // the same with a Strategy: .fifo, .random(seed:), .pct(depth:seed:)
///                                          // (pass expectedChoicePoints: k from a first run), .replay(schedule)
/// report.outcome    // .passed / .failed(message) / .deadlock(diagnostics) / .stepLimit / .captureBroken(reason)
/// report.steps; report.choicePoints; report.schedule       // a Schedule replays the run exactly
/// Schedule("0x12.3.0x5.1")!; schedule.description; schedule.deviations; schedule.trimmed
/// Schedule.shrink(schedule) { !Explorer.run(.replay($0), program).outcome.isPassed }
/// let x = Explorer.explore(bound: 2, maxSchedules: 100_000, reduction: true, { { try await program() } })
/// x.schedules; x.pruned; x.complete; x.failures /* [Failure(schedule, outcome)], first 20 */; x.failureCount
/// x.outcomes /* [Outcome: Int] */; x.nondeterminism /* String? */; x.maxChoicePoints; x.maxSteps
/// Task(executorPreference: Explorer.taskExecutor) { ... }  // unstructured tasks whose hops should be choice points
/// ```
///
/// A program must be deterministic given its schedule (no real time, no randomness the schedule does not fix, no
/// state carried between runs); the exhaustive search checks it.
///
/// ## Capture
///
/// ``install()`` sets the runtime's four enqueue hooks (`swift_task_enqueueGlobal_hook`, `...WithDelay_hook`,
/// `...WithDeadline_hook`, `swift_task_enqueueMainExecutor_hook`). A job enqueued on the explorer's thread joins the
/// run queue; a job asking for real time (`Task.sleep`, a `ContinuousClock` deadline) or the main actor fails the run,
/// since programs run on a manual clock; an enqueue (or a package lock taken) on another thread is counted as foreign,
/// handed to the runtime's own executor so that it is not lost, and fails the run ("capture broken").
///
/// ## Inline hops become choice points
///
/// The runtime runs an actor hop inline (no enqueue) only when no task executor is current
/// (`swift_task_switchImpl` in stdlib/public/Concurrency/Actor.cpp). The explorer runs every job with
/// `runSynchronously(on:)` its own task executor, and starts the program's task with that executor as its preference
/// (`Task.detached(executorPreference:)`; child tasks inherit it). The preference matters: while an actor drains its
/// queue, the runtime makes each task's own preference the current task executor, so a task without one would hop
/// off the actor inline. With it, every hop is an enqueue: onto an actor (whose processing job reaches the global
/// hook) or back to the generic executor (which reaches the explorer's task executor). An unstructured `Task {}`
/// does not inherit a preference (SE-0417): programs start theirs with `Task(executorPreference:
/// Explorer.taskExecutor)`, or their jobs are still captured but hops inside an actor's drain are not choice points.
///
/// ## Dependence (the exhaustive search's partial-order reduction)
///
/// A step is one job run. Its ``Footprint``: the package locks it took (SessionEngine's lock calls `__tsan_acquire`,
/// which the C target defines), the actors it touched (the current executor at each lock and each enqueue; for an
/// actor's processing job, the actor named in the job; the actors whose processing jobs it enqueued), and the jobs it
/// enqueued. A step is *opaque* when it enqueued nothing (a task that ends its step without an enqueue finished,
/// parked on a continuation, a task or a group, or queued itself on an actor that already had a processing job
/// scheduled, which the runtime does without reaching any hook), or is an actor job whose actor is unknown. Two steps
/// are dependent when
/// 1. they took a common lock or touched a common actor: they may touch the same state, or the same actor queue; or
/// 2. one is opaque and the other is opaque too, is an actor's job, or enqueued one: the opaque step may have queued a
///    task on that actor (or any actor), and the order decides that actor's queue order, or whether the processing
///    job runs that task at all; or
/// 3. one woke another task (enqueued a task other than its own: creation, a resumed continuation, a child's result
///    its parent awaited, a finished task's awaiter) and the other is opaque or woke a task too: wakes go through
///    runtime state the explorer cannot see (a group's results, a task's awaiters), and of two children finishing,
///    the first wakes the waiting parent and the second only leaves its result, silently.
/// Otherwise they are independent: each touched different actors (or none) under different locks and ended with
/// visible enqueues of its own task or of an actor's job, so neither read what the other wrote through an actor or a lock, and swapping them changes only
/// the order of the run queue, not its contents (the search names jobs by their enqueue ordinal, not their index).
///
/// In an actor's processing job the explorer cannot tell a task hopping off the actor from a task finishing and
/// waking its awaiter (both enqueue after the runtime cleared the current task), so rule 3 sees only the wakes made
/// while a task is current (continuation resumes, task creation); an actor's job is dependent with every opaque step
/// under rule 2 anyway.
///
/// Why this is sound for Swift 6 programs: without data races, tasks share mutable state only through actors, locks
/// and the runtime's own synchronisation; actors and package locks are in the footprint. Where it is an
/// approximation: state shared through a lock that is not the package's (`Synchronization.Mutex` used directly,
/// `AsyncStream`'s internal lock, atomics), task cancellation flags, task-group and `async let` completion, and a step
/// that wakes another task silently (resuming a continuation onto a busy actor) while also enqueuing something
/// visibly. The engine shares state through its actors and `SanitizedMutex`. A footprint recorded when a job ran on
/// an earlier branch is reused for the same job (same ordinal) on a sibling branch; that is valid because runs are
/// deterministic, which the search checks (the runnable jobs at every replayed step must be the recorded ones).
/// Sleep sets combined with a deviation bound can in principle cut a state reachable within the bound only through
/// a pruned order. The self-test compares the final states reached with and without reduction on two programs (the
/// toy; three tasks visiting two recording actors, where the first version of this relation, without rule 2's
/// "enqueued an actor's job", missed one of six orders).
///
/// ## Limitations, and what to do when a toolchain changes them
///
/// - An unstructured `Task {}` without `executorPreference: Explorer.taskExecutor` has its jobs captured, but its hops
///   inside an actor's drain run inline (not choice points), and a real-time wait it makes goes to the default
///   executor's timer, past every hook: the run may pass, and the job, firing later on another thread, fails the next
///   run ("between runs"). Engines under test should start their tasks on an executor the test names. Running inline
///   is also an order of its own, which a program may want: the task leaves the actor with the thread, the actor's
///   remaining queue waits for a new processing job (a choice point), and the task's next steps can run first. With
///   the preference the drain goes on through the actor's whole queue in one step (the runtime's drain loop never
///   yields), so a task that prefers the explorer's executor never runs between two jobs of one drain.
/// - The main actor: on 6.3.1 its executor (DispatchMainExecutor, in Swift) enqueues on the dispatch main queue
///   without the main-executor hook; the explorer never drains that queue, so a program waiting for the main actor
///   deadlocks (the self-test pins this: it accepts either a deadlock or capture broken).
/// - Runtime details pinned by ``selfTest(lockProbe:)``, each failing with where to look: the four hook symbols
///   (ConcurrencyHooks.def), the job kind byte at offset 32 and the actor at offset 64 of an out-of-line processing job
///   (include/swift/ABI/Task.h, MetadataValues.h, Actor.cpp `ProcessOutOfLineJob`), that a current task executor
///   stops inline hops (Actor.cpp `swift_task_switchImpl`), and that `Task.sleep` asks the current task executor's
///   `SchedulingExecutor` side (experimental SPI; TaskSleep.swift). When one fails: read the named file at the new
///   toolchain's tag, adjust the C target or this file, and rerun the self-test. When the custom-executor API lands
///   (`ExecutorFactory` with `defaultExecutor` and `mainExecutor`, SE-0505 `SchedulingExecutor`), install a factory
///   whose executors append to the run queue instead of the hooks: it catches the main actor and every sleep, and the
///   rest (run queue, task executor, strategies, search) stays.
package enum Explorer {
    /// Queues a job of a task that prefers the explorer's executor: to the run queue on the explorer's thread, to the
    /// foreign queue from any other.
    static func enqueuePreferring(_ job: UnownedJob) {
        let pointer = unsafeBitCast(job, to: UnsafeMutableRawPointer.self)
        guard se_explorer_on_explorer_thread() != 0 else {
            se_explorer_enqueue_foreign(pointer)
            return
        }
        captured(pointer, route: Int32(SE_EXPLORER_ROUTE_TASK_EXECUTOR.rawValue))
    }

    /// The explorer's task executor: every job runs with it as the current task executor, so that the runtime never
    /// runs an actor hop inline. Its own enqueue (a task that prefers it) joins the run queue.
    final class HopExecutor: TaskExecutor {
        /// Queues a job of a task that prefers this executor.
        func enqueue(_ job: consuming ExecutorJob) {
            Explorer.enqueuePreferring(UnownedJob(job))
        }
    }

    /// The runtime asks a task executor's scheduling side for every timed wait (`Task.sleep`, a clock's
    /// `sleep(until:)`) before it falls back to the default executor, which would bypass the hooks: this conformance
    /// is how the explorer sees real-time waits and fails the run. The job is dropped: its task never resumes.
    ///
    /// `SchedulingExecutor` is experimental SPI (SE-0505, returned for revision); the self-test checks that a sleep
    /// reaches it.
    @available(macOS 26.4, iOS 26.4, watchOS 26.4, tvOS 26.4, visionOS 26.4, *)
    final class TimedHopExecutor: TaskExecutor, SchedulingExecutor {
        /// Queues a job of a task that prefers this executor.
        func enqueue(_ job: consuming ExecutorJob) {
            Explorer.enqueuePreferring(UnownedJob(job))
        }

        /// A job that asks to run after a delay on a real clock: fails the run.
        func enqueue<C: Clock>(
            _ job: consuming ExecutorJob,
            after delay: C.Duration,
            tolerance: C.Duration?,
            clock: C
        ) {
            Explorer.askedForRealTime("\(C.self) after \(delay)", job)
        }

        /// A job that asks to run at an instant of a real clock: fails the run.
        func enqueue<C: Clock>(
            _ job: consuming ExecutorJob,
            at instant: C.Instant,
            tolerance: C.Duration?,
            clock: C
        ) {
            Explorer.askedForRealTime("\(C.self)", job)
        }
    }

    /// A job waiting in the run queue.
    struct Pending {
        /// The runtime's job.
        var pointer: UnsafeMutableRawPointer
        /// What the strategy sees.
        var info: JobInfo
    }

    /// The explorer's mutable state; touched only on the explorer's thread (the hooks check the thread first).
    struct State {
        /// Whether ``install()`` succeeded.
        var installed = false
        /// Whether a run is in progress.
        var active = false
        /// The run queue, in enqueue order.
        var queue: [Pending] = []
        /// Enqueues so far in this run (the next job's ordinal).
        var ordinals = 0
        /// Why capture broke in this run, if it did.
        var captureFailure: String?
        /// The footprint of the job running now.
        var footprint = Footprint(kind: .task)
        /// The task of the job running now (0 for an actor's job).
        var runningTask: UInt = 0
        /// Jobs enqueued outside any run.
        var strays = 0
        /// Every job kind seen, for the self-test.
        var kindsSeen: Set<Int> = []
        /// Foreign enqueues and locks counted when the last run ended (or at installation).
        var foreignAtLastRun: UInt64 = 0
        /// Runs jobs as the runtime's own executor does (no task executor), for the self-test's control run.
        var withoutTaskExecutor = false
        /// The thread each step of the current run started on, when the self-test asks.
        var recordThreads = false
        /// The threads recorded.
        var threads: Set<UInt64> = []
        /// Tasks waiting until no other job can run (``waitUntilIdle()``), in the order they came.
        var idleWaiters: [UnsafeContinuation<Void, Never>] = []
    }

    /// The explorer's state (explorer's thread only).
    nonisolated(unsafe) static var state = State()

    /// The task executor every job runs on.
    static let hopExecutor: any TaskExecutor = {
        if #available(macOS 26.4, iOS 26.4, watchOS 26.4, tvOS 26.4, visionOS 26.4, *) {
            return TimedHopExecutor()
        }
        return HopExecutor()
    }()

    /// The explorer's task executor, for programs that start unstructured tasks: `Task(executorPreference:
    /// Explorer.taskExecutor) { ... }`. The program's own task and its child tasks (`async let`, task groups) prefer
    /// it already; an unstructured `Task {}` does not inherit a preference (SE-0417), and a task without one runs
    /// its hops inline while an actor drains it (the drain sets each task's own preference as the current task
    /// executor), so those hops are not choice points. Jobs of such tasks are still captured.
    package static var taskExecutor: any TaskExecutor { hopExecutor }

    /// A job asked for real time (through the task executor's scheduling side). The job is dropped on the explorer's
    /// thread (its task never resumes) and handed to the global executor on any other.
    static func askedForRealTime(_ what: String, _ job: consuming ExecutorJob) {
        guard onExplorerThread else {
            se_explorer_enqueue_foreign(unsafeBitCast(UnownedJob(job), to: UnsafeMutableRawPointer.self))
            return
        }
        if state.captureFailure == nil {
            state.captureFailure =
                "a job asked for real time (Task.sleep or a clock's sleep, \(what)); programs under the explorer "
                + "must use a manual clock"
        }
    }

    /// Installs the runtime hooks. Call first, from the synchronous top level of main.swift, before any task exists;
    /// the calling thread becomes the explorer's thread.
    ///
    /// - Throws: ``ExplorerError`` when a hook symbol is missing or already set.
    package static func install() throws(ExplorerError) {
        if state.installed {
            return
        }
        let enqueue: se_explorer_enqueue_sink = { job, route in
            Explorer.captured(job!, route: route)
        }
        let lock: se_explorer_lock_sink = { lock, executor in
            Explorer.locked(UInt(bitPattern: lock), executor: UInt(bitPattern: executor))
        }
        if let failure = se_explorer_install(enqueue, lock) {
            throw ExplorerError(
                "cannot install the concurrency hooks: \(String(cString: failure)) "
                    + "(see swiftlang/swift include/swift/Runtime/Concurrency.h and "
                    + "stdlib/public/Concurrency/ConcurrencyHooks.def for this toolchain)")
        }
        state.installed = true
        state.foreignAtLastRun = se_explorer_foreign_enqueues() + se_explorer_foreign_locks()
    }

    /// A job reached a hook on the explorer's thread.
    static func captured(_ pointer: UnsafeMutableRawPointer, route: Int32) {
        let kindByte = Int(se_explorer_job_kind(pointer))
        state.kindsSeen.insert(kindByte)
        switch UInt32(route) {
        case SE_EXPLORER_ROUTE_DELAY.rawValue, SE_EXPLORER_ROUTE_DEADLINE.rawValue:
            if state.captureFailure == nil {
                state.captureFailure =
                    "a job asked for real time (Task.sleep or a ContinuousClock/SuspendingClock deadline); "
                    + "programs under the explorer must use a manual clock"
            }
            return
        case SE_EXPLORER_ROUTE_MAIN.rawValue:
            if state.captureFailure == nil {
                state.captureFailure = "a job asked for the main actor; programs under the explorer must not use it"
            }
            return
        default:
            break
        }
        if !state.active {
            state.strays += 1
        }
        let kind: JobInfo.Kind = kindByte == 0 ? .task : .actor
        // ProcessOutOfLineJob (kind 193): the Job header (64 bytes), then the actor it drains.
        let identity = kindByte == 193 ? se_explorer_job_word(pointer, 64) : UInt(bitPattern: pointer)
        let info = JobInfo(kind: kind, identity: identity, ordinal: state.ordinals, rawKind: kindByte)
        state.ordinals += 1
        state.queue.append(Pending(pointer: pointer, info: info))
        state.footprint.enqueued += 1
        // A wake: a task job's step enqueued a task other than its own. In an actor's job, the tasks it runs are not
        // known in advance; a task enqueued while another is current was created or woken by it, but a hop off the
        // actor and a completion both enqueue after the runtime cleared the current task, so those are not told
        // apart (see the approximation in the type's documentation).
        if kind == .task && state.active {
            if state.runningTask != 0 {
                if identity != state.runningTask {
                    state.footprint.wokeTask = true
                }
            } else {
                let current = UInt(bitPattern: se_explorer_current_task())
                if current != 0 && current != identity {
                    state.footprint.wokeTask = true
                }
            }
        }
        if kind == .actor {
            state.footprint.enqueuedRuntimeJob = true
            if kindByte == 193 {
                state.footprint.scheduledActors.insert(identity)
            }
        }
        let executor = UInt(bitPattern: se_explorer_current_executor())
        if executor != 0 {
            state.footprint.executors.insert(executor)
        }
    }

    /// A package lock was taken on the explorer's thread.
    static func locked(_ lock: UInt, executor: UInt) {
        guard state.active else { return }
        state.footprint.locks.insert(lock)
        if executor != 0 {
            state.footprint.executors.insert(executor)
        }
    }

    /// Suspends the calling task until no job of the run can run: every other task is parked (asleep on a manual
    /// clock, held by a script, waiting for another task) or has finished. Then the first waiter is woken, alone:
    /// what it does next is the run's next step.
    ///
    /// This is how a program under the explorer knows that the code it drives has done all it can, without counting
    /// anything in that code: the explorer runs every job, so its run queue is empty exactly then.
    ///
    /// - Precondition: Called from a job of a run, on the explorer's thread.
    package static func waitUntilIdle() async {
        precondition(onExplorerThread && state.active, "Explorer.waitUntilIdle() is for programs inside a run")
        await withUnsafeContinuation { continuation in
            state.idleWaiters.append(continuation)
        }
    }

    /// Whether the calling thread is the explorer's thread.
    package static var onExplorerThread: Bool {
        se_explorer_on_explorer_thread() != 0
    }

    /// Runs `program` once under a ``Strategy``.
    ///
    /// - Parameters:
    ///   - strategy: The strategy for this run.
    ///   - expectedChoicePoints: k for ``Strategy/pct(depth:seed:)`` (from an earlier run of the program).
    ///   - stepLimit: The most jobs the run may take.
    ///   - diagnostics: What is parked; called on deadlock.
    ///   - program: The program; a thrown error fails the run.
    /// - Returns: The run's outcome, counts and schedule.
    package static func run(
        _ strategy: Strategy,
        expectedChoicePoints: Int = 100,
        stepLimit: Int = 200_000,
        diagnostics: @escaping @Sendable () -> String = { "" },
        _ program: @escaping @Sendable () async throws -> Void
    ) -> RunReport {
        var chooser = strategy.chooser(expectedChoicePoints: expectedChoicePoints)
        return run(&chooser, stepLimit: stepLimit, diagnostics: diagnostics, program)
    }

    /// Runs `program` once, every job on the calling thread, picking the next job with `chooser`.
    ///
    /// Returns when the program's task has finished and no job is left, or on deadlock, step limit or broken capture.
    /// Jobs left after the program's task finished run to quiescence under the same chooser. On a step limit or
    /// broken capture the jobs still queued are dropped (their tasks never finish and their memory is not freed), so
    /// the next run starts with an empty queue.
    ///
    /// - Parameters:
    ///   - chooser: The strategy for this run.
    ///   - stepLimit: The most jobs the run may take.
    ///   - diagnostics: What is parked; called on deadlock, its text in the outcome.
    ///   - program: The program; a thrown error fails the run.
    /// - Returns: The run's outcome, counts and schedule.
    package static func run<Chooser: ScheduleChooser>(
        _ chooser: inout Chooser,
        stepLimit: Int = 200_000,
        diagnostics: @escaping @Sendable () -> String = { "" },
        _ program: @escaping @Sendable () async throws -> Void
    ) -> RunReport {
        var report = RunReport(outcome: .passed, steps: 0, choicePoints: 0, schedule: Schedule())
        guard state.installed else {
            report.outcome = .captureBroken("Explorer.install() was not called (or failed)")
            return report
        }
        guard onExplorerThread else {
            report.outcome = .captureBroken("Explorer.run was called from a thread other than install()'s")
            return report
        }
        guard !state.active else {
            report.outcome = .captureBroken("Explorer.run was called from inside a run")
            return report
        }
        if !state.queue.isEmpty || state.strays > 0 {
            let count = max(state.queue.count, state.strays)
            state.queue.removeAll()
            state.strays = 0
            report.outcome = .captureBroken("\(count) jobs were enqueued outside a run (dropped)")
            return report
        }
        let foreignBefore = se_explorer_foreign_enqueues() + se_explorer_foreign_locks()
        if foreignBefore > state.foreignAtLastRun {
            // A job of an earlier run went on elsewhere after it ended (a real-time wait of a task without the
            // explorer's preference fires on the runtime's timer thread, say).
            let count = foreignBefore - state.foreignAtLastRun
            state.foreignAtLastRun = foreignBefore
            report.outcome = .captureBroken(
                "\(count) jobs were enqueued or locks taken on other threads between runs (a job of an earlier run "
                    + "escaped)")
            return report
        }
        state.active = true
        state.ordinals = 0
        state.captureFailure = nil
        state.footprint = Footprint(kind: .task)
        let result = ProgramResult()
        let body: @Sendable () async -> Void = {
            do {
                try await program()
                result.finish(nil)
            } catch {
                result.finish("\(error)")
            }
        }
        if state.withoutTaskExecutor {
            Task.detached(operation: body)
        } else {
            Task.detached(executorPreference: hopExecutor, operation: body)
        }
        let executor = hopExecutor.asUnownedTaskExecutor()
        while true {
            if let failure = state.captureFailure {
                report.outcome = .captureBroken(failure)
                break
            }
            let foreign = se_explorer_foreign_enqueues() + se_explorer_foreign_locks() - foreignBefore
            if foreign > 0 {
                report.outcome = .captureBroken(
                    "\(foreign) jobs were enqueued or locks taken on a thread other than the explorer's")
                break
            }
            if state.queue.isEmpty, !state.idleWaiters.isEmpty {
                // Quiescent: the first task waiting for it goes on. Resuming it enqueues its job here.
                state.idleWaiters.removeFirst().resume()
                continue
            }
            if state.queue.isEmpty {
                switch result.value {
                case .none: report.outcome = .deadlock(diagnostics())
                case .some(.none): report.outcome = .passed
                case .some(.some(let message)): report.outcome = .failed(message)
                }
                break
            }
            if report.steps >= stepLimit {
                report.outcome = .stepLimit
                break
            }
            let runnable = state.queue.count
            var index = 0
            if runnable > 1 {
                index = chooser.choose(among: state.queue.map(\.info))
                index = min(max(index, 0), runnable - 1)
                report.schedule.choices.append(index)
                report.choicePoints += 1
            }
            let job = state.queue.remove(at: index)
            state.footprint = Footprint(kind: job.info.kind)
            state.runningTask = job.info.kind == .task ? job.info.identity : 0
            if job.info.rawKind == 193 {
                state.footprint.actor = job.info.identity
            }
            if state.recordThreads {
                state.threads.insert(se_explorer_thread_id())
            }
            if state.withoutTaskExecutor {
                _ = se_explorer_run_job_without_task_executor(job.pointer)
            } else {
                unsafeBitCast(job.pointer, to: UnownedJob.self).runSynchronously(on: executor)
            }
            report.steps += 1
            chooser.stepFinished(job.info, runnable: runnable, footprint: state.footprint)
        }
        state.queue.removeAll()
        // Waiters of a run that ended otherwise (a deadlock is reported before them; a step limit, broken capture)
        // are dropped with the run's other jobs.
        state.idleWaiters.removeAll()
        state.strays = 0
        state.active = false
        state.foreignAtLastRun = se_explorer_foreign_enqueues() + se_explorer_foreign_locks()
        return report
    }
}

/// The program's result, set by its task.
final class ProgramResult: Sendable {
    /// nil while running; then nil (passed) or the error's description.
    let storage = Mutex<String??>(nil)

    /// Records the program's end.
    func finish(_ error: String?) {
        storage.withLock { $0 = .some(error) }
    }

    /// nil while running; then nil (passed) or the error's description.
    var value: String?? {
        storage.withLock { $0 }
    }
}
