/// A job the scheduler can run next, as a strategy sees it.
package struct JobInfo: Sendable, Hashable {
    /// What the job is.
    package enum Kind: Sendable, Hashable {
        /// An `AsyncTask` resuming (runtime job kind 0).
        case task
        /// A runtime-private job (kind 192 or above): a default actor's processing job, which runs the tasks queued
        /// on that actor.
        case actor
    }

    /// What the job is.
    package var kind: Kind
    /// A stable identity for the task or actor the job belongs to: the `AsyncTask`'s address for a task job (the same
    /// across all its suspensions); for an actor's out-of-line processing job (kind 193, what 6.x enqueues) the
    /// actor's address, read from the job (the word after the 64-byte Job header, `ProcessOutOfLineJob::Actor`); for
    /// other runtime jobs the job's address (an actor's inline processing job lives inside the actor, so it too is
    /// stable while the actor lives).
    package var identity: UInt
    /// The job's position among all enqueues of this run (0 for the program's task); the same job has the same
    /// ordinal in every run that shares the prefix before its enqueue, since runs are deterministic.
    package var ordinal: Int
    /// The runtime's job kind byte (0 for a task; 192 a default actor's inline processing job, 193 its out-of-line
    /// one, 194 a priority override, 195 a nullary continuation, 196 an isolated deinit).
    package var rawKind: Int
}

/// What one job did while it ran: the footprint the exhaustive search's partial-order reduction compares.
package struct Footprint: Sendable, Hashable {
    /// The kind of the job.
    package var kind: JobInfo.Kind
    /// The addresses of the package locks (``SessionEngine``'s `SanitizedMutex`) it acquired.
    package var locks: Set<UInt> = []
    /// The identities of the non-generic executors (actors) it was seen running on: at each lock it took and at each
    /// job it enqueued.
    package var executors: Set<UInt> = []
    /// For an actor's out-of-line processing job, the actor, read from the job before it ran.
    package var actor: UInt?
    /// The actors whose processing jobs it enqueued (it scheduled an idle actor: it wrote that actor's queue).
    package var scheduledActors: Set<UInt> = []
    /// Whether it enqueued a runtime job other than a task (an actor's processing job, a continuation job).
    package var enqueuedRuntimeJob = false
    /// Whether it enqueued a task other than the one running: it created a task, or woke one (resumed a continuation,
    /// completed a child a parent awaited, finished a task another awaited), through runtime state the explorer
    /// cannot see.
    package var wokeTask = false
    /// The number of jobs it enqueued where the explorer sees them.
    package var enqueued = 0

    /// Whether the job enqueued nothing where the explorer sees it: it may have ended by queueing its task on an
    /// actor that already had a processing job scheduled (which the runtime does without reaching a hook), or by
    /// parking on a continuation or another task.
    package var silent: Bool { enqueued == 0 }

    /// The actors the job touched: those it was seen on, the actor of its processing job, and those it scheduled.
    package var actors: Set<UInt> {
        var actors = executors.union(scheduledActors)
        if let actor {
            actors.insert(actor)
        }
        return actors
    }

    /// Whether the job may have changed state the explorer cannot name: it is ``silent``, or an actor's job whose
    /// actor the explorer never saw.
    package var opaque: Bool {
        silent || (kind == .actor && actors.isEmpty)
    }

    /// Whether the job touched some actor's queue where the explorer sees it: it is an actor's job, or it enqueued one.
    package var touchesActorQueue: Bool {
        kind == .actor || enqueuedRuntimeJob
    }

    /// Whether running `self` and `other` in either order from the same state reaches the same state.
    ///
    /// They are dependent when they took a common lock or touched a common actor (ran on it, or scheduled it), or
    /// when one is ``opaque`` and the other is opaque too, ``touchesActorQueue`` or ``wokeTask``: an opaque job may
    /// have queued a task on a busy actor without any hook, or changed the runtime state a wake reads (a task group's
    /// results, a task's awaiters); or when both woke tasks (the same runtime object may decide both). See
    /// ``Explorer`` for why this is sound and where it is an approximation.
    package func isIndependent(of other: Footprint) -> Bool {
        if !locks.isDisjoint(with: other.locks) || !actors.isDisjoint(with: other.actors) {
            return false
        }
        if opaque && (other.opaque || other.touchesActorQueue || other.wokeTask) {
            return false
        }
        if other.opaque && (touchesActorQueue || wokeTask) {
            return false
        }
        // Two wakes may go through the same runtime object (a task group, a task's awaiters), which decides who wakes
        // whom and the order of results.
        if wokeTask && other.wokeTask {
            return false
        }
        return true
    }
}

