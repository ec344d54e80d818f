import Foundation
import SessionEngineBackend
import SessionEngineTestKit
import Synchronization
import Testing

@testable import SessionEngine

/// A backend whose listed accounts never answer and ignore cancellation (a backend call stuck in a kernel, a fetcher
/// without a timeout), whose failing accounts answer 503, and whose other accounts answer at once.
private func faultyBackend(
    clock: ManualClock, hanging: Locked<Set<AccountID>> = Locked([]), failing: Set<AccountID> = []
) throws -> ScriptedCredentialFetcher {
    let signer = try IdentitySigner(projectID: "proj_faults", secret: "faults-secret", clock: clock)
    return ScriptedCredentialFetcher(clock: clock) { request in
        let credential = try signer.sign(email: "\(request.account.rawValue)@example.com")
        // A year on the manual clock: only the engine's deadline or a cancellation ends the wait for it.
        if hanging.value.contains(request.account) {
            return .credential(credential, after: .seconds(365 * 86_400), ignoringCancellation: true)
        }
        if failing.contains(request.account) {
            return .error(
                SessionError(.fetchFailed, reason: "the backend answered 503 for this user", isTransient: true))
        }
        return .credential(credential)
    }
}

extension ScriptedCredentialFetcher {
    fileprivate func requests(for account: AccountID) -> Int { requests.filter { $0.account == account }.count }
}

/// Faults stay where they start: a fetch has a deadline the engine enforces, a hung or failing account holds no
/// other account of a pool, and the time a fetch waits for the pool's budget is neither clock skew nor latency.
@Suite struct FaultIsolationTests {
    @Test func aHungFetchIsAbandonedAtItsDeadlineLoggedOnceAndRetried() async throws {
        let clock = ManualClock()
        let hanging = Locked<Set<AccountID>>(["alice"])
        let fetcher = try faultyBackend(clock: clock, hanging: hanging)
        let records = SanitizedMutex<[SessionLogRecord]>([])
        var configuration = SessionConfiguration(
            randomSeed: 3, log: { record in records.withLock { $0.append(record) } })
        configuration.fetchTimeout = .seconds(20)
        let engine = SessionEngine(fetcher: fetcher, configuration: configuration, clock: clock)
        let signIn = await engine.startCall { try await $0.signIn("alice", timeout: .seconds(300)) }
        await engine.waitUntilIdle()
        clock.advance(by: .seconds(19))
        await engine.waitUntilIdle()
        #expect(engine.metrics.fetchesTimedOut == 0, "the deadline has not passed")
        clock.advance(by: .seconds(1))
        await engine.waitUntilIdle()
        #expect(engine.metrics.fetchesTimedOut == 1)
        #expect(engine.metrics.fetchesFailed == [.fetchTimedOut: 1])
        #expect(engine.metrics.liveTasks <= 2, "the abandoned fetch holds no task of the engine but its timer")
        let warnings = records.withLock { $0.filter { $0.level == .warning && $0.metadata["fetch"] != nil } }
        #expect(warnings.count == 1, "the fetcher that outlived its deadline is logged once")
        // The account recovers: the backend answers the retry.
        hanging.withLock { $0 = [] }
        await clock.advance(upTo: .seconds(3_600)) { engine.state.isIdentified }
        try await signIn.value
        #expect(engine.state.isIdentified)
        #expect(fetcher.requests(for: "alice") >= 2)
        await engine.shutdown()
    }

