import Foundation
import SessionEngineBackend
import SessionEngineModel
import SessionEngineTestKit
import Synchronization
import Testing

@testable import SessionEngine

/// Accounts leaving a pool while other calls reach it: a sign-in keeps its member from eviction until it has returned,
/// a sign-out during a graceful shutdown still runs the account's hooks, and a shutdown returns only once every
/// account has stopped, those already leaving included, however many callers ask for it.
@Suite struct PoolLeavingTests {
    /// A sign-in whose join evicted an account waits for that account's hooks before its own call reaches its engine.
    /// Meanwhile its member is the least recently used, yet the next sign-in at the cap must not evict it: its
    /// caller has not reached the engine, so no waiter keeps it.
    @Test func aMemberWhoseSignInIsUnderWayIsNotEvicted() async throws {
        let harness = PoolHarness(maximumAccounts: 3)
        let held = Gate()
        await harness.pool.addAccountChangeHook { change in
            if change.from == "xavier" && change.to == nil { await held.wait() }
        }
        for account: AccountID in ["xavier", "yann", "zoe"] { try await harness.pool.signIn(account) }
        let events = harness.pool.events(bufferLimit: .max)
        // alice's join evicts xavier, the least recently used, whose sign-out is held in its hooks.
        let alice = await harness.pool.startCall { try await $0.signIn("alice") }
        #expect(held.isHolding)
        let serial = try #require(harness.pool.memberSerial(of: "alice"))
        // yann and zoe are used after alice joined: she is now the least recently used.
        _ = try harness.pool.identityHeaders(for: "yann")
        _ = try harness.pool.identityHeaders(for: "zoe")
        try await harness.pool.signIn("bob")
        held.open()
        try await alice.value
        #expect(harness.pool.memberSerial(of: "alice") == serial, "alice's member was evicted under her sign-in")
        #expect(harness.pool.state(of: "alice").isIdentified)
        // Two reads with no other use between them share a stamp: bob's join evicts yann or zoe.
        let accounts = Set(harness.pool.accounts)
        #expect(accounts.count == 3 && accounts.isSuperset(of: ["alice", "bob"]))
        await harness.pool.shutdown()
        var evicted: Set<AccountID> = []
        for await event in events {
            if case .evicted = event.kind { evicted.insert(event.account) }
        }
        #expect(evicted.count == 2 && evicted.contains("xavier") && !evicted.contains("alice"), "\(evicted)")
    }

    /// A graceful shutdown admits no account change, and would have turned a sign-out into a shutdown without
    /// hooks: signing an account out during the grace period ends that account's grace period instead, so it leaves
    /// with its hooks, its work cancelled, while the other accounts keep theirs.
    @Test func aSignOutDuringAGracefulShutdownRunsTheAccountsHooks() async throws {
        let harness = PoolHarness()
        let changes = Locked<[String]>()
        await harness.pool.addAccountChangeHook { change in
            changes.append("\(change.from?.rawValue ?? "nil") → \(change.to?.rawValue ?? "nil")")
        }
        try await harness.pool.signIn("alice")
        try await harness.pool.signIn("bob")
        let clock = harness.clock
        let work = await harness.startWork(for: ["alice", "bob"], sleeping: .seconds(30))
        let shutdown = await harness.pool.startCall { pool in await pool.shutdown(gracePeriod: .seconds(60)) }
        #expect(changes.value == ["nil → alice", "nil → bob"], "the grace period runs")
        await harness.pool.signOut("alice")
        #expect(changes.value.contains("alice → nil"), "alice left without her hooks")
        await #expect(throws: SessionError.self, "alice's work was cancelled") { try await work[0].value }
        #expect(harness.pool.state(of: "bob").isIdentified, "bob's grace period goes on")
        clock.advance(by: .seconds(30))
        try await work[1].value
        try await shutdown.value
        #expect(changes.value.contains("bob → nil"))
    }

