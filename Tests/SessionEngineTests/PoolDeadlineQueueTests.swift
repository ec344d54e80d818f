import SessionEngineBackend
import SessionEngineModel
import SessionEngineTestKit
import Testing

@testable import SessionEngine

/// The pool's deadline queue: every account's timer in one heap, one sleeper, and the wall clock's jumps.
@Suite struct PoolDeadlineQueueTests {
    @Test func manyAccountsShareOneSleeperAndNoTaskEach() async throws {
        let harness = PoolHarness(budget: .init(maximumInFlight: 64, startsPerSecond: 1000, burst: 64))
        let accounts = PoolHarness.accounts(50)
        for call in await harness.signInAtOnce(accounts) { try await call.value }
        await harness.pool.waitUntilIdle()
        #expect(harness.pool.timers.count == accounts.count, "every identified account has its renewal timer")
        // The pool's timers sleep once for all of them; an engine of its own would sleep once each.
        #expect(harness.clock.sleeperCount == 1)
        for account in accounts { #expect(harness.pool.metrics(for: account)?.liveTasks == 0) }
        await harness.pool.shutdown()
        #expect(harness.pool.timers.count == 0)
    }

    /// An account that leaves gives its timer's slot back, and the next account's timer takes it: the timers hold as
    /// many slots as accounts and fetches in flight (each fetch's deadline holds a slot for its life) at once, and
    /// none once no account has one.
    @Test func accountsThatLeaveGiveTheirTimersSlotsToTheNext() async throws {
        let harness = PoolHarness(budget: .init(maximumInFlight: 64, startsPerSecond: 1000, burst: 64))
        let first = PoolHarness.accounts(20)
        for call in await harness.signInAtOnce(first) { try await call.value }
        await harness.pool.waitUntilIdle()
        #expect(harness.pool.timers.count == 20)
        // Twenty accounts, and at most the deadlines of their twenty first fetches, in flight at once.
        #expect((20...40).contains(harness.pool.timers.slotCount), "\(harness.pool.timers.slotCount) slots")
        for account in first.prefix(10) { await harness.pool.signOut(account) }
        await harness.pool.waitUntilIdle()
        #expect(harness.pool.timers.count == 10)
        let next = (0..<10).map { AccountID("next-\($0)") }
        for call in await harness.signInAtOnce(next) { try await call.value }
        await harness.pool.waitUntilIdle()
        #expect(harness.pool.timers.count == 20)
        // Twenty accounts and ten fetches at most: without reuse, the ten accounts and ten deadlines would add slots.
        #expect(harness.pool.timers.slotCount <= 40, "the freed slots were not reused")
        // Each account still renews through its own slot, before its credential expires.
        for _ in 0..<900 {
            harness.clock.advance(by: .seconds(1))
            await harness.pool.waitUntilIdle()
        }
        for account in first.suffix(10) + next {
            let metrics = try #require(harness.pool.metrics(for: account))
            #expect(metrics.renewals >= 1 && metrics.expiries == 0, "\(account): \(metrics)")
            #expect(harness.pool.state(of: account).isIdentified)
        }
        await harness.pool.shutdown()
        // The accounts' last jobs hold their slots, and so their places in the queue, until they have run.
        await harness.pool.waitUntilIdle()
        #expect(harness.pool.timers.count == 0)
        #expect(harness.pool.timers.slotCount == 0)
    }

    /// A sign-in's deadline and each fetch's deadline hold a slot of the queue only while their wait lasts: once the
    /// sign-in has returned, the account's renewal is the only timer left.
    @Test func theDeadlinesOfASignInAndItsFetchEndWithTheirWaits() async throws {
        let harness = PoolHarness()
        try await harness.pool.signIn("alice", timeout: .seconds(30))
        await harness.pool.waitUntilIdle()
        #expect(harness.pool.timers.count == 1, "the renewal's timer only")
        // The sign-in's deadline, were it still set, would fire now and find nothing to fail.
        harness.clock.advance(by: .seconds(31))
        await harness.pool.waitUntilIdle()
        #expect(harness.pool.timers.count == 1)
        #expect(harness.pool.state(of: "alice").isIdentified)
        await harness.pool.shutdown()
        // The accounts' last jobs hold their slots, and so their places in the queue, until they have run.
        await harness.pool.waitUntilIdle()
        #expect(harness.pool.timers.slotCount == 0)
    }

    /// The budget's sleeper is a deadline of the pool's queue: while fetches wait for a token, the queue holds it
    /// beside the accounts' timers and one task sleeps for all of them; once nothing waits, its slot is given back.
    @Test func theBudgetsSleeperWaitsInThePoolsQueue() async throws {
        // One start a second, a bucket of one: the second and third sign-ins wait for tokens.
        let harness = PoolHarness(budget: .init(maximumInFlight: 8, startsPerSecond: 1, burst: 1))
        let calls = await harness.signInAtOnce(PoolHarness.accounts(3))
        #expect(harness.pool.timers.count == 2, "the first account's renewal and the sleeper's deadline")
        #expect(harness.clock.sleeperCount == 1)
        for _ in 0..<3 {
            harness.clock.advance(by: .seconds(1))
            await harness.pool.waitUntilIdle()
        }
        for call in calls { try await call.value }
        #expect(harness.pool.timers.count == 3, "the accounts' renewals only: nothing waits for the budget")
        #expect(harness.clock.sleeperCount == 1)
        await harness.pool.shutdown()
        // The accounts' last jobs hold their slots, and so their places in the queue, until they have run.
        await harness.pool.waitUntilIdle()
        #expect(harness.pool.timers.slotCount == 0, "every slot was given back, the sleeper's too")
    }

    /// The idle sweeper is a deadline of the pool's queue, set again after each sweep: no task sleeps for it, and a
    /// shutdown cancels it.
    @Test func theIdleSweeperWaitsInThePoolsQueue() async throws {
        let harness = PoolHarness(idleTimeout: .seconds(60))
        try await harness.pool.signIn("alice")
        await harness.pool.waitUntilIdle()
        #expect(harness.pool.timers.count == 2, "alice's renewal and the sweeper")
        #expect(harness.clock.sleeperCount == 1, "one task sleeps for both")
        harness.clock.advance(by: .seconds(30))
        await harness.pool.waitUntilIdle()
        #expect(harness.pool.timers.count == 2, "the sweeper swept and set its next deadline")
        await harness.pool.shutdown()
        #expect(harness.pool.timers.count == 0)
        #expect(harness.clock.sleeperCount == 0)
    }

    @Test func everyAccountRenewsOnceThroughTheSharedTimers() async throws {
        let harness = PoolHarness(budget: .init(maximumInFlight: 64, startsPerSecond: 1000, burst: 64))
        let accounts = PoolHarness.accounts(10)
        for call in await harness.signInAtOnce(accounts) { try await call.value }
        // Credentials last 15 minutes and renew well before they expire: each account exactly once in 15 minutes.
        for _ in 0..<900 {
            harness.clock.advance(by: .seconds(1))
            await harness.pool.waitUntilIdle()
        }
        for account in accounts {
            let metrics = try #require(harness.pool.metrics(for: account))
            #expect(metrics.renewals == 1, "\(account) renewed \(metrics.renewals) times")
            #expect(metrics.expiries == 0)
            #expect(harness.pool.state(of: account).isIdentified)
        }
        await harness.pool.shutdown()
    }

    @Test func aWallClockJumpForwardIsNoticedWithinOneSlice() async throws {
        let harness = PoolHarness()
        try await harness.pool.signIn("alice")
        let before = harness.fetcher.totalRequests
        // The wall clock moves past the credential's expiry; the monotonic clock has not moved.
        harness.clock.jumpWallClock(by: .seconds(3600))
        var waited = Duration.zero
        while harness.fetcher.totalRequests == before && waited < .seconds(60) {
            harness.clock.advance(by: .seconds(1))
            waited += .seconds(1)
            await harness.pool.waitUntilIdle()
        }
        #expect(harness.fetcher.totalRequests > before)
        #expect(waited <= DeadlineQueue<AccountShard.TimerTarget>.slice, "the jump was noticed after \(waited)")
        await harness.pool.shutdown()
    }

    @Test func aWallClockJumpBackDelaysTheRenewalByTheJump() async throws {
        let harness = PoolHarness()
        try await harness.pool.signIn("alice")
        let before = harness.fetcher.totalRequests
        harness.clock.jumpWallClock(by: .seconds(-3600))
        // The credential expires 15 minutes after the sign-in by the backend's clock; locally it is now 75 minutes
        // away, and the renewal comes before it, not at its time on the monotonic clock.
        var renewedAfter: Duration?
        for second in 1...(80 * 60) {
            harness.clock.advance(by: .seconds(1))
            await harness.pool.waitUntilIdle()
            if harness.fetcher.totalRequests > before {
                renewedAfter = .seconds(second)
                break
            }
        }
        let after = try #require(renewedAfter)
        #expect(after > .seconds(3600), "renewed after \(after), before the wall clock came back to its time")
        #expect(after < .seconds(75 * 60))
        await harness.pool.shutdown()
    }

    @Test func signingOutCancelsTheTimerAndTheLastStopsTheSleeper() async throws {
        let harness = PoolHarness()
        try await harness.pool.signIn("alice")
        try await harness.pool.signIn("bob")
        #expect(harness.pool.timers.count == 2)
        await harness.pool.signOut("alice")
        #expect(harness.pool.timers.count == 1)
        await harness.pool.signOut("bob")
        await harness.pool.waitUntilIdle()
        #expect(harness.pool.timers.count == 0)
        #expect(harness.clock.sleeperCount == 0, "no timer is left to sleep for")
        await harness.pool.shutdown()
    }

    /// A pool dropped without shutting down takes its accounts' timers with it. The timers hold their engines, and
    /// the engines the timers, so a pool that left them would leave its engines alive, renewing for ever.
    @Test func aPoolDroppedWithoutShuttingDownFreesItsEngines() async throws {
        let clock = ManualClock()
        let signer = try IdentitySigner(projectID: "proj_pool", secret: "pool-secret", clock: clock)
        let fetcher = ScriptedCredentialFetcher(responder: { account in
            try signer.sign(email: exampleEmail(for: account))
        })
        var pool: SessionPool? = SessionPool(fetcher: fetcher, clock: clock)
        try await pool?.signIn("alice")
        await pool?.waitUntilIdle()
        weak let slot = pool?.member("alice")?.slot
        let timers = try #require(pool?.timers)
        #expect(slot != nil)
        #expect(timers.count == 1, "the account's renewal timer has its slot in the queue")
        pool = nil
        #expect(slot == nil, "the dropped pool's account is freed")
        #expect(timers.count == 0)
    }

    /// A fetch whose fetcher never answers still times out when the pool was dropped without shutting down: its
    /// deadline, a slot of the pool's queue, needs no pool to fire, so the fetch task ends and its engine is freed.
    @Test func aHungFetchOfADroppedPoolStillTimesOutAndFreesItsEngine() async throws {
        let clock = ManualClock()
        let fetcher = ScriptedCredentialFetcher(clock: clock) { _ in .held(ignoringCancellation: true) }
        var pool: SessionPool? = SessionPool(fetcher: fetcher, clock: clock)
        let caller = Task { [weak pool] in try await pool?.signIn("alice") }
        _ = await fetcher.nextRequest()
        weak let slot = pool?.member("alice")?.slot
        #expect(slot != nil)
        caller.cancel()
        _ = await caller.result
        weak let dropped = pool
        pool = nil
        #expect(dropped == nil, "the pool is gone")
        #expect(slot != nil, "the fetch task holds its account's slot while the fetcher hangs")
        clock.advance(by: SessionConfiguration().fetchTimeout + .seconds(1))
        await clock.executor.waitUntilIdle()
        #expect(slot == nil, "the fetch timed out, and its task let its account's slot go")
    }
}