    @Test func aPoolWithTwoHungAccountsStillSignsAThirdIn() async throws {
        let clock = ManualClock()
        let fetcher = try faultyBackend(clock: clock, hanging: Locked(["hung-1", "hung-2"]))
        var session = SessionConfiguration(randomSeed: 5)
        session.fetchTimeout = .seconds(20)
        let pool = SessionPool(
            fetcher: fetcher,
            configuration: SessionPoolConfiguration(
                session: session, budget: .init(maximumInFlight: 2, startsPerSecond: 100)),
            clock: clock)
        let hung = await pool.startCalls(2) { pool, index in try await pool.signIn(AccountID("hung-\(index + 1)")) }
        #expect(pool.metrics.fetchesInFlight == 2)
        let third = await pool.startCall { try await $0.signIn("third", timeout: .seconds(60)) }
        #expect(pool.metrics.queuedNeeded == 1, "both slots are held by fetches that never answer")
        // Signing a hung account out frees its slot at once, though its fetcher ignores the cancellation.
        await pool.signOut("hung-1")
        await pool.waitUntilIdle()
        try await third.value
        #expect(pool.state(of: "third").isIdentified)
        #expect(pool.metrics.fetchesInFlight == 1, "only the other hung fetch holds a slot")

        // The deadline frees the other slot: a fourth account signs in once it has passed, not never.
        let fourthOnItsWay = await pool.startCall { try await $0.signIn("fourth", timeout: .seconds(60)) }
        #expect(pool.state(of: "fourth").isIdentified, "a free slot admits the fourth at once")
        try await fourthOnItsWay.value
        clock.advance(by: .seconds(20))
        await pool.waitUntilIdle()
        #expect(pool.metrics.fetchesInFlight == 0, "the hung fetch's slot is free at its deadline")
        #expect(pool.metrics(for: "hung-2")?.fetchesTimedOut == 1)
        for call in hung { call.cancel() }
        await pool.shutdown()
    }

    @Test func oneFailingAccountAmongTenNeverStartsAnOutage() async throws {
        let clock = ManualClock()
        let fetcher = try faultyBackend(clock: clock, failing: ["broken"])
        // A retry policy as fast as the engine allows: the failing account fetches every few seconds.
        let session = SessionConfiguration(
            retry: RetryPolicy(initial: .milliseconds(50), multiplier: 1, cap: .milliseconds(50)),
            minimumFetchInterval: .seconds(1), randomSeed: 9)
        let pool = SessionPool(
            fetcher: fetcher,
            configuration: SessionPoolConfiguration(session: session, budget: .init(outageThreshold: 8)),
            clock: clock)
        let events = pool.events(bufferLimit: 100_000)
        let healthy = PoolHarness.accounts(10)
        let signIns = await pool.startCalls(10) { pool, index in try await pool.signIn(healthy[index]) }
        for call in signIns { try await call.value }
        _ = await pool.startCall { try? await $0.signIn("broken") }
        // Two minutes in which the broken account fails some hundred times and every healthy account renews.
        for _ in 0..<240 {
            clock.advance(by: .milliseconds(500))
            await pool.waitUntilIdle()
        }
        #expect(fetcher.requests(for: "broken") > 50, "the broken account kept failing")
        #expect(pool.metrics.outages == 0 && !pool.metrics.holdsForOutage, "one account is no outage")
        let renewal = await pool.startCall { try await $0.renew(for: healthy[0]) }
        _ = try await renewal.value
        #expect(healthy.allSatisfy { pool.state(of: $0).isIdentified })
        await pool.shutdown()
        for await event in events {
            if case .outageBegan = event.kind { Issue.record("the pool began an outage for \(event.account)") }
        }
    }

    @Test func aFetchThatWaitedForTheBudgetIsMeasuredFromWhenItLeft() async throws {
        let clock = ManualClock()
        let fetcher = try faultyBackend(clock: clock)
        let pool = SessionPool(
            fetcher: fetcher,
            configuration: SessionPoolConfiguration(session: SessionConfiguration(randomSeed: 4)),
            clock: clock)
        // The backend asked for 90 s of quiet: a sign-in waits for the budget that long before it leaves.
        pool.budget.pause(for: .seconds(90))
        let asked = clock.now
        let signIn = await pool.startCall { try await $0.signIn("alice") }
        clock.advance(by: .seconds(90))
        await pool.waitUntilIdle()
        try await signIn.value
        let arrival = try #require(fetcher.requests.first)
        #expect(arrival.startedAt == arrival.receivedAt, "the request says when it left, not when it was asked")
        #expect(try #require(arrival.receivedAt).timeIntervalSince(asked) >= 90)
        let metrics = try #require(pool.metrics(for: "alice"))
        #expect(metrics.fetchLatency.max == .zero, "the budget's wait is not the backend's latency")
        #expect(pool.metrics.budgetWait.max >= .seconds(90), "it is the budget's own metric")
        await pool.shutdown()
    }

