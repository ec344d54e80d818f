import Foundation
import SessionEngine
import SessionEngineTestKit

/// A fleet of processes that all signed in within one minute, over a virtual day: does the renewal jitter spread the
/// backend's load, or does the fleet renew in waves?
///
/// The fleet is simulated with the engine's renewal arithmetic (`renewalTime` in `SessionStateMachine+Scheduling.swift`):
/// a credential issued at `t` that expires at `expiresAt` is renewed at
/// `t + clamp(lifetime × (fraction + jitter × u), minimumFetchInterval, lifetime − minimumLead)` with `u` uniform in
/// `-1..<1` and `lifetime = expiresAt − t`. The simulated backend answers at once and stamps `expiresAt` as the
/// signer does, in whole seconds: `floor(t) + 900`. A sample of real engines on manual clocks checks that the
/// engine's renewal times follow the same distribution.
struct FleetBenchmark: Benchmark {
    let name = "fleet"
    let summary = "100,000 processes signed in within a minute, 24 virtual hours: backend fetch peak over mean"

    private static let processes = 100_000
    private static let day = 86_400
    private static let lifetime = 900.0

    func run(_ options: Options) async throws -> [Figure] {
        let policy = RenewalPolicy()
        let configuration = SessionConfiguration()
        // The previous default, for comparison.
        let narrowJitter = RenewalPolicy(fraction: policy.fraction, jitter: 0.1, minimumLead: policy.minimumLead)
        var jittered: [Load] = []
        var lockstep: [Load] = []
        var narrow: [Load] = []
        var together: [Double] = []
        var togetherFloored: [Double] = []
        var steady: [Double] = []
        var steadyFloored: [Double] = []
        for round in 0..<options.rounds {
            progress("  fleet round \(round + 1)")
            let seed = UInt64(round + 1)
            jittered.append(simulate(policy: policy, configuration: configuration, seed: seed))
            let withoutJitter = RenewalPolicy(fraction: policy.fraction, jitter: 0, minimumLead: policy.minimumLead)
            lockstep.append(simulate(policy: withoutJitter, configuration: configuration, seed: seed))
            narrow.append(simulate(policy: narrowJitter, configuration: configuration, seed: seed))
            for floored in [false, true] {
                let outage = { (start: Double) in
                    simulateOutage(
                        policy: policy, configuration: configuration, start: start, floored: floored, seed: seed)
                }
                if floored {
                    togetherFloored.append(outage(0))
                    steadyFloored.append(outage(Double(Self.day / 2)))
                } else {
                    together.append(outage(0))
                    steady.append(outage(Double(Self.day / 2)))
                }
            }
        }
        let validation = try await validateAgainstEngines(policy: policy, quick: options.quick)
        let replicaFigures = await replicaFleet(quick: options.quick)

        let jitterPercent = Int((policy.jitter * 100).rounded())
        let settled = Summary(jittered.map { $0.settledAfter / 3600 }).median
        let fromFirstWave = jittered.map(\.fromFirstWaveRatio)
        return [
            Figure(
                name,
                Measurement(
                    "peak / mean fetches per second from the first renewal wave on, jitter ±\(jitterPercent)%",
                    .ratio,
                    fromFirstWave
                ),
                against: Measurement("without jitter", .ratio, lockstep.map(\.fromFirstWaveRatio)),
                goal: Goal(text: "< 2×", met: Summary(fromFirstWave).median < 2),
                note: String(
                    format: "peak %.0f/s, mean %.0f/s; every hour stays under 2× from hour %.1f",
                    Summary(jittered.map(\.firstWavePeak)).median,
                    Summary(jittered.map(\.mean)).median,
                    settled
                ),
                paired: true
            ),
            Figure(
                name,
                Measurement("peak / mean after the first wave", .ratio, jittered.map(\.peakOverMean)),
                against: Measurement("without jitter", .ratio, lockstep.map(\.peakOverMean)),
                goal: Goal(text: "< 2×", met: Summary(jittered.map(\.peakOverMean)).median < 2),
                paired: true
            ),
            Figure(
                name,
                Measurement("peak fetches per second after the first wave", .perSecond, jittered.map(\.peak)),
                against: Measurement("without jitter", .perSecond, lockstep.map(\.peak)),
                paired: true
            ),
            Figure(
                name,
                Measurement("peak / mean in the last 12 hours", .ratio, jittered.map(\.lateRatio)),
                against: Measurement("without jitter", .ratio, lockstep.map(\.lateRatio)),
                goal: Goal(text: "< 2×", met: Summary(jittered.map(\.lateRatio)).median < 2),
                paired: true
            ),
            Figure(
                name,
                Measurement(
                    "peak / mean from the first renewal wave on, jitter ±\(jitterPercent)%", .ratio, fromFirstWave),
                against: Measurement("jitter ±10% (the previous default)", .ratio, narrow.map(\.fromFirstWaveRatio)),
                paired: true
            ),
            Figure(
                name,
                Measurement(
                    "outage recovery: retry starts per second after a shared 5-minute outage, peak / mean",
                    .ratio,
                    together
                ),
                against: Measurement("jitter swallowed by the 5 s floor (before)", .ratio, togetherFloored),
                goal: Goal(text: "< 2×", met: Summary(together).median < 2),
                note: "the fleet signs in within a minute while the backend is down for 5 minutes",
                paired: true
            ),
            Figure(
                name,
                Measurement(
                    "outage recovery of a fleet in steady state, 5-minute outage at hour 12, peak / mean",
                    .ratio,
                    steady
                ),
                against: Measurement("jitter swallowed by the 5 s floor (before)", .ratio, steadyFloored),
                note: "recently failed processes retry within seconds: see BENCHMARKS.md",
                paired: true
            ),
            validation,
        ] + replicaFigures
    }

