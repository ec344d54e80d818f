import Foundation
import SessionEngine
import Synchronization

/// Many engines in one process, as a daemon holding one per tenant: 10,000 identified engines that have nothing to
/// do. What does each cost in memory, and how often does the process wake up, and for how much CPU, while idle?
///
/// The engines run on the system clock with a fetcher that answers at once with credentials of 24 hours, so no
/// renewal falls into the idle window: every wake-up is a look at the wall clock. On the ``SystemClock`` the timers
/// of all engines wait in the process's one deadline queue; the baseline wraps the system clock, which gives each
/// engine a queue of its own, so each engine's timer wakes every 30 s on its own, as before. The window is 31 seconds (1 with
/// `--quick`), so every 30-second slice ends once in a full run.
struct IdleEnginesBenchmark: Benchmark {
    let name = "idle-engines"
    let summary = "10,000 idle identified engines in one process: memory per engine, wake-ups and CPU while idle"

    private static let engines = 10_000

    func run(_ options: Options) async throws -> [Figure] {
        let window: Duration = options.quick ? .seconds(1) : .seconds(31)
        let shared = try await measure(clock: SystemClock(), window: window) { SessionEngine.systemTimerWakeUps }
        let sleeps = SleepCounter()
        let sliced = try await measure(clock: CountingClock(sleeps: sleeps), window: window) {
            sleeps.value.load(ordering: .relaxed)
        }
        let perEngine = shared.wakeUps / Double(Self.engines)
        return [
            Figure(
                name,
                Measurement("memory per idle identified engine (over 10,000)", .bytes, [shared.memory]),
                note: "resident memory rise after signing 10,000 engines in, over 10,000"
            ),
            Figure(
                name,
                Measurement("wall-clock wake-ups per second, 10,000 idle engines", .perSecond, [shared.wakeUps]),
                against: Measurement("a 30 s slice per engine (before)", .perSecond, [sliced.wakeUps]),
                goal: Goal(text: "independent of the engines", met: shared.wakeUps <= 1),
                note: String(format: "%.6f per engine per second: one shared deadline queue", perEngine)
            ),
            Figure(
                name,
                Measurement("CPU while idle, share of one core, 10,000 engines", .ratio, [shared.cpuShare]),
                against: Measurement("a 30 s slice per engine (before)", .ratio, [sliced.cpuShare]),
                note: "over a \(Unit.seconds.format(shared.elapsed)) window; before: "
                    + "\(Unit.seconds.format(sliced.cpuPerWakeUp)) of CPU per wake-up"
            ),
        ]
    }

    /// Signs 10,000 engines in on `clock`, leaves them idle for `window` and shuts them down.
    private func measure(
        clock: some SessionClock,
        window: Duration,
        wakeUps: () -> Int
    ) async throws -> (memory: Double, wakeUps: Double, cpuShare: Double, cpuPerWakeUp: Double, elapsed: Double) {
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
        let memory = (residentMemory() - before) / Double(Self.engines)
        progress("  idle-engines: \(grouped(Self.engines)) signed in on \(type(of: clock)), idle for \(window)")
        let idle = await idleWindow(window, wakeUps: wakeUps)
        for engine in engines { await engine.shutdown() }
        let count = Double(idle.wakeUps)
        return (memory, count / idle.seconds, idle.cpu / idle.seconds, count > 0 ? idle.cpu / count : 0, idle.seconds)
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