    @Test func probesGoToAccountsInTurn() async {
        let clock = ManualClock()
        let budget = FetchBudget(
            limits: .init(
                maximumInFlight: 4, startsPerSecond: 1000, outageThreshold: 3, outageProbeInterval: .seconds(5)),
            clock: clock, timers: .ofTheirOwn(on: clock))
        // Three accounts fail in a row: an outage.
        for name in ["a", "b", "c"] {
            let ticket = budget.ticket(urgency: .needed, deadline: .zero, account: AccountID(name))
            #expect(await budget.acquire(ticket))
            budget.release(ticket, outcome: .outage)
        }
        #expect(budget.snapshot.holdsForOutage)
        let admitted = Admitted()
        func queue(_ name: String, deadline: Duration) async -> FetchBudget.Ticket {
            await FetchBudgetTests.start(budget, deadline: deadline, clock: clock, admitted: admitted, name: name)
                .ticket
        }
        // The failing account's retry is always first in urgency order; the healthy one waits behind it.
        var failing = await queue("failing", deadline: .zero)
        let healthy = await queue("healthy", deadline: .seconds(1))
        clock.advance(by: .seconds(5))
        await clock.executor.waitUntilIdle()
        #expect(admitted.all == ["failing"])
        budget.release(failing, outcome: .outage)
        failing = await queue("failing", deadline: .zero)
        clock.advance(by: .seconds(5))
        await clock.executor.waitUntilIdle()
        #expect(
            admitted.all == ["failing", "healthy"],
            "the next probe is another account's, though the failing account's retry comes first")
        budget.release(healthy, outcome: .answered)
        await clock.executor.waitUntilIdle()
        #expect(!budget.snapshot.holdsForOutage)
        #expect(admitted.all == ["failing", "healthy", "failing"])
        budget.release(failing, outcome: .answered)
    }

    @Test func aRenewalAdmittedAfterItsExpiryWarnsThatTheBudgetCannotKeepUp() async {
        let clock = ManualClock()
        let changes = SanitizedMutex<[FetchBudget.Change]>([])
        let budget = FetchBudget(
            limits: .init(maximumInFlight: 1, startsPerSecond: 1000), clock: clock,
            timers: .ofTheirOwn(on: clock), onChange: { change in changes.withLock { $0.append(change) } })
        let admitted = Admitted()
        func queue(_ name: String, _ urgency: FetchUrgency, deadline: Duration) async -> FetchBudget.Ticket {
            await FetchBudgetTests.start(
                budget, urgency, deadline: deadline, clock: clock, admitted: admitted, name: name
            ).ticket
        }
        let first = await queue("first", .needed, deadline: .zero)
        let onTime = await queue("on-time", .proactive, deadline: .seconds(100))
        budget.release(first, outcome: .answered)
        await clock.executor.waitUntilIdle()
        #expect(admitted.all == ["first", "on-time"] && budget.snapshot.lateRenewals == 0)
        let late = await queue("late", .proactive, deadline: clock.uptime + .seconds(10))
        let later = await queue("later", .proactive, deadline: clock.uptime + .seconds(11))
        clock.advance(by: .seconds(20))
        budget.release(onTime, outcome: .answered)
        await clock.executor.waitUntilIdle()
        budget.release(late, outcome: .answered)
        await clock.executor.waitUntilIdle()
        #expect(admitted.all == ["first", "on-time", "late", "later"])
        #expect(budget.snapshot.lateRenewals == 2, "both were admitted after their credentials expired")
        #expect(changes.withLock { $0 } == [.behind("late")], "reported once until the queue empties")
        budget.release(later, outcome: .answered)
    }

    @Test func failuresOfOneOrTwoAccountsNeverBeginAnOutageButOfThreeDo() async {
        let clock = ManualClock()
        let budget = FetchBudget(
            limits: .init(maximumInFlight: 100, startsPerSecond: 1000, outageThreshold: 4),
            clock: clock,
            timers: DeadlineQueue(clock: clock, taskExecutor: nil, delivery: AccountShard.TimerTarget.deliver))
        func fail(_ name: String) async {
            let ticket = budget.ticket(urgency: .needed, deadline: .zero, account: AccountID(name))
            #expect(await budget.acquire(ticket))
            budget.release(ticket, outcome: .outage)
        }
        for _ in 0..<20 { await fail("x") }
        for _ in 0..<20 { await fail("y") }
        #expect(!budget.snapshot.holdsForOutage, "forty failures in a row from two accounts")
        await fail("z")
        #expect(budget.snapshot.holdsForOutage, "a third account's failure makes it the backend's")
    }
}