/// A strategy for one run: picks the next job at every choice point.
package protocol ScheduleChooser {
    /// Picks one of `runnable`, the jobs that can run, in enqueue (FIFO) order; called only when there are two or
    /// more.
    ///
    /// - Parameter runnable: The runnable jobs, first enqueued first.
    /// - Returns: The index of the job to run; out-of-range values are clamped.
    mutating func choose(among runnable: [JobInfo]) -> Int

    /// Told after every step (choice point or not) which job ran and what it did.
    ///
    /// - Parameters:
    ///   - job: The job that ran.
    ///   - runnable: How many jobs were runnable when it was picked.
    ///   - footprint: What it did.
    mutating func stepFinished(_ job: JobInfo, runnable: Int, footprint: Footprint)
}

extension ScheduleChooser {
    /// Ignores the step.
    package mutating func stepFinished(_ job: JobInfo, runnable: Int, footprint: Footprint) {}
}

/// The strategies that need no search state across runs.
package enum Strategy: Sendable, Hashable {
    /// Always the first-enqueued job: what a FIFO executor does.
    case fifo
    /// Uniform among the runnable jobs, from a seeded generator.
    case random(seed: UInt64)
    /// Probabilistic concurrency testing (Burckhardt et al. 2010) for bugs of depth `depth`; see ``PCTChooser``.
    case pct(depth: Int, seed: UInt64)
    /// Replays a schedule; FIFO after its end.
    case replay(Schedule)

    /// A chooser for one run of this strategy.
    ///
    /// - Parameter expectedChoicePoints: The number of choice points a run of the program has (k in PCT's bound; from
    ///   an earlier run); only PCT uses it.
    /// - Returns: A fresh chooser.
    package func chooser(expectedChoicePoints: Int = 100) -> any ScheduleChooser {
        switch self {
        case .fifo: return ReplayChooser(Schedule())
        case .random(let seed): return RandomChooser(seed: seed)
        case .pct(let depth, let seed):
            return PCTChooser(depth: depth, seed: seed, expectedChoicePoints: expectedChoicePoints)
        case .replay(let schedule): return ReplayChooser(schedule)
        }
    }
}

/// A small, fast, seedable generator (SplitMix64), the same sequence on every platform.
package struct SplitMix64: RandomNumberGenerator, Sendable {
    /// The generator's state.
    private var state: UInt64

    /// Creates a generator from a seed.
    ///
    /// - Parameter seed: Any value; equal seeds give equal sequences.
    package init(seed: UInt64) {
        state = seed
    }

    /// The next 64 random bits.
    package mutating func next() -> UInt64 {
        state &+= 0x9E37_79B9_7F4A_7C15
        var z = state
        z = (z ^ (z >> 30)) &* 0xBF58_476D_1CE4_E5B9
        z = (z ^ (z >> 27)) &* 0x94D0_49BB_1331_11EB
        return z ^ (z >> 31)
    }
}

