import Foundation
import SessionEngine
import Synchronization

/// The read every identified request makes: `identityHeaders()`, a lock-protected snapshot read without an actor
/// hop, against the cheapest possible lock read and against the actor hop it avoids.
struct HotPathBenchmark: Benchmark {
    let name = "hot-path"
    let summary = "identityHeaders() against a bare Mutex<Int> read and an actor-isolated getter"

    /// Operations per timed batch; the clock is read once per batch.
    private static let batchSize = 256

    func run(_ options: Options) async throws -> [Figure] {
        let window: Duration = options.quick ? .milliseconds(40) : .milliseconds(200)
        let fetcher = SigningFetcher(clock: SystemClock())
        let engine = SessionEngine(
            fetcher: fetcher,
            configuration: SessionConfiguration(minimumFetchInterval: .zero, randomSeed: 1)
        )
        try await engine.signIn("reader")
        let counter = LockedCounter()
        let holder = HeadersHolder(try engine.identityHeaders())
        let lockedHeaders = LockedHeaders(try engine.identityHeaders())

        let readMutex: @Sendable () -> Int = {
            var sum = 0
            for _ in 0..<Self.batchSize { sum &+= counter.value.withLock { $0 } }
            return sum
        }
        let readLockedHeaders: @Sendable () -> Int = {
            var sum = 0
            for _ in 0..<Self.batchSize { sum &+= lockedHeaders.read().fields.count }
            return sum
        }
        let readHeaders: @Sendable () -> Int = {
            var sum = 0
            for _ in 0..<Self.batchSize { sum &+= try! engine.identityHeaders().fields.count }
            return sum
        }
        var series: [String: [Double]] = [:]
        var renewalRates: [Double] = []
        var missedRenewals = 0
        var onCPU: [Double] = []
        for round in 0..<(options.warmupRounds + options.rounds) {
            progress("  hot-path round \(round + 1)")
            var values: [String: Double] = [:]
            // Alternate the subject and its baselines within each round, so drifting load hits all of them.
            func readRate(threads: Int, _ batch: @escaping @Sendable () -> Int) async -> Double {
                let rates = await threadRates(threads: threads, duration: window, batchSize: Self.batchSize, batch)
                if threads == 2 { onCPU.append(rates.onCPU) }
                return rates.meanRate
            }
            values["mutex1"] = await readRate(threads: 1, readMutex)
            values["engine1"] = await readRate(threads: 1, readHeaders)
            values["mutex2"] = await readRate(threads: 2, readMutex)
            values["engine2"] = await readRate(threads: 2, readHeaders)
            values["floor1"] = await readRate(threads: 1, readLockedHeaders)
            let renewing = await readWhileRenewing(engine, window: window, readHeaders)
            values["engine2renewing"] = renewing.rates.meanRate
            onCPU.append(renewing.rates.onCPU)
            values["actorTask"] = await Task.detached { await Self.actorReadRate(holder, window: window) }.value
            values["actorMain"] = await Self.mainActorReadRate(holder, window: window)
            guard round >= options.warmupRounds else { continue }
            for (key, value) in values { series[key, default: []].append(value) }
            renewalRates.append(Double(renewing.renewals) / window.seconds)
            missedRenewals += renewing.missed
        }
        await engine.shutdown()

        func perRead(_ key: String, _ name: String) -> Measurement {
            Measurement(name, .seconds, series[key]!.map { 1 / $0 })
        }
        func rate(_ key: String, _ name: String) -> Measurement {
            Measurement(name, .perSecond, series[key]!)
        }
        let oneThread = perRead("engine1", "identityHeaders(), 1 thread")
        let twoThreads = perRead("engine2", "identityHeaders(), 2 threads")
        let renewing = perRead("engine2renewing", "identityHeaders(), 2 threads, renewing")
        let mutexOne = perRead("mutex1", "Mutex<Int> read, 1 thread")
        let mutexTwo = perRead("mutex2", "Mutex<Int> read, 2 threads")
        // Two readers contend only while both run: on a loaded machine the scheduler interleaves them instead.
        let overlap = String(format: "readers on a CPU %.0f%% of the time", Summary(onCPU).median * 100)
        var renewalNote = "\(Unit.perSecond.format(Summary(renewalRates).median)) renewals meanwhile"
        if missedRenewals > 0 { renewalNote += ", \(missedRenewals) renew() calls missed their outcome" }
        let atMostThreeTimes = { (ratio: Double) in ratio <= 3 }
        return [
            Figure(name, oneThread, against: mutexOne, paired: true).goal("≤ 3×", atMostThreeTimes),
            Figure(name, twoThreads, against: mutexTwo, note: overlap, paired: true).goal("≤ 3×", atMostThreeTimes),
            Figure(name, renewing, against: mutexTwo, note: renewalNote, paired: true).goal("≤ 3×", atMostThreeTimes),
            Figure(
                name,
                rate("engine1", "identityHeaders() reads/s per core, 1 thread"),
                against: rate("mutex1", "Mutex<Int>"),
                goal: Goal(text: "≥ 20 M/s", met: Summary(series["engine1"]!).median >= 20e6),
                paired: true
            ),
            Figure(
                name,
                rate("engine2renewing", "identityHeaders() reads/s per core, 2 threads, renewing"),
                against: rate("mutex2", "Mutex<Int>, 2 threads"),
                goal: Goal(text: "≥ 20 M/s", met: Summary(series["engine2renewing"]!).median >= 20e6),
                paired: true
            ),
            Figure(
                name,
                oneThread,
                against: perRead("floor1", "floor: Mutex<IdentityHeaders> read, no clock, 1 thread"),
                note: "the lock plus the retain and release any returned headers cost: the floor of a locked read",
                paired: true
            ),
            Figure(
                name,
                perRead("floor1", "floor: Mutex<IdentityHeaders> read, no clock, 1 thread"),
                against: mutexOne,
                paired: true
            ),
            Figure(name, oneThread, against: perRead("actorTask", "actor getter from a task"), paired: true),
            Figure(name, oneThread, against: perRead("actorMain", "actor getter from the main actor"), paired: true),
        ]
    }