/// An account ID is input from outside: checked at every call that signs an account in, never echoed raw.
@Suite struct AccountIDCheckTests {
    static let hostile: [(String, String)] = [
        ("", "empty"),
        ("evil\nlevel=error msg=\"forged\"", "a line feed"),
        ("evil\r", "a carriage return"),
        ("evil\u{1B}[31m", "an escape"),
        ("evil\u{0}", "a NUL"),
        ("evil\u{2028}", "a line separator"),
        (String(repeating: "a", count: 257), "one byte over the bound"),
        (String(repeating: "é", count: 129), "two-byte characters over the bound"),
    ]

    @Test func anEngineAndAPoolRefuseIDsThatCannotNameAnAccount() async throws {
        let clock = ManualClock()
        let fetcher = try faultyBackend(clock: clock)
        let engine = SessionEngine(fetcher: fetcher, configuration: SessionConfiguration(randomSeed: 1), clock: clock)
        let pool = SessionPool(fetcher: fetcher, clock: clock)
        for (raw, what) in Self.hostile {
            let account = AccountID(raw)
            for call in [
                { try await engine.signIn(account) }, { try await engine.switchAccount(to: account) },
                { try await engine.signIn(account, timeout: .seconds(1)) }, { try await pool.signIn(account) },
                { try await pool.signIn(account, timeout: .seconds(1)) },
            ] as [@Sendable () async throws -> Void] {
                do {
                    try await call()
                    Issue.record("an ID with \(what) was signed in")
                } catch let error as SessionError {
                    #expect(error.code == .invalidAccount, "\(what)")
                    #expect(error.reason.utf8.count < 200, "the reason does not grow with the ID")
                    #expect(!error.reason.contains("evil"), "the reason never repeats the ID")
                }
            }
        }
        #expect(engine.state == .signedOut)
        #expect(pool.accounts.isEmpty, "a refused ID takes no place in the pool")
        #expect(fetcher.requests.isEmpty, "nothing reached the backend")
        // The bound itself is an ID.
        try AccountID(String(repeating: "a", count: AccountID.maximumLength)).validate()
        await engine.shutdown()
        await pool.shutdown()
    }

    @Test func aDescriptionNeverCarriesAControlCharacterOrAHugeID() {
        #expect(AccountID("evil\nlevel=error").description == "evil\\u{A}level=error")
        #expect(AccountID("plain-user").description == "plain-user")
        let huge = AccountID(String(repeating: "x", count: 1 << 20)).description
        #expect(huge.utf8.count < 100 && huge.hasSuffix("(1048576 bytes)"))
        #expect(!SessionPool.notHeld(AccountID("a\u{1B}b")).reason.contains("\u{1B}"))
    }
}

