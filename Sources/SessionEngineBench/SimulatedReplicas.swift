import Foundation
import SessionEngine
import SessionEngineTestKit

/// The fleet as replicas of one daemon: 100 pools in virtual time, each account signed in on four of them, through a
/// secret rotation and an outage, with and without one fleet coordinator.
///
/// Real pools, real engines and the in-process coordinator's ledger (`FleetLedger`, the rules the Redis scripts keep)
/// decide every fetch, on one manual clock; only the backend is simulated, as pool-day's: it answers after 200 ms with
/// a 900-second credential, refuses every fetch at once while it is down, and counts fetch starts per virtual second.
/// The fleet's budget is set to flatten the backend's load: 1.25 times the mean renewal load of the accounts (one fetch
/// per account every lifetime × the renewal fraction), a bucket of one. Each replica's own budget has the same rate,
/// so on its own a replica renews its accounts as it would without a fleet.
struct SimulatedReplicas {
    /// Replicas each account is signed in on.
    static let copies = 4
    static let latency: Duration = .milliseconds(200)
    /// The load is measured from here on: the sign-in and its first renewal wave are over.
    static let windowStart: Duration = .seconds(3600)
    static let rotationAt: Duration = .seconds(2 * 3600)
    static let outageAt: Duration = .seconds(3 * 3600)
    static let outageLength: Duration = .seconds(5 * 60)
    static let end: Duration = .seconds(4 * 3600)

    let replicas: Int
    let accounts: Int
    /// How far the clock moves at a time: fetches held by the fleet wait in deadlines, which fire as it passes them,
    /// at most one step late.
    var step: Duration = .milliseconds(100)

    /// The fleet's budget, and each replica's.
    var budget: SessionPoolConfiguration.Budget {
        let rate = 1.25 * Double(accounts) / (PoolDayBenchmark.lifetime * RenewalPolicy().fraction)
        return SessionPoolConfiguration.Budget(maximumInFlight: 128, startsPerSecond: rate, burst: 1)
    }

    /// What one run showed.
    struct Load {
        /// Fetch starts per virtual second at the backend, from the clock's start.
        var perSecond: [Int32] = []
        /// The coordinator's decisions per virtual second (none without one).
        var decisionsPerSecond: [Int32] = []
        /// From the rotation until every identity holds a credential of the new secret.
        var rotationSeconds = 0.0
        /// Accounts the backend fetched for more than once from the rotation until every identity was back.
        var rotationRefetched = 0
        /// Renewals of every identity in the steady hour before the rotation.
        var steadyRenewals = 0
        /// Identities without a usable credential at the end.
        var notIdentified = 0
        /// Times an identity expired over the run, all replicas together.
        var expiries = 0
        var fleet: FleetMetrics?

        /// The window the load is measured over: from ``SimulatedReplicas/windowStart`` to the end.
        var window: ArraySlice<Int32> {
            let start = min(perSecond.count, Int(SimulatedReplicas.windowStart.seconds))
            return perSecond[start..<min(perSecond.count, Int(SimulatedReplicas.end.seconds))]
        }
        var peak: Double { Double(window.max() ?? 0) }
        var mean: Double { Double(window.reduce(0) { $0 + Int($1) }) / Double(max(1, window.count)) }
        /// Fetch starts in the hour before the rotation.
        var steadyFetches: Int {
            let hour = Int(SimulatedReplicas.windowStart.seconds)..<Int(SimulatedReplicas.rotationAt.seconds)
            return perSecond[hour.clamped(to: perSecond.indices)].reduce(0) { $0 + Int($1) }
        }
        /// Fetch starts while the backend was down.
        var outageFetches: Int {
            let down =
                Int(
                    SimulatedReplicas.outageAt.seconds)..<Int(
                    (SimulatedReplicas.outageAt + SimulatedReplicas.outageLength).seconds)
            return perSecond[down.clamped(to: perSecond.indices)].reduce(0) { $0 + Int($1) }
        }
        /// The most decisions in one virtual second.
        var decisionPeak: Double { Double(decisionsPerSecond.max() ?? 0) }
    }

    /// The accounts replica `replica` holds: those whose index is the replica's modulo `replicas / copies`, so each
    /// account lives on `copies` replicas spread across the fleet.
    func accounts(of replica: Int) -> [Int] {
        let stride = replicas / Self.copies
        return Array(Swift.stride(from: replica % stride, to: accounts, by: stride))
    }

