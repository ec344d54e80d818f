import Foundation
import SessionEngineBackend
import SessionEngineModel
import SessionEngineTestKit
import Synchronization
import Testing

@testable import SessionEngine

/// A scripted fetcher that also records when, on the pool's clock, each fetch reached it, and from which member.
final class TimedFetcher: CredentialFetcher, ActivityLedgerFetcher {
    struct Start {
        /// When, on the monotonic clock, the member's engine started the fetch: its request's `startedAt`. The
        /// request may then wait for the pool's budget before it reaches the backend.
        let time: Duration
        let account: AccountID
        /// The serial of the account's member when the fetch reached the backend.
        let member: UInt64?
        let epoch: UInt64
    }

    let script = ScriptedCredentialFetcher()
    let clock: ManualClock
    /// Names the account's member when a fetch arrives; set once the pool exists.
    let memberOf = Mutex<(@Sendable (AccountID) -> UInt64?)?>(nil)
    private let starts = Mutex<(all: [Duration], unchecked: [Start])>(([], []))
    /// From which monotonic time on the wall clock stood how far from it, oldest first: one entry per jump.
    private let wallOffsets = Mutex<[(from: Duration, offset: TimeInterval)]>([])
    private let outstanding = Mutex<[AccountID: Int]>([:])

    init(clock: ManualClock) {
        self.clock = clock
        noteWallClock()
    }

    /// Records where the wall clock stands against the monotonic clock, after a jump.
    func noteWallClock() {
        let (uptime, wall) = (clock.uptime, clock.now.timeIntervalSince1970)
        wallOffsets.withLock { $0.append((uptime, wall - uptime.timeInterval)) }
    }

    /// The monotonic time at which the wall clock read `wall`, no later than now: the latest stretch between two
    /// jumps in which it did.
    private func uptime(atWall wall: Date) -> Duration {
        let now = clock.uptime
        return wallOffsets.withLock { offsets in
            for (index, entry) in offsets.enumerated().reversed() {
                let uptime = Duration.seconds(wall.timeIntervalSince1970 - entry.offset)
                let end = index + 1 < offsets.count ? offsets[index + 1].from : now
                // Wall times are `Date`s: a millisecond either side is their rounding.
                if uptime >= entry.from - .milliseconds(1), uptime <= end + .milliseconds(1) {
                    return min(max(uptime, entry.from), end)
                }
            }
            return now
        }
    }

    func attach(_ ledger: ActivityLedger) { script.attach(ledger) }

    var startTimes: [Duration] { starts.withLock { $0.all } }

    /// The starts since the last call.
    func takeStarts() -> [Start] {
        starts.withLock { starts in
            defer { starts.unchecked.removeAll() }
            return starts.unchecked
        }
    }

    /// The accounts with a fetch that reached this fetcher and has not returned.
    var accountsFetching: [AccountID] { outstanding.withLock { Array($0.filter { $0.value > 0 }.keys) } }

    /// How many fetches of each account reached this fetcher and have not returned.
    var outstandingByAccount: [AccountID: Int] { outstanding.withLock { $0 } }

    func fetchCredential(for account: AccountID) async throws -> IdentityCredential {
        try await script.fetchCredential(for: account)
    }

    func fetchCredential(_ request: FetchRequest) async throws -> IdentityCredential {
        let member = memberOf.withLock { $0 }?(request.account)
        let arrival = clock.uptime
        var decided = request.startedAt.map { uptime(atWall: $0) } ?? arrival
        // A request that did not wait for the budget reached the backend in the step that started it.
        if arrival - decided < .milliseconds(1) { decided = arrival }
        let start = Start(time: decided, account: request.account, member: member, epoch: request.epoch)
        starts.withLock {
            $0.all.append(arrival)
            $0.unchecked.append(start)
        }
        outstanding.withLock { $0[request.account, default: 0] += 1 }
        defer { outstanding.withLock { $0[request.account, default: 0] -= 1 } }
        return try await script.fetchCredential(request)
    }
}

/// One operation of a pool program.
private enum PoolOperation: CustomStringConvertible {
    case signIn(Int)
    case signOut(Int)
    case read(Int)
    case work(Int, seconds: Int)
    case renew(Int)
    case reject(Int)
    case answer(Int)
    case failWithRetryAfter(seconds: Int)
    /// The backend is unreachable for the next fetches waiting at it.
    case outage(Int)
    /// The host's backend pushes the account a fresh credential.
    case push(Int)
    /// The host pushes the account another account's credential, which an established account must refuse.
    case pushForeign(Int, of: Int)
    /// The service's secret rotated: every account's credential is rejected.
    case rotate
    /// This host's wall clock jumps (an NTP step, a suspended VM resuming); the monotonic clock does not.
    case jumpWallClock(seconds: Int)
    case advance(seconds: Int)