/// A host that knows which user an account is says so, and a first credential for another user is refused, not
/// pinned.
@Suite struct ExpectedUserTests {
    /// A manual clock, and the backend's signer on it.
    private static func backend() throws -> (ManualClock, IdentitySigner) {
        let clock = ManualClock()
        return (clock, try IdentitySigner(projectID: "proj_expect", secret: "expect-secret", clock: clock))
    }

    /// An engine on `clock` that fetches from `fetcher`, with a fixed seed.
    private static func engine(_ fetcher: ScriptedCredentialFetcher, on clock: ManualClock) -> SessionEngine {
        SessionEngine(fetcher: fetcher, configuration: SessionConfiguration(randomSeed: 2), clock: clock)
    }

    /// Starts `call` on `engine`, with a flag set once it has ended, so that a test can see that it ended without
    /// awaiting it (which, under a regression, would wait for ever).
    private static func startTracked(
        _ engine: SessionEngine, _ call: @escaping @Sendable (SessionEngine) async throws -> Void
    ) async -> (Task<Void, any Error>, Locked<Bool>) {
        let ended = Locked(false)
        let task = await engine.startCall { engine in
            defer { ended.withLock { $0 = true } }
            try await call(engine)
        }
        return (task, ended)
    }

    @Test func aFirstCredentialForAnotherUserIsRefusedNotPinned() async throws {
        let (clock, signer) = try Self.backend()
        let fetcher = ScriptedCredentialFetcher(responder: { _ in try signer.sign(email: "mallory@example.com") })
        let engine = Self.engine(fetcher, on: clock)
        let signIn = await engine.startCall {
            try await $0.signIn("alice", expecting: "  Alice@Example.com ", timeout: .seconds(3_600))
        }
        await engine.waitUntilIdle()
        #expect(engine.metrics.fetchesFailed[.identityMismatch] == 1, "another user's credential is refused")
        #expect(engine.state.isExpired)
        #expect(throws: SessionError.self) { try engine.identityHeaders() }
        // The backend is fixed: the account's own user is installed, since nothing was pinned to the other one.
        fetcher.setResponder { _ in try signer.sign(email: "alice@example.com") }
        await clock.advance(upTo: .seconds(3_600)) { engine.state.isIdentified }
        try await signIn.value
        #expect(try engine.identityHeaders().credential().email == "alice@example.com")
        await #expect(throws: SessionError.self) { try await engine.signIn("alice", expecting: "bob@example.com") }
        await #expect(throws: SessionError.self) { try await engine.signIn("carol", expecting: " \u{7} ") }
        await engine.shutdown()
    }

    @Test func aSignInToTheAccountUnderWayPinsItsExpectedUserAndRefusesAnother() async throws {
        let (clock, signer) = try Self.backend()
        let fetcher = ScriptedCredentialFetcher()
        let engine = Self.engine(fetcher, on: clock)
        // The first sign-in expects no user; its first fetch is held.
        let first = await engine.startCall { try await $0.signIn("alice", timeout: .seconds(3_600)) }
        let request = await fetcher.nextRequest()
        // A second expects one: the account session is pinned to it before the first credential arrives.
        let second = await engine.startCall {
            try await $0.signIn("alice", expecting: "alice@example.com", timeout: .seconds(3_600))
        }
        // A third expects another user: refused at once, while the first two still wait.
        let (third, thirdEnded) = await Self.startTracked(engine) {
            try await $0.signIn("alice", expecting: "bob@example.com", timeout: .seconds(3_600))
        }
        await engine.waitUntilIdle()
        #expect(thirdEnded.value, "the sign-in expecting another user ended before the first credential came")
        // The first credential names another user than the pinned one: refused, not installed.
        fetcher.respond(to: request, with: .success(try signer.sign(email: "mallory@example.com")))
        await engine.waitUntilIdle()
        #expect(engine.metrics.fetchesFailed[.identityMismatch] == 1)
        #expect(!engine.state.isIdentified)
        fetcher.setResponder { _ in try signer.sign(email: "alice@example.com") }
        await clock.advance(upTo: .seconds(3_600)) { engine.state.isIdentified }
        try await first.value
        try await second.value
        #expect(try engine.identityHeaders().credential().email == "alice@example.com")
        let refused = await #expect(throws: SessionError.self) { try await third.value }
        #expect(refused?.code == .identityMismatch)
        await engine.shutdown()
    }