    /// Runs the fleet for four virtual hours: the sign-in, a steady hour, a rotation at hour 2, an outage of five
    /// minutes at hour 3.
    func run(coordinated: Bool, seed: UInt64) async -> Load {
        let clock = ManualClock()
        let backend = DayBackend(clock: clock, accounts: accounts, latency: Self.latency)
        let budget = self.budget
        let coordinator = DecisionCounter(
            InProcessFleetCoordinator(
                limits: FleetLimits(
                    startsPerSecond: budget.startsPerSecond, burst: budget.burst,
                    maximumInFlight: budget.maximumInFlight, sharesCredentials: true),
                clock: clock),
            clock: clock)
        let ids = (0..<accounts).map { AccountID("member-\($0)") }
        let held = (0..<replicas).map { accounts(of: $0) }
        let pools = (0..<replicas).map { replica in
            let configuration = SessionPoolConfiguration(
                session: SessionConfiguration(randomSeed: seed &+ UInt64(replica) &* 0x9E37_79B9), budget: budget)
            return coordinated
                ? SessionPool(
                    fetcher: backend, configuration: configuration, clock: clock,
                    coordination: FleetCoordination(coordinator, sharesCredentials: true))
                : SessionPool(fetcher: backend, configuration: configuration, clock: clock)
        }
        var signIns: [Task<Void, any Error>] = []
        for (replica, pool) in pools.enumerated() {
            let mine = held[replica]
            signIns += await pool.startCalls(mine.count) { pool, index in
                let account = ids[mine[index]]
                try await pool.signIn(account, expecting: Fixtures.email(for: account))
            }
        }
        var load = Load()
        var rejected: [(replica: Int, account: Int, signature: String)] = []
        var rotationPending = false
        var fetchesBefore: [AccountID: Int] = [:]
        var renewalsAtStart = 0
        let started = ContinuousClock.now
        while clock.uptime < Self.end {
            let now = clock.uptime
            if now == Self.windowStart {
                renewalsAtStart = renewals(pools, held, ids)
            } else if now == Self.rotationAt {
                load.steadyRenewals = renewals(pools, held, ids) - renewalsAtStart
                backend.rotate()
                // The service now refuses every credential signed with the old secret: each identity's next request
                // reports it, all in the same moment.
                for (replica, pool) in pools.enumerated() {
                    for index in held[replica] {
                        guard let credential = try? pool.identityHeaders(for: ids[index]).credential() else { continue }
                        rejected.append((replica, index, credential.signature))
                        await pool.credentialRejected(credential, for: ids[index])
                    }
                }
                rotationPending = true
                fetchesBefore = backend.record.fetches
            } else if now == Self.outageAt {
                backend.setDown(true)
            } else if now == Self.outageAt + Self.outageLength {
                backend.setDown(false)
            }
            clock.advance(by: step)
            await pools[0].waitUntilIdle()
            if rotationPending, Int(clock.uptime.seconds * 10) % 10 == 0,
                backend.issued(generation: 1) >= accounts
            {
                rejected.removeAll { entry in
                    let credential = try? pools[entry.replica].identityHeaders(for: ids[entry.account]).credential()
                    return credential.map { $0.signature != entry.signature } ?? false
                }
                if rejected.isEmpty {
                    // Accounts the backend fetched for more than once since the rotation.
                    for (account, count) in backend.record.fetches where count - fetchesBefore[account, default: 0] > 1
                    {
                        load.rotationRefetched += 1
                    }
                    rotationPending = false
                    load.rotationSeconds = (clock.uptime - Self.rotationAt).seconds
                }
            }
            if Int(clock.uptime.seconds * 10) % 36000 == 0 {
                progress(
                    "    hour \(Int(clock.uptime.seconds) / 3600), "
                        + "\(Unit.seconds.format(started.duration(to: .now).seconds)) wall")
            }
        }
        if rotationPending { load.rotationSeconds = .infinity }
        for (replica, pool) in pools.enumerated() {
            for index in held[replica] {
                if (try? pool.identityHeaders(for: ids[index])) == nil { load.notIdentified += 1 }
                load.expiries += pool.metrics(for: ids[index])?.expiries ?? 0
            }
            if let metrics = pool.metrics.fleet {
                var total = load.fleet ?? FleetMetrics()
                total.add(metrics)
                load.fleet = total
            }
        }
        for pool in pools { await pool.shutdown() }
        for task in signIns { _ = try? await task.value }
        load.perSecond = backend.record.perSecond
        load.decisionsPerSecond = coordinated ? coordinator.perSecond : []
        return load
    }

    /// Renewals so far of every identity, all replicas together.
    private func renewals(_ pools: [SessionPool], _ held: [[Int]], _ ids: [AccountID]) -> Int {
        var total = 0
        for (replica, pool) in pools.enumerated() {
            for index in held[replica] { total += pool.metrics(for: ids[index])?.renewals ?? 0 }
        }
        return total
    }
}

/// A coordinator that counts the decisions it is asked for per second of its clock, and passes them on.
private final class DecisionCounter: FleetCoordinator {
    private let inner: InProcessFleetCoordinator
    private let clock: ManualClock
    private let counts = Locked<[Int32]>([])

    init(_ inner: InProcessFleetCoordinator, clock: ManualClock) {
        self.inner = inner
        self.clock = clock
    }

    var perSecond: [Int32] { counts.value }

    func decide(_ fetch: FleetFetch) async throws -> FleetDecision {
        let second = Int(clock.uptime.seconds)
        counts.withLock { counts in
            if counts.count <= second { counts.append(contentsOf: repeatElement(0, count: second + 1 - counts.count)) }
            counts[second] += 1
        }
        return try await inner.decide(fetch)
    }

    func fetchEnded(_ fetch: FleetFetch, lease: FleetLease?, outcome: FleetOutcome) async throws {
        try await inner.fetchEnded(fetch, lease: lease, outcome: outcome)
    }
}