    var description: String {
        switch self {
        case .signIn(let account): "signIn(\(account))"
        case .signOut(let account): "signOut(\(account))"
        case .read(let account): "read(\(account))"
        case .work(let account, let seconds): "work(\(account), \(seconds) s)"
        case .renew(let account): "renew(\(account))"
        case .reject(let account): "reject(\(account))"
        case .answer(let count): "answer(\(count))"
        case .failWithRetryAfter(let seconds): "503(Retry-After \(seconds) s)"
        case .outage(let count): "outage(\(count))"
        case .push(let account): "push(\(account))"
        case .pushForeign(let account, let other): "push(\(account), credential of \(other))"
        case .rotate: "rotate"
        case .jumpWallClock(let seconds): "jumpWallClock(\(seconds) s)"
        case .advance(let seconds): "advance(\(seconds) s)"
        }
    }

    static func random(_ random: inout SplitMix64, accounts: Int) -> PoolOperation {
        let account = Int(random.next() % UInt64(accounts))
        switch random.next() % 28 {
        case 0...3: return .signIn(account)
        case 4: return .signOut(account)
        case 5...6: return .read(account)
        case 7...8: return .work(account, seconds: Int(random.next() % 120) + 1)
        case 9: return .renew(account)
        case 10: return .reject(account)
        case 11...14: return .answer(Int(random.next() % 3) + 1)
        case 15: return .failWithRetryAfter(seconds: Int(random.next() % 40) + 1)
        case 16...17: return .outage(Int(random.next() % 3) + 1)
        case 18: return .push(account)
        case 19: return .pushForeign(account, of: (account + 1 + Int(random.next() % UInt64(accounts - 1))) % accounts)
        case 20: return .rotate
        case 21: return .jumpWallClock(seconds: [-3600, -600, -30, 30, 600, 3600][Int(random.next() % 6)])
        default: return .advance(seconds: [1, 1, 5, 30, 300, 700][Int(random.next() % 6)])
        }
    }
}

/// Random programs over several accounts of one pool, checked after every step against the pool's rules (never more
/// than the budget's fetches in flight, never more starts in any second than the bucket allows, no account's
/// credential handed out for another, no fetch for an account that left, no eviction cancelling running work) and,
/// once the pool is idle, against the engine model's invariants for every account (``checkAccounts``). After the
/// program the backend answers every fetch: every account the pool holds must become identified (liveness), and
/// after the shutdown nothing may be left running.
@Suite struct PoolPropertyTests {
    static let accounts = 4
    static let budget = SessionPoolConfiguration.Budget(maximumInFlight: 2, startsPerSecond: 2, burst: 3)
    /// How long the backend answering every fetch may take to identify every held account.
    static let recoveryRounds = 40

    @Test func randomProgramsKeepThePoolsRules() async {
        let settings = PropertySettings.current(defaultSeed: 0x9001, defaultIterations: 500)
        var operations = 0
        var failures: [String] = []
        for index in 0..<settings.iterations where failures.isEmpty {
            let seed = index == 0 ? settings.seed : PropertyRandom.programSeed(run: settings.seed, index: index)
            var random = SplitMix64(seed: seed)
            let program = (0..<40).map { _ in PoolOperation.random(&random, accounts: Self.accounts) }
            operations += program.count
            if let failure = await Self.run(program, seed: seed) {
                failures.append("program \(seed): \(failure)\n  \(program.map(\.description).joined(separator: ", "))")
            }
        }
        print(
            "pool model: \(settings.iterations) programs, \(operations) operations, \(failures.count) failures, "
                + "seed \(settings.seed)")
        for failure in failures { Issue.record("\(failure)") }
    }

