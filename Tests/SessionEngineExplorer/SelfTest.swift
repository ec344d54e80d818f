import CSessionEngineExplorer
import Synchronization

/// What ``Explorer/selfTest()`` proved and measured.
package struct SelfTestReport: Sendable, CustomStringConvertible {
    /// One line per check, each saying what it proved.
    package var checks: [String] = []
    /// Steps and choice points of one FIFO run of the racy toy.
    package var toySteps = 0
    /// Choice points of one FIFO run of the racy toy.
    package var toyChoicePoints = 0
    /// Random schedules of the toy per second, on this machine and build.
    package var schedulesPerSecond = 0.0

    /// The checks and numbers, one per line.
    package var description: String {
        var lines = checks.map { "ok: \($0)" }
        lines.append(
            "toy: \(toySteps) steps, \(toyChoicePoints) choice points a run; \(Int(schedulesPerSecond)) schedules/s")
        return lines.joined(separator: "\n")
    }
}

extension Explorer {
    /// Proves the runtime details the explorer relies on, and that it finds a race each strategy should find.
    ///
    /// Checks, each failing with what changed and where to look: total capture (every step of a program with actors,
    /// a task group, `Task.yield` and an unstructured task ran on the explorer's thread, the program saw that thread
    /// at each of its own steps, no job was enqueued or lock taken on another thread, and the runtime's original
    /// executor was never called); a foreign enqueue, a `Task.sleep` and a main-actor job each break capture; the job
    /// kind layout (the program's first job reads kind 0, an actor's processing job 192 or above, a task keeps its
    /// identity across suspensions); inline hops are choice points (a hop onto an idle actor and back is three jobs
    /// with the explorer's task executor and one without); package locks report to the explorer (when
    /// `lockProbe` is given); the racy toy passes under FIFO and fails under random, PCT and the exhaustive search,
    /// and its failing schedule replays and shrinks; the correct toy passes the exhaustive search, which reaches the
    /// same final states with and without reduction.
    ///
    /// - Parameter lockProbe: Takes one package lock (SessionEngine's `SanitizedMutex`), which this target cannot
    ///   import; nil skips the lock check.
    /// - Returns: What was proved and measured.
    /// - Throws: ``ExplorerError`` naming the check that failed.
    package static func selfTest(lockProbe: (@Sendable () -> Void)? = nil) throws(ExplorerError) -> SelfTestReport {
        try install()
        var report = SelfTestReport()
        try checkOutcomes(&report)
        try checkCapture(&report)
        try checkEscapes(&report)
        try checkInlineHops(&report)
        if let lockProbe {
            try checkLocks(lockProbe, &report)
        }
        try checkToy(&report)
        return report
    }

    /// Records every step's job.
    struct RecordingChooser: ScheduleChooser {
        /// The jobs run, with their footprints.
        var steps: [(JobInfo, Footprint)] = []
        /// The strategy underneath.
        var base: RandomChooser

        /// Chooses with `base`.
        mutating func choose(among runnable: [JobInfo]) -> Int {
            base.choose(among: runnable)
        }

        /// Records the step.
        mutating func stepFinished(_ job: JobInfo, runnable: Int, footprint: Footprint) {
            steps.append((job, footprint))
        }
    }

    /// Thread identities seen by a program.
    final class ThreadLog: Sendable {
        /// The identities.
        let threads = Mutex<Set<UInt64>>([])

        /// Records the calling thread.
        func note() {
            let thread = se_explorer_thread_id()
            threads.withLock { _ = $0.insert(thread) }
        }
    }