    /// An account taken out of the table (here by a sign-out held in its hooks) has not stopped yet: a shutdown
    /// returns only once it has, and lets it leave as it began to, with its hooks.
    @Test func aShutdownWaitsForAnAccountStillLeaving() async throws {
        let harness = PoolHarness()
        let held = Gate()
        let hooksRan = Locked(false)
        await harness.pool.addAccountChangeHook { change in
            guard change.from == "alice", change.to == nil else { return }
            await held.wait()
            hooksRan.withLock { $0 = true }
        }
        try await harness.pool.signIn("alice")
        try await harness.pool.signIn("bob")
        let signOut = await harness.pool.startCall { await $0.signOut("alice") }
        #expect(held.isHolding)
        let returned = Locked(false)
        let shutdown = await harness.pool.startCall { pool in
            await pool.shutdown()
            returned.withLock { $0 = true }
        }
        #expect(!returned.value, "the shutdown returned while alice was still leaving")
        held.open()
        try await signOut.value
        try await shutdown.value
        #expect(hooksRan.value)
    }

    /// Every caller of `shutdown()`, and `run()`, returns once the pool has shut down: the second caller finds the
    /// table empty, and must wait for the first, not end the pool's events and `run()` at once.
    @Test func everyShutdownCallerReturnsOnlyOnceThePoolHasShutDown() async throws {
        let harness = PoolHarness()
        try await harness.pool.signIn("alice")
        let clock = harness.clock
        // Work that notices its cancellation only once the clock has moved: the shutdown waits for it to drain.
        let work = await harness.pool.startCall { pool in
            try await pool.withIdentity(for: "alice") { _ in await clock.sleepIgnoringCancellation(for: .seconds(5)) }
        }
        let returned = Locked<[String]>()
        let running = await harness.pool.startCall { pool in
            try await pool.run()
            returned.append("run")
        }
        let calls = await harness.pool.startCalls(2) { pool, index in
            await pool.shutdown()
            returned.append("shutdown \(index)")
        }
        #expect(returned.value.isEmpty, "a caller returned while alice's work still ran")
        clock.advance(by: .seconds(5))
        _ = try? await work.value
        for call in calls { try await call.value }
        try await running.value
        #expect(Set(returned.value) == ["run", "shutdown 0", "shutdown 1"])
        #expect(harness.pool.state(of: "alice") == .signedOut)
    }

    /// While every account is busy the pool holds more than its cap; the next sign-in that finds them idle again
    /// evicts as many as bring it back within the cap, not one for one for ever.
    @Test func aPoolOverItsCapComesBackWithinItOnceAccountsAreIdle() async throws {
        // Fetches are answered by the test: a sign-in cannot end before the test lets it.
        let harness = PoolHarness(maximumAccounts: 2, answersAtOnce: false)
        for call in await harness.signInAtOnce(["alice", "bob"]) {
            await harness.answerPending()
            try await call.value
        }
        let clock = harness.clock
        let work = await harness.startWork(for: ["alice", "bob"], sleeping: .seconds(10))
        // carol and dave sign in together, and neither sign-in can end before both have joined: each one's join finds
        // the others busy or signing in. (Answered at once, the first could end before the second task even started
        // on a busy machine, and then be evicted by it, as an idle account should be.)
        let signIns = await harness.signInAtOnce(["carol", "dave"])
        #expect(harness.pool.accounts.count == 4, "every account was busy: none could go")
        await harness.answerPending()
        for call in signIns { try await call.value }
        #expect(harness.pool.accounts.count == 4)
        _ = try harness.pool.identityHeaders(for: "dave")
        clock.advance(by: .seconds(10))
        for call in work { try await call.value }
        let erin = await harness.pool.startCall { try await $0.signIn("erin") }
        await harness.answerPending()
        try await erin.value
        #expect(harness.pool.accounts.count == 2)
        #expect(Set(harness.pool.accounts) == ["dave", "erin"])
        #expect(harness.pool.metrics.evictions == 3)
        await harness.pool.shutdown()
    }

    /// A shutdown waits for an eviction under way to be reported: the evicted account's event comes before the pool's
    /// events end.
    @Test func anEvictionUnderWayIsReportedBeforeTheEventsEnd() async throws {
        let harness = PoolHarness(maximumAccounts: 1)
        let held = Gate()
        await harness.pool.addAccountChangeHook { change in
            if change.from == "alice" && change.to == nil { await held.wait() }
        }
        try await harness.pool.signIn("alice")
        let events = harness.pool.events(bufferLimit: .max)
        let bob = await harness.pool.startCall { try await $0.signIn("bob") }
        #expect(held.isHolding, "bob's join evicted alice, whose hooks are held")
        let shutdown = await harness.pool.startCall { pool in await pool.shutdown() }
        held.open()
        _ = try? await bob.value
        try await shutdown.value
        var evicted: [AccountID] = []
        for await event in events {
            if case .evicted(.capacity) = event.kind { evicted.append(event.account) }
        }
        #expect(evicted == ["alice"])
    }

