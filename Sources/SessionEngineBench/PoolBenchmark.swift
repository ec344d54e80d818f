import Foundation
import SessionEngine
import SessionEngineTestKit
import Synchronization

/// A pool acting for many accounts: what a read for one of them costs against a single engine's read, and how many
/// accounts signing in at once load the backend through the pool's budget (virtual time, real engines).
struct PoolBenchmark: Benchmark {
    let name = "pool"
    let summary = "identityHeaders(for:) on a pool against one engine's read; many sign-ins at once through the budget"

    private static let batchSize = 256
    /// The sign-in run's bucket: a full bucket lets this many start at once, on top of the rate.
    private static let burst = 5

    func run(_ options: Options) async throws -> [Figure] {
        let readers = options.poolAccounts ?? (options.quick ? 2_000 : 100_000)
        let signingIn = options.quick ? 500 : 10_000
        let rate = options.quick ? 100.0 : 500.0
        let window: Duration = options.quick ? .milliseconds(40) : .milliseconds(200)

        progress("  pool: signing \(grouped(readers)) accounts in")
        let clock = SystemClock()
        // Credentials of a day: nothing renews while the pool is measured idle.
        let fetcher = SigningFetcher(clock: clock, lifetime: 86_400)
        // Run first (a filter that selects the pool benchmarks): nothing freed before it is left for the accounts
        // to reuse.
        let measuresMemoryAlone = !options.quick && options.filter?.hasPrefix("pool") == true
        releaseFreeMemory()
        let memoryBefore = residentMemory()
        let pool = SessionPool(
            fetcher: fetcher,
            configuration: SessionPoolConfiguration(
                session: SessionConfiguration(minimumFetchInterval: .zero, randomSeed: 1),
                budget: .init(maximumInFlight: 256, startsPerSecond: 1e9)
            ),
            clock: clock
        )
        let accounts = (0..<readers).map { AccountID("reader-\($0)") }
        try await withThrowingTaskGroup(of: Void.self) { group in
            for chunk in stride(from: 0, to: readers, by: 1000) {
                group.addTask {
                    for account in accounts[chunk..<min(readers, chunk + 1000)] { try await pool.signIn(account) }
                }
            }
            try await group.waitForAll()
        }
        releaseFreeMemory()
        let memoryPerAccount = (residentMemory() - memoryBefore) / Double(readers)
        progress("  pool: resident memory rose \(Int(memoryPerAccount.rounded())) bytes an account")
        let idleWindow: Duration = options.quick ? .seconds(1) : .seconds(31)
        progress("  pool: \(grouped(readers)) idle identified accounts for \(idleWindow)")
        let idle = await measureIdle(pool, for: idleWindow)
        // An account holds its credential, not its headers, until its first read builds them and its row keeps them:
        // every account is read once here, so that the rounds below measure the reads after it, and what the first
        // reads cost and leave behind is measured apart.
        progress("  pool: reading each of \(grouped(readers)) accounts once")
        let firstReadsStart = ContinuousClock.now
        var firstReadsSum = 0
        for account in accounts { firstReadsSum &+= try pool.identityHeaders(for: account).fields.count }
        let firstRead = firstReadsStart.duration(to: .now).seconds / Double(readers)
        consume(firstReadsSum)
        releaseFreeMemory()
        let memoryOnceRead = (residentMemory() - memoryBefore) / Double(readers)
        progress("  pool: resident memory \(Int(memoryOnceRead.rounded())) bytes an account once each was read")
        let engine = SessionEngine(
            fetcher: SigningFetcher(clock: clock),
            configuration: SessionConfiguration(minimumFetchInterval: .zero, randomSeed: 1)
        )
        try await engine.signIn("reader")
        let count = readers
        let step = 7919 % count
        let position = Atomic<Int>(0)
        let readPool: @Sendable () -> Int = {
            var sum = 0
            // A batch starts where the one before it ended, and each read steps 7919 accounts on (fewer in a quick
            // run), so that reads spread over the whole pool, each account read once in a pass of them all: every
            // read finds its account's row and headers out of the cache, as in a pool whose reads spread evenly.
            // (Batches that started one step apart read a window of accounts moving one account a batch, which the
            // cache held.) The step wraps by a subtraction, not a division, which would cost the loop a sixth of
            // the engine's whole read.
            var index = position.add(step &* Self.batchSize, ordering: .relaxed).newValue % count
            for _ in 0..<Self.batchSize {
                index &+= step
                if index >= count { index &-= count }
                sum &+= try! pool.identityHeaders(for: accounts[index]).fields.count
            }
            return sum
        }
        let readEngine: @Sendable () -> Int = {
            var sum = 0
            for _ in 0..<Self.batchSize { sum &+= try! engine.identityHeaders().fields.count }
            return sum
        }
        var series: [String: [Double]] = [:]
        for round in 0..<(options.warmupRounds + options.rounds) {
            progress("  pool read round \(round + 1)")
            var values: [String: Double] = [:]
            for threads in [1, 2] {
                values["engine\(threads)"] =
                    await threadRates(threads: threads, duration: window, batchSize: Self.batchSize, readEngine)
                    .meanRate
                values["pool\(threads)"] =
                    await threadRates(threads: threads, duration: window, batchSize: Self.batchSize, readPool).meanRate
            }
            guard round >= options.warmupRounds else { continue }
            for (key, value) in values { series[key, default: []].append(value) }
        }
        func perRead(_ key: String, _ name: String) -> Measurement {
            Measurement(name, .seconds, series[key]!.map { 1 / $0 })
        }
        for threads in [1, 2] {
            let pool = perRead("pool\(threads)", "").summary.median * 1e9
            let engine = perRead("engine\(threads)", "").summary.median * 1e9
            progress(
                "  pool: reads on \(threads) thread(s), \(String(format: "%.1f", pool)) ns against one engine's "
                    + "\(String(format: "%.1f", engine)) ns: \(String(format: "%.2f", pool / engine))×")
        }
        progress("  pool: shutting \(grouped(readers)) accounts down")
        let shutdownStart = ContinuousClock.now
        await pool.shutdown()
        let shutdownSeconds = shutdownStart.duration(to: .now).seconds
        progress("  pool: shut down in \(String(format: "%.2f", shutdownSeconds)) s")
        await engine.shutdown()
        let atMostTwice = { (ratio: Double) in ratio <= 2 }
        var figures = [
            Figure(
                name,
                Measurement(
                    "memory per idle identified account, \(grouped(readers)) accounts", .bytes,
                    [memoryPerAccount]),
                // Memory that earlier benchmarks freed but the allocator kept absorbs the rise: in a smoke run it
                // holds all of it, so only a run of this benchmark alone is held to the goal.
                goal: measuresMemoryAlone ? Goal(text: "≤ 2 KiB", met: memoryPerAccount <= 2048) : nil,
                note: "resident memory rise after signing the accounts in, over the accounts"
                    + (measuresMemoryAlone
                        ? "; the engine of its own: see idle-engines"
                        : "; not held to the goal in a smoke run or after other benchmarks, whose freed memory the "
                            + "accounts may reuse (run with --filter pool)")
            ),
            Figure(
                name,
                Measurement(
                    "memory per identified account once each was read, \(grouped(readers)) accounts", .bytes,
                    [memoryOnceRead]),
                note: "the same rise once every account's first read has built and kept its headers"
            ),
            Figure(
                name,
                Measurement(
                    "an account's first read of its credential, \(grouped(readers)) accounts, 1 thread", .seconds,
                    [firstRead]),
                note: "each account read once, in turn: the read builds the credential's headers and keeps them in the "
                    + "account's row (once a credential)"
            ),
            Figure(
                name,
                Measurement(
                    "timer wake-ups per second, \(grouped(readers)) idle accounts", .perSecond,
                    [idle.wakeUps]),
                goal: Goal(text: "independent of the accounts", met: idle.wakeUps <= 1),
                note: String(
                    format: "the pool's one timer sleeper: %.0f wake-ups in a %.0f s window; CPU %.3f%% of one core",
                    idle.wakeUps * idle.seconds, idle.seconds, idle.cpuShare * 100)
            ),
            Figure(
                name,
                Measurement("shutdown() of \(grouped(readers)) identified accounts", .seconds, [shutdownSeconds]),
                goal: Goal(
                    text: "≤ 20 µs an account", met: shutdownSeconds <= 20e-6 * Double(readers)),
                note: "every account's shutdown begun, then each waited for, a few dozen at a time"
            ),
            Figure(
                name, perRead("pool1", "identityHeaders(for:), \(grouped(readers)) accounts, 1 thread"),
                against: perRead("engine1", "one engine's identityHeaders(), 1 thread"), paired: true
            ).goal("≤ 2×", atMostTwice),
            Figure(
                name, perRead("pool2", "identityHeaders(for:), \(grouped(readers)) accounts, 2 threads"),
                against: perRead("engine2", "one engine's identityHeaders(), 2 threads"), paired: true
            ).goal("≤ 2×", atMostTwice),
        ]

        progress("  pool: \(grouped(signingIn)) sign-ins at once, budget \(Int(rate))/s (virtual time)")
        var peaks: [Double] = []
        var durations: [Double] = []
        for round in 0..<(options.quick ? 1 : 3) {
            progress("  pool sign-in round \(round + 1)")
            let (peak, took) = try await signInAtOnce(accounts: signingIn, rate: rate)
            peaks.append(peak)
            durations.append(took)
        }
        let ideal = Double(signingIn) / rate
        figures.append(
            Figure(
                name, Measurement("backend peak fetch starts per virtual second", .perSecond, peaks),
                against: Measurement(
                    "the budget: starts per second plus the bucket's \(Self.burst)", .perSecond,
                    peaks.map { _ in rate + Double(Self.burst) })
            ).goal("≤ 1.0×") { $0 <= 1.0 })
        figures.append(
            Figure(
                name,
                Measurement("\(grouped(signingIn)) accounts all identified after (virtual)", .seconds, durations),
                against: Measurement("accounts / starts per second", .seconds, durations.map { _ in ideal }),
                note: "200 ms backend latency, at most 128 in flight"
            ).goal("≤ 1.1×") { $0 <= 1.1 })
        return figures
    }

