import Foundation
import SessionEngineBackend
import SessionEngineModel
import SessionEngineTestKit
import Synchronization
import Testing

@testable import SessionEngine

/// A pool wired to a manual clock, a scripted fetcher and a signer.
struct PoolHarness {
    let clock = ManualClock()
    let fetcher: ScriptedCredentialFetcher
    let signer: IdentitySigner
    let pool: SessionPool

    init(
        budget: SessionPoolConfiguration.Budget = .init(maximumInFlight: 8, startsPerSecond: 100),
        maximumAccounts: Int? = nil,
        idleTimeout: Duration? = nil,
        answersAtOnce: Bool = true
    ) {
        let clock = self.clock
        let signer = try! IdentitySigner(projectID: "proj_pool", secret: "pool-secret", clock: clock)
        self.signer = signer
        let responder: (@Sendable (AccountID) throws -> IdentityCredential)? = { account in
            try signer.sign(email: exampleEmail(for: account))
        }
        fetcher = ScriptedCredentialFetcher(responder: answersAtOnce ? responder : nil)
        pool = SessionPool(
            fetcher: fetcher,
            configuration: SessionPoolConfiguration(
                session: SessionConfiguration(randomSeed: 7),
                budget: budget,
                maximumAccounts: maximumAccounts,
                idleTimeout: idleTimeout
            ),
            clock: clock
        )
    }

    static func accounts(_ count: Int) -> [AccountID] { (0..<count).map { AccountID("user-\($0)") } }

    func credential(for account: AccountID) -> IdentityCredential {
        try! signer.sign(email: exampleEmail(for: account))
    }

    /// Starts a sign-in of every account at once; returns once all have entered the pool and it is idle.
    func signInAtOnce(_ accounts: [AccountID]) async -> [Task<Void, any Error>] {
        await pool.startCalls(accounts.count) { pool, index in try await pool.signIn(accounts[index]) }
    }

    /// Answers every pending fetch with its account's credential; returns how many it answered.
    @discardableResult
    func answerPending() async -> Int {
        var answered = 0
        while fetcher.pendingCount > 0 {
            let request = await fetcher.nextRequest()
            if fetcher.respond(to: request, with: .success(credential(for: request.account))) { answered += 1 }
        }
        return answered
    }

    /// Starts scoped work for each account that sleeps `duration` on the clock, honouring cancellation; returns once
    /// each has entered and the pool is idle.
    func startWork(for accounts: [AccountID], sleeping duration: Duration) async -> [Task<Void, any Error>] {
        let clock = self.clock
        return await pool.startCalls(accounts.count) { pool, index in
            try await pool.withIdentity(for: accounts[index]) { _ in try await clock.sleep(for: duration) }
        }
    }
}

