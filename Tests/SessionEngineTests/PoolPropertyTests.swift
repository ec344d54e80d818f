import Foundation
import SessionEngineBackend
import SessionEngineModel
import SessionEngineTestKit
import Synchronization
import Testing

@testable import SessionEngine

/// A scripted fetcher that also records when, on the pool's clock, each fetch reached it.
private final class TimedFetcher: CredentialFetcher, ActivityLedgerFetcher {
    let script = ScriptedCredentialFetcher()
    let clock: ManualClock
    private let starts = Mutex<[Duration]>([])
    private let outstanding = Mutex<[AccountID: Int]>([:])

    init(clock: ManualClock) {
        self.clock = clock
    }

    func attach(_ ledger: ActivityLedger) { script.attach(ledger) }

    var startTimes: [Duration] { starts.withLock { $0 } }

    /// The accounts with a fetch that reached this fetcher and has not returned.
    var accountsFetching: [AccountID] { outstanding.withLock { Array($0.filter { $0.value > 0 }.keys) } }

    func fetchCredential(for account: AccountID) async throws -> IdentityCredential {
        try await script.fetchCredential(for: account)
    }

    func fetchCredential(_ request: FetchRequest) async throws -> IdentityCredential {
        starts.withLock { $0.append(clock.uptime) }
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
        case .advance(let seconds): "advance(\(seconds) s)"
        }
    }

    static func random(_ random: inout SplitMix64, accounts: Int) -> PoolOperation {
        let account = Int(random.next() % UInt64(accounts))
        switch random.next() % 20 {
        case 0...3: return .signIn(account)
        case 4: return .signOut(account)
        case 5...6: return .read(account)
        case 7...8: return .work(account, seconds: Int(random.next() % 120) + 1)
        case 9: return .renew(account)
        case 10: return .reject(account)
        case 11...14: return .answer(Int(random.next() % 3) + 1)
        case 15: return .failWithRetryAfter(seconds: Int(random.next() % 40) + 1)
        default: return .advance(seconds: [1, 1, 5, 30, 300, 700][Int(random.next() % 6)])
        }
    }
}

/// Random programs over several accounts of one pool, checked after every step against the pool's rules: never more
/// than the budget's fetches in flight, never more starts in any second than the bucket allows, no account's
/// credential handed out for another, no fetch for an account that left, and no eviction cancelling running work.
@Suite struct PoolPropertyTests {
    static let accounts = 4
    static let budget = SessionPoolConfiguration.Budget(maximumInFlight: 2, startsPerSecond: 2, burst: 3)

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
        let pool = SessionPool(
            fetcher: fetcher,
            configuration: SessionPoolConfiguration(
                session: SessionConfiguration(randomSeed: seed),
                budget: Self.budget,
                maximumAccounts: 3
            ),
            clock: clock
        )
        let names = (0..<Self.accounts).map { AccountID("member-\($0)") }
        @Sendable func email(_ account: AccountID) -> String { "\(account.rawValue)@example.com" }
        var tasks: [Task<Void, Never>] = []
        /// Per account, the steps at which the program signed it out; work cancelled by the pool must follow one.
        var signedOutAt: [AccountID: [Int]] = [:]
        let violations = Mutex<[String]>([])
        let cancelledWork = Mutex<[(account: AccountID, started: Int)]>([])
        let shuttingDown = Atomic<Bool>(false)

        for (step, operation) in program.enumerated() {
            switch operation {
            case .signIn(let index):
                tasks.append(asVoid(await pool.startCall { try await $0.signIn(names[index]) }))
            case .signOut(let index):
                signedOutAt[names[index], default: []].append(step)
                if pool.accounts.contains(names[index]) {
                    tasks.append(asVoid(await pool.startCall { await $0.signOut(names[index]) }))
                }
            case .read(let index):
                if let headers = try? pool.identityHeaders(for: names[index]),
                    let credential = try? headers.credential(), credential.email != email(names[index])
                {
                    return "step \(step): \(names[index])'s headers hold \(credential.email)'s credential"
                }
            case .work(let index, let seconds):
                let account = names[index]
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
                guard pool.accounts.contains(names[index]) else { break }
                tasks.append(asVoid(await pool.startCall { _ = try await $0.renew(for: names[index]) }))
            case .reject(let index):
                if let credential = try? pool.identityHeaders(for: names[index]).credential() {
                    await pool.credentialRejected(credential, for: names[index])
                    await pool.waitUntilIdle()
                }
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
            case .advance(let seconds):
                clock.advance(by: .seconds(seconds))
                await pool.waitUntilIdle()
            }
            if let failure = check(step: step, pool: pool, fetcher: fetcher) { return failure }
            if let violation = violations.withLock({ $0.first }) { return "step \(step): \(violation)" }
        }
        shuttingDown.store(true, ordering: .relaxed)
        await pool.shutdown()
        for task in tasks { await task.value }
        // Work cancelled before the shutdown must follow a sign-out of its account: eviction never cancels it.
        for work in cancelledWork.withLock({ $0 }) {
            let signedOutLater = signedOutAt[work.account, default: []].contains { $0 >= work.started }
            if !signedOutLater {
                return "\(work.account)'s work of step \(work.started) was cancelled without a sign-out"
            }
        }
        return nil
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
