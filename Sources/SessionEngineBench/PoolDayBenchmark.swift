import Foundation
import SessionEngine
import SessionEngineBackend
import SessionEngineTestKit

/// A pool's day in virtual time: a secret rotation that rejects every account's credential at once, 24 hours of
/// renewals, and a 5-minute outage at hour 12.
///
/// Real pools, real engines and their state machines decide every fetch, on a manual clock; only the backend is
/// simulated: it answers after 200 ms of virtual time with a 900-second credential and counts when each fetch began.
/// The rotation, and one run of each day, go through a budget scaled to the accounts (``Budgeting/scaled``); another
/// run of each day goes through a budget set to flatten the load (``Budgeting/smoothing``). The baselines of the
/// day's figures run the same pool with a budget so large it never binds: what engines renewing on their own would
/// do.
struct PoolDayBenchmark: Benchmark {
    let name = "pool-day"
    let summary = "a pool through a secret rotation, 24 virtual hours of renewals and a 5-minute outage at hour 12"

    /// How far the clock moves at a time while no fetch waits for the budget.
    private static let step: Duration = .seconds(1)
    /// How far it moves at a time while fetches wait for the budget, so its sleeper admits them as tokens come.
    private static let fineStep: Duration = .milliseconds(100)
    private static let latency: Duration = .milliseconds(200)
    private static let outageLength: Duration = .seconds(5 * 60)
    /// The backend's credentials' lifetime in seconds, as the signer's default.
    static let lifetime = 900.0