@Suite struct SessionPoolTests {
    @Test func everyAccountIsIdentifiedWithItsOwnCredential() async throws {
        let harness = PoolHarness()
        let accounts: [AccountID] = ["alice", "bob", "carol"]
        let calls = await harness.signInAtOnce(accounts)
        for call in calls { try await call.value }
        for account in accounts {
            let headers = try harness.pool.identityHeaders(for: account)
            #expect(try headers.credential().email == exampleEmail(for: account))
            #expect(harness.pool.state(of: account).isIdentified)
        }
        #expect(throws: SessionError.self) { try harness.pool.identityHeaders(for: "dave") }
        #expect(Set(harness.pool.accounts) == Set(accounts))
        #expect(harness.pool.metrics.accounts == 3)
        // Each sign-in waited for its credential; an identified member keeps no waiters once the wait is over.
        for account in accounts { #expect(harness.pool.member(account)?.slot.waitersIfAny == nil) }
        await harness.pool.shutdown()
    }

    /// An account's first read builds its headers, and its row keeps them for the reads after it: until then the row
    /// holds only the credential, as the rows of accounts nobody reads do. Another credential starts unbuilt again.
    @Test func aRowKeepsTheHeadersItsFirstReadBuiltUntilTheNextCredential() async throws {
        let harness = PoolHarness()
        for call in await harness.signInAtOnce(["alice"]) { try await call.value }
        let table = harness.pool.table
        let hash = table.hasher.hash("alice")
        func read() -> SessionStore.Copy? { table.reading("alice", hash: hash, stampingUse: false) }
        let first = try #require(read()?.unbuilt)
        #expect(read()?.headers == nil)
        #expect(try harness.pool.identityHeaders(for: "alice") == IdentityHeaders(first))
        #expect(read()?.headers == IdentityHeaders(first))
        #expect(read()?.unbuilt == nil)
        // A renewal that brings the same credential keeps the headers; a pushed credential does not.
        #expect(try await harness.pool.renew(for: "alice") == first)
        #expect(read()?.headers == IdentityHeaders(first))
        harness.clock.advance(by: .seconds(1))
        let renewed = harness.credential(for: "alice")
        #expect(renewed != first)
        try await harness.pool.setIdentityCredential(renewed, for: "alice")
        #expect(read()?.unbuilt == renewed)
        #expect(try harness.pool.identityHeaders(for: "alice") == IdentityHeaders(renewed))
        #expect(read()?.headers == IdentityHeaders(renewed))
        await harness.pool.shutdown()
    }

    @Test func theBudgetBoundsFetchesInFlightAcrossAccounts() async throws {
        let harness = PoolHarness(budget: .init(maximumInFlight: 2, startsPerSecond: 1000), answersAtOnce: false)
        let accounts = PoolHarness.accounts(10)
        let calls = await harness.signInAtOnce(accounts)
        var maximum = 0
        while harness.fetcher.totalRequests < accounts.count || harness.fetcher.pendingCount > 0 {
            maximum = max(maximum, harness.fetcher.pendingCount)
            #expect(harness.pool.metrics.fetchesInFlight <= 2)
            let request = await harness.fetcher.nextRequest()
            harness.fetcher.respond(to: request, with: .success(harness.credential(for: request.account)))
            await harness.pool.waitUntilIdle()
        }
        for call in calls { try await call.value }
        #expect(maximum == 2)
        #expect(harness.pool.metrics.budgetWaits == 8)
        #expect(harness.pool.metrics.fetchesAdmitted == 10)
        for account in accounts { #expect(harness.pool.state(of: account).isIdentified) }
        await harness.pool.shutdown()
    }

    @Test func theBudgetBoundsFetchStartsPerSecond() async throws {
        let harness = PoolHarness(budget: .init(maximumInFlight: 100, startsPerSecond: 5, burst: 5))
        let accounts = PoolHarness.accounts(20)
        let calls = await harness.signInAtOnce(accounts)
        var started: [Int] = [harness.fetcher.totalRequests]
        for _ in 0..<4 {
            harness.clock.advance(by: .seconds(1))
            await harness.pool.waitUntilIdle()
            started.append(harness.fetcher.totalRequests)
        }
        for call in calls { try await call.value }
        // The full bucket's burst at once, then one token every 200 ms.
        #expect(started == [5, 10, 15, 20, 20])
        for account in accounts { #expect(harness.pool.state(of: account).isIdentified) }
        await harness.pool.shutdown()
    }

    @Test func aRetryAfterFromTheBackendPausesEveryAccount() async throws {
        let harness = PoolHarness(answersAtOnce: false)
        let alice = await harness.pool.startCall { try await $0.signIn("alice") }
        let request = await harness.fetcher.nextRequest()
        harness.fetcher.respond(
            to: request,
            with: .failure(
                SessionError(.fetchFailed, reason: "503 from the backend", isTransient: true, retryAfter: .seconds(30)))
        )
        await harness.pool.waitUntilIdle()
        let bob = await harness.pool.startCall { try await $0.signIn("bob") }
        #expect(harness.fetcher.totalRequests == 1, "bob's first fetch waits for the backend's pause")
        #expect(harness.pool.metrics.queuedNeeded == 1)
        harness.clock.advance(by: .seconds(29))
        await harness.pool.waitUntilIdle()
        #expect(harness.fetcher.totalRequests == 1)
        harness.clock.advance(by: .seconds(1))
        await harness.pool.waitUntilIdle()
        #expect(harness.fetcher.requestedAccounts.contains("bob"), "bob's fetch starts once the pause has passed")
        // alice retries on her own schedule, which honours the same Retry-After.
        for _ in 0..<10 where !harness.pool.state(of: "alice").isIdentified {
            await harness.answerPending()
            harness.clock.advance(by: .seconds(10))
            await harness.pool.waitUntilIdle()
        }
        try await alice.value
        try await bob.value
        await harness.pool.shutdown()
    }

    @Test func anOutageHoldsTheAccountsFetchesAndOneProbeFindsTheBackendBack() async throws {
        let harness = PoolHarness(
            budget: .init(maximumInFlight: 8, startsPerSecond: 100, outageThreshold: 4), answersAtOnce: false)
        let accounts = PoolHarness.accounts(12)
        let events = harness.pool.events(bufferLimit: 10_000)
        let calls = await harness.signInAtOnce(accounts)
        #expect(harness.fetcher.pendingCount == 8)
        let unreachable = SessionError(.fetchFailed, reason: "connection refused", isTransient: true)
        repeat {
            while harness.fetcher.pendingCount > 0 {
                _ = harness.fetcher.respond(to: await harness.fetcher.nextRequest(), with: .failure(unreachable))
            }
            await harness.pool.waitUntilIdle()
        } while harness.fetcher.pendingCount > 0
        #expect(harness.pool.metrics.holdsForOutage && harness.pool.metrics.outages == 1)
        // The first failures let queued sign-ins through before the fourth began the outage; at most the budget's
        // eight in flight then, and no more since.
        let beforeTheOutage = harness.fetcher.totalRequests
        #expect(beforeTheOutage <= 12)
        // A minute in which every account's own backoff (the minimum interval of 5 s plus at most 2 s) passes, and
        // the backend still sees one probe at a time, one every probe interval.
        for _ in 0..<12 {
            harness.clock.advance(by: .seconds(5))
            await harness.pool.waitUntilIdle()
            #expect(harness.fetcher.pendingCount <= 1, "one probe at a time")
            if harness.fetcher.pendingCount == 1 {
                _ = harness.fetcher.respond(to: await harness.fetcher.nextRequest(), with: .failure(unreachable))
                await harness.pool.waitUntilIdle()
            }
        }
        #expect(harness.fetcher.totalRequests <= beforeTheOutage + 12)
        #expect(
            harness.pool.metrics.queuedNeeded == 11,
            "every account's retry is held but the last probe's, which waits out its own backoff")
        harness.clock.advance(by: .seconds(5))
        await harness.pool.waitUntilIdle()
        #expect(harness.fetcher.pendingCount == 1)
        // The backend answers the probe: the outage is over and the held fetches go through the budget.
        let probe = await harness.fetcher.nextRequest()
        _ = harness.fetcher.respond(to: probe, with: .success(harness.credential(for: probe.account)))
        await harness.pool.waitUntilIdle()
        #expect(!harness.pool.metrics.holdsForOutage)
        #expect(harness.fetcher.pendingCount == 1, "the bucket holds one start when the outage ends")
        harness.clock.advance(by: .milliseconds(100))
        await harness.pool.waitUntilIdle()
        #expect(harness.fetcher.pendingCount == 8, "then as many as the budget allows in flight, at its rate")
        for _ in 0..<3 where harness.fetcher.pendingCount > 0 {
            _ = await harness.answerPending()
            await harness.pool.waitUntilIdle()
        }
        for call in calls { try await call.value }
        #expect(accounts.allSatisfy { harness.pool.state(of: $0).isIdentified })
        #expect(harness.pool.metrics.outages == 1)
        await harness.pool.shutdown()
        var outageEvents: [String] = []
        for await event in events {
            switch event.kind {
            case .outageBegan: outageEvents.append("began")
            case .outageEnded: outageEvents.append("ended by \(event.account)")
            default: break
            }
        }
        #expect(outageEvents == ["began", "ended by \(probe.account)"], "the pool's stream reports the outage")
    }

    @Test func aPauseAloneEndsWithNoOtherFetchToWakeTheQueue() async throws {
        // Only the budget's sleeper can admit bob here: no fetch ends and no other account asks.
        let harness = PoolHarness(budget: .init(maximumInFlight: 4, startsPerSecond: 100))
        harness.pool.budget.pause(for: .seconds(30))
        let bob = await harness.pool.startCall { try await $0.signIn("bob") }
        #expect(harness.fetcher.totalRequests == 0)
        harness.clock.advance(by: .seconds(30))
        await harness.pool.waitUntilIdle()
        #expect(harness.fetcher.requestedAccounts == ["bob"])
        try await bob.value
        await harness.pool.shutdown()
    }

    @Test func signingOneAccountOutCancelsOnlyItsWork() async throws {
        let harness = PoolHarness()
        for account: AccountID in ["alice", "bob"] { try await harness.pool.signIn(account) }
        let clock = harness.clock
        let work = await harness.pool.startCalls(2) { pool, index in
            try await pool.withIdentity(for: index == 0 ? "alice" : "bob") { credential in
                try await clock.sleep(for: .seconds(60))
                return credential.email
            }
        }
        await harness.pool.signOut("alice")
        await #expect(throws: SessionError.self) { try await work[0].value }
        #expect(harness.pool.state(of: "alice") == .signedOut)
        #expect(harness.pool.metrics(for: "bob")?.scopedWork == 1)
        #expect(try harness.pool.identityHeaders(for: "bob").credential().email == exampleEmail(for: "bob"))
        clock.advance(by: .seconds(60))
        #expect(try await work[1].value == exampleEmail(for: "bob"))
        await harness.pool.shutdown()
    }

    /// A subscriber of the pool's stream that falls behind loses its oldest events, and the pool's metrics count them.
    @Test func eventsASubscriberLostAreCounted() async throws {
        let harness = PoolHarness()
        let everything = harness.pool.events(bufferLimit: .max)
        let lagging = harness.pool.events(bufferLimit: 2)
        try await harness.pool.signIn("alice")
        try await harness.pool.signIn("bob")
        await harness.pool.shutdown()
        var published = 0
        for await _ in everything { published += 1 }
        var kept = 0
        for await _ in lagging { kept += 1 }
        #expect(published > 4)
        #expect(kept == 2)
        #expect(harness.pool.metrics.eventsDropped == published - 2)
        #expect(harness.pool.metrics.description.contains("events dropped \(published - 2)"))
    }

    @Test func theLeastRecentlyUsedIdleAccountMakesRoomWithItsHooks() async throws {
        let harness = PoolHarness(maximumAccounts: 2)
        let changes = SanitizedMutex<[String]>([])
        await harness.pool.addAccountChangeHook { change in
            changes.withLock { $0.append("\(change.from?.rawValue ?? "nil") → \(change.to?.rawValue ?? "nil")") }
        }
        let events = harness.pool.events(bufferLimit: .max)
        try await harness.pool.signIn("alice")
        harness.clock.advance(by: .seconds(1))
        try await harness.pool.signIn("bob")
        harness.clock.advance(by: .seconds(1))
        _ = try harness.pool.identityHeaders(for: "alice")
        try await harness.pool.signIn("carol")
        #expect(Set(harness.pool.accounts) == ["alice", "carol"])
        #expect(changes.withLock { $0 }.contains("bob → nil"))
        #expect(harness.pool.metrics.evictions == 1)
        await harness.pool.shutdown()
        var evicted: [AccountID] = []
        for await event in events {
            if case .evicted(.capacity) = event.kind { evicted.append(event.account) }
        }
        #expect(evicted == ["bob"])
    }

    @Test func anAccountWhoseWorkRunsIsNotEvicted() async throws {
        let harness = PoolHarness(maximumAccounts: 2)
        try await harness.pool.signIn("alice")
        harness.clock.advance(by: .seconds(1))
        try await harness.pool.signIn("bob")
        let clock = harness.clock
        let work = await harness.startWork(for: ["alice"], sleeping: .seconds(60))[0]
        // alice is the least recently used by her last sign-in, but her work runs: bob goes.
        harness.clock.advance(by: .seconds(1))
        _ = try harness.pool.identityHeaders(for: "bob")
        try await harness.pool.signIn("carol")
        #expect(Set(harness.pool.accounts) == ["alice", "carol"])
        clock.advance(by: .seconds(60))
        try await work.value
        await harness.pool.shutdown()
    }

    @Test func anEvictionClosesTheAccountToWorkInTheStepThatChoseIt() async throws {
        let harness = PoolHarness()
        try await harness.pool.signIn("alice")
        let slot = try #require(harness.pool.member("alice")?.slot)
        let clock = harness.clock
        let work = await harness.startWork(for: ["alice"], sleeping: .seconds(10))[0]
        #expect(!slot.closeToWorkIfIdle(), "work runs: the account cannot be closed")
        clock.advance(by: .seconds(10))
        try await work.value
        #expect(slot.closeToWorkIfIdle())
        // Closed, still a member: new work gets no identity; the account's reads go on until it leaves.
        await #expect(throws: SessionError.self) { try await harness.pool.withIdentity(for: "alice") { _ in } }
        #expect(try harness.pool.identityHeaders(for: "alice").credential().email == exampleEmail(for: "alice"))
        await harness.pool.shutdown()
    }

    @Test func accountsSignedInTogetherRenewApart() async throws {
        // One configured seed for the pool: each account must still draw its own jitter, or accounts signed in
        // together would renew together for ever.
        let harness = PoolHarness(budget: .init(maximumInFlight: 100, startsPerSecond: 1000, burst: 100))
        let accounts = PoolHarness.accounts(20)
        let calls = await harness.signInAtOnce(accounts)
        for call in calls { try await call.value }
        var renewedAt: Set<Int> = []
        var seen = harness.fetcher.totalRequests
        for second in 1...900 {
            harness.clock.advance(by: .seconds(1))
            await harness.pool.waitUntilIdle()
            if harness.fetcher.totalRequests > seen { renewedAt.insert(second) }
            seen = harness.fetcher.totalRequests
        }
        #expect(harness.fetcher.totalRequests >= 2 * accounts.count)
        #expect(renewedAt.count >= 10, "20 accounts renewed within only \(renewedAt.count) distinct seconds")
        await harness.pool.shutdown()
    }

    @Test func anAccountUnusedForTheIdleTimeoutIsSignedOut() async throws {
        let harness = PoolHarness(idleTimeout: .seconds(60))
        try await harness.pool.signIn("alice")
        try await harness.pool.signIn("bob")
        for _ in 0..<4 {
            harness.clock.advance(by: .seconds(30))
            _ = try harness.pool.identityHeaders(for: "bob")
            await harness.pool.waitUntilIdle()
        }
        #expect(harness.pool.accounts == ["bob"])
        #expect(harness.pool.metrics.evictions == 1)
        await harness.pool.shutdown()
    }

    @Test func anIdleAccountIsKeptForTheWholeTimeoutAndGoesWithinOneAndAHalf() async throws {
        // The sweeper wakes every 30 s; alice is read at 29 s, just before the first sweep: at 60 s she has been
        // unused for only 31 s and stays; at 90 s she has been unused for 61 s and goes.
        let harness = PoolHarness(idleTimeout: .seconds(60))
        try await harness.pool.signIn("alice")
        harness.clock.advance(by: .seconds(29))
        _ = try harness.pool.identityHeaders(for: "alice")
        for _ in 0..<31 {
            harness.clock.advance(by: .seconds(1))
            await harness.pool.waitUntilIdle()
        }
        #expect(harness.pool.accounts == ["alice"], "unused for 31 s of a 60 s timeout")
        _ = try harness.pool.headersWithoutUse(for: "alice")
        for _ in 0..<30 {
            harness.clock.advance(by: .seconds(1))
            await harness.pool.waitUntilIdle()
        }
        #expect(harness.pool.accounts.isEmpty, "unused for 61 s of a 60 s timeout")
        #expect(harness.pool.metrics.evictions == 1)
        await harness.pool.shutdown()
    }

    /// What a shutdown does to every member runs for each member once, and for at most a few at a time: a task group of
    /// every member at once costs time quadratic in the members (BENCHMARKS.md, *pool*: the shutdown).
    @Test func aShutdownVisitsEveryMemberOnceAndAFewAtATime() async throws {
        let harness = PoolHarness(budget: .init(maximumInFlight: 64, startsPerSecond: 1000, burst: 64))
        for call in await harness.signInAtOnce(PoolHarness.accounts(50)) { try await call.value }
        let members = harness.pool.table.members
        let counts = SanitizedMutex((active: 0, most: 0, visited: [AccountID]()))
        await SessionPool.forEach(members, atMost: 4) { member in
            counts.withLock {
                $0.active += 1
                $0.most = max($0.most, $0.active)
                $0.visited.append(member.account)
            }
            for _ in 0..<20 { await Task.yield() }
            counts.withLock { $0.active -= 1 }
        }
        let (active, most, visited) = counts.withLock { $0 }
        #expect(active == 0)
        #expect(most <= 4, "\(most) members at once")
        #expect(
            visited.sorted { $0.rawValue < $1.rawValue } == members.map(\.account).sorted { $0.rawValue < $1.rawValue })
        await harness.pool.shutdown()
        #expect(harness.pool.accounts.isEmpty)
    }

    @Test func anAccountsLatencySummaryKeepsOnlyItsRecentFetches() async throws {
        // Memory that grew with every renewal would grow without bound in a pool held for weeks.
        let harness = PoolHarness()
        try await harness.pool.signIn("alice")
        for _ in 0..<(SessionPool.accountLatencyWindow + 4) {
            harness.clock.advance(by: .seconds(60))
            _ = try await harness.pool.renew(for: "alice")
        }
        let metrics = try #require(harness.pool.metrics(for: "alice"))
        #expect(metrics.fetchesSucceeded == SessionPool.accountLatencyWindow + 5)
        #expect(metrics.fetchLatency.count == SessionPool.accountLatencyWindow)
        await harness.pool.shutdown()
    }

    @Test func aShutDownPoolRefusesSignInsAndEndsItsEvents() async throws {
        let harness = PoolHarness()
        let events = harness.pool.events()
        try await harness.pool.signIn("alice")
        await harness.pool.shutdown()
        await #expect(throws: SessionError.self) { try await harness.pool.signIn("bob") }
        #expect(harness.pool.accounts.isEmpty)
        var count = 0
        for await _ in events { count += 1 }
        #expect(count > 0)
    }

    @Test(.timeLimit(TimeLimits.minutes(1)))
    func runReturnsOnShutdownAndOnCancellation() async throws {
        // A shutdown() from elsewhere ends run(): a run() that outlived it would hang here to the time limit.
        let harness = PoolHarness()
        try await harness.pool.signIn("alice")
        let running = Task { try await harness.pool.run() }
        await harness.pool.shutdown()
        try await running.value
        #expect(harness.pool.accounts.isEmpty)

        // Cancelling the task that runs it shuts the pool down.
        let other = PoolHarness()
        try await other.pool.signIn("bob")
        let cancelled = Task { try await other.pool.run() }
        cancelled.cancel()
        try await cancelled.value
        #expect(other.pool.accounts.isEmpty)
        await #expect(throws: SessionError.self) { try await other.pool.signIn("carol") }
    }
}

/// The names of the fetches a budget admitted, in order.
final class Admitted: Sendable {
    private let names = SanitizedMutex<[String]>([])

