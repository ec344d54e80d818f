import Foundation
import SessionEngine
import SessionEngineBackend
import SessionEngineTestKit

/// `--pool N`: a daemon acting for N people at once through one `SessionPool`, over a simulated day with a backend
/// outage and a secret rotation, printing the backend's requests per second hour by hour.
struct PoolDay {
    /// The pool's budget toward the backend.
    static let budget = SessionPoolConfiguration.Budget(maximumInFlight: 32, startsPerSecond: 20, burst: 20)
    static let outageStart: Duration = .seconds(12 * 3600)
    static let outageLength: Duration = .seconds(5 * 60)
    static let rotationAt: Duration = .seconds(18 * 3600)
    static let day: Duration = .seconds(24 * 3600)
    /// How far the clock moves per step: requests are counted per step.
    static let step: Duration = .seconds(10)

    let people: Int
    let seed: UInt64
    let secret: String

    /// Runs the day; prints the histogram and whether every person ended identified with their own credential.
    ///
    /// - Returns: Whether every person ended identified with their own credential.
    func run(print line: (String) -> Void) async -> Bool {
        let clock = ManualClock()
        let backend = PoolDayBackend(projectID: "proj_demo", secret: secret, clock: clock)
        let pool = SessionPool(
            fetcher: backend,
            configuration: SessionPoolConfiguration(
                session: SessionConfiguration(randomSeed: seed), budget: Self.budget),
            clock: clock
        )
        let accounts = (0..<people).map { AccountID("person-\($0)") }
        line(
            "Pool: \(people) people signed in at once through one budget (\(Self.budget.maximumInFlight) in flight, "
                + "\(Int(Self.budget.startsPerSecond)) starts/s); a 5-minute outage at hour 12, a secret rotation "
                + "at hour 18.")
        let signIns = await pool.startCalls(people) { pool, index in try await pool.signIn(accounts[index]) }
        var perStep: [Int] = []
        var rotated = false
        var outage = false
        var duringOutage = 0
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
                for account in accounts {
                    if let credential = try? pool.identityHeaders(for: account).credential(),
                        !backend.verifies(credential)
                    {
                        await pool.credentialRejected(credential, for: account)
                    }
                }
            }
            await advanceOneStep(clock, pool)
            perStep.append(backend.requests - before)
            if outage { duringOutage += backend.requests - before }
        }
        for task in signIns { _ = try? await task.value }
        printHistogram(perStep, print: line)
        let identified = accounts.filter { account in
            guard let credential = try? pool.identityHeaders(for: account).credential() else { return false }
            return credential.email == PoolDayBackend.email(for: account) && backend.verifies(credential)
        }.count
        let metrics = pool.metrics
        line(
            "Pool: \(identified) of \(people) people identified with their own credential at the end; "
                + "\(backend.requests) backend requests, \(metrics.budgetWaits) waited for the budget.")
        line(
            "Pool: the backend was down for \(Int(Self.outageLength.seconds / 60)) minutes, answering 503 with "
                + "Retry-After: 60; it received \(duringOutage) requests meanwhile, each Retry-After pausing every "
                + "person's fetches.")
        await pool.shutdown()
        return identified == people
    }

    /// Moves the clock one step. While fetches wait for the budget it moves from deadline to deadline, so the
    /// budget's sleeper starts them as they come due; otherwise the whole step at once, so timers due within it fire
    /// at its end (a little late, as after a busy moment of a real machine).
    private func advanceOneStep(_ clock: ManualClock, _ pool: SessionPool) async {
        let end = clock.uptime + Self.step
        while clock.uptime < end {
            let queued = pool.metrics.queuedNeeded + pool.metrics.queuedProactive
            if queued == 0 {
                clock.advance(by: end - clock.uptime)
            } else if clock.advanceToNextDeadline(limit: end - clock.uptime) == .zero {
                clock.advance(by: end - clock.uptime)
            }
            await pool.waitUntilIdle()
        }
    }

    /// One line per hour: the hour's peak and mean requests per second, with a bar of the peak.
    private func printHistogram(_ perStep: [Int], print line: (String) -> Void) {
        let stepsPerHour = Int(3600 / Self.step.seconds)
        let scale = Self.budget.startsPerSecond
        line("Backend requests per second, by hour (peak, mean; a bar of the peak, full at the budget's rate):")
        for hour in 0..<(perStep.count / stepsPerHour) {
            let steps = perStep[(hour * stepsPerHour)..<((hour + 1) * stepsPerHour)]
            let peak = Double(steps.max() ?? 0) / Self.step.seconds
            let mean = Double(steps.reduce(0, +)) / 3600
            let width = Int((peak / scale * 20).rounded(.up))
            let bar = String(repeating: "#", count: min(20, width)).padding(toLength: 20, withPad: " ", startingAt: 0)
            var mark = ""
            if hour == Int(Self.outageStart.seconds / 3600) { mark = "  outage" }
            if hour == Int(Self.rotationAt.seconds / 3600) { mark = "  rotation" }
            let hourText = String(format: "%02d", hour)
            line(String(format: "  h\(hourText) |\(bar)| %5.1f /s peak, %5.2f /s mean\(mark)", peak, mean))
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