    /// Reads on two threads while a task renews the credential back to back; returns the threads' read rates, how
    /// many renewals completed meanwhile and how many `renew()` calls missed their outcome.
    private func readWhileRenewing(
        _ engine: SessionEngine,
        window: Duration,
        _ read: @escaping @Sendable () -> Int
    ) async -> (rates: ThreadRates, renewals: Int, missed: Int) {
        let stop = StopFlag()
        let renewer = Task {
            var renewals = 0
            var missed = 0
            while !stop.isSet {
                switch await renew(engine, within: .milliseconds(20)) {
                case .renewed: renewals += 1
                case .timedOut: missed += 1
                case .failed: break
                }
            }
            return (renewals, missed)
        }
        let rates = await threadRates(threads: 2, duration: window, batchSize: Self.batchSize, read)
        stop.set()
        let (renewals, missed) = await renewer.value
        return (rates, renewals, missed)
    }

    /// Reads through an actor hop, for `window`, from the caller's isolation: the main actor, or none for a task
    /// on the global executor.
    ///
    /// - Returns: Reads per second of the process's CPU time: the hops run on more than one thread.
    private static func actorReadRate(
        _ holder: HeadersHolder,
        window: Duration,
        isolation: isolated (any Actor)? = #isolation
    ) async -> Double {
        let start = ContinuousClock.now
        let startCPU = processCPUTime()
        var reads = 0
        var sum = 0
        repeat {
            for _ in 0..<batchSize { sum &+= await holder.current().fields.count }
            reads += batchSize
        } while start.duration(to: .now) < window
        consume(sum)
        return Double(reads) / (processCPUTime() - startCPU)
    }

    /// ``actorReadRate(_:window:isolation:)`` from the main actor.
    @MainActor
    private static func mainActorReadRate(_ holder: HeadersHolder, window: Duration) async -> Double {
        await actorReadRate(holder, window: window)
    }
}

/// A bare `Mutex`-protected integer: the cheapest lock-protected read, the baseline of the hot path. It is the
/// standard library's lock, without the package's sanitizer annotations.
private final class LockedCounter: Sendable {
    let value = Synchronization.Mutex(0)
}

/// The alternative design the hot path avoids: headers behind an actor.
private actor HeadersHolder {
    private var headers: IdentityHeaders

    init(_ headers: IdentityHeaders) {
        self.headers = headers
    }

    func current() -> IdentityHeaders { headers }
}

/// The headers alone behind the standard lock, read without a clock: the floor of any locked read that returns them.
private final class LockedHeaders: Sendable {
    private let headers: Synchronization.Mutex<IdentityHeaders>

    init(_ headers: IdentityHeaders) {
        self.headers = Synchronization.Mutex(headers)
    }

    /// Never inlined, so it is called across a function boundary as the engine's method is.
    @inline(never)
    func read() -> IdentityHeaders { headers.withLock { $0 } }
}

/// A flag one task sets and others poll.
final class StopFlag: Sendable {
    private let value = Atomic<Bool>(false)

    var isSet: Bool { value.load(ordering: .relaxed) }

    func set() { value.store(true, ordering: .relaxed) }
}
