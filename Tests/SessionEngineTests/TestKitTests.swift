import Foundation
import SessionEngine
import SessionEngineBackend
import SessionEngineTestKit
import Testing

/// What the test kit gives hosts: a fetcher that records and scripts every fetch, a clock that advances until
/// something holds, and a gate that carries a value.
@Suite(.timeLimit(TimeLimits.minutes(1)))
struct TestKitTests {
    static func credential(on clock: ManualClock) throws -> IdentityCredential {
        let signer = try IdentitySigner(projectID: EngineHarness.projectID, secret: EngineHarness.secret, clock: clock)
        return try signer.sign(email: "alice@example.com")
    }

    // MARK: - ScriptedCredentialFetcher

    @Test func aScriptedFetcherRecordsEveryRequestInFull() async throws {
        let clock = ManualClock()
        let credential = try Self.credential(on: clock)
        let fetcher = ScriptedCredentialFetcher(clock: clock) { _ in .credential(credential) }
        let engine = SessionEngine(fetcher: fetcher, configuration: SessionConfiguration(randomSeed: 1), clock: clock)
        try await engine.signIn("alice")
        let request = try #require(fetcher.requests.first)
        #expect(fetcher.requests.count == 1 && request.id == 1)
        #expect(request.account == "alice" && request.attempt == 1)
        #expect(request.startedAt == clock.now && request.receivedAt == clock.now)
        #expect(fetcher.requestedAccounts == ["alice"])
        await engine.shutdown()
    }

    @Test func aDelayedReplyArrivesOnItsOwnWhenTheClockReachesIt() async throws {
        let clock = ManualClock()
        let credential = try Self.credential(on: clock)
        let fetcher = ScriptedCredentialFetcher(clock: clock) { _ in .credential(credential, after: .seconds(5)) }
        let engine = SessionEngine(fetcher: fetcher, configuration: SessionConfiguration(randomSeed: 1), clock: clock)
        let signIn = await engine.startCall { try await $0.signIn("alice") }
        clock.advance(by: .seconds(4))
        await engine.waitUntilIdle()
        #expect(!engine.state.isIdentified, "the answer is still on its way")
        clock.advance(by: .seconds(1))
        await engine.waitUntilIdle()
        #expect(engine.state.isIdentified, "the answer arrived without the test answering")
        try await signIn.value
        #expect(fetcher.pendingCount == 0)
        await engine.shutdown()
    }

    @Test func aReplyReportsTheBackendsClockOffset() async throws {
        let clock = ManualClock()
        let credential = try Self.credential(on: clock)
        let fetcher = ScriptedCredentialFetcher(clock: clock) { _ in
            .credential(credential, serverClockOffset: .seconds(-90))
        }
        let fetched = try await fetcher.fetch(FetchRequest(id: 1, account: "alice", epoch: 3, attempt: 2))
        #expect(fetched == FetchedCredential(credential, serverClockOffset: .seconds(-90)))
        let request = try #require(fetcher.requests.first)
        #expect(request.epoch == 3 && request.attempt == 2 && request.startedAt == nil)
    }

    @Test func aHeldFetchThatIgnoresCancellationEndsOnlyWithItsAnswer() async throws {
        let clock = ManualClock()
        let credential = try Self.credential(on: clock)
        let fetcher = ScriptedCredentialFetcher(clock: clock) { _ in .held(ignoringCancellation: true) }
        let fetch = Task { try await fetcher.fetchCredential(for: "alice") }
        let request = await fetcher.nextRequest()
        fetch.cancel()
        #expect(fetcher.pendingCount == 1, "the cancelled fetch still waits for its answer")
        #expect(fetcher.respond(to: request, with: .success(credential)))
        #expect(try await fetch.value == credential)
        #expect(fetcher.cancelledCount == 0)
    }

