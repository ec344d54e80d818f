import Foundation
import SessionEngineExplorer
import SessionEngineModel

/// A value handed between the explorer's thread and the closures it runs there; everything runs on that one thread.
final class Unchecked<Value>: @unchecked Sendable {
    var value: Value

    init(_ value: Value) {
        self.value = value
    }
}

/// Runs the parts of an exploration, counts what it explored and reports failures with their replay commands.
final class Runner {
    static let command = "swift run -c release SessionEngineSchedules"
    /// A bound on the jobs of one run: far above what a program needs (a generated program takes a few thousand).
    static let stepLimit = 400_000
    /// How many candidate programs shrinking a failing one may run.
    static let shrinkBudget = 150

    let options: Options
    let start = ContinuousClock.now
    let deadline: ContinuousClock.Instant
    var schedules = 0
    var programs = 0
    var failures = 0

    init(options: Options) {
        self.options = options
        deadline = start + .milliseconds(Int(options.budget * 1000))
    }

    var elapsed: Double { seconds(ContinuousClock.now - start) }

    var timeLeft: Bool { ContinuousClock.now < deadline }

    func seconds(_ duration: Duration) -> Double {
        Double(duration.components.seconds) + Double(duration.components.attoseconds) / 1e18
    }

    func say(_ line: String) {
        guard !options.quiet else { return }
        print(line)
        fflush(nil)
    }

    func report(_ line: String) {
        print(line)
        fflush(nil)
    }

    /// The closing line.
    var summary: String {
        "schedules: \(schedules) explored, \(programs) programs, \(failures) failures, seed \(options.seed)"
    }

    // MARK: Named programs

    /// A race or regression program by name.
    struct Named {
        let name: String
        let summary: String
        let bound: Int
        let make: () -> @Sendable () async throws -> Void
    }

    /// The regression programs first, each a few seconds at most, so that a short budget on a slow machine still
    /// reaches every bug found before; then each race twice: with its calls' hops off the engine's actor queued as
    /// steps, then (`NAME/inline`) with the calls running on inline as they leave the actor, so that the rest of the
    /// actor's queue is a step of its own that the call's next steps can precede. A one-thread explorer sees the
    /// second order only so: a default actor drains its whole queue in one processing job.
    static var named: [Named] {
        RegressionPrograms.all.map { entry in
            Named(
                name: entry.name,
                summary: "regression: \(entry.operations.map(\.description).joined(separator: ", "))",
                bound: RegressionPrograms.bound,
                make: { EnginePrograms.program(entry.operations, seed: entry.seed) }
            )
        }
            + (Races.all + PoolRaces.all).flatMap { race in
                [
                    Named(name: race.name, summary: race.summary, bound: race.bound, make: race.make),
                    Named(
                        name: "\(race.name)/inline",
                        summary: "\(race.summary); the calls run on inline as they leave the engine's actor",
                        bound: race.bound,
                        make: {
                            let run = race.make()
                            return { try await RaceRig.$callsFollowTheirThread.withValue(true) { try await run() } }
                        }
                    ),
                ]
            }
    }

    /// Explores a named program exhaustively within its bound, with the explorer's reduction; returns whether it
    /// passed.
    @discardableResult
    func explore(_ program: Named, maxSchedules: Int = 100_000) -> Bool {
        let began = ContinuousClock.now
        let bound = options.bound ?? program.bound
        let result = Explorer.explore(
            bound: bound,
            maxSchedules: maxSchedules,
            reduction: true,
            stepLimit: Self.stepLimit,
            diagnostics: Diagnostics.describe,
            program.make
        )
        let took = seconds(ContinuousClock.now - began)
        schedules += result.schedules
        programs += 1
        let rate = took > 0 ? Int(Double(result.schedules) / took) : 0
        let completeness =
            if let nondeterminism = result.nondeterminism {
                "STOPPED (nondeterministic: \(nondeterminism))"
            } else if result.complete {
                "complete"
            } else {
                "INCOMPLETE (\(maxSchedules) schedules)"
            }
        say(
            "exhaustive \(program.name): \(result.schedules) schedules, bound \(bound), \(completeness), "
                + "\(result.pruned) pruned, \(String(format: "%.1f", took)) s (\(rate)/s), up to \(result.maxSteps) "
                + "jobs and \(result.maxChoicePoints) choice points a run; \(result.outcomeSummary)"
        )
        if let nondeterminism = result.nondeterminism {
            // A failure of the program, not of a schedule: reported in a quiet run too.
            failures += 1
            report("FAILED \(program.name): the program differs between runs of one schedule (\(nondeterminism))")
        }
        guard let failure = result.failures.first else {
            return result.nondeterminism == nil && sample(program)
        }
        failures += result.failureCount
        report(
            "FAILED \(program.name) (\(result.failureCount) of \(result.schedules) schedules): \(failure.outcome)"
        )
        return reportFailure(of: program, schedule: failure.schedule)
    }

    /// Random and PCT schedules per named program, after its exhaustive search: the search covers every order within
    /// its delay bound, these reach orders that need many more deviations (a whole account change landing inside a
    /// caller's window between two of its steps), which PCT finds by starving one task.
    static let sampledPerNamedProgram = 300