    /// Runs one program; returns the first broken rule.
    private static func run(_ program: [PoolOperation], seed: UInt64) async -> String? {
        let clock = ManualClock()
        let fetcher = TimedFetcher(clock: clock)
        let signer = try! IdentitySigner(projectID: "proj_pool_model", secret: "pool-model-secret", clock: clock)
        let probes = MemberProbes()
        let pool = SessionPool(
            fetcher: fetcher,
            configuration: SessionPoolConfiguration(
                session: SessionConfiguration(randomSeed: seed),
                budget: Self.budget,
                maximumAccounts: 3
            ),
            clock: clock,
            observer: { probes.observe(member: $0, event: $1) }
        )
        fetcher.memberOf.withLock { $0 = { [weak pool] in pool?.member($0)?.serial } }
        let names = (0..<Self.accounts).map { AccountID("member-\($0)") }
        var tasks: [Task<Void, Never>] = []
        /// Per account, the steps at which the program signed it out; work cancelled by the pool must follow one.
        var signedOutAt: [AccountID: [Int]] = [:]
        let violations = Mutex<[String]>([])
        let cancelledWork = Mutex<[(account: AccountID, started: Int)]>([])
        let shuttingDown = Atomic<Bool>(false)
        await pool.addAccountChangeHook { change in
            // A member acts for one account: its changes enter it or leave it, never another account.
            if change.from != nil, change.to != nil {
                violations.withLock { $0.append("a hook ran from \(change.from!) to \(change.to!)") }
            }
        }

        for (step, operation) in program.enumerated() {
            var idle = true
            switch operation {
            case .signIn(let index):
                tasks.append(asVoid(await pool.startCall { try await $0.signIn(names[index]) }))
                idle = false
            case .signOut(let index):
                signedOutAt[names[index], default: []].append(step)
                if pool.accounts.contains(names[index]) {
                    tasks.append(asVoid(await pool.startCall { await $0.signOut(names[index]) }))
                }
                idle = false
            case .read(let index):
                if let headers = try? pool.identityHeaders(for: names[index]),
                    let credential = try? headers.credential(), credential.email != email(names[index])
                {
                    return "step \(step): \(names[index])'s headers hold \(credential.email)'s credential"
                }
                idle = false
            case .work(let index, let seconds):
                let account = names[index]
                idle = false
                guard pool.state(of: account).isIdentified || pool.state(of: account).isRenewing else { break }
                let task = await pool.startCall { pool in
                    do {
                        try await pool.withIdentity(for: account) { credential in
                            if credential.email != email(account) {
                                violations.withLock { $0.append("work for \(account) got \(credential.email)") }
                            }
                            try await clock.sleep(for: .seconds(seconds))
                        }
                    } catch let error as SessionError where error.code == .accountChanged {
                        if !shuttingDown.load(ordering: .relaxed) {
                            cancelledWork.withLock { $0.append((account, step)) }
                        }
                    }
                }
                tasks.append(asVoid(task))
            case .renew(let index):
                idle = false
                guard pool.accounts.contains(names[index]) else { break }
                tasks.append(asVoid(await pool.startCall { _ = try await $0.renew(for: names[index]) }))
            case .reject(let index):
                if let credential = try? pool.identityHeaders(for: names[index]).credential() {
                    await pool.credentialRejected(credential, for: names[index])
                }
                await pool.waitUntilIdle()
            case .rotate:
                for account in names {
                    guard let credential = try? pool.identityHeaders(for: account).credential() else { continue }
                    await pool.credentialRejected(credential, for: account)
                }
                await pool.waitUntilIdle()
            case .push(let index), .pushForeign(let index, _):
                let account = names[index]
                var owner = account
                if case .pushForeign(_, let other) = operation { owner = names[other] }
                let established = pool.state(of: account).isIdentified || pool.state(of: account).isRenewing
                // Before an account's first credential the pool cannot know its email: handing it another account's
                // is the host's mistake, which no session library can tell from a first sign-in.
                if owner != account, !established { break }
                let credential = try! signer.sign(email: email(owner))
                let accepted = (try? await pool.setIdentityCredential(credential, for: account)) != nil
                if owner != account, established, accepted {
                    return "step \(step): \(account) accepted \(owner)'s credential"
                }
                await pool.waitUntilIdle()
            case .answer(let count):
                for _ in 0..<count where fetcher.script.pendingCount > 0 {
                    let request = await fetcher.script.nextRequest()
                    let credential = try! signer.sign(email: email(request.account))
                    fetcher.script.respond(to: request, with: .success(credential))
                }
                await pool.waitUntilIdle()
            case .failWithRetryAfter(let seconds):
                if fetcher.script.pendingCount > 0 {
                    let request = await fetcher.script.nextRequest()
                    fetcher.script.respond(
                        to: request,
                        with: .failure(
                            SessionError(
                                .fetchFailed, reason: "503", isTransient: true, retryAfter: .seconds(seconds))))
                }
                await pool.waitUntilIdle()
            case .outage(let count):
                for _ in 0..<count where fetcher.script.pendingCount > 0 {
                    let request = await fetcher.script.nextRequest()
                    let error = SessionError(.fetchFailed, reason: "connection refused", isTransient: true)
                    fetcher.script.respond(to: request, with: .failure(error))
                }
                await pool.waitUntilIdle()
            case .jumpWallClock(let seconds):
                clock.jumpWallClock(by: .seconds(seconds))
                fetcher.noteWallClock()
                await pool.waitUntilIdle()
            case .advance(let seconds):
                clock.advance(by: .seconds(seconds))
                await pool.waitUntilIdle()
            }
            if let failure = check(step: step, pool: pool, fetcher: fetcher) { return failure }
            if let violation = violations.withLock({ $0.first }) { return "step \(step): \(violation)" }
            if idle, let failure = checkAccounts(names, pool: pool, probes: probes, fetcher: fetcher, clock: clock) {
                return "step \(step): \(failure)"
            }
        }
        if let failure = await recover(names, pool: pool, probes: probes, fetcher: fetcher, signer: signer) {
            return "after the program: \(failure)"
        }
        shuttingDown.store(true, ordering: .relaxed)
        await pool.shutdown()
        for task in tasks { await task.value }
        fetcher.memberOf.withLock { $0 = nil }
        let metrics = pool.metrics
        if metrics.accounts != 0 || metrics.fetchesInFlight != 0 || metrics.timers != 0
            || metrics.queuedNeeded + metrics.queuedProactive != 0 || !fetcher.accountsFetching.isEmpty
        {
            return "after the shutdown: \(metrics), fetching for \(fetcher.accountsFetching)"
        }
        // Work cancelled before the shutdown must follow a sign-out of its account: eviction never cancels it.
        for work in cancelledWork.withLock({ $0 }) {
            let signedOutLater = signedOutAt[work.account, default: []].contains { $0 >= work.started }
            if !signedOutLater {
                return "\(work.account)'s work of step \(work.started) was cancelled without a sign-out"
            }
        }
        return nil
    }

