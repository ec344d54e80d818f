import Foundation
import SessionEngine
import SessionEngineBackend
import SessionEngineRedis
import SessionEngineTestKit

/// `--pool N`: a daemon acting for N people at once through one `SessionPool`, over a simulated day with a backend
/// outage and a secret rotation, printing the backend's requests per second hour by hour. `--fleet R` runs R replicas
/// of that daemon, each holding every person, twice: each on its own, then over one in-process fleet coordinator that
/// shares their budget, their outage and their credentials. With `--redis URL` the replicas coordinate over a Redis
/// server instead, which decides on its own clock: the day then runs in real time, shortened (``Timescale/realTime``).
struct PoolDay {
    /// The pool's budget toward the backend, and the fleet's.
    static let budget = SessionPoolConfiguration.Budget(maximumInFlight: 32, startsPerSecond: 20, burst: 20)

    /// How long the day's parts last.
    struct Timescale {
        /// One hour of the printed histogram.
        let hour: Duration
        /// The hours of the day.
        let hours: Int
        /// How far the clock moves per step: requests are counted per step, and it divides an hour.
        let step: Duration
        let outageStart: Duration
        let outageLength: Duration
        let rotationAt: Duration
        /// The backend's `Retry-After` during the outage.
        let retryAfter: Duration
        /// The credentials' lifetime.
        let lifetime: Duration
        /// Whether it runs on the real clock, as a coordinator on a server needs.
        let isRealTime: Bool

        var day: Duration { hour * hours }

        /// A day of 24 hours on a manual clock: 15-minute credentials, a 5-minute outage at hour 12 and a rotation
        /// at hour 18, run in a few seconds.
        static let simulated = Timescale(
            hour: .seconds(3600), hours: 24, step: .seconds(10), outageStart: .seconds(12 * 3600),
            outageLength: .seconds(5 * 60), rotationAt: .seconds(18 * 3600), retryAfter: .seconds(60),
            lifetime: .seconds(15 * 60), isRealTime: false)

        /// A day shortened for the real clock, 96 seconds: 1-minute credentials (each renewed after about 40 s),
        /// "hours" of 8 seconds, an outage of one hour at hour 5 answering `Retry-After: 2`, a rotation at hour 8.
        /// With 200 people a replica renews about 5 a second, a quarter of the budget, which leaves the budget's
        /// rate visible at the sign-in, after the outage and at the rotation.
        static let realTime = Timescale(
            hour: .seconds(8), hours: 12, step: .seconds(1), outageStart: .seconds(40), outageLength: .seconds(8),
            rotationAt: .seconds(64), retryAfter: .seconds(2), lifetime: .seconds(60), isRealTime: true)
    }

    /// What one run of the day saw.
    struct Outcome {
        /// The backend's requests in each step of the day.
        var perStep: [Int] = []
        /// People identified at the end with their own credential, on every replica.
        var identified = 0
        var requests = 0
        var duringOutage = 0
        var budgetWaits = 0
        var fleet: FleetMetrics?
        /// Why the coordinator could not be made, if it could not.
        var coordinatorProblem: String?
    }

    let people: Int
    let seed: UInt64
    let secret: String
    /// The daemon's replicas, each holding every person.
    var replicas = 1
    /// The Redis server the replicas coordinate over, if any; `nil` coordinates them in the process.
    var redis: RedisFleetCoordinator.Configuration?

    /// The day's timescale: real time over Redis, simulated otherwise.
    private var scale: Timescale { redis == nil ? .simulated : .realTime }

    /// Runs the day; prints the histogram and whether every person ended identified with their own credential.
    ///
    /// - Returns: Whether every person ended identified with their own credential.
    func run(print line: (String) -> Void) async -> Bool {
        line(
            "Pool: \(people) people signed in at once through one budget (\(Self.budget.maximumInFlight) in flight, "
                + "\(Int(Self.budget.startsPerSecond)) starts/s); a 5-minute outage at hour 12, a secret rotation "
                + "at hour 18.")
        let outcome = await day(coordinated: false)
        printHistogram([outcome.perStep], scale: scale, print: line)
        line(
            "Pool: \(outcome.identified) of \(people) people identified with their own credential at the end; "
                + "\(outcome.requests) backend requests, \(outcome.budgetWaits) waited for the budget.")
        line(
            "Pool: the backend was down for \(Int(scale.outageLength.seconds / 60)) minutes, answering 503 with "
                + "Retry-After: 60; it received \(outcome.duringOutage) requests meanwhile, each Retry-After pausing "
                + "every person's fetches.")
        return outcome.identified == people
    }

