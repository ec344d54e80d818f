import Foundation
import SessionEngine
import SessionEngineBackend
import SessionEngineTestKit

/// `--pool N`: a daemon acting for N people at once through one `SessionPool`, over a simulated day with a backend
/// outage and a secret rotation, printing the backend's requests per second hour by hour. `--fleet R` runs R replicas
/// of that daemon, each holding every person, twice: each on its own, then over one in-process fleet coordinator that
/// shares their budget, their outage and their credentials.
struct PoolDay {
    /// The pool's budget toward the backend, and the fleet's.
    static let budget = SessionPoolConfiguration.Budget(maximumInFlight: 32, startsPerSecond: 20, burst: 20)
    static let outageStart: Duration = .seconds(12 * 3600)
    static let outageLength: Duration = .seconds(5 * 60)
    static let rotationAt: Duration = .seconds(18 * 3600)
    static let day: Duration = .seconds(24 * 3600)
    /// How far the clock moves per step: requests are counted per step.
    static let step: Duration = .seconds(10)

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
    }

    let people: Int
    let seed: UInt64
    let secret: String
    /// The daemon's replicas, each holding every person.
    var replicas = 1

    /// Runs the day; prints the histogram and whether every person ended identified with their own credential.
    ///
    /// - Returns: Whether every person ended identified with their own credential.
    func run(print line: (String) -> Void) async -> Bool {
        line(
            "Pool: \(people) people signed in at once through one budget (\(Self.budget.maximumInFlight) in flight, "
                + "\(Int(Self.budget.startsPerSecond)) starts/s); a 5-minute outage at hour 12, a secret rotation "
                + "at hour 18.")
        let outcome = await day(coordinated: false)
        printHistogram([outcome.perStep], print: line)
        line(
            "Pool: \(outcome.identified) of \(people) people identified with their own credential at the end; "
                + "\(outcome.requests) backend requests, \(outcome.budgetWaits) waited for the budget.")
        line(
            "Pool: the backend was down for \(Int(Self.outageLength.seconds / 60)) minutes, answering 503 with "
                + "Retry-After: 60; it received \(outcome.duringOutage) requests meanwhile, each Retry-After pausing "
                + "every person's fetches.")
        return outcome.identified == people
    }

    /// Runs the day for the replicas on their own, then coordinated; prints both histograms side by side.
    ///
    /// - Returns: Whether every person ended identified with their own credential on every replica, both times.
    func runFleet(print line: (String) -> Void) async -> Bool {
        line(
            "Fleet: \(replicas) replicas of a daemon, each holding the same \(people) people, each with a budget of "
                + "\(Int(Self.budget.startsPerSecond)) starts/s; a 5-minute outage at hour 12, a secret rotation at "
                + "hour 18. First each on its own, then over one coordinator with the same budget for the fleet, "
                + "sharing credentials.")
        let alone = await day(coordinated: false)
        let fleet = await day(coordinated: true)
        printHistogram([alone.perStep, fleet.perStep], print: line)
        for (name, outcome) in [("alone", alone), ("coordinated", fleet)] {
            line(
                "Fleet, \(name): \(outcome.identified) of \(people * replicas) identities (people × replicas) "
                    + "identified with their own credential at the end; \(outcome.requests) backend requests, "
                    + "\(outcome.duringOutage) during the outage.")
        }
        if let metrics = fleet.fleet { line("Fleet, coordinated: \(metrics)") }
        return alone.identified == people * replicas && fleet.identified == people * replicas
    }

    /// One day of the replicas, with or without a coordinator.
    private func day(coordinated: Bool) async -> Outcome {
        let clock = ManualClock()
        let backend = PoolDayBackend(projectID: "proj_demo", secret: secret, clock: clock)
        let coordinator = InProcessFleetCoordinator(
            limits: FleetLedger.Limits(
                startsPerSecond: Self.budget.startsPerSecond, burst: Self.budget.burst,
                maximumInFlight: Self.budget.maximumInFlight, sharesCredentials: true),
            clock: clock)
        let pools = (0..<replicas).map { replica in
            let configuration = SessionPoolConfiguration(
                session: SessionConfiguration(randomSeed: seed &+ UInt64(replica)), budget: Self.budget)
            return coordinated
                ? SessionPool(
                    fetcher: backend, configuration: configuration, clock: clock,
                    coordination: FleetCoordination(coordinator, sharesCredentials: true))
                : SessionPool(fetcher: backend, configuration: configuration, clock: clock)
        }
        let accounts = (0..<people).map { AccountID("person-\($0)") }
        var signIns: [Task<Void, any Error>] = []
        for pool in pools {
            signIns += await pool.startCalls(people) { pool, index in try await pool.signIn(accounts[index]) }
        }
        var outcome = Outcome()
        var rotated = false
        var outage = false
        while clock.uptime < Self.day {
            let before = backend.requests
            if !outage, clock.uptime >= Self.outageStart, clock.uptime < Self.outageStart + Self.outageLength {
                outage = true
                backend.setOutage(true)
            } else if outage, clock.uptime >= Self.outageStart + Self.outageLength {
                outage = false
                backend.setOutage(false)
            }
            if !rotated, clock.uptime >= Self.rotationAt {
                rotated = true
                backend.rotate()
                // The service now refuses every credential signed with the old secret; each person's next request
                // reports it, and the pool renews them through the same budget.
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
            await advanceOneStep(clock, pools)
            outcome.perStep.append(backend.requests - before)
            if outage { outcome.duringOutage += backend.requests - before }
        }
        for task in signIns { _ = try? await task.value }
        for pool in pools {
            outcome.identified +=
                accounts.filter { account in
                    guard let credential = try? pool.identityHeaders(for: account).credential() else { return false }
                    return credential.email == PoolDayBackend.email(for: account) && backend.verifies(credential)
                }.count
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

    /// Moves the clock one step. While fetches wait for the budget it moves from deadline to deadline, so the
    /// budget's sleeper starts them as they come due; otherwise the whole step at once, so timers due within it fire
    /// at its end (a little late, as after a busy moment of a real machine).
    private func advanceOneStep(_ clock: ManualClock, _ pools: [SessionPool]) async {
        let end = clock.uptime + Self.step
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
    private func printHistogram(_ runs: [[Int]], print line: (String) -> Void) {
        let stepsPerHour = Int(3600 / Self.step.seconds)
        let scale = Self.budget.startsPerSecond
        line(
            "Backend requests per second, by hour (peak, mean; a bar of the peak, full at the budget's rate"
                + (runs.count > 1 ? "; each replica on its own, then coordinated):" : "):"))
        for hour in 0..<(runs[0].count / stepsPerHour) {
            var text = ""
            for (index, perStep) in runs.enumerated() {
                let steps = perStep[(hour * stepsPerHour)..<((hour + 1) * stepsPerHour)]
                let peak = Double(steps.max() ?? 0) / Self.step.seconds
                let mean = Double(steps.reduce(0, +)) / 3600
                if index == 0 {
                    let width = Int((peak / scale * 20).rounded(.up))
                    let bar = String(repeating: "#", count: min(20, width))
                    text += "|" + bar.padding(toLength: 20, withPad: " ", startingAt: 0) + "|"
                } else {
                    text += "   "
                }
                text += String(format: " %5.1f /s peak, %5.2f /s mean", peak, mean)
            }
            var mark = ""
            if hour == Int(Self.outageStart.seconds / 3600) { mark = "  outage" }
            if hour == Int(Self.rotationAt.seconds / 3600) { mark = "  rotation" }
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
    private let clock: ManualClock
    private let state: SanitizedMutex<State>

    init(projectID: String, secret: String, clock: ManualClock) {
        self.projectID = projectID
        self.secret = secret
        self.clock = clock
        state = SanitizedMutex(
            State(
                signer: try! IdentitySigner(projectID: projectID, secret: secret, clock: clock),
                verifier: try! IdentityVerifier(projectID: projectID, secret: secret, clock: clock)))
    }

    static func email(for account: AccountID) -> String { "\(account.rawValue)@example.com" }

    var requests: Int { state.withLock { $0.requests } }

    func setOutage(_ on: Bool) { state.withLock { $0.outage = on } }

    func rotate() {
        let projectID = self.projectID
        let clock = self.clock
        state.withLock { state in
            state.generation += 1
            let secret = DemoSecrets.rotated(self.secret, generation: state.generation)
            state.signer = try! IdentitySigner(projectID: projectID, secret: secret, clock: clock)
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
                    .fetchFailed, reason: "the backend answered 503", isTransient: true, retryAfter: .seconds(60))
            }
            return try state.signer.sign(email: Self.email(for: account))
        }
    }
}