    func append(_ name: String) { names.withLock { $0.append(name) } }

    var all: [String] { names.withLock { $0 } }
}

extension DeadlineQueue where Target == AccountShard.TimerTarget {
    /// A deadline queue for a budget of its own, on `clock` and its executor, as a pool's is.
    static func ofTheirOwn(on clock: ManualClock) -> DeadlineQueue {
        DeadlineQueue(clock: clock, taskExecutor: clock.executor, delivery: AccountShard.TimerTarget.deliver)
    }
}

@Suite struct FetchBudgetTests {
    private func budget(
        inFlight: Int = 1, rate: Double = 1000, burst: Int? = nil, outageThreshold: Int? = nil, clock: ManualClock,
        onChange: (@Sendable (FetchBudget.Change) -> Void)? = nil
    ) -> FetchBudget {
        FetchBudget(
            limits: .init(
                maximumInFlight: inFlight, startsPerSecond: rate, burst: burst, outageThreshold: outageThreshold,
                outageProbeInterval: .seconds(5)),
            clock: clock, timers: .ofTheirOwn(on: clock), onChange: onChange)
    }

    /// Ends one admitted fetch that was no probe, as neither an answer nor an outage.
    private func releaseOne(_ budget: FetchBudget) {
        budget.release(budget.ticket(urgency: .needed, deadline: .zero, account: "released"), outcome: .neither)
    }