    func run(_ options: Options) async throws -> [Figure] {
        // The pool's timers sleep once for all accounts, so a step of the clock costs little; the days are the
        // wall time: five of them at 10,000 accounts take about two and a half minutes.
        let rotating = options.quick ? 300 : 100_000
        let daily = options.dayAccounts ?? (options.quick ? 300 : 10_000)
        let day: Duration = .seconds(options.quick ? 2 * 3600 : 24 * 3600)
        let hours = Int(day.seconds / 3600)
        let outageStart = day / 2

        progress("  pool-day: \(grouped(rotating)) accounts, every credential rejected at once")
        let rotation = try await rotate(accounts: rotating)
        let budget = Budgeting.scaled.limits(for: rotating)
        let bound = budget.startsPerSecond + Double(budget.burst)
        let ideal = Double(rotating) / budget.startsPerSecond
        var figures = [
            Figure(
                name,
                Measurement(
                    "\(grouped(rotating)) sign-ins at once: backend peak fetch starts per virtual second", .perSecond,
                    [rotation.signInPeak]),
                against: Measurement("the budget: rate plus bucket", .perSecond, [bound])
            ).goal("≤ 1.0×") { $0 <= 1.0 },
            Figure(
                name,
                Measurement(
                    "\(grouped(rotating)) sign-ins at once: all identified after (virtual)", .seconds,
                    [rotation.signInSeconds]),
                against: Measurement("accounts / starts per second", .seconds, [ideal]),
                note: "200 ms backend latency, at most 128 in flight"
            ).goal("≤ 1.1×") { $0 <= 1.1 },
            Figure(
                name,
                Measurement(
                    "rotation across \(grouped(rotating)) accounts: backend peak fetch starts per virtual second",
                    .perSecond, [rotation.peak]),
                against: Measurement(
                    "the budget: \(String(format: "%g", budget.startsPerSecond)) starts per second plus the bucket's \(budget.burst)",
                    .perSecond, [bound])
            ).goal("≤ 1.0×") { $0 <= 1.0 },
            Figure(
                name,
                Measurement(
                    "rotation: \(grouped(rotating)) accounts identified again with a new credential after (virtual)",
                    .seconds, [rotation.seconds]),
                against: Measurement("accounts / starts per second", .seconds, [ideal]),
                note: "\(grouped(rotation.fetches)) fetches from the rotation on; 200 ms backend latency"
            ).goal("≤ 1.1×") { $0 <= 1.1 },
        ]

        progress("  pool-day: \(grouped(daily)) accounts, \(hours) virtual hours through a budget that never binds")
        let steadyFree = try await runDay(accounts: daily, length: day, outageAt: nil, budget: .unbounded)
        progress("  pool-day: the same outage at hour \(hours / 2) through a budget that never binds")
        let outageFree = try await runDay(accounts: daily, length: day, outageAt: outageStart, budget: .unbounded)
        for budget in [Budgeting.scaled, .smoothing] {
            progress("  pool-day: \(grouped(daily)) accounts, \(hours) virtual hours through \(budget.name)")
            let steady = try await runDay(accounts: daily, length: day, outageAt: nil, budget: budget)
            figures.append(
                peakOverMean(
                    "\(hours) h of renewals, \(grouped(daily)) accounts, \(budget.name): peak / mean fetch starts per "
                        + "second after the first renewal wave", steady.steadyRatio,
                    neverBinding: steadyFree.steadyRatio, below: 1.5,
                    note: String(
                        format: "%@; peak %.0f/s, mean %.1f/s from %.0f s on, %d identities expired (never binding: "
                            + "peak %.0f/s, mean %.1f/s from %.0f s on)",
                        budget.describe(for: daily), steady.steadyPeak, steady.steadyMean, steady.firstWaveEnd,
                        steady.expiries, steadyFree.steadyPeak, steadyFree.steadyMean, steadyFree.firstWaveEnd)))
            progress("  pool-day: the same outage through \(budget.name)")
            let outage = try await runDay(accounts: daily, length: day, outageAt: outageStart, budget: budget)
            figures.append(
                peakOverMean(
                    "outage recovery, \(grouped(daily)) accounts, 5-minute outage at hour \(hours / 2), "
                        + "\(budget.name): peak / mean of the failed accounts' first fetch starts per second after it",
                    outage.recoveryRatio, neverBinding: outageFree.recoveryRatio, below: 2,
                    note: String(
                        format: "%d accounts failed, recovered within %.0f s (peak %.0f/s, mean %.1f/s); never "
                            + "binding: %d within %.0f s (peak %.0f/s); independent engines (fleet): 8.9×",
                        outage.failedAccounts, outage.recoverySeconds, outage.recoveryPeak, outage.recoveryMean,
                        outageFree.failedAccounts, outageFree.recoverySeconds, outageFree.recoveryPeak)))
            figures.append(
                Figure(
                    name,
                    Measurement(
                        "fetches the backend received while it was down for 5 minutes, \(budget.name)", .count,
                        [Double(outage.outageRequests)]),
                    against: Measurement(
                        "a budget that never binds or holds", .count, [Double(outageFree.outageRequests)]),
                    note: "the pool holds its accounts' fetches after 8 outages in a row and probes every 5 s"))
            figures.append(
                peakOverMean(
                    "the backend's load in the hour after the outage, \(budget.name): peak / mean of every fetch "
                        + "start per second", outage.afterRatio, neverBinding: outageFree.afterRatio, below: 2,
                    note: String(
                        format: "peak %.0f/s, mean %.1f/s, %d identities expired over the run (never binding: peak "
                            + "%.0f/s, mean %.1f/s, %d expired)", outage.afterPeak, outage.afterMean, outage.expiries,
                        outageFree.afterPeak, outageFree.afterMean, outageFree.expiries)))
        }
        return figures
    }

    /// A peak-over-mean figure of a run, against the same run through a budget that never binds.
    private func peakOverMean(
        _ description: String, _ ratio: Double, neverBinding: Double, below limit: Double, note: String
    ) -> Figure {
        Figure(
            name, Measurement(description, .ratio, [ratio]),
            against: Measurement("a budget that never binds or holds", .ratio, [neverBinding]),
            goal: Goal(text: "< \(String(format: "%g", limit))×", met: ratio < limit), note: note)
    }

    /// The budgets a day runs through.
    enum Budgeting {
        /// `accounts / 200` starts per second, a bucket of one second's worth: 200 s to start a fetch for every
        /// account, about three times the mean renewal load.
        case scaled
        /// 1.2 times the mean renewal load (one fetch per account every lifetime × the renewal fraction), a bucket
        /// of a fifth of a second's worth: a budget set to flatten the backend's load, which proactive renewals can
        /// wait for.
        case smoothing
        /// So large it never binds, and never holds fetches for an outage: what engines renewing on their own would do.
        case unbounded

        var name: String {
            switch self {
            case .scaled: "the scaled budget"
            case .smoothing: "a smoothing budget"
            case .unbounded: "a budget that never binds or holds"
            }
        }

