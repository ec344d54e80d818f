import Foundation
import SessionEngine
import SessionEngineBackend
import SessionEngineTestKit
import Synchronization

/// Many callers that need a fresh credential at the moment the old one expires: they must share one fetch, and the
/// credential must reach all of them soon after the fetch returns.
struct CoalescingBenchmark: Benchmark {
    let name = "coalescing"
    let summary = "10,000 concurrent renew() callers at the moment of expiry share one fetch"

    private static let callers = 10_000

    func run(_ options: Options) async throws -> [Figure] {
        var fetches: [Double] = []
        var engineMedian: [Double] = []
        var engineTail: [Double] = []
        var joining: [Double] = []
        var baselineMedian: [Double] = []
        var baselineTail: [Double] = []
        for round in 0..<(options.warmupRounds + options.rounds) {
            progress("  coalescing round \(round + 1)")
            let engine = try await renewAtExpiry(seed: UInt64(round))
            let baseline = await resumeContinuations()
            guard round >= options.warmupRounds else { continue }
            fetches.append(Double(engine.fetches))
            joining.append(engine.joining.seconds)
            engineMedian.append(percentile(engine.latencies, 0.5))
            engineTail.append(percentile(engine.latencies, 0.99))
            baselineMedian.append(percentile(baseline, 0.5))
            baselineTail.append(percentile(baseline, 0.99))
        }
        let count = grouped(Self.callers)
        let exactlyOne = fetches.allSatisfy { $0 == 1 }
        return [
            Figure(
                name,
                Measurement("fetches started for \(count) renew() callers", .count, fetches),
                goal: Goal(text: "= 1 in every round", met: exactlyOne),
                note: "\(count) callers joined in \(Unit.seconds.format(Summary(joining).median))"
            ),
            Figure(
                name,
                Measurement("added latency after the fetch, p50", .seconds, engineMedian),
                against: Measurement("resuming \(count) continuations, p50", .seconds, baselineMedian),
                paired: true
            ).goal("≤ 2×") { $0 <= 2 },
            Figure(
                name,
                Measurement("added latency after the fetch, p99", .seconds, engineTail),
                against: Measurement("resuming \(count) continuations, p99", .seconds, baselineTail),
                paired: true
            ),
        ]
    }

    /// Signs in, lets the credential expire, starts the callers and answers the one fetch they cause.
    ///
    /// - Returns: The fetches started after sign-in, how long the callers took to join the fetch, and each caller's
    ///   latency from the moment the fetch returned to the moment its `renew()` returned, sorted.
    private func renewAtExpiry(seed: UInt64) async throws -> (fetches: Int, joining: Duration, latencies: [Double]) {
        let clock = ManualClock()
        let fetcher = ScriptedCredentialFetcher()
        let signer = Fixtures.signer(clock: clock)
        // No minimum interval, so the callers themselves start the fetch rather than a planned retry.
        let configuration = SessionConfiguration(minimumFetchInterval: .zero, randomSeed: seed)
        // The runtime's own executors, as in a host: the manual clock only keeps the renewal timer from firing.
        let engine = SessionEngine(fetcher: fetcher, configuration: configuration, clock: VirtualClock(manual: clock))
        func credential() -> IdentityCredential {
            let now = Int64(clock.now.timeIntervalSince1970)
            return try! signer.sign(email: Fixtures.email(for: "member"), properties: nil, expiresAt: now + 900)
        }
        async let signedIn: Void = engine.signIn("member")
        fetcher.respond(to: await fetcher.nextRequest(), with: .success(credential()))
        try await signedIn
        let fetchesBefore = engine.metrics.fetchesStarted

        // The moment of expiry: the wall clock reaches expiresAt before the renewal timer has run.
        clock.jumpWallClock(by: .seconds(900))
        let started = ContinuousClock.now
        // Returns once every caller is in the engine and waits for the one fetch, which the script holds.
        let callers = await startConcurrentCalls(Self.callers, into: engine) { engine in
            _ = try await engine.renew()
            return ContinuousClock.now
        }
        let joining = started.duration(to: .now)
        let request = await fetcher.nextRequest()
        guard engine.metrics.waiters == Self.callers else {
            fatalError("\(engine.metrics.waiters) of \(Self.callers) callers wait for the fetch")
        }
        let returned = ContinuousClock.now
        fetcher.respond(to: request, with: .success(credential()))
        let latencies = try await Self.latencies(of: callers, since: returned)
        let fetches = engine.metrics.fetchesStarted - fetchesBefore
        await engine.shutdown()
        return (fetches, joining, latencies)
    }

    /// The runtime's floor: as many tasks suspended on continuations, all resumed at once.
    ///
    /// - Returns: Each task's latency from the moment resuming began to the moment it ran again, sorted.
    private func resumeContinuations() async -> [Double] {
        let waiting = Locked<[CheckedContinuation<Void, Never>]>([])
        let arrived = Arrivals()
        let tasks = (0..<Self.callers).map { _ in
            Task {
                await withCheckedContinuation { continuation in
                    waiting.withLock { $0.append(continuation) }
                    arrived.arrive()
                }
                return ContinuousClock.now
            }
        }
        await arrived.wait(for: Self.callers)
        let resumed = ContinuousClock.now
        for continuation in waiting.withLock({ $0 }) { continuation.resume() }
        return try! await Self.latencies(of: tasks, since: resumed)
    }

    /// Each task's latency from `start` to the instant it returned, sorted.
    ///
    /// The callers are separate tasks rather than one task group's children: a group's bookkeeping costs more per
    /// child the more children it has, which would be measured instead of the engine.
    private static func latencies<Failure: Error>(
        of tasks: [Task<ContinuousClock.Instant, Failure>],
        since start: ContinuousClock.Instant
    ) async throws -> [Double] {
        var latencies: [Double] = []
        latencies.reserveCapacity(tasks.count)
        for task in tasks { latencies.append(start.duration(to: try await task.value).seconds) }
        return latencies.sorted()
    }
}