    @Test func anOutageHoldsEveryFetchButOneProbeUntilTheBackendAnswers() async {
        let clock = ManualClock()
        let changes = SanitizedMutex<[FetchBudget.Change]>([])
        let budget = budget(inFlight: 10, outageThreshold: 3, clock: clock) { change in
            changes.withLock { $0.append(change) }
        }
        let admitted = Admitted()
        var failing: [FetchBudget.Ticket] = []
        for name in ["a", "b", "c"] {
            failing.append(await Self.start(budget, clock: clock, admitted: admitted, name: name).ticket)
        }
        // Two outages and an answer: the count starts again.
        budget.release(failing[0], outcome: .outage)
        budget.release(failing[1], outcome: .answered)
        budget.release(failing[2], outcome: .outage)
        #expect(!budget.snapshot.holdsForOutage)
        for name in ["d", "e", "f"] {
            failing.append(await Self.start(budget, clock: clock, admitted: admitted, name: name).ticket)
        }
        budget.release(failing[3], outcome: .outage)
        budget.release(failing[4], outcome: .neither)
        #expect(!budget.snapshot.holdsForOutage, "a fetch that was cancelled or paused counts for nothing")
        budget.release(failing[5], outcome: .outage)
        #expect(budget.snapshot.holdsForOutage && budget.snapshot.outages == 1, "three outages in a row")
        #expect(changes.withLock { $0 } == [.began("f")], "reported once, naming the fetch that completed the run")

        let probe = await Self.start(budget, clock: clock, admitted: admitted, name: "probe").ticket
        let held = await Self.start(
            budget, .proactive, deadline: .seconds(900), clock: clock, admitted: admitted, name: "held"
        ).ticket
        #expect(admitted.all.count == 6, "nothing starts before the probe interval")
        clock.advance(by: .seconds(5))
        await clock.executor.waitUntilIdle()
        #expect(admitted.all.last == "probe", "the first in urgency order goes alone")
        clock.advance(by: .seconds(60))
        await clock.executor.waitUntilIdle()
        #expect(!admitted.all.contains("held"), "one probe at a time")
        budget.release(probe, outcome: .outage)
        await clock.executor.waitUntilIdle()
        clock.advance(by: .seconds(4))
        await clock.executor.waitUntilIdle()
        #expect(!admitted.all.contains("held"), "the next probe waits the interval after the last one failed")
        clock.advance(by: .seconds(1))
        await clock.executor.waitUntilIdle()
        #expect(admitted.all.last == "held")
        let late = await Self.start(budget, clock: clock, admitted: admitted, name: "late").ticket
        #expect(admitted.all.last == "held")
        budget.release(held, outcome: .answered)
        await clock.executor.waitUntilIdle()
        #expect(!budget.snapshot.holdsForOutage && budget.snapshot.outages == 1)
        #expect(budget.snapshot.inFlight == 1, "the bucket holds one start when the outage ends")
        #expect(admitted.all.last == "late", "the answer ends the outage and the held fetches go")
        budget.release(late, outcome: .answered)
        #expect(changes.withLock { $0 } == [.began("f"), .ended("held")])
    }