        func limits(for accounts: Int) -> SessionPoolConfiguration.Budget {
            switch self {
            case .scaled:
                return SessionPoolConfiguration.Budget(maximumInFlight: 128, startsPerSecond: Double(accounts) / 200)
            case .smoothing:
                let interval = PoolDayBenchmark.lifetime * RenewalPolicy().fraction
                let rate = 1.2 * Double(accounts) / interval
                return SessionPoolConfiguration.Budget(
                    maximumInFlight: 128, startsPerSecond: rate, burst: max(1, Int(rate / 5)))
            case .unbounded:
                return SessionPoolConfiguration.Budget(
                    maximumInFlight: 1 << 30, startsPerSecond: 1e9, burst: 1 << 30, outageThreshold: nil)
            }
        }

        func describe(for accounts: Int) -> String {
            let limits = limits(for: accounts)
            return String(format: "%.1f starts/s, bucket %d", limits.startsPerSecond, limits.burst)
        }
    }

    /// A pool of `accounts` on `clock` through `budget`.
    private static func pool(
        accounts: Int,
        backend: DayBackend,
        clock: ManualClock,
        budget: Budgeting
    ) -> SessionPool {
        SessionPool(
            fetcher: backend,
            configuration: SessionPoolConfiguration(
                session: SessionConfiguration(randomSeed: 7), budget: budget.limits(for: accounts)),
            clock: clock
        )
    }

    /// Signs `accounts` in at once through the budget, rotates the backend's secret once all are identified, and
    /// reports every account's credential rejected, at one virtual instant.
    ///
    /// - Returns: The peak fetch starts in any virtual second from the rotation on, the virtual time until every
    ///   account is identified with a credential other than the rejected one, and the fetches started meanwhile;
    ///   for the sign-ins before it, the peak fetch starts in a virtual second and the virtual time until every
    ///   account was identified.
    private func rotate(accounts count: Int) async throws -> (
        peak: Double, seconds: Double, fetches: Int, signInPeak: Double, signInSeconds: Double
    ) {
        let clock = ManualClock()
        let backend = DayBackend(clock: clock, accounts: count, latency: Self.latency)
        let pool = Self.pool(accounts: count, backend: backend, clock: clock, budget: .scaled)
        let accounts = (0..<count).map { AccountID("member-\($0)") }
        let signIns = await pool.startCalls(count) { pool, index in try await pool.signIn(accounts[index]) }
        // Fine steps while fetches wait for the budget, as in the rotation, so the budget's sleeper admits them as
        // its tokens come. An account renewing meanwhile still has a usable credential.
        while backend.issued(generation: 0) < count
            || !accounts.allSatisfy({ (try? pool.identityHeaders(for: $0)) != nil })
        {
            await advance(clock, pool, by: Self.step)
        }
        for task in signIns { try await task.value }
        let signInSeconds = clock.uptime.seconds
        let signInPeak = Double(backend.record.perSecond.prefix(Int(signInSeconds.rounded(.up))).max() ?? 0)

        let rejected = try accounts.map { try pool.identityHeaders(for: $0).credential() }
        backend.rotate()
        let start = clock.uptime
        backend.recordStarts()
        // The service now refuses every credential signed with the old secret: each account's next request reports
        // it, all in the same moment.
        for (account, credential) in zip(accounts, rejected) { await pool.credentialRejected(credential, for: account) }
        var pending = Array(accounts.indices)
        while !pending.isEmpty {
            clock.advance(by: Self.fineStep)
            await pool.waitUntilIdle()
            guard backend.issued(generation: 1) >= count else { continue }
            pending.removeAll { index in
                let credential = try? pool.identityHeaders(for: accounts[index]).credential()
                return credential.map { $0.signature != rejected[index].signature } ?? false
            }
        }
        let took = (clock.uptime - start).seconds
        await pool.shutdown()
        let starts = backend.recordedStarts
        return (Double(peakInAnySecond(starts)), took, starts.count, signInPeak, signInSeconds)
    }

    /// What one day of a pool showed at the backend.
    private struct DayLoad {
        /// When the last account's first renewal started, in seconds since the accounts signed in.
        var firstWaveEnd: Double
        /// The highest fetch starts in one virtual second from `firstWaveEnd` on.
        var steadyPeak: Double
        /// The mean fetch starts per second over the same window.
        var steadyMean: Double
        /// Accounts that failed a fetch in the outage.
        var failedAccounts: Int
        /// The highest count in one second of failed accounts' first fetch after the outage.
        var recoveryPeak: Double
        /// The mean of those counts per second, from the outage's end to the last one.
        var recoveryMean: Double
        /// From the outage's end to the last failed account's first fetch after it.
        var recoverySeconds: Double
        /// The highest count in one second of every fetch start in the hour after the outage: the backend's load.
        var afterPeak: Double = 0
        /// The mean of those counts per second.
        var afterMean: Double = 0
        /// Times an account's identity expired (identified work refused) over the run, all accounts together.
        var expiries = 0
        /// Fetches the backend received while it was down.
        var outageRequests = 0