    /// Runs a named program under random and PCT schedules; returns whether every run passed.
    private func sample(_ program: Named) -> Bool {
        let began = ContinuousClock.now
        // Each program's schedules follow from the run's seed and the program's name (FNV-1a), so one replays alone.
        var random = SplitMix64(
            seed: program.name.utf8.reduce(options.seed ^ 0xCBF2_9CE4_8422_2325) {
                ($0 ^ UInt64($1)) &* 0x100_0000_01B3
            }
        )
        let fifo = Explorer.run(.fifo, stepLimit: Self.stepLimit, diagnostics: Diagnostics.describe, program.make())
        let expected = max(1, fifo.choicePoints)
        var runs = 1
        schedules += 1
        var failure: RunReport?
        for index in 0..<(2 * Self.sampledPerNamedProgram) where failure == nil && fifo.outcome.isPassed {
            let strategy: Strategy =
                index % 2 == 0 ? .random(seed: random.next()) : .pct(depth: Self.pctDepth, seed: random.next())
            let run = Explorer.run(
                strategy, expectedChoicePoints: expected, stepLimit: Self.stepLimit,
                diagnostics: Diagnostics.describe, program.make()
            )
            runs += 1
            schedules += 1
            if !run.outcome.isPassed { failure = run }
        }
        if !fifo.outcome.isPassed { failure = fifo }
        let took = seconds(ContinuousClock.now - began)
        say(
            "sampled \(program.name): \(runs) schedules (FIFO, then random and PCT depth \(Self.pctDepth) in turn), "
                + "\(String(format: "%.1f", took)) s; \(failure == nil ? "passed" : "FAILED")"
        )
        guard let failure else { return true }
        failures += 1
        report("FAILED \(program.name) under a sampled schedule: \(failure.outcome)")
        return reportFailure(of: program, schedule: failure.schedule)
    }

    /// Prints a failing named program's replay command, shrinks its schedule and prints that too; returns false.
    private func reportFailure(of program: Named, schedule: Schedule) -> Bool {
        report("  replay: \(Self.command) --replay \(program.name):\(schedule)")
        let shrunk = Schedule.shrink(schedule) { candidate in
            !Explorer.run(.replay(candidate), stepLimit: Self.stepLimit, program.make()).outcome.isPassed
        }
        report("  shrunk schedule (\(shrunk.deviations) of \(schedule.deviations) deviations): \(shrunk)")
        report("  replay: \(Self.command) --replay \(program.name):\(shrunk)")
        return false
    }

    // MARK: Generated programs

    /// Schedules tried per generated program, besides its FIFO run.
    static let randomPerProgram = 3
    static let pctPerProgram = 3
    /// PCT's depth: a bug that needs at most `depth - 1` ordering constraints is found with probability at least
    /// 1 / (n · k^(depth - 1)) per run, n jobs and k choice points.
    static let pctDepth = 3

    /// Of every this many generated programs, one is a pool program; the others are engine programs.
    static let poolEvery = 3

    /// Runs generated programs, each under FIFO, random and PCT schedules, until the budget is spent: engine programs,
    /// and every ``poolEvery``th a pool program, each from its own seed.
    func sample() {
        let began = ContinuousClock.now
        var index = 0
        var pool = 0
        var runs = 0
        var steps = 0
        var choicePoints = 0
        var maxSteps = 0
        var maxChoicePoints = 0
        var failed = false
        while timeLeft && !failed {
            let seed = EnginePrograms.programSeed(run: options.seed, index: index)
            let isPool = index % Self.poolEvery == Self.poolEvery - 1
            index += 1
            programs += 1
            let engineOperations = isPool ? [] : EnginePrograms.operations(seed: seed)
            let poolOperations = isPool ? PoolPrograms.operations(seed: seed) : []
            if isPool { pool += 1 }
            var random = SplitMix64(seed: seed ^ 0x5C4E_D01E)
            var strategies: [Strategy] = [.fifo]
            for _ in 0..<Self.randomPerProgram { strategies.append(.random(seed: random.next())) }
            for _ in 0..<Self.pctPerProgram { strategies.append(.pct(depth: Self.pctDepth, seed: random.next())) }
            var expected = 100
            for strategy in strategies {
                let report = Explorer.run(
                    strategy,
                    expectedChoicePoints: expected,
                    stepLimit: Self.stepLimit, diagnostics: Diagnostics.describe,
                    isPool
                        ? PoolPrograms.program(poolOperations, seed: seed)
                        : EnginePrograms.program(engineOperations, seed: seed)
                )
                schedules += 1
                runs += 1
                steps += report.steps
                choicePoints += report.choicePoints
                maxSteps = max(maxSteps, report.steps)
                maxChoicePoints = max(maxChoicePoints, report.choicePoints)
                if strategy == .fifo { expected = max(1, report.choicePoints) }
                if !report.outcome.isPassed {
                    failures += 1
                    failed = true
                    if isPool {
                        shrinkFailure(
                            "pool program", replay: "pool-\(seed)", seed: seed, operations: poolOperations,
                            report: report, strategy: strategy, program: PoolPrograms.program)
                    } else {
                        shrinkFailure(
                            "program", replay: "\(seed)", seed: seed, operations: engineOperations, report: report,
                            strategy: strategy, program: EnginePrograms.program)
                    }
                    break
                }
            }
        }
        let took = seconds(ContinuousClock.now - began)
        let perRun = runs > 0 ? runs : 1
        say(
            "generated programs: \(index) programs (\(pool) of them pool programs), \(runs) schedules (FIFO, "
                + "\(Self.randomPerProgram) random, \(Self.pctPerProgram) PCT depth \(Self.pctDepth) each), "
                + "\(String(format: "%.1f", took)) s (\(String(format: "%.0f", Double(runs) / max(took, 0.001)))/s); "
                + "per run \(steps / perRun) jobs and \(choicePoints / perRun) choice points on average, up to "
                + "\(maxSteps) and \(maxChoicePoints)"
        )
    }