/// Picks uniformly among the runnable jobs.
package struct RandomChooser: ScheduleChooser {
    /// The generator.
    private var generator: SplitMix64

    /// Creates a chooser whose choices follow from `seed`.
    ///
    /// - Parameter seed: The generator's seed.
    package init(seed: UInt64) {
        generator = SplitMix64(seed: seed)
    }

    /// A uniform index into `runnable`.
    package mutating func choose(among runnable: [JobInfo]) -> Int {
        Int.random(in: 0..<runnable.count, using: &generator)
    }
}

/// Replays a schedule: its choice at each choice point, FIFO once it runs out.
package struct ReplayChooser: ScheduleChooser {
    /// The schedule replayed.
    package let schedule: Schedule
    /// The next choice point.
    private var position = 0

    /// Creates a chooser that replays `schedule`.
    ///
    /// - Parameter schedule: The choices to make.
    package init(_ schedule: Schedule) {
        self.schedule = schedule
    }

    /// The schedule's next choice, or 0 after its end; the last runnable job for a choice that names a job that is
    /// not there (the program is not the one the schedule was recorded on, or it is not deterministic).
    package mutating func choose(among runnable: [JobInfo]) -> Int {
        defer { position += 1 }
        guard position < schedule.choices.count else { return 0 }
        return min(schedule.choices[position], runnable.count - 1)
    }
}

/// Probabilistic concurrency testing (Burckhardt, Kothari, Musuvathi, Nagarakatte, ASPLOS 2010).
///
/// Each task or actor identity gets a random priority, all at least `depth`; at every choice point the runnable
/// job with the highest priority runs. At `depth - 1` change points, chosen uniformly among the `k` expected choice
/// points, the job about to run drops to priority `i` (lower than every initial priority) for the i-th change point.
/// For a program with `n` identities and `k` choice points, one run finds a given bug of depth `d` (one that needs `d`
/// ordering constraints between jobs) with probability at least `1 / (n * k^(d-1))`; runs with different seeds are
/// independent, so `r` runs miss it with probability at most `(1 - 1/(n * k^(d-1)))^r`.
package struct PCTChooser: ScheduleChooser {
    /// The generator.
    private var generator: SplitMix64
    /// The priority of each identity seen so far.
    private var priorities: [UInt: UInt64] = [:]
    /// The choice points (0-based) at which the running identity's priority drops, with the priority it drops to.
    private var changePoints: [Int: UInt64] = [:]
    /// The choice points so far.
    private var position = 0
    /// The bug depth the chooser targets.
    package let depth: Int

    /// Creates a chooser for bugs of depth `depth`.
    ///
    /// - Parameters:
    ///   - depth: The bug depth d (1 or more); d - 1 priority change points.
    ///   - seed: The generator's seed.
    ///   - expectedChoicePoints: k, the number of choice points a run has (measure it with a first run).
    package init(depth: Int, seed: UInt64, expectedChoicePoints: Int) {
        self.depth = max(1, depth)
        generator = SplitMix64(seed: seed)
        let k = max(1, expectedChoicePoints)
        for change in 1..<self.depth {
            changePoints[Int.random(in: 0..<k, using: &generator)] = UInt64(change)
        }
    }

    /// The runnable job whose identity has the highest priority, after this choice point's priority change.
    package mutating func choose(among runnable: [JobInfo]) -> Int {
        defer { position += 1 }
        for job in runnable where priorities[job.identity] == nil {
            // Initial priorities are at least `depth`, above every changed one.
            priorities[job.identity] = UInt64(depth) + (generator.next() >> 8)
        }
        var best = highest(runnable)
        if let lowered = changePoints[position] {
            priorities[runnable[best].identity] = lowered
            best = highest(runnable)
        }
        return best
    }

    /// The index of the runnable job with the highest priority (the first enqueued on ties).
    private func highest(_ runnable: [JobInfo]) -> Int {
        var best = 0
        for index in runnable.indices where priorities[runnable[index].identity]! > priorities[runnable[best].identity]!
        {
            best = index
        }
        return best
    }
}