    /// Total capture and the job kind layout.
    static func checkCapture(_ report: inout SelfTestReport) throws(ExplorerError) {
        let log = ThreadLog()
        let foreignBefore = se_explorer_foreign_enqueues() + se_explorer_foreign_locks()
        let originalBefore = se_explorer_original_calls()
        state.recordThreads = true
        state.threads = []
        state.kindsSeen = []
        var chooser = RecordingChooser(base: RandomChooser(seed: 1))
        let run = Explorer.run(&chooser) {
            log.note()
            let account = Toy.Account()
            let other = Toy.Other()
            await withTaskGroup(of: Void.self) { group in
                for _ in 0..<3 {
                    group.addTask {
                        log.note()
                        await account.withdraw(via: other, racy: false)
                        log.note()
                        await Task.yield()
                        log.note()
                    }
                }
            }
            log.note()
            await Task.detached { log.note() }.value
            async let child: Void = other.ping()
            await child
            log.note()
        }
        state.recordThreads = false
        let explorerThread = se_explorer_thread_id()
        guard run.outcome == .passed else {
            throw ExplorerError("capture self-test: the program ended \(run.outcome), expected passed")
        }
        let programThreads = log.threads.withLock { $0 }
        guard programThreads == [explorerThread], state.threads == [explorerThread] else {
            throw ExplorerError(
                "capture self-test: a job ran on a thread other than the explorer's (the program saw "
                    + "\(programThreads.count) threads); the enqueue hooks no longer see every job "
                    + "(stdlib/public/Concurrency/GlobalExecutor.cpp, ExecutorImpl.swift)")
        }
        let foreign = se_explorer_foreign_enqueues() + se_explorer_foreign_locks() - foreignBefore
        let original = se_explorer_original_calls() - originalBefore
        guard foreign == 0, original == 0 else {
            throw ExplorerError(
                "capture self-test: \(foreign) foreign enqueues or locks, \(original) calls of the runtime's own "
                    + "executor")
        }
        report.checks.append(
            "total capture: \(run.steps) jobs (task group, actors, Task.yield, Task.detached, async let) all ran on "
                + "the explorer's thread, which the program saw at each of its steps; 0 foreign enqueues, 0 calls "
                + "of the runtime's own executor")
        // The job kind layout.
        guard let first = chooser.steps.first, first.0.rawKind == 0, first.0.ordinal == 0 else {
            throw ExplorerError(
                "job kind self-test: the program's first job (an AsyncTask) does not read kind 0 at byte 32 of the "
                    + "job; the Job header changed (include/swift/ABI/Task.h: HeapObject, SchedulerPrivate[2], "
                    + "JobFlags; include/swift/ABI/MetadataValues.h: JobKind)")
        }
        let unexpected = state.kindsSeen.filter { $0 != 0 && !(192...196).contains($0) }
        guard unexpected.isEmpty, state.kindsSeen.contains(where: { $0 >= 192 }) else {
            throw ExplorerError(
                "job kind self-test: kinds \(state.kindsSeen.sorted()) seen; expected 0 (tasks) and 192...196 "
                    + "(actor processing and runtime jobs); see include/swift/ABI/MetadataValues.h JobKind")
        }
        let rootSteps = chooser.steps.filter { $0.0.identity == first.0.identity && $0.0.kind == .task }.count
        guard rootSteps >= 3 else {
            throw ExplorerError(
                "job kind self-test: the program's task ran \(rootSteps) jobs under its identity, expected one per "
                    + "suspension; an AsyncTask is no longer its own job")
        }
        let outOfLine = chooser.steps.filter { $0.0.rawKind == 193 && !$0.1.executors.isEmpty }
        guard !outOfLine.isEmpty, outOfLine.allSatisfy({ $0.1.executors.contains($0.0.identity) }) else {
            throw ExplorerError(
                "job kind self-test: an actor's out-of-line processing job (kind 193) does not hold its actor at "
                    + "byte 64 (the actor seen while it ran differs), or none ran; ProcessOutOfLineJob in "
                    + "stdlib/public/Concurrency/Actor.cpp changed")
        }
        report.checks.append(
            "job layout: the program's first job reads kind 0, actor jobs \(state.kindsSeen.filter { $0 >= 192 }.sorted()), "
                + "the program's task kept its identity across \(rootSteps) jobs, and "
                + "\(outOfLine.count) out-of-line actor jobs named the actor they ran on")
    }