    @Test func aSignInExpectingAnotherUserThanAHandedOverCredentialIsRefusedNotTheCredential() async throws {
        let (clock, signer) = try Self.backend()
        let fetcher = ScriptedCredentialFetcher()
        let engine = Self.engine(fetcher, on: clock)
        // The sign-in's change waits in its hook, so the credential handed over with it is kept, not yet installed.
        let hooks = Gate()
        await engine.addAccountChangeHook { _ in await hooks.wait() }
        let handOver = await engine.startCall {
            try await $0.signIn("alice", with: signer.sign(email: "bob@example.com"))
        }
        let (refused, refusedEnded) = await Self.startTracked(engine) {
            try await $0.signIn("alice", expecting: "alice@example.com", timeout: .seconds(60))
        }
        await engine.waitUntilIdle()
        #expect(refusedEnded.value, "the sign-in expecting another user ended while the change was prepared")
        // The handed-over credential is installed as the first, not dropped for a fetch.
        hooks.open()
        await engine.waitUntilIdle()
        #expect(try engine.identityHeaders().credential().email == "bob@example.com")
        #expect(engine.metrics.credentialsPushed == 1)
        // Ends the waits a regression would leave open: the refused call's deadline, the hand-over's wait.
        _ = await clock.advance(upTo: .seconds(120)) { false }
        handOver.cancel()
        _ = await handOver.result
        let error = await #expect(throws: SessionError.self) { try await refused.value }
        #expect(error?.code == .identityMismatch)
        await engine.shutdown()
    }

    @Test func aSignInToTheCurrentAccountComparesTheExpectedUserByteForByte() async throws {
        let (clock, signer) = try Self.backend()
        // "josé" with a precomposed é, as the backend signs it.
        let fetcher = ScriptedCredentialFetcher(responder: { _ in try signer.sign(email: "jos\u{E9}@example.com") })
        let engine = Self.engine(fetcher, on: clock)
        try await engine.signIn("jose", expecting: " JOS\u{C9}@example.com")
        // Normalized as the backend normalizes: trimmed and lowercased, the same bytes.
        try await engine.signIn("jose", expecting: "jos\u{E9}@example.com")
        // Canonically equivalent, other bytes: the signature covers bytes, so this names another user.
        let decomposed = "jose\u{301}@example.com"
        #expect(decomposed == "jos\u{E9}@example.com", "Swift's String equality is canonical equivalence")
        let refused = await #expect(throws: SessionError.self) {
            try await engine.signIn("jose", expecting: decomposed)
        }
        #expect(refused?.code == .identityMismatch)
        #expect(engine.state.isIdentified)
        await engine.shutdown()
    }

    @Test func aPoolPinsTheExpectedUserToo() async throws {
        let (clock, signer) = try Self.backend()
        let fetcher = ScriptedCredentialFetcher(responder: { _ in try signer.sign(email: "mallory@example.com") })
        let pool = SessionPool(fetcher: fetcher, clock: clock)
        let signIn = await pool.startCall { try await $0.signIn("alice", expecting: "alice@example.com") }
        await pool.waitUntilIdle()
        signIn.cancel()
        await #expect(throws: CancellationError.self) { try await signIn.value }
        #expect(pool.metrics(for: "alice")?.fetchesFailed[.identityMismatch] ?? 0 >= 1)
        #expect(!pool.state(of: "alice").isIdentified)
        await pool.shutdown()
    }
}