    /// The fleet as 100 replicas of one daemon through a rotation and an outage (``SimulatedReplicas``), each replica on
    /// its own and then over one coordinator.
    private func replicaFleet(quick: Bool) async -> [Figure] {
        // A smoke run moves the clock in coarser steps: its timers fire up to half a second late.
        let fleet = SimulatedReplicas(
            replicas: quick ? 8 : 100, accounts: quick ? 400 : 12_500, step: .milliseconds(quick ? 500 : 100))
        let perReplica = fleet.accounts * SimulatedReplicas.copies / fleet.replicas
        let budget = fleet.budget
        progress("  fleet: \(fleet.replicas) replicas × \(grouped(perReplica)) accounts, each on its own")
        let alone = await fleet.run(coordinated: false, seed: 1)
        progress("  fleet: the same replicas over one coordinator")
        let together = await fleet.run(coordinated: true, seed: 1)
        let scale =
            "\(fleet.replicas) replicas, \(grouped(fleet.accounts)) accounts each on \(SimulatedReplicas.copies)"
        let bound = budget.startsPerSecond + Double(budget.burst)
        let ideal = Double(fleet.accounts) / budget.startsPerSecond
        let steadyPerRenewal = { (load: SimulatedReplicas.Load) in
            Double(load.steadyFetches) / (Double(load.steadyRenewals) / Double(SimulatedReplicas.copies))
        }
        let budgetText = String(format: "%.1f starts/s, a bucket of %d", budget.startsPerSecond, budget.burst)
        return [
            Figure(
                name,
                Measurement(
                    "\(scale): backend peak / mean fetch starts per second, hours 1 to 4, through a rotation and an outage",
                    .ratio, [together.peak / together.mean]),
                against: Measurement("each replica on its own", .ratio, [alone.peak / alone.mean]),
                // A smoke run's fleet starts too few fetches a second for a ratio of per-second counts.
                goal: quick ? nil : Goal(text: "< 1.5×", met: together.peak / together.mean < 1.5),
                note: String(
                    format: "peak %.0f/s, mean %.1f/s (on its own: peak %.0f/s, mean %.1f/s); the fleet's budget %@",
                    together.peak, together.mean, alone.peak, alone.mean, budgetText)),
            Figure(
                name,
                Measurement("\(scale): backend peak fetch starts per second", .perSecond, [together.peak]),
                against: Measurement("the fleet's budget: rate plus bucket", .perSecond, [bound])
            ).goal("≤ 1.0×") { $0 <= 1.0 },
            Figure(
                name,
                Measurement(
                    "\(scale): fetches per renewal per account in the steady hour", .ratio, [steadyPerRenewal(together)]
                ),
                against: Measurement("each replica on its own", .ratio, [steadyPerRenewal(alone)]),
                goal: Goal(text: "≤ 1.1", met: steadyPerRenewal(together) <= 1.1)),
            Figure(
                name,
                Measurement(
                    "\(scale): rotation, every identity back after (virtual)", .seconds, [together.rotationSeconds]),
                against: Measurement("accounts / the fleet's rate", .seconds, [ideal]),
                note: String(
                    format: "%d accounts fetched more than once meanwhile; on its own: %.0f s",
                    together.rotationRefetched, alone.rotationSeconds)
            ).goal("≤ 1.1×") { $0 <= 1.1 },
            Figure(
                name,
                Measurement(
                    "\(scale): fetches the backend received while it was down for 5 minutes", .count,
                    [Double(together.outageFetches)]),
                against: Measurement("each replica on its own", .count, [Double(alone.outageFetches)])),
            Figure(
                name,
                Measurement(
                    "\(scale): the coordinator's decisions in its busiest second", .perSecond, [together.decisionPeak]),
                note: together.fleet.map { "\($0)" }),
            Figure(
                name,
                Measurement(
                    "\(scale): identities without a usable credential at the end", .count,
                    [Double(together.notIdentified)]),
                against: Measurement("each replica on its own", .count, [Double(alone.notIdentified)]),
                goal: Goal(text: "0", met: together.notIdentified == 0),
                note: "identities expired over the run: \(together.expiries) (on its own: \(alone.expiries))"),
        ]
    }