    /// Foreign enqueues, real time and the main actor break capture.
    static func checkEscapes(_ report: inout SelfTestReport) throws(ExplorerError) {
        let foreign = Explorer.run(.fifo) {
            se_explorer_run_on_other_thread {
                Task.detached {}
            }
        }
        guard case .captureBroken = foreign.outcome else {
            throw ExplorerError("escape self-test: a job enqueued on another thread ended \(foreign.outcome)")
        }
        let sleep = Explorer.run(.fifo) { try await Task.sleep(nanoseconds: 1_000) }
        guard case .captureBroken(let sleepReason) = sleep.outcome, sleepReason.contains("real time") else {
            throw ExplorerError(
                "escape self-test: Task.sleep ended \(sleep.outcome), expected capture broken (real time); the "
                    + "runtime no longer asks the current task executor's SchedulingExecutor side "
                    + "(stdlib/public/Concurrency/TaskSleep.swift, Executor.swift currentSchedulingExecutor)")
        }
        // On 6.3.1 the main actor's executor is the Swift DispatchMainExecutor, which enqueues on the dispatch main
        // queue without the main-executor hook; the explorer never drains that queue, so the job stays parked and a
        // program that waits for it deadlocks. Either way the run fails.
        let main = Explorer.run(.fifo, diagnostics: { "waiting for the main actor" }, { await MainActor.run {} })
        let mainSeen: String
        switch main.outcome {
        case .captureBroken(let reason) where reason.contains("main actor"):
            mainSeen = "capture broken (the main-executor hook saw it)"
        case .deadlock:
            mainSeen = "a deadlock (the main executor bypasses the hook; the job stays on the dispatch main queue)"
        default:
            throw ExplorerError(
                "escape self-test: a main-actor hop ended \(main.outcome), expected capture broken or deadlock; "
                    + "the main actor's jobs now run somewhere (stdlib/public/Concurrency/DispatchExecutor.swift)")
        }
        let after = Explorer.run(.fifo) {}
        guard after.outcome == .passed else {
            throw ExplorerError("escape self-test: the run after the escapes ended \(after.outcome)")
        }
        report.checks.append(
            "escapes fail the run: an enqueue from another thread and Task.sleep end in capture broken, "
                + "MainActor.run in \(mainSeen), and the next run starts clean")
    }

    /// Inline hops become choice points.
    static func checkInlineHops(_ report: inout SelfTestReport) throws(ExplorerError) {
        let other = Toy.Other()
        let program: @Sendable () async throws -> Void = { await other.ping() }
        let with = Explorer.run(.fifo, program)
        state.withoutTaskExecutor = true
        let without = Explorer.run(.fifo, program)
        state.withoutTaskExecutor = false
        guard with.outcome == .passed, without.outcome == .passed else {
            throw ExplorerError("inline-hop self-test: runs ended \(with.outcome) and \(without.outcome)")
        }
        guard with.steps == 3 else {
            throw ExplorerError(
                "inline-hop self-test: a hop onto an idle actor and back took \(with.steps) jobs on the explorer's "
                    + "task executor, expected 3 (task, actor, task); swift_task_switchImpl in "
                    + "stdlib/public/Concurrency/Actor.cpp no longer enqueues when a task executor is current")
        }
        report.checks.append(
            "inline hops are choice points: a hop onto an idle actor and back is \(with.steps) jobs with the "
                + "explorer's task executor and \(without.steps) without (the runtime runs it inline)")
    }

    /// A counter shared across runs, for the nondeterminism check.
    static let runCounter = Mutex(0)

    /// Deadlock, step limit, a thrown error, leftover tasks and nondeterminism are reported as such.
    static func checkOutcomes(_ report: inout SelfTestReport) throws(ExplorerError) {
        let other = Toy.Other()
        // A bounded loop far past the limit: a `while true` closure capturing a local actor crashed or hung the
        // task inside the runtime on 6.3.1 (the closure never returns, and its context did not outlive the loop).
        let another = Toy.Other()
        let endless = Explorer.run(
            .fifo, stepLimit: 50,
            {
                // Two actors: hops between calls to one actor may be merged by the optimizer.
                for _ in 0..<1_000_000 {
                    await other.ping()
                    await another.ping()
                }
            })
        guard endless.outcome == .stepLimit, endless.steps == 50 else {
            throw ExplorerError("outcome self-test: an endless program ended \(endless.outcome) after \(endless.steps)")
        }
        let deadlock = Explorer.run(
            .fifo, diagnostics: { "one task parked on a continuation nobody resumes" },
            {
                await withCheckedContinuation { (continuation: CheckedContinuation<Void, Never>) in
                    Toy.parked.withLock { $0.append(continuation) }
                }
            })
        // Never resumed: the task stays parked (the program's leak).
        guard deadlock.outcome == .deadlock("one task parked on a continuation nobody resumes") else {
            throw ExplorerError("outcome self-test: a parked program ended \(deadlock.outcome), expected deadlock")
        }
        let thrown = Explorer.run(.fifo, { throw Toy.Overdrawn(balance: -1) })
        guard thrown.outcome == .failed("overdrawn: balance -1") else {
            throw ExplorerError("outcome self-test: a throwing program ended \(thrown.outcome)")
        }
        let leftover = ThreadLog()
        let quiescent = Explorer.run(.fifo) {
            Task(executorPreference: Explorer.taskExecutor) {
                await other.ping()
                leftover.note()
            }
        }
        guard quiescent.outcome == .passed, !leftover.threads.withLock({ $0.isEmpty }) else {
            throw ExplorerError("outcome self-test: a task left running after the program did not run to its end")
        }
        let varying = Explorer.explore(bound: 1, maxSchedules: 1_000) {
            {
                let odd = Explorer.runCounter.withLock {
                    $0 += 1
                    return $0 % 2 == 1
                }
                async let first: Void = other.ping()
                if odd {
                    async let second: Void = other.ping()
                    await second
                }
                await first
            }
        }
        guard let divergence = varying.nondeterminism, !varying.complete else {
            throw ExplorerError(
                "outcome self-test: a program that behaves differently on every other run was not flagged as "
                    + "nondeterministic by the exhaustive search")
        }
        _ = divergence
        report.checks.append(
            "outcomes: a parked program is a deadlock with the caller's diagnostics, an endless one stops at its step "
                + "limit, a thrown error fails the run, a task left running finishes before run returns, and a "
                + "program that differs between runs stops the exhaustive search as nondeterministic")
    }