    /// Leaves `pool` idle for `window` and returns its timer wake-ups per second, the process's CPU time as a share
    /// of one core, and the window's length in seconds.
    private func measureIdle(_ pool: SessionPool, for window: Duration) async -> (
        wakeUps: Double, cpuShare: Double, seconds: Double
    ) {
        let idle = await idleWindow(window) { pool.timerWakeUps }
        return (Double(idle.wakeUps) / idle.seconds, idle.cpu / idle.seconds, idle.seconds)
    }

    /// Signs `accounts` in at once on a manual clock through a budget of `rate` starts per second, with a backend that
    /// answers after 200 ms; returns the peak starts in any virtual second and the virtual time until all are
    /// identified.
    private func signInAtOnce(accounts count: Int, rate: Double) async throws -> (peak: Double, seconds: Double) {
        let clock = ManualClock()
        let fetcher = SlowFetcher(clock: clock, latency: .milliseconds(200))
        let pool = SessionPool(
            fetcher: fetcher,
            configuration: SessionPoolConfiguration(
                session: SessionConfiguration(randomSeed: 3),
                budget: .init(maximumInFlight: 128, startsPerSecond: rate, burst: Self.burst)
            ),
            clock: clock
        )
        let accounts = (0..<count).map { AccountID("member-\($0)") }
        let tasks = await pool.startCalls(count) { pool, index in try await pool.signIn(accounts[index]) }
        let start = clock.uptime
        let step = Duration.milliseconds(10)
        var identified = 0
        while identified < count {
            clock.advance(by: step)
            await pool.waitUntilIdle()
            identified = accounts.lazy.filter { pool.state(of: $0).isIdentified }.count
            if clock.uptime - start > .seconds(Double(count) / rate * 10) { break }
        }
        let took = (clock.uptime - start).seconds
        for task in tasks { try await task.value }
        await pool.shutdown()
        return (Double(peakInAnySecond(fetcher.startTimes)), took)
    }
}

/// A backend that answers each fetch after a latency on the pool's manual clock, recording when each began.
private final class SlowFetcher: CredentialFetcher {
    private let clock: ManualClock
    private let latency: Duration
    private let signing: SigningFetcher
    private let starts = SanitizedMutex<[Duration]>([])

    init(clock: ManualClock, latency: Duration) {
        self.clock = clock
        self.latency = latency
        self.signing = SigningFetcher(clock: clock)
    }

    var startTimes: [Duration] { starts.withLock { $0 } }

    func fetchCredential(for account: AccountID) async throws -> IdentityCredential {
        starts.withLock { $0.append(clock.uptime) }
        try await clock.sleep(for: latency)
        return try await signing.fetchCredential(for: account)
    }
}