    /// The retries of a fleet after a shared outage of 5 minutes from `start` (seconds since the fleet began).
    ///
    /// Every fetch started in the outage fails at once and is retried with the engine's backoff (`backoff` in
    /// `SessionStateMachine+Scheduling.swift`): the floor the minimum fetch interval still requires plus
    /// `ceiling × u`, `u` uniform in `0..<1`; with `floored`, the formula before this change,
    /// `max(ceiling × u, floor)`. Counted: each failed process's first fetch after the outage (its retry that
    /// succeeds), per second from the outage's end until the last one.
    ///
    /// - Returns: The peak over the mean of those per-second counts.
    private func simulateOutage(
        policy: RenewalPolicy,
        configuration: SessionConfiguration,
        start: Double,
        floored: Bool,
        seed: UInt64
    ) -> Double {
        var random = SplitMix(seed: seed &+ 0x5EED)
        let end = start + 300
        let retry = configuration.retry
        let minimumInterval = configuration.minimumFetchInterval.seconds
        let minimumLead = policy.minimumLead.seconds
        var recoveries = [Int32](repeating: 0, count: 3600)
        for _ in 0..<Self.processes {
            var now = random.unit() * 60
            var failures = 0
            while now < end + 3600 {
                if now >= start && now < end {
                    failures += 1
                    // The fetch failed at once, so the floor is the whole minimum interval.
                    let ceiling = retry.ceiling(afterFailures: failures).seconds
                    now +=
                        floored
                        ? max(ceiling * random.unit(), minimumInterval) : minimumInterval + ceiling * random.unit()
                    continue
                }
                if failures > 0 {
                    if now >= end { recoveries[min(3599, Int(now - end))] += 1 }
                    failures = 0
                }
                let lifetime = max(0, now.rounded(.down) + Self.lifetime - now)
                var delay = lifetime * (policy.fraction + (random.unit() * 2 - 1) * policy.jitter)
                delay = min(delay, lifetime - minimumLead)
                delay = max(delay, minimumInterval)
                now += delay
            }
        }
        let last = recoveries.lastIndex { $0 > 0 } ?? 0
        let window = recoveries[...last]
        let total = window.reduce(0) { $0 + Int($1) }
        return Double(window.max() ?? 0) / (Double(total) / Double(window.count))
    }

    /// The backend's load over the day.
    private struct Load {
        /// The highest one-second fetch count from the end of the sign-in minute on, the first renewal wave included.
        var firstWavePeak: Double
        /// The mean fetches per second over the same window.
        var firstWaveMean: Double
        /// The highest one-second fetch count after the first renewal wave.
        var peak: Double
        /// The mean fetches per second over the same window.
        var mean: Double
        /// When every later hour's peak stays under twice that hour's mean, in seconds since the fleet began.
        var settledAfter: Double
        /// Peak over mean in the second half of the day.
        var lateRatio: Double

        var peakOverMean: Double { peak / mean }
        var fromFirstWaveRatio: Double { firstWavePeak / firstWaveMean }
    }