    /// A sign-out of an account whose eviction is under way returns once the account has left, its hooks run and its
    /// eviction reported, and does not sign it out a second time. It used to find no member and return at once.
    @Test func aSignOutOfAnAccountBeingEvictedReturnsOnceItHasLeft() async throws {
        let harness = PoolHarness(maximumAccounts: 1)
        let held = Gate()
        let changes = Locked<[String]>()
        await harness.pool.addAccountChangeHook { change in
            if change.from == "alice" && change.to == nil { await held.wait() }
            changes.append("\(change.from?.rawValue ?? "nil") → \(change.to?.rawValue ?? "nil")")
        }
        try await harness.pool.signIn("alice")
        let events = harness.pool.events(bufferLimit: .max)
        let bob = await harness.pool.startCall { try await $0.signIn("bob") }
        #expect(held.isHolding, "bob's join evicted alice, whose hooks are held")
        let returned = Locked(false)
        let signOut = await harness.pool.startCall { pool in
            await pool.signOut("alice")
            returned.withLock { $0 = true }
        }
        #expect(!returned.value, "the sign-out returned while alice was still leaving")
        held.open()
        try await signOut.value
        try await bob.value
        #expect(changes.value.filter { $0.hasPrefix("alice") } == ["alice → nil"])
        #expect(harness.pool.accounts == ["bob"])
        await harness.pool.shutdown()
        var evicted: [AccountID] = []
        for await event in events {
            if case .evicted(.capacity) = event.kind { evicted.append(event.account) }
        }
        #expect(evicted == ["alice"])
    }

    /// A sign-out, a sign-in that evicts the same account from a full pool and a shutdown race on real threads, round
    /// after round: every eviction the pool counts reaches its stream before the stream ends. A sign-out that looked
    /// its member up in one lock step and took it out in another could take out a member an eviction had already
    /// taken out, and end the member's leaving before the eviction was reported, so the shutdown finished the stream
    /// first. The window is the few instructions between the two steps: without the members' assertion that a
    /// member leaves once, that sign-out lost the eviction in 11 rounds of 40,000 in one run and 1 of 36,000 in
    /// another; with it (a debug build) these rounds fail in every run (Design/testing.md, *Limits*).
    @Test func realThreadsRacingASignOutAnEvictionAndAShutdownLoseNoEviction() async {
        let lost = Atomic<Int>(0)
        let stuck = await RealThreadRounds.run(RealThreadRounds.scaled(4_000)) { _ in
            let clock = ManualClock(executor: ManualExecutor(tasksRunInParallel: true))
            let signer = try! IdentitySigner(projectID: "proj_pool", secret: "pool-secret", clock: clock)
            let pool = SessionPool(
                fetcher: ScriptedCredentialFetcher { try signer.sign(email: exampleEmail(for: $0)) },
                configuration: SessionPoolConfiguration(maximumAccounts: 1),
                clock: clock
            )
            try? await pool.signIn("alice")
            let events = pool.events(bufferLimit: .max)
            async let signedOut: Void = Task.detached(executorPreference: RealThreadRounds.threads) {
                await pool.signOut("alice")
            }.value
            async let signedIn: Void = Task.detached(executorPreference: RealThreadRounds.threads) {
                try? await pool.signIn("carol")
            }.value
            async let shutDown: Void = Task.detached(executorPreference: RealThreadRounds.threads) {
                await pool.shutdown()
            }.value
            _ = await (signedOut, signedIn, shutDown)
            var reported = 0
            for await event in events {
                if case .evicted = event.kind { reported += 1 }
            }
            if reported != pool.metrics.evictions { lost.add(1, ordering: .relaxed) }
        }
        #expect(stuck == nil, "a call never returned in round \(stuck ?? -1)")
        #expect(lost.load(ordering: .relaxed) == 0, "rounds whose stream ended before an eviction was reported")
    }
}