    /// Runs the day for the replicas on their own and coordinated (in real time both at once, each with a backend of
    /// its own, so that the two days take the time of one); prints both histograms side by side.
    ///
    /// - Returns: Whether every person ended identified with their own credential on every replica, both times.
    func runFleet(print line: (String) -> Void) async -> Bool {
        if let redis {
            line(
                "Fleet: \(replicas) replicas of a daemon, each holding the same \(people) people, each with a budget "
                    + "of \(Int(Self.budget.startsPerSecond)) starts/s, in real time: a day of 12 \"hours\" of 8 s "
                    + "with 1-minute credentials, an 8-second outage at hour 5 and a secret rotation at hour 8, 96 s "
                    + "a run. Two runs at once, each against a backend of its own: each replica on its own, and over "
                    + "the Redis server at "
                    + "\(redis.host):\(redis.port) (key prefix \(redis.keyPrefix)\(redis.tls == nil ? "" : ", TLS")) with "
                    + "the same budget for the fleet, sharing credentials.")
        } else {
            line(
                "Fleet: \(replicas) replicas of a daemon, each holding the same \(people) people, each with a budget "
                    + "of \(Int(Self.budget.startsPerSecond)) starts/s; a 5-minute outage at hour 12, a secret "
                    + "rotation at hour 18. First each on its own, then over one coordinator with the same budget for "
                    + "the fleet, sharing credentials.")
        }
        let alone: Outcome
        let fleet: Outcome
        if scale.isRealTime {
            async let replicasAlone = day(coordinated: false)
            fleet = await day(coordinated: true)
            alone = await replicasAlone
        } else {
            alone = await day(coordinated: false)
            fleet = await day(coordinated: true)
        }
        printHistogram([alone.perStep, fleet.perStep], scale: scale, print: line)
        for (name, outcome) in [("alone", alone), ("coordinated", fleet)] {
            line(
                "Fleet, \(name): \(outcome.identified) of \(people * replicas) identities (people × replicas) "
                    + "identified with their own credential at the end; \(outcome.requests) backend requests, "
                    + "\(outcome.duringOutage) during the outage.")
        }
        if let metrics = fleet.fleet { line("Fleet, coordinated: \(metrics)") }
        if let problem = fleet.coordinatorProblem { line("Fleet, coordinated: the coordinator: \(problem)") }
        return alone.identified == people * replicas && fleet.identified == people * replicas
    }