    /// Liveness: once the backend answers every fetch, every account the pool holds becomes identified, and every
    /// account's invariants still hold.
    private static func recover(
        _ names: [AccountID], pool: SessionPool, probes: MemberProbes, fetcher: TimedFetcher, signer: IdentitySigner
    ) async -> String? {
        let clock = fetcher.clock
        fetcher.script.setResponder { try signer.sign(email: email($0)) }
        for _ in 0..<Self.recoveryRounds {
            while fetcher.script.pendingCount > 0 {
                let request = await fetcher.script.nextRequest()
                fetcher.script.respond(to: request, with: .success(try! signer.sign(email: email(request.account))))
            }
            await pool.waitUntilIdle()
            if let failure = checkAccounts(names, pool: pool, probes: probes, fetcher: fetcher, clock: clock) {
                return failure
            }
            if pool.accounts.allSatisfy({ pool.state(of: $0).isIdentified }) { return nil }
            clock.advance(by: .seconds(60))
            await pool.waitUntilIdle()
        }
        let stuck = pool.accounts.filter { !pool.state(of: $0).isIdentified }.map { "\($0): \(pool.state(of: $0))" }
        return "the backend answered every fetch for \(Self.recoveryRounds) minutes, and \(stuck) are not identified"
    }

    private static func check(step: Int, pool: SessionPool, fetcher: TimedFetcher) -> String? {
        let budget = Self.budget
        if fetcher.script.pendingCount > budget.maximumInFlight || pool.metrics.fetchesInFlight > budget.maximumInFlight
        {
            return "step \(step): \(fetcher.script.pendingCount) fetches in flight, \(pool.metrics)"
        }
        let starts = fetcher.startTimes
        let allowed = budget.burst + Int(budget.startsPerSecond)
        for (index, start) in starts.enumerated() {
            let inWindow = starts[index...].prefix { $0 < start + .seconds(1) }.count
            if inWindow > allowed {
                return "step \(step): \(inWindow) fetch starts within a second from \(start), at most \(allowed)"
            }
        }
        let held = Set(pool.accounts)
        for account in fetcher.accountsFetching where !held.contains(account) {
            return "step \(step): a fetch for \(account) waits after it left the pool"
        }
        return nil
    }

    private static func asVoid<T>(_ task: Task<T, any Error>) -> Task<Void, Never> {
        Task { _ = try? await task.value }
    }
}
