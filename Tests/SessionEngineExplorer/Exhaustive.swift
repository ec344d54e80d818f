import CSessionEngineExplorer

/// What an exhaustive exploration did.
package struct ExhaustiveReport: Sendable {
    /// A run that did not pass.
    package struct Failure: Sendable {
        /// The schedule that replays it (``Strategy/replay(_:)``).
        package var schedule: Schedule
        /// How it ended.
        package var outcome: RunReport.Outcome
    }

    /// The runs made: one per schedule explored.
    package var schedules = 0
    /// Alternatives the sleep sets skipped, plus runs cut short because every runnable job was asleep (those run on
    /// FIFO to the end and are counted in ``schedules`` too).
    package var pruned = 0
    /// Whether every schedule within the bound was explored (false when cut by `maxSchedules` or nondeterminism).
    package var complete = false
    /// The runs that did not pass (at most the first 20), with their schedules.
    package var failures: [Failure] = []
    /// The runs that did not pass, all of them.
    package var failureCount = 0
    /// How many runs ended in each outcome.
    package var outcomes: [RunReport.Outcome: Int] = [:]
    /// Set when a replayed prefix saw runnable jobs other than those recorded: the program is not deterministic, and
    /// the exploration stopped.
    package var nondeterminism: String?
    /// The most choice points one run had.
    package var maxChoicePoints = 0
    /// The most steps one run had.
    package var maxSteps = 0
}

extension Explorer {
    /// Explores every schedule of a program with at most `bound` deviations from FIFO, depth first and stateless:
    /// every schedule is a fresh run of a fresh program from `makeProgram`.
    ///
    /// With `reduction`, sleep sets (Godefroid 1996) skip orders that differ from an explored one only by swapping
    /// independent adjacent steps (``Footprint/isIndependent(of:)``); a footprint recorded on an earlier branch is
    /// reused on a sibling branch, which is valid because runs are deterministic, and the search checks that: the
    /// runnable jobs at every replayed step must be the recorded ones, or it stops with ``ExhaustiveReport/nondeterminism``.
    ///
    /// - Parameters:
    ///   - bound: The most non-FIFO choices a schedule may make.
    ///   - maxSchedules: The most runs; the report says whether the search completed within it.
    ///   - reduction: Whether to apply sleep-set reduction; off regardless in a thread-sanitizer build, where the
    ///     package locks report to the sanitizer instead.
    ///   - stepLimit: The most jobs one run may take.
    ///   - diagnostics: What is parked; called on deadlock.
    ///   - makeProgram: Makes a fresh program for each run.
    /// - Returns: The counts, the outcomes and the failing schedules.
    package static func explore(
        bound: Int,
        maxSchedules: Int,
        reduction: Bool = true,
        stepLimit: Int = 200_000,
        diagnostics: @escaping @Sendable () -> String = { "" },
        _ makeProgram: () -> @Sendable () async throws -> Void
    ) -> ExhaustiveReport {
        var report = ExhaustiveReport()
        // Under the thread sanitizer the package locks report to the sanitizer, not here: without them in the
        // footprints, the reduction could prune orders that differ through a lock.
        let reduction = reduction && se_explorer_sees_locks() != 0
        var search = SearchChooser(bound: bound, reduction: reduction, prefix: [])
        while true {
            if report.schedules >= maxSchedules {
                return report
            }
            let run = Explorer.run(&search, stepLimit: stepLimit, diagnostics: diagnostics, makeProgram())
            report.schedules += 1
            report.maxChoicePoints = max(report.maxChoicePoints, run.choicePoints)
            report.maxSteps = max(report.maxSteps, run.steps)
            report.outcomes[run.outcome, default: 0] += 1
            if !run.outcome.isPassed {
                report.failureCount += 1
                if report.failures.count < 20 {
                    report.failures.append(.init(schedule: run.schedule, outcome: run.outcome))
                }
            }
            if let divergence = search.divergence {
                report.nondeterminism = divergence
                return report
            }
            if search.blocked {
                report.pruned += 1
            }
            guard let next = search.backtrack(pruned: &report.pruned) else {
                report.complete = true
                return report
            }
            search = SearchChooser(bound: bound, reduction: reduction, prefix: next)
        }
    }
}