    /// One day of the replicas, with or without a coordinator.
    private func day(coordinated: Bool) async -> Outcome {
        let scale = self.scale
        let manual = scale.isRealTime ? nil : ManualClock()
        let clock: any SessionClock = manual ?? SystemClock()
        let backend = PoolDayBackend(
            projectID: "proj_demo", secret: secret, clock: clock, lifetime: scale.lifetime,
            retryAfter: scale.retryAfter)
        var outcome = Outcome()
        var coordination: [FleetCoordination] = []
        if coordinated {
            do {
                coordination = try coordinators(clock: manual)
            } catch {
                outcome.coordinatorProblem = "\(error)"
                return outcome
            }
        }
        let pools = (0..<replicas).map { replica in
            let configuration = SessionPoolConfiguration(
                session: SessionConfiguration(randomSeed: seed &+ UInt64(replica)), budget: Self.budget)
            return coordinated
                ? SessionPool(
                    fetcher: backend, configuration: configuration, clock: clock, coordination: coordination[replica])
                : SessionPool(fetcher: backend, configuration: configuration, clock: clock)
        }
        let accounts = (0..<people).map { AccountID("person-\($0)") }
        var signIns: [Task<Void, any Error>] = []
        for pool in pools {
            if manual != nil {
                signIns += await pool.startCalls(people) { pool, index in try await pool.signIn(accounts[index]) }
            } else {
                signIns += accounts.map { account in Task { _ = try await pool.signIn(account) } }
            }
        }
        // The service refuses every credential signed with the old secret; each person's next request reports it,
        // and the pool renews them through the same budget. In real time a fetch may land an old credential just
        // after the rotation, so the service looks again at every step.
        func reportRejected() async {
            for pool in pools {
                for account in accounts {
                    if let credential = try? pool.identityHeaders(for: account).credential(),
                        !backend.verifies(credential)
                    {
                        await pool.credentialRejected(credential, for: account)
                    }
                }
            }
        }
        var rotated = false
        var outage = false
        var elapsed: Duration = .zero
        let started = ContinuousClock.now
        while elapsed < scale.day {
            let before = backend.requests
            if !outage, elapsed >= scale.outageStart, elapsed < scale.outageStart + scale.outageLength {
                outage = true
                backend.setOutage(true)
            } else if outage, elapsed >= scale.outageStart + scale.outageLength {
                outage = false
                backend.setOutage(false)
            }
            if !rotated, elapsed >= scale.rotationAt {
                rotated = true
                backend.rotate()
                await reportRejected()
            } else if rotated, scale.isRealTime {
                await reportRejected()
            }
            if let manual {
                await advanceOneStep(manual, pools)
                elapsed = manual.uptime
            } else {
                elapsed += scale.step
                try? await Task.sleep(until: started + elapsed, clock: .continuous)
            }
            outcome.perStep.append(backend.requests - before)
            if outage { outcome.duringOutage += backend.requests - before }
        }
        for task in signIns { _ = try? await task.value }
        func identified(_ pool: SessionPool) -> Int {
            accounts.filter { account in
                guard let credential = try? pool.identityHeaders(for: account).credential() else { return false }
                return credential.email == PoolDayBackend.email(for: account) && backend.verifies(credential)
            }.count
        }
        // In real time the last renewals of the rotation may still be landing: the service keeps reporting, for at
        // most a lifetime.
        let settled = ContinuousClock.now + (scale.isRealTime ? scale.lifetime : .zero)
        while scale.isRealTime, pools.map(identified).reduce(0, +) < people * replicas, ContinuousClock.now < settled {
            await reportRejected()
            try? await Task.sleep(for: .milliseconds(250))
        }
        for pool in pools {
            outcome.identified += identified(pool)
            outcome.budgetWaits += pool.metrics.budgetWaits
        }
        outcome.requests = backend.requests
        outcome.fleet = coordinated ? pools.first?.metrics.fleet : nil
        if var fleet = outcome.fleet {
            for pool in pools.dropFirst() {
                if let metrics = pool.metrics.fleet { fleet.add(metrics) }
            }
            outcome.fleet = fleet
        }
        for pool in pools { await pool.shutdown() }
        return outcome
    }

    /// Each replica's coordination: one `RedisFleetCoordinator` each (a connection each, as processes have) over
    /// `redis`, or one in-process coordinator on the manual clock they share.
    private func coordinators(clock: ManualClock?) throws -> [FleetCoordination] {
        let limits = FleetLimits(
            startsPerSecond: Self.budget.startsPerSecond, burst: Self.budget.burst,
            maximumInFlight: Self.budget.maximumInFlight, sharesCredentials: true)
        if let redis {
            let configuration = try RedisFleetCoordinator.Configuration(
                host: redis.host, port: redis.port, username: redis.username, password: redis.password,
                keyPrefix: redis.keyPrefix, limits: limits, connectTimeout: redis.connectTimeout,
                commandTimeout: redis.commandTimeout, tls: redis.tls)
            return try (0..<replicas).map { _ in
                FleetCoordination(
                    try RedisFleetCoordinator(configuration: configuration), callTimeout: redis.commandTimeout * 2,
                    sharesCredentials: true)
            }
        }
        let coordinator = InProcessFleetCoordinator(limits: limits, clock: clock ?? ManualClock())
        return Array(repeating: FleetCoordination(coordinator, sharesCredentials: true), count: replicas)
    }

    /// Moves the clock one step. While fetches wait for the budget it moves from deadline to deadline, so the
    /// budget's sleeper starts them as they come due; otherwise the whole step at once, so timers due within it fire
    /// at its end (a little late, as after a busy moment of a real machine).
    private func advanceOneStep(_ clock: ManualClock, _ pools: [SessionPool]) async {
        let end = clock.uptime + scale.step
        while clock.uptime < end {
            // A fetch held by the fleet waits in a deadline too, and counts in flight in its pool's budget.
            let waiting = pools.reduce(0) { waiting, pool in
                let metrics = pool.metrics
                return waiting + metrics.queuedNeeded + metrics.queuedProactive
                    + (metrics.fleet == nil ? 0 : metrics.fetchesInFlight)
            }
            if waiting == 0 {
                clock.advance(by: end - clock.uptime)
            } else if clock.advanceToNextDeadline(limit: end - clock.uptime) == .zero {
                clock.advance(by: end - clock.uptime)
            }
            await pools[0].waitUntilIdle()
        }
    }