    @Test func aBudgetWithoutOutageDetectionNeverHolds() async {
        let clock = ManualClock()
        let budget = budget(inFlight: 10, clock: clock)
        let admitted = Admitted()
        for index in 0..<20 {
            let ticket = await Self.start(budget, clock: clock, admitted: admitted, name: "\(index)").ticket
            budget.release(ticket, outcome: .outage)
        }
        #expect(admitted.all.count == 20 && !budget.snapshot.holdsForOutage)
    }

    /// A fetch started on the budget: its ticket, to release or promote it, and the task that acquires it.
    struct Started {
        let ticket: FetchBudget.Ticket
        let task: Task<Void, Never>
    }

    /// Starts `acquire` in a task on the clock's executor, as the engine's fetch tasks are, for a ticket of the
    /// account `name`; `name` joins `admitted` once the fetch is admitted.
    @discardableResult
    static func start(
        _ budget: FetchBudget, _ urgency: FetchUrgency = .needed, deadline: Duration = .zero, clock: ManualClock,
        admitted: Admitted, name: String
    ) async -> Started {
        let ticket = budget.ticket(urgency: urgency, deadline: deadline, account: AccountID(name))
        let task = Task(executorPreference: clock.executor) {
            if await budget.acquire(ticket) { admitted.append(name) }
        }
        await clock.executor.waitUntilIdle()
        return Started(ticket: ticket, task: task)
    }