    /// Simulates the fleet for a day and returns the backend's load after the first renewal wave.
    private func simulate(policy: RenewalPolicy, configuration: SessionConfiguration, seed: UInt64) -> Load {
        var random = SplitMix(seed: seed)
        var fetches = [Int32](repeating: 0, count: Self.day)
        var firstWaveEnd = 0.0
        let minimumInterval = configuration.minimumFetchInterval.seconds
        let minimumLead = policy.minimumLead.seconds
        for _ in 0..<Self.processes {
            var now = random.unit() * 60
            var renewals = 0
            while now < Double(Self.day) {
                fetches[Int(now)] += 1
                let lifetime = max(0, now.rounded(.down) + Self.lifetime - now)
                var delay = lifetime * (policy.fraction + (random.unit() * 2 - 1) * policy.jitter)
                delay = min(delay, lifetime - minimumLead)
                delay = max(delay, minimumInterval)
                now += delay
                renewals += 1
                if renewals == 1 { firstWaveEnd = max(firstWaveEnd, now) }
            }
        }
        let start = Int(firstWaveEnd.rounded(.up))
        let window = fetches[start...]
        let hourly = stride(from: 0, to: Self.day, by: 3600).map { hour -> Double in
            let slice = fetches[max(hour, start)..<min(hour + 3600, Self.day)]
            guard !slice.isEmpty else { return .infinity }
            return Double(slice.max()!) / (Double(slice.reduce(0) { $0 + Int($1) }) / Double(slice.count))
        }
        let settledHour = (hourly.lastIndex { $0 >= 2 }).map { $0 + 1 } ?? 0
        let late = fetches[(Self.day / 2)...]
        let lateMean = Double(late.reduce(0) { $0 + Int($1) }) / Double(late.count)
        let fromFirstWave = fetches[60...]
        return Load(
            firstWavePeak: Double(fromFirstWave.max()!),
            firstWaveMean: Double(fromFirstWave.reduce(0) { $0 + Int($1) }) / Double(fromFirstWave.count),
            peak: Double(window.max()!),
            mean: Double(window.reduce(0) { $0 + Int($1) }) / Double(window.count),
            settledAfter: Double(settledHour * 3600),
            lateRatio: Double(late.max()!) / lateMean
        )
    }

    /// Runs real engines on manual clocks through many renewals and compares the renewal points they chose, as a
    /// share of each credential's lifetime, with the uniform distribution the simulation draws from.
    private func validateAgainstEngines(policy: RenewalPolicy, quick: Bool) async throws -> Figure {
        let engines = quick ? 8 : 32
        let cycles = quick ? 25 : 60
        var shares: [Double] = []
        for index in 0..<engines {
            let clock = ManualClock()
            let issued = Locked<[(at: Date, expiresAt: Int64)]>([])
            let fetcher = SigningFetcher(clock: clock) { _, now, expiresAt in
                issued.withLock { $0.append((now, expiresAt)) }
            }
            let configuration = SessionConfiguration(renewal: policy, randomSeed: UInt64(index) &* 0x9E37_79B9)
            let engine = SessionEngine(fetcher: fetcher, configuration: configuration, clock: clock)
            try await engine.signIn(AccountID("process-\(index)"))
            let driver = RenewalDriver(engine: engine, clock: clock, fetcher: fetcher)
            for _ in 0..<cycles { await driver.renewOnce() }
            await engine.shutdown()
            let history = issued.withLock { $0 }
            for (previous, next) in zip(history, history.dropFirst()) {
                let lifetime = Double(previous.expiresAt) - previous.at.timeIntervalSince1970
                shares.append(next.at.timeIntervalSince(previous.at) / lifetime)
            }
        }
        // Kolmogorov–Smirnov distance from uniform on fraction ± jitter.
        let low = policy.fraction - policy.jitter
        let width = 2 * policy.jitter
        let sorted = shares.sorted()
        var distance = 0.0
        for (index, share) in sorted.enumerated() {
            let expected = min(1, max(0, (share - low) / width))
            distance = max(distance, abs(Double(index + 1) / Double(sorted.count) - expected))
            distance = max(distance, abs(Double(index) / Double(sorted.count) - expected))
        }
        let critical = 1.63 / Double(sorted.count).squareRoot()
        return Figure(
            name,
            Measurement(
                "real engines' renewal points: KS distance from the simulated distribution", .count, [distance]),
            against: Measurement("critical value at 1%", .count, [critical]),
            goal: Goal(text: "below the critical value", met: distance < critical),
            note: String(
                format: "%d renewals of %d engines, share of lifetime %.3f…%.3f, mean %.4f (simulated %.4f)",
                sorted.count,
                engines,
                sorted.first ?? 0,
                sorted.last ?? 0,
                mean(sorted),
                policy.fraction
            )
        )
    }
}

/// SplitMix64, the generator the engine draws its jitter from (its type is internal to the engine), so the
/// simulation's draws have the same quality.
private struct SplitMix {
    private var state: UInt64

    init(seed: UInt64) {
        state = seed
    }

    /// A uniformly distributed number in `0..<1`.
    mutating func unit() -> Double {
        state &+= 0x9E37_79B9_7F4A_7C15
        var z = state
        z = (z ^ (z >> 30)) &* 0xBF58_476D_1CE4_E5B9
        z = (z ^ (z >> 27)) &* 0x94D0_49BB_1331_11EB
        return Double((z ^ (z >> 31)) >> 11) * 0x1.0p-53
    }
}