    /// One line per hour: each run's peak and mean requests per second, with a bar of the first run's peak.
    private func printHistogram(_ runs: [[Int]], scale: Timescale, print line: (String) -> Void) {
        let stepsPerHour = Int((scale.hour / scale.step).rounded())
        let fullBar = Self.budget.startsPerSecond
        line(
            "Backend requests per second, by hour (peak, mean; a bar of the peak, full at the budget's rate"
                + (runs.count > 1 ? "; each replica on its own, then coordinated):" : "):"))
        for hour in 0..<(runs[0].count / stepsPerHour) {
            var text = ""
            for (index, perStep) in runs.enumerated() {
                let steps = perStep[(hour * stepsPerHour)..<((hour + 1) * stepsPerHour)]
                let peak = Double(steps.max() ?? 0) / scale.step.seconds
                let mean = Double(steps.reduce(0, +)) / scale.hour.seconds
                if index == 0 {
                    let width = Int((peak / fullBar * 20).rounded(.up))
                    let bar = String(repeating: "#", count: min(20, width))
                    text += "|" + bar.padding(toLength: 20, withPad: " ", startingAt: 0) + "|"
                } else {
                    text += "   "
                }
                text += String(format: " %5.1f /s peak, %5.2f /s mean", peak, mean)
            }
            var mark = ""
            if hour == Int(scale.outageStart.seconds / scale.hour.seconds) { mark = "  outage" }
            if hour == Int(scale.rotationAt.seconds / scale.hour.seconds) { mark = "  rotation" }
            line("  h" + String(format: "%02d", hour) + " " + text + mark)
        }
    }
}

/// The pool day's backend: signs for anyone, fails with `503` and `Retry-After` during the outage, and rotates its
/// secret.
private final class PoolDayBackend: CredentialFetcher {
    private struct State {
        var signer: IdentitySigner
        var verifier: IdentityVerifier
        var generation = 0
        var outage = false
        var requests = 0
    }

    private let projectID: String
    private let secret: String
    private let clock: any SessionClock
    private let lifetime: Duration
    private let retryAfter: Duration
    private let state: SanitizedMutex<State>

    init(projectID: String, secret: String, clock: any SessionClock, lifetime: Duration, retryAfter: Duration) {
        self.projectID = projectID
        self.secret = secret
        self.clock = clock
        self.lifetime = lifetime
        self.retryAfter = retryAfter
        state = SanitizedMutex(
            State(
                signer: try! IdentitySigner(projectID: projectID, secret: secret, lifetime: lifetime, clock: clock),
                verifier: try! IdentityVerifier(projectID: projectID, secret: secret, clock: clock)))
    }

    static func email(for account: AccountID) -> String { "\(account.rawValue)@example.com" }

    var requests: Int { state.withLock { $0.requests } }

    func setOutage(_ on: Bool) { state.withLock { $0.outage = on } }

    func rotate() {
        let projectID = self.projectID
        let clock = self.clock
        let lifetime = self.lifetime
        state.withLock { state in
            state.generation += 1
            let secret = DemoSecrets.rotated(self.secret, generation: state.generation)
            state.signer = try! IdentitySigner(projectID: projectID, secret: secret, lifetime: lifetime, clock: clock)
            state.verifier = try! IdentityVerifier(projectID: projectID, secret: secret, clock: clock)
        }
    }

    /// Whether the service accepts `credential` now.
    func verifies(_ credential: IdentityCredential) -> Bool {
        state.withLock { $0.verifier.verify(credential).isValid }
    }

    func fetchCredential(for account: AccountID) async throws -> IdentityCredential {
        try state.withLock { state throws -> IdentityCredential in
            state.requests += 1
            guard !state.outage else {
                throw SessionError(
                    .fetchFailed, reason: "the backend answered 503", isTransient: true, retryAfter: retryAfter)
            }
            return try state.signer.sign(email: Self.email(for: account))
        }
    }
}