    @Test func aHeldFetchEndsWhenCancelledUnlessTheScriptSaysOtherwise() async throws {
        let fetcher = ScriptedCredentialFetcher()
        let fetch = Task { try await fetcher.fetchCredential(for: "alice") }
        let request = await fetcher.nextRequest()
        fetch.cancel()
        await #expect(throws: CancellationError.self) { try await fetch.value }
        #expect(fetcher.cancelledCount == 1)
        #expect(!fetcher.respond(to: request, with: .error(SessionError.fetchFailed("late"))))
    }

    // MARK: - ManualClock.advance(upTo:until:)

    @Test func advancingUntilAConditionStopsAtTheDeadlineThatMakesItHold() async {
        let clock = ManualClock()
        let woken = Locked(0)
        for seconds in [10, 20, 30] {
            Task(executorPreference: clock.executor) {
                try await clock.sleep(for: .seconds(seconds))
                woken.withLock { $0 += 1 }
            }
        }
        await clock.waitForSleepers(count: 3)
        #expect(await clock.advance(upTo: .seconds(60)) { woken.value == 2 })
        #expect(clock.uptime == .seconds(20), "the clock stopped at the second deadline")
        clock.advance(by: .seconds(10))
    }

    @Test func advancingUntilAConditionStopsAtItsLimitOrWhenNothingSleeps() async {
        let clock = ManualClock()
        #expect(await clock.advance(upTo: .seconds(60)) { false } == false)
        #expect(clock.uptime == .zero, "nothing sleeps: the clock stays")
        Task(executorPreference: clock.executor) { try await clock.sleep(for: .seconds(100)) }
        await clock.waitForSleepers(count: 1)
        #expect(await clock.advance(upTo: .seconds(60)) { false } == false)
        #expect(clock.uptime == .seconds(60), "the clock moved as far as the limit and no further")
        clock.advance(by: .seconds(40))
    }

    // MARK: - Gate

    @Test func aGateGivesEveryWaiterTheValueItWasFirstOpenedWith() async {
        let gate = Gate()
        let waiter = Task { await gate.value(as: Int.self) }
        #expect(!gate.isOpen)
        gate.open(with: 7)
        gate.open(with: 8)
        #expect(await waiter.value == 7)
        #expect(await gate.value(as: Int.self) == 7, "a late waiter passes at once")
        #expect(await gate.value(as: String.self) == nil, "a value of another type is none")
    }

    @Test func aGateOpenedWithoutAValueLetsWaitersThroughWithNone() async {
        let gate = Gate()
        let waiter = Task { await gate.wait() }
        gate.open()
        await waiter.value
        #expect(gate.isOpen && !gate.isHolding)
        #expect(await gate.value(as: Bool.self) == nil)
    }

    // MARK: - ManualExecutor

    @Test func workRunOutsideTheExecutorKeepsItBusyUntilItEnds() async {
        let executor = ManualExecutor()
        #expect(executor.isIdle)
        let ended = Locked(false)
        let task = Task(executorPreference: executor) {
            await executor.runOutside {
                // Resumed from a thread of the system's, as a real server's answer is: the executor has no job meanwhile.
                await withCheckedContinuation { continuation in
                    DispatchQueue.global().asyncAfter(deadline: .now() + .milliseconds(50)) { continuation.resume() }
                }
                ended.withLock { $0 = true }
            }
        }
        await executor.waitUntilIdle()
        #expect(ended.withLock { $0 }, "the executor read idle while the work outside it ran")
        #expect(executor.isIdle)
        await task.value
    }

    @Test func tasksThatRunInParallelAreCountedWithTheSerialQueue() async {
        let executor = ManualExecutor(tasksRunInParallel: true)
        let own = ObjectIdentifier(executor.taskExecutor) != ObjectIdentifier(executor)
        #expect(own, "tasks run on an executor of their own")
        let finished = Locked(0)
        for _ in 0..<20 {
            Task(executorPreference: executor.taskExecutor) {
                for _ in 0..<5 { await Task.yield() }
                finished.withLock { $0 += 1 }
            }
        }
        await executor.waitUntilIdle()
        #expect(finished.withLock { $0 } == 20)
        #expect(executor.isIdle)
    }
}