        var steadyRatio: Double { steadyPeak / steadyMean }
        var recoveryRatio: Double { recoveryPeak / recoveryMean }
        var afterRatio: Double { afterPeak / afterMean }
    }

    /// Signs `accounts` in at once and runs the pool to `length`, or, with an outage, until every account that failed
    /// in it has fetched again.
    ///
    /// The steady window runs from the first renewal wave's end (the last account's first renewal) to `length`.
    /// Recoveries are the first fetch start of each account that failed in the outage after the outage's end, counted
    /// per second from that end until the last one, as the fleet benchmark counts them.
    private func runDay(accounts count: Int, length: Duration, outageAt: Duration?, budget: Budgeting) async throws
        -> DayLoad
    {
        let clock = ManualClock()
        let backend = DayBackend(clock: clock, accounts: count, latency: Self.latency)
        let pool = Self.pool(accounts: count, backend: backend, clock: clock, budget: budget)
        let accounts = (0..<count).map { AccountID("member-\($0)") }
        let started = ContinuousClock.now
        let signIns = await pool.startCalls(count) { pool, index in try await pool.signIn(accounts[index]) }
        var end = length
        if let outageAt { end = outageAt + Self.outageLength + .seconds(3600) }
        while clock.uptime < end {
            if let outageAt, clock.uptime >= outageAt, clock.uptime < outageAt + Self.outageLength {
                backend.setDown(true)
            } else if let outageAt, clock.uptime >= outageAt + Self.outageLength {
                backend.setDown(false)
                if backend.unrecovered == 0 { break }
            }
            await advance(clock, pool, by: Self.step)
            if Int(clock.uptime.seconds) % 3600 == 0 {
                progress(
                    "    hour \(Int(clock.uptime.seconds) / 3600), "
                        + "\(Unit.seconds.format(started.duration(to: .now).seconds)) wall")
            }
        }
        let expiries = accounts.reduce(0) { $0 + (pool.metrics(for: $1)?.expiries ?? 0) }
        await pool.shutdown()
        for task in signIns { _ = try? await task.value }
        let record = backend.record
        let waveEnd = record.firstWaveEnd ?? length
        let steady = record.perSecond[min(record.perSecond.count, Int(waveEnd.seconds.rounded(.up)))...]
        let steadyTotal = steady.reduce(0) { $0 + Int($1) }
        var load = DayLoad(
            firstWaveEnd: waveEnd.seconds,
            steadyPeak: Double(steady.max() ?? 0),
            steadyMean: Double(steadyTotal) / Double(max(1, steady.count)),
            failedAccounts: record.failedEver, recoveryPeak: 0, recoveryMean: 0, recoverySeconds: 0,
            expiries: expiries)
        if let outageAt {
            let outageEnd = outageAt + Self.outageLength
            let offsets = record.recoveries.map { Int(($0 - outageEnd).seconds) }
            var perSecond = [Int](repeating: 0, count: (offsets.max() ?? 0) + 1)
            for offset in offsets { perSecond[offset] += 1 }
            load.recoveryPeak = Double(perSecond.max() ?? 0)
            load.recoveryMean = Double(offsets.count) / Double(perSecond.count)
            load.recoverySeconds = Double(perSecond.count)
            let from = min(record.perSecond.count, Int(outageEnd.seconds))
            let after = record.perSecond[from..<min(record.perSecond.count, from + 3600)]
            load.afterPeak = Double(after.max() ?? 0)
            load.afterMean = Double(after.reduce(0) { $0 + Int($1) }) / Double(max(1, after.count))
            let down = min(record.perSecond.count, Int(outageAt.seconds))..<from
            load.outageRequests = record.perSecond[down].reduce(0) { $0 + Int($1) }
        }
        progress("    \(Unit.seconds.format(started.duration(to: .now).seconds)) wall")
        return load
    }