    @Test func neededFetchesGoFirstThenEarlierDeadlines() async {
        let clock = ManualClock()
        let budget = budget(clock: clock)
        let admitted = Admitted()
        await Self.start(budget, .needed, clock: clock, admitted: admitted, name: "first")
        for (name, urgency, deadline) in [
            ("late renewal", FetchUrgency.proactive, Duration.seconds(900)),
            ("early renewal", .proactive, .seconds(300)), ("caller", .needed, .seconds(1_000)),
        ] {
            await Self.start(budget, urgency, deadline: deadline, clock: clock, admitted: admitted, name: name)
        }
        #expect(admitted.all == ["first"])
        #expect(budget.snapshot.queuedNeeded == 1 && budget.snapshot.queuedProactive == 2)
        for _ in 0..<3 {
            releaseOne(budget)
            await clock.executor.waitUntilIdle()
        }
        #expect(admitted.all == ["first", "caller", "early renewal", "late renewal"])
    }

    @Test func aRenewalPastItsDeadlineCountsAsNeeded() async {
        let clock = ManualClock()
        let budget = budget(clock: clock)
        let admitted = Admitted()
        await Self.start(budget, .needed, clock: clock, admitted: admitted, name: "first")
        await Self.start(budget, .proactive, deadline: .seconds(10), clock: clock, admitted: admitted, name: "renewal")
        clock.advance(by: .seconds(20))
        await Self.start(
            budget, .needed, deadline: clock.uptime, clock: clock, admitted: admitted, name: "caller")
        releaseOne(budget)
        await clock.executor.waitUntilIdle()
        #expect(admitted.all == ["first", "renewal"])
        releaseOne(budget)
        await clock.executor.waitUntilIdle()
        #expect(admitted.all == ["first", "renewal", "caller"])
    }

