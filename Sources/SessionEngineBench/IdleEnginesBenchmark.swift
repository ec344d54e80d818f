import Foundation
import SessionEngine
import Synchronization

/// Many engines in one process, as a daemon holding one per tenant: 10,000 identified engines that have nothing to
/// do. What does each cost in memory, and how often does the process wake up, and for how much CPU, while idle?
///
/// The engines run on the system clock (wrapped to count the timer's sleeps) with a fetcher that answers at once
/// with credentials of 24 hours, so no renewal falls into the idle window: every wake-up is a 30-second wall-clock
/// slice of an engine's timer. The window is 31 seconds (3 with `--quick`), so in a full run every engine's timer
/// wakes about once.
struct IdleEnginesBenchmark: Benchmark {
    let name = "idle-engines"
    let summary = "10,000 idle identified engines in one process: memory per engine, wake-ups and CPU while idle"

    private static let engines = 10_000

    func run(_ options: Options) async throws -> [Figure] {
        let window: Duration = options.quick ? .seconds(3) : .seconds(31)
        let sleeps = SleepCounter()
        let clock = CountingClock(sleeps: sleeps)
        let fetcher = SigningFetcher(clock: SystemClock(), lifetime: 86_400)
        releaseFreeMemory()
        let before = residentMemory()
        var engines: [SessionEngine] = []
        engines.reserveCapacity(Self.engines)
        for index in 0..<Self.engines {
            let engine = SessionEngine(
                fetcher: fetcher,
                configuration: SessionConfiguration(randomSeed: UInt64(index)),
                clock: clock
            )
            try await engine.signIn(AccountID("tenant-\(index)"))
            engines.append(engine)
        }
        releaseFreeMemory()
        let perEngine = (residentMemory() - before) / Double(Self.engines)
        progress("  idle-engines: \(grouped(Self.engines)) signed in, idle for \(window)")

        let startSleeps = sleeps.value.load(ordering: .relaxed)
        let startCPU = processCPUTime()
        let start = ContinuousClock.now
        try await Task.sleep(for: window)
        let elapsed = start.duration(to: .now).seconds
        let cpu = processCPUTime() - startCPU
        let wakeUps = Double(sleeps.value.load(ordering: .relaxed) - startSleeps) / elapsed
        for engine in engines { await engine.shutdown() }

        let perEngineRate = wakeUps / Double(Self.engines)
        return [
            Figure(
                name,
                Measurement("memory per idle identified engine (over 10,000)", .bytes, [perEngine]),
                note: "resident memory rise after signing 10,000 engines in, over 10,000"
            ),
            Figure(
                name,
                Measurement("timer wake-ups per second, 10,000 idle engines", .perSecond, [wakeUps]),
                note: String(
                    format: "%.4f per engine per second: one 30 s wall-clock slice each; grows with the engines",
                    perEngineRate
                )
            ),
            Figure(
                name,
                Measurement("CPU while idle, share of one core, 10,000 engines", .ratio, [cpu / elapsed]),
                note: "\(Unit.seconds.format(wakeUps > 0 ? cpu / (wakeUps * elapsed) : 0)) of CPU per wake-up, over "
                    + "a \(Unit.seconds.format(elapsed)) window"
            ),
        ]
    }
}

/// The system clock, counting the sleeps of the engines' timers.
private struct CountingClock: SessionClock {
    let sleeps: SleepCounter

    var now: Date { Date() }
    var uptime: Duration { SystemClock().uptime }

    func sleep(for duration: Duration) async throws {
        try await SystemClock().sleep(for: duration)
        sleeps.value.add(1, ordering: .relaxed)
    }
}

/// How many timer sleeps have ended.
private final class SleepCounter: Sendable {
    let value = Atomic<Int>(0)
}