    /// Reports a failing generated program with its replay command, shrinks the program keeping the schedule, then
    /// the schedule.
    ///
    /// - Parameters:
    ///   - kind: What the program is, for the report.
    ///   - replay: The program's name in a `--replay` argument.
    ///   - program: Makes a run of some operations with the program's seed.
    func shrinkFailure<Operation: Shrinkable & CustomStringConvertible>(
        _ kind: String, replay: String, seed: UInt64, operations: [Operation], report run: RunReport,
        strategy: Strategy, program: ([Operation], UInt64) -> @Sendable () async throws -> Void
    ) {
        let schedule = run.schedule
        report("FAILED \(kind) \(seed) under \(strategy) schedule (\(schedule.deviations) deviations): \(run.outcome)")
        report("  replay: \(Self.command) --replay \(replay):\(schedule)")
        func fails(_ candidate: [Operation], _ schedule: Schedule) -> Bool {
            !Explorer.run(
                .replay(schedule), stepLimit: Self.stepLimit, diagnostics: Diagnostics.describe,
                program(candidate, seed)
            )
            .outcome.isPassed
        }
        let shrunk = Shrinker.shrink(operations, budget: Self.shrinkBudget) { fails($0, schedule) }
        let shrunkSchedule = Schedule.shrink(schedule) { fails(shrunk.operations, $0) }
        let last = Explorer.run(
            .replay(shrunkSchedule),
            stepLimit: Self.stepLimit, diagnostics: Diagnostics.describe,
            program(shrunk.operations, seed)
        )
        let listing = shrunk.operations.map { "    \($0)," }.joined(separator: "\n")
        report(
            """
              shrunk \(kind) (\(shrunk.operations.count) of \(operations.count) operations, \(shrunk.attempts) \
            attempts), seed \(seed), schedule \(shrunkSchedule) (\(shrunkSchedule.deviations) deviations):
              [
            \(listing)
              ]
              its failure: \(last.outcome)
            """
        )
    }

    // MARK: Replay

    /// Replays one program with one schedule and reports what it did; returns whether it passed.
    func replay(_ replay: Options.Replay) throws(UsageError) -> Bool {
        let make: () -> @Sendable () async throws -> Void
        let text: String
        let label: String
        switch replay {
        case .program(let seed, let scheduleText):
            let operations = EnginePrograms.operations(seed: seed)
            make = { EnginePrograms.program(operations, seed: seed) }
            text = scheduleText
            label = "program \(seed): \(operations.map(\.description).joined(separator: ", "))"
        case .poolProgram(let seed, let scheduleText):
            let operations = PoolPrograms.operations(seed: seed)
            make = { PoolPrograms.program(operations, seed: seed) }
            text = scheduleText
            label = "pool program \(seed): \(operations.map(\.description).joined(separator: ", "))"
        case .named(let name, let scheduleText):
            guard let program = Self.named.first(where: { $0.name == name }) else {
                throw UsageError("no race or regression program is called \(name) (see --list)")
            }
            make = program.make
            text = scheduleText
            label = "\(name): \(program.summary)"
        }
        guard let schedule = Schedule(text) else { throw UsageError("bad schedule \(text)") }
        let run = Explorer.run(.replay(schedule), stepLimit: Self.stepLimit, diagnostics: Diagnostics.describe, make())
        schedules += 1
        programs += 1
        report(label)
        report("schedule \(run.schedule): \(run.outcome); \(run.steps) jobs, \(run.choicePoints) choice points")
        if !run.outcome.isPassed { failures += 1 }
        return run.outcome.isPassed
    }
}

extension RegressionPrograms {
    /// The delay bound of the regression programs' exhaustive exploration.
    static let bound = 2
}

/// What the running program has parked, for a deadlock's report: set by the program when it builds its engine.
///
/// Every run happens on the explorer's one thread, so the variable is never touched concurrently.
enum Diagnostics {
    nonisolated(unsafe) static var current: (() -> String)?

    /// The running program's activity, or nothing when it has not built its engine yet.
    static let describe: @Sendable () -> String = { current?() ?? "(the program built no engine)" }
}