    @Test func aPromotedRenewalGoesBeforeOtherRenewals() async {
        let clock = ManualClock()
        let budget = budget(clock: clock)
        let admitted = Admitted()
        await Self.start(budget, .needed, clock: clock, admitted: admitted, name: "first")
        await Self.start(budget, .proactive, deadline: .seconds(100), clock: clock, admitted: admitted, name: "a")
        let b = await Self.start(
            budget, .proactive, deadline: .seconds(200), clock: clock, admitted: admitted, name: "b")
        budget.promote(b.ticket)
        releaseOne(budget)
        await clock.executor.waitUntilIdle()
        #expect(admitted.all == ["first", "b"])
    }

    @Test func aCancelledWaiterLeavesTheQueueAndReleasesNothing() async {
        let clock = ManualClock()
        let budget = budget(clock: clock)
        let admitted = Admitted()
        await Self.start(budget, .needed, clock: clock, admitted: admitted, name: "first")
        let cancelled = await Self.start(budget, .needed, clock: clock, admitted: admitted, name: "cancelled")
        await Self.start(budget, .needed, clock: clock, admitted: admitted, name: "next")
        cancelled.task.cancel()
        await cancelled.task.value
        #expect(budget.snapshot.queuedNeeded == 1)
        releaseOne(budget)
        await clock.executor.waitUntilIdle()
        #expect(admitted.all == ["first", "next"])
        #expect(budget.snapshot.inFlight == 1)
    }

    @Test func thePauseHoldsEveryFetchUntilItEndsThenOneProbeGoesFirst() async {
        let clock = ManualClock()
        let budget = budget(inFlight: 10, clock: clock)
        let admitted = Admitted()
        budget.pause(for: .seconds(30))
        let a = await Self.start(budget, .needed, clock: clock, admitted: admitted, name: "a")
        await Self.start(budget, .proactive, deadline: .seconds(900), clock: clock, admitted: admitted, name: "b")
        await Self.start(budget, .proactive, deadline: .seconds(950), clock: clock, admitted: admitted, name: "c")
        clock.advance(by: .seconds(29))
        await clock.executor.waitUntilIdle()
        #expect(admitted.all.isEmpty)
        clock.advance(by: .seconds(1))
        await clock.executor.waitUntilIdle()
        #expect(admitted.all == ["a"], "the first in urgency order goes alone, as an outage's probe does")
        clock.advance(by: .seconds(60))
        await clock.executor.waitUntilIdle()
        #expect(admitted.all == ["a"], "the others wait for the backend's answer to it")
        budget.release(a.ticket, outcome: .answered)
        await clock.executor.waitUntilIdle()
        #expect(admitted.all == ["a", "b"], "one start in the bucket when the pause ends")
        clock.advance(by: .milliseconds(1))
        await clock.executor.waitUntilIdle()
        #expect(admitted.all == ["a", "b", "c"], "then the budget's rate")
        #expect(budget.snapshot.outages == 0 && !budget.snapshot.holdsForOutage, "a pause is no outage")
    }