/// A pool shuts down as an engine does: gracefully, with its hooks, or at once.
@Suite struct PoolShutdownTests {
    @Test func aGracefulShutdownLetsWorkFinishThenRunsEveryAccountsHooks() async throws {
        let harness = PoolHarness()
        let changes = SanitizedMutex<[AccountChange]>([])
        await harness.pool.addAccountChangeHook { change in changes.withLock { $0.append(change) } }
        let signIns = await harness.signInAtOnce(["alice", "bob"])
        for call in signIns { try await call.value }
        changes.withLock { $0.removeAll() }
        let clock = harness.clock
        let work = await harness.startWork(for: ["alice"], sleeping: .seconds(10))[0]
        let shutdown = await harness.pool.startCall { pool in await pool.shutdown(gracePeriod: .seconds(60)) }
        // During the grace period: running work keeps its identity, nothing new starts.
        #expect(throws: Never.self) { try harness.pool.identityHeaders(for: "alice") }
        await #expect(throws: SessionError.self) { try await harness.pool.signIn("carol") }
        await #expect(throws: SessionError.self) {
            try await harness.pool.withIdentity(for: "bob") { _ in "new work" }
        }
        #expect(
            !changes.withLock { $0 }.contains { $0.from == "alice" },
            "alice, whose work runs, has not left yet; bob, with none, may have")
        clock.advance(by: .seconds(10))
        try await work.value
        try await shutdown.value
        let left = changes.withLock { $0 }
        #expect(Set(left.compactMap(\.from)) == ["alice", "bob"], "every account's hooks ran: \(left)")
        #expect(left.allSatisfy { $0.to == nil })
        #expect(harness.pool.accounts.isEmpty && harness.pool.isShutDown)
    }
}

/// No clock may defeat local expiry: of two plausible clocks, the one under which a credential expires soonest decides.
@Suite struct LyingClockTests {
    @Test func aDateHeaderADayBehindCannotKeepAnExpiredCredentialInUse() async throws {
        let clock = ManualClock()
        let signer = try IdentitySigner(projectID: "proj_clock", secret: "clock-secret", clock: clock)
        let records = SanitizedMutex<[SessionLogRecord]>([])
        let engine = SessionEngine(
            fetcher: ScriptedCredentialFetcher(clock: clock) { request in
                // A backend whose `Date` lags this host's by 23 hours while its signer agrees with the host: its
                // first answer carries a credential and that offset, every later fetch fails.
                guard request.id == 1 else {
                    return .error(SessionError(.fetchFailed, reason: "the backend is away", isTransient: true))
                }
                return .credential(
                    try signer.sign(email: "alice@example.com"), serverClockOffset: .seconds(-23 * 3_600))
            },
            configuration: SessionConfiguration(
                randomSeed: 3, log: { record in records.withLock { $0.append(record) } }),
            clock: clock)
        try await engine.signIn("alice")
        #expect(engine.metrics.appliedClockOffset == nil, "the lagging Date is kept out")
        #expect(engine.metrics.clockOffsetsKeptOut == 1)
        #expect(
            records.withLock { $0.contains { $0.level == .warning && $0.metadata["finding"] == "dateHeaderIgnored" } })
        // The credential lives 15 minutes on the signer's clock and this host's; 5 minutes after that it is expired,
        // whatever the Date header said.
        clock.advance(by: .seconds(20 * 60))
        await engine.waitUntilIdle()
        #expect(throws: SessionError.self) { try engine.identityHeaders() }
        #expect(!engine.hasValidIdentity(at: clock.now))
        #expect(engine.state.isExpired)
        await engine.shutdown()
    }
}