/// One step of the current path of the depth-first search.
struct SearchNode {
    /// The runnable jobs' ordinals, in FIFO order.
    var runnable: [Int]
    /// The index chosen on the current path.
    var chosen: Int
    /// The sleep set on entering this step: jobs whose running here is covered by an explored order, with the
    /// footprint each had when it was explored.
    var sleep: [Int: Footprint]
    /// The jobs already run from this step on earlier branches (and the current one once it ran), with footprints.
    var explored: [Int: Footprint] = [:]
    /// The non-FIFO choices on the path before this step.
    var deviationsBefore: Int
}

/// The chooser of one run of the exhaustive search: replays a prefix of nodes, then goes FIFO (skipping jobs in the
/// sleep set), recording a node for every step.
struct SearchChooser: ScheduleChooser {
    /// The most deviations a path may make.
    let bound: Int
    /// Whether sleep sets apply.
    let reduction: Bool
    /// The nodes of the prefix to replay (the last with its new choice).
    let prefix: [SearchNode]
    /// The nodes of this run's path.
    var nodes: [SearchNode] = []
    /// The sleep set for the next step.
    var sleep: [Int: Footprint] = [:]
    /// The non-FIFO choices so far.
    var deviations = 0
    /// Whether the run reached a step where every runnable job was asleep (the rest of the run is redundant).
    var blocked = false
    /// Set when the replayed prefix saw different runnable jobs.
    var divergence: String?
    /// The node being decided (set by `choose`, consumed by `stepFinished`).
    var pending: SearchNode?

    /// Creates the chooser for one run.
    init(bound: Int, reduction: Bool, prefix: [SearchNode]) {
        self.bound = bound
        self.reduction = reduction
        self.prefix = prefix
    }

    /// Decides the step at `nodes.count` with `runnable` jobs.
    mutating func decide(_ runnable: [Int]) -> Int {
        let depth = nodes.count
        if blocked || divergence != nil {
            return 0
        }
        if depth < prefix.count {
            var node = prefix[depth]
            if node.runnable != runnable {
                divergence =
                    "step \(depth): runnable jobs \(runnable) where an earlier run with the same prefix had "
                    + "\(node.runnable); the program is not deterministic given its schedule"
                return 0
            }
            node.sleep = sleep
            pending = node
            return node.chosen
        }
        var choice: Int?
        for index in runnable.indices where sleep[runnable[index]] == nil {
            if index == 0 || deviations < bound {
                choice = index
            }
            break
        }
        guard let choice else {
            blocked = true
            return 0
        }
        pending = SearchNode(runnable: runnable, chosen: choice, sleep: sleep, deviationsBefore: deviations)
        return choice
    }

    /// Picks by the prefix, then FIFO among the awake jobs.
    mutating func choose(among runnable: [JobInfo]) -> Int {
        decide(runnable.map(\.ordinal))
    }

    /// Records the step's node and computes the next sleep set.
    mutating func stepFinished(_ job: JobInfo, runnable: Int, footprint: Footprint) {
        if blocked || divergence != nil {
            return
        }
        if runnable == 1 {
            _ = decide([job.ordinal])
            if blocked || divergence != nil {
                return
            }
        }
        guard var node = pending else { return }
        pending = nil
        if node.chosen != 0 {
            deviations += 1
        }
        node.explored[job.ordinal] = footprint
        if reduction {
            var next: [Int: Footprint] = [:]
            for (ordinal, other) in node.sleep.merging(node.explored, uniquingKeysWith: { old, _ in old })
            where ordinal != job.ordinal && other.isIndependent(of: footprint) {
                next[ordinal] = other
            }
            sleep = next
        }
        nodes.append(node)
    }

    /// The prefix of the next run: the deepest step with an unexplored, awake alternative within the bound, or nil
    /// when the search is done. Counts the alternatives the sleep sets skipped into `pruned`.
    mutating func backtrack(pruned: inout Int) -> [SearchNode]? {
        while var node = nodes.popLast() {
            for index in node.runnable.indices where node.explored[node.runnable[index]] == nil {
                if node.deviationsBefore + (index == 0 ? 0 : 1) > bound {
                    continue
                }
                if reduction && node.sleep[node.runnable[index]] != nil {
                    pruned += 1
                    // Counted once: mark it so that later backtracks to this node do not count it again.
                    node.explored[node.runnable[index]] = node.sleep[node.runnable[index]]
                    continue
                }
                node.chosen = index
                return nodes + [node]
            }
        }
        return nil
    }
}