    /// Fetches of both urgencies take tickets, are promoted, ask to start, are cancelled and end on real threads, round
    /// after round: the budget never holds more in flight than its bound, admits or cancels every fetch that asked
    /// (none waits for ever), and ends each round with nothing in flight or queued. A fetch that read its task's
    /// cancellation before the lock step that queues it could queue after its cancellation handler found nothing to
    /// cancel, and wait for ever.
    @Test func realThreadsRacingTheBudgetAdmitEveryFetchWithinItsBound() async {
        let fetches = 6
        let bound = 2
        let overBound = RealThreadRounds.Count()
        let unbalanced = Atomic<Int>(0)
        let stuck = await RealThreadRounds.run(RealThreadRounds.scaled(3_000)) { round in
            let clock = ManualClock()
            // A bucket no round empties: only the in-flight bound makes fetches wait, so no time need pass.
            let budget = budget(inFlight: bound, rate: 1000, burst: 1_000_000, clock: clock)
            let inFlight = RealThreadRounds.Count()
            await withTaskGroup(of: Void.self) { group in
                for index in 0..<fetches {
                    let urgency: FetchUrgency = (round + index) % 2 == 0 ? .needed : .proactive
                    let ticket = budget.ticket(
                        urgency: urgency, deadline: .seconds(index), account: AccountID("fetch-\(index)"))
                    let fetch = Task.detached(executorPreference: RealThreadRounds.threads) {
                        guard await budget.acquire(ticket) else { return }
                        if inFlight.value.add(1, ordering: .relaxed).newValue > bound {
                            overBound.value.add(1, ordering: .relaxed)
                        }
                        await Task.yield()
                        inFlight.value.subtract(1, ordering: .relaxed)
                        budget.release(ticket, outcome: .neither)
                    }
                    group.addTask(executorPreference: RealThreadRounds.threads) {
                        switch index % 3 {
                        case 0: fetch.cancel()
                        case 1: budget.promote(ticket)
                        default: break
                        }
                        await fetch.value
                    }
                }
            }
            let snapshot = budget.snapshot
            if snapshot.inFlight != 0 || snapshot.queuedNeeded != 0 || snapshot.queuedProactive != 0 {
                unbalanced.add(1, ordering: .relaxed)
            }
        }
        #expect(stuck == nil, "a fetch waited for ever in round \(stuck ?? -1)")
        #expect(overBound.value.load(ordering: .relaxed) == 0, "fetches admitted over the bound")
        #expect(unbalanced.load(ordering: .relaxed) == 0, "rounds that ended with fetches in flight or queued")
    }

    /// Two fetches in flight end on two threads at once, one as an outage and one answered: whichever of them the
    /// budget's lock takes first, the observer hears the outage begin before it ends, never the other way round,
    /// since each change is reported in the lock step that makes it. Reported after that step, the two reports of
    /// racing steps can arrive swapped, and a pool's observer would hear an outage end that never began. The
    /// observer takes a varying while before it records a report, as a host's does.
    @Test func realThreadsEndingFetchesReportTheOutageInTheOrderItChanged() async {
        let misordered = RealThreadRounds.Count()
        let stuck = await RealThreadRounds.run(RealThreadRounds.scaled(4_000)) { round in
            let reports = Locked<[String]>([])
            let calls = Atomic(round)
            let budget = budget(inFlight: 2, burst: 10, outageThreshold: 1, clock: ManualClock()) { change in
                let spins = (calls.add(1, ordering: .relaxed).newValue &* 7_919) % 20_000
                for _ in 0..<spins where calls.load(ordering: .relaxed) < 0 {}
                switch change {
                case .began: reports.append("began")
                case .ended: reports.append("ended")
                case .behind: break
                }
            }
            let tickets = (0..<2).map {
                budget.ticket(urgency: .needed, deadline: .zero, account: AccountID("fetch-\($0)"))
            }
            for ticket in tickets { _ = await budget.acquire(ticket) }
            let line = RealThreadRounds.StartLine(parties: 2)
            await withTaskGroup(of: Void.self) { group in
                for (index, ticket) in tickets.enumerated() {
                    group.addTask(executorPreference: RealThreadRounds.threads) {
                        line.arriveAndWait()
                        budget.release(ticket, outcome: index == 0 ? .outage : .answered)
                    }
                }
            }
            // The answer came first (the failure then begins an outage) or second (it ends the outage).
            if reports.value != ["began"] && reports.value != ["began", "ended"] {
                misordered.value.add(1, ordering: .relaxed)
            }
        }
        #expect(stuck == nil, "a round never ended: \(stuck ?? -1)")
        #expect(misordered.value.load(ordering: .relaxed) == 0, "rounds whose observer heard the outage end first")
    }
}