    /// Package locks report to the explorer.
    static func checkLocks(_ probe: @escaping @Sendable () -> Void, _ report: inout SelfTestReport)
        throws(ExplorerError)
    {
        guard se_explorer_sees_locks() != 0 else {
            report.checks.append("locks: not seen in a thread-sanitizer build (the sanitizer owns __tsan_acquire)")
            return
        }
        var chooser = RecordingChooser(base: RandomChooser(seed: 0))
        _ = Explorer.run(&chooser) { probe() }
        guard chooser.steps.contains(where: { !$0.1.locks.isEmpty }) else {
            throw ExplorerError(
                "lock self-test: a package lock taken inside the program did not reach the explorer; "
                    + "__tsan_acquire is not this target's (CSessionEngineExplorer/explorer.c), or SanitizedMutex "
                    + "no longer calls it")
        }
        report.checks.append("locks: a package lock taken by the program reached the explorer with its address")
    }

    /// The toy race, under every strategy.
    static func checkToy(_ report: inout SelfTestReport) throws(ExplorerError) {
        let fifo = Explorer.run(.fifo, Toy.program(racy: true))
        guard fifo.outcome == .passed else {
            throw ExplorerError("toy self-test: the racy toy fails under FIFO (\(fifo.outcome)); it should not")
        }
        report.toySteps = fifo.steps
        report.toyChoicePoints = fifo.choicePoints
        // Random.
        let clock = ContinuousClock()
        var found: RunReport?
        var runsToFind = 0
        let started = clock.now
        var runs = 0
        while runs < 2_000 {
            let run = Explorer.run(.random(seed: UInt64(runs)), Toy.program(racy: true))
            runs += 1
            if found == nil && !run.outcome.isPassed {
                found = run
                runsToFind = runs
            }
        }
        let elapsed = clock.now - started
        let seconds = Double(elapsed.components.seconds) + Double(elapsed.components.attoseconds) / 1e18
        report.schedulesPerSecond = Double(runs) / max(seconds, 1e-9)
        guard let found, case .failed(let message) = found.outcome, message.contains("overdrawn") else {
            throw ExplorerError("toy self-test: 2,000 random runs never overdrew the racy toy")
        }
        // Replay and shrink.
        let replayed = Explorer.run(.replay(found.schedule), Toy.program(racy: true))
        guard replayed.outcome == found.outcome, replayed.schedule == found.schedule,
            Schedule(found.schedule.description) == found.schedule
        else {
            throw ExplorerError(
                "toy self-test: replaying \(found.schedule) ended \(replayed.outcome), not \(found.outcome)")
        }
        let shrunk = Schedule.shrink(found.schedule) {
            !Explorer.run(.replay($0), Toy.program(racy: true)).outcome.isPassed
        }
        report.checks.append(
            "random finds the toy race in \(runsToFind) runs; its schedule \(found.schedule) replays "
                + "exactly and shrinks to \(shrunk) (\(shrunk.deviations) deviations, from "
                + "\(found.schedule.deviations))")
        // PCT.
        var pctFound = 0
        for seed in 0..<2_000 where pctFound == 0 {
            let run = Explorer.run(
                .pct(depth: 2, seed: UInt64(seed)), expectedChoicePoints: fifo.choicePoints, Toy.program(racy: true))
            if !run.outcome.isPassed {
                pctFound = seed + 1
            }
        }
        guard pctFound > 0 else {
            throw ExplorerError("toy self-test: 2,000 PCT (depth 2) runs never overdrew the racy toy")
        }
        report.checks.append("PCT (depth 2, k = \(fifo.choicePoints)) finds the toy race in \(pctFound) runs")
        // Exhaustive.
        let racy = Explorer.explore(bound: 2, maxSchedules: 100_000) { Toy.program(racy: true) }
        guard racy.complete, racy.failureCount > 0 else {
            throw ExplorerError(
                "toy self-test: the exhaustive search (bound 2) of the racy toy found \(racy.failureCount) "
                    + "failures in \(racy.schedules) schedules (complete: \(racy.complete))")
        }
        let correct = Explorer.explore(bound: 3, maxSchedules: 100_000) { Toy.program(racy: false) }
        guard correct.complete, correct.failureCount == 0 else {
            throw ExplorerError(
                "toy self-test: the exhaustive search flagged the correct toy: \(correct.failures.first?.outcome.description ?? "incomplete")"
            )
        }
        // Soundness of the reduction: the same final states with and without it.
        let reduced = Explorer.explore(bound: 3, maxSchedules: 100_000) {
            Toy.program(racy: true, reportFinalState: true)
        }
        let full = Explorer.explore(bound: 3, maxSchedules: 100_000, reduction: false) {
            Toy.program(racy: true, reportFinalState: true)
        }
        guard reduced.complete, full.complete, Set(reduced.outcomes.keys) == Set(full.outcomes.keys) else {
            throw ExplorerError(
                "toy self-test: with reduction the search reached \(reduced.outcomes.count) final states in "
                    + "\(reduced.schedules) schedules, without it \(full.outcomes.count) in \(full.schedules); "
                    + "the dependence relation (Footprint.isIndependent) is unsound")
        }
        // A busier program: three tasks each visiting two actors that record the order of visits.
        let busyReduced = Explorer.explore(bound: 3, maxSchedules: 200_000) { Toy.interleavings() }
        let busyFull = Explorer.explore(bound: 3, maxSchedules: 200_000, reduction: false) { Toy.interleavings() }
        guard busyReduced.complete, busyFull.complete,
            Set(busyReduced.outcomes.keys) == Set(busyFull.outcomes.keys)
        else {
            throw ExplorerError(
                "reduction self-test: with reduction the search reached \(busyReduced.outcomes.count) final states "
                    + "in \(busyReduced.schedules) schedules, without it \(busyFull.outcomes.count) in "
                    + "\(busyFull.schedules); the dependence relation (Footprint.isIndependent) is unsound")
        }
        report.checks.append(
            "reduction is sound on three tasks over two actors (bound 3): \(busyReduced.outcomes.count) final "
                + "states in \(busyReduced.schedules) schedules with it (\(busyReduced.pruned) pruned), the same "
                + "\(busyFull.outcomes.count) in \(busyFull.schedules) without")
        // Wakes through runtime state: a group's results, in the order its children finish.
        let groupReduced = Explorer.explore(bound: 3, maxSchedules: 200_000) { Toy.groupOrder() }
        let groupFull = Explorer.explore(bound: 3, maxSchedules: 200_000, reduction: false) { Toy.groupOrder() }
        guard groupReduced.complete, groupFull.complete,
            Set(groupReduced.outcomes.keys) == Set(groupFull.outcomes.keys)
        else {
            throw ExplorerError(
                "reduction self-test: with reduction the search reached \(groupReduced.outcomes.count) result orders "
                    + "of a task group in \(groupReduced.schedules) schedules, without it "
                    + "\(groupFull.outcomes.count) in \(groupFull.schedules); the dependence relation "
                    + "(Footprint.isIndependent) is unsound")
        }
        report.checks.append(
            "reduction is sound on a task group's result order (bound 3): \(groupReduced.outcomes.count) orders in "
                + "\(groupReduced.schedules) schedules with it, the same \(groupFull.outcomes.count) in "
                + "\(groupFull.schedules) without")
        let correctFull = Explorer.explore(bound: 3, maxSchedules: 100_000, reduction: false) {
            Toy.program(racy: false)
        }
        report.checks.append(
            "exhaustive (bound 2) finds the toy race: \(racy.failureCount) failing of \(racy.schedules) schedules "
                + "(\(racy.pruned) pruned); the correct toy passes all \(correct.schedules) schedules within bound 3 "
                + "(\(correctFull.schedules) without reduction)")
        report.checks.append(
            "reduction is sound on the toy: \(reduced.outcomes.count) final states in \(reduced.schedules) "
                + "schedules with it, the same \(full.outcomes.count) in \(full.schedules) without")
    }
}