    /// Moves the clock `step` on. While fetches wait for the budget it moves in fine steps, so the budget's sleeper
    /// admits them as its tokens come; otherwise the whole step at once, so timers due within it fire at its end (a
    /// little late, as after a busy moment of a real machine).
    private func advance(_ clock: ManualClock, _ pool: SessionPool, by step: Duration) async {
        let end = clock.uptime + step
        while clock.uptime < end {
            let metrics = pool.metrics
            let waiting = metrics.queuedNeeded + metrics.queuedProactive > 0
            clock.advance(by: waiting ? min(Self.fineStep, end - clock.uptime) : end - clock.uptime)
            await pool.waitUntilIdle()
        }
    }
}

/// The day's backend: signs for every account after a latency on the manual clock, fails every fetch at once while
/// it is down, rotates its secret, and records when each fetch began.
final class DayBackend: CredentialFetcher {
    /// What the backend saw.
    struct Record {
        /// Fetch starts per virtual second since the clock's start.
        var perSecond: [Int32] = []
        /// Every fetch start's virtual time since ``DayBackend/recordStarts()``.
        var starts: [Duration] = []
        var recording = false
        /// Fetches started per account.
        var fetches: [AccountID: Int] = [:]
        var renewedOnce = 0
        /// When the last account's first renewal started.
        var firstWaveEnd: Duration?
        /// Accounts whose last fetch failed in the outage.
        var failed: Set<AccountID> = []
        var failedEver = 0
        /// When each failed account first fetched again after the outage.
        var recoveries: [Duration] = []
    }

    private struct State {
        var signer: IdentitySigner
        var generation = 0
        var issued = [0]
        var down = false
        var record = Record()
    }

    private let clock: ManualClock
    private let accounts: Int
    private let latency: Duration
    private let state: SanitizedMutex<State>

    init(clock: ManualClock, accounts: Int, latency: Duration) {
        self.clock = clock
        self.accounts = accounts
        self.latency = latency
        state = SanitizedMutex(State(signer: Fixtures.signer(clock: clock)))
    }

    var record: Record { state.withLock { $0.record } }
    var recordedStarts: [Duration] { state.withLock { $0.record.starts } }
    var unrecovered: Int { state.withLock { $0.record.failed.count } }

    /// Credentials issued with the secret of `generation` (0 before the first rotation).
    func issued(generation: Int) -> Int {
        state.withLock { generation < $0.issued.count ? $0.issued[generation] : 0 }
    }

    /// Records every fetch start's time from now on.
    func recordStarts() { state.withLock { $0.record.recording = true } }

    func setDown(_ down: Bool) { state.withLock { $0.down = down } }

    /// Signs with a new secret from now on: the service refuses every credential signed before.
    func rotate() {
        let clock = self.clock
        state.withLock { state in
            state.generation += 1
            state.issued.append(0)
            state.signer = try! IdentitySigner(
                projectID: Fixtures.projectID, secret: Fixtures.secret + "-rotated-\(state.generation)", clock: clock)
        }
    }

    func fetchCredential(for account: AccountID) async throws -> IdentityCredential {
        let now = clock.uptime
        let accounts = self.accounts
        let down = state.withLock { state -> Bool in
            let second = Int(now.seconds)
            if state.record.perSecond.count <= second {
                state.record.perSecond.append(
                    contentsOf: repeatElement(0, count: second + 1 - state.record.perSecond.count))
            }
            state.record.perSecond[second] += 1
            if state.record.recording { state.record.starts.append(now) }
            let fetches = state.record.fetches[account, default: 0] + 1
            state.record.fetches[account] = fetches
            if fetches == 2 {
                state.record.renewedOnce += 1
                if state.record.renewedOnce == accounts { state.record.firstWaveEnd = now }
            }
            if state.down {
                if state.record.failed.insert(account).inserted { state.record.failedEver += 1 }
                return true
            }
            if state.record.failed.remove(account) != nil { state.record.recoveries.append(now) }
            return false
        }
        // Down: the connection is refused at once, a transient failure without `Retry-After`.
        if down { throw SessionError(.fetchFailed, reason: "the backend is down", isTransient: true) }
        try await clock.sleep(for: latency)
        let (signer, expiresAt) = state.withLock { state in
            state.issued[state.generation] += 1
            return (
                state.signer, Int64(clock.now.timeIntervalSince1970.rounded(.down)) + Int64(PoolDayBenchmark.lifetime)
            )
        }
        return try signer.sign(email: Fixtures.email(for: account), properties: nil, expiresAt: expiresAt)
    }
}
