import SessionEngine
import SessionEngineTestKit

/// A long life in virtual time: renewal after renewal, with subscribers and scoped work coming and going, while
/// resident memory must stay flat.
struct SoakBenchmark: Benchmark {
    let name = "soak"
    let summary = "renewal cycles in virtual time with subscriber and scoped-work churn: wall time and memory growth"

    /// Credentials live 15 minutes, as the signer's default.
    private static let lifetime: Int64 = 900

    func run(_ options: Options) async throws -> [Figure] {
        // A million cycles take four to five minutes on two shared cores; the default takes half of that, and
        // `--soak-cycles 1000000` runs the full million.
        let cycles = options.soakCycles ?? (options.quick ? 1_000 : 500_000)
        let warmup = options.quick ? 500 : 20_000
        progress("  soak: \(grouped(cycles)) cycles after \(grouped(warmup)) warm-up cycles")
        let plain = try await soak(cycles: min(cycles, warmup), warmup: warmup, churn: false)
        let churned = try await soak(cycles: cycles, warmup: warmup, churn: true)
        let growth = churned.finalMemory - churned.warmMemory
        let perCycle = churned.wallTime.seconds / Double(cycles)
        var timing = "\(grouped(cycles)) cycles took \(Unit.seconds.format(churned.wallTime.seconds))"
        if cycles != 1_000_000 { timing += "; 1,000,000 would take about \(Unit.seconds.format(perCycle * 1_000_000))" }
        return [
            Figure(
                name,
                Measurement("wall time per renewal cycle, with churn", .seconds, [perCycle]),
                against: Measurement("without churn", .seconds, [plain.wallTime.seconds / Double(plain.cycles)]),
                note: timing
            ),
            Figure(
                name,
                Measurement("resident memory after \(grouped(cycles)) cycles", .bytes, [churned.finalMemory]),
                against: Measurement("after warm-up", .bytes, [churned.warmMemory]),
                goal: Goal(text: "growth < 1 MiB (\(Unit.bytes.format(growth)))", met: growth < 1_048_576),
                note: churned.leftovers
            ),
        ]
    }

    /// What one soak run observed.
    private struct Outcome {
        var cycles: Int
        var wallTime: Duration
        var warmMemory: Double
        var finalMemory: Double
        /// What the engine still held at the end, beyond its timer and the long-lived subscribers.
        var leftovers: String
    }

    /// Runs `warmup` and then `cycles` renewal cycles.
    ///
    /// With churn, every cycle runs a piece of scoped work, every tenth cycle a subscriber comes that reads until
    /// the next renewal and goes, and two subscribers live throughout: one reads every event, one never reads (its
    /// buffer stays at the limit, dropping the oldest).
    private func soak(cycles: Int, warmup: Int, churn: Bool) async throws -> Outcome {
        let clock = ManualClock()
        let fetcher = SigningFetcher(clock: clock, lifetime: Self.lifetime)
        let engine = SessionEngine(fetcher: fetcher, configuration: SessionConfiguration(randomSeed: 7), clock: clock)
        try await engine.signIn("member")
        let driver = RenewalDriver(engine: engine, clock: clock, fetcher: fetcher)

        var longLived: [Task<Void, Never>] = []
        let idle = engine.events(bufferLimit: 64)
        if churn {
            let reader = engine.events()
            longLived.append(Task { for await _ in reader {} })
        }
        var visitor: Task<Void, Never>?
        var start = ContinuousClock.now
        var warmMemory = 0.0
        for cycle in 0..<(warmup + cycles) {
            if cycle == warmup {
                releaseFreeMemory()
                warmMemory = residentMemory()
                start = .now
            }
            await driver.renewOnce()
            guard churn else { continue }
            _ = try await engine.withIdentity { credential in credential.expiresAt }
            if cycle % 10 == 0 {
                await visitor?.value
                let events = engine.events()
                visitor = Task {
                    for await event in events {
                        if case .renewed = event.kind { break }
                    }
                }
            }
        }
        let wallTime = start.duration(to: .now)
        // The last visitor leaves at the next renewal.
        await driver.renewOnce()
        await visitor?.value
        releaseFreeMemory()
        let finalMemory = residentMemory()

        // Every task of the last renewal has ended or sleeps on the clock once the engine is idle.
        await engine.waitUntilIdle()
        let metrics = engine.metrics
        let leftovers =
            "at the end: \(metrics.liveTasks) live tasks, \(metrics.subscribers) subscribers, "
            + "\(metrics.waiters) waiters, \(metrics.scopedWork) scoped work"
        await engine.shutdown()
        for task in longLived { await task.value }
        withExtendedLifetime(idle) {}
        return Outcome(
            cycles: cycles,
            wallTime: wallTime,
            warmMemory: warmMemory,
            finalMemory: finalMemory,
            leftovers: leftovers
        )
    }
}
