import Foundation
import SessionEngineTestKit
import Testing

@testable import SessionEngine

/// `signIn(_:timeout:)`: the caller gets an answer by the deadline, on the engine's clock, while the engine keeps
/// signing in.
@Suite(.timeLimit(TimeLimits.minutes(1)))
struct SignInDeadlineTests {
    private static let outage = SessionError.fetchFailed("the backend could not be reached")

    /// The backend is down: the caller fails with `SIGN_IN_TIMED_OUT` at the deadline, not before, saying why the
    /// last fetch failed; the account stays signed in and the engine keeps fetching.
    @Test func anOutageFailsTheCallerAtTheDeadlineAndTheEngineKeepsTrying() async throws {
        let harness = EngineHarness(configuration: SessionConfiguration(randomSeed: 21))
        let engine = harness.engine
        let fetcher = harness.fetcher
        fetcher.setResponder { _ in throw Self.outage }
        let clock = harness.clock
        let ended = Locked<Duration?>(nil)
        let signIn = await engine.startCall { engine in
            defer { ended.withLock { $0 = clock.uptime } }
            try await engine.signIn("alice", timeout: .seconds(30))
        }
        let endedEarly = await harness.clock.advance(upTo: .seconds(29)) { ended.value != nil }
        #expect(!endedEarly, "the call ended before its deadline")
        _ = await harness.clock.advance(upTo: .seconds(5)) { ended.value != nil }
        #expect(ended.value == .seconds(30))
        do {
            try await signIn.value
            Issue.record("the sign-in succeeded during an outage")
        } catch let error as SessionError {
            #expect(error.code == .signInTimedOut)
            #expect(error.code.rawValue == "SIGN_IN_TIMED_OUT")
            #expect(error.reason.contains("30 s") && error.reason.contains("FETCH_FAILED"), "\(error.reason)")
        }
        guard case .expired(let expired) = engine.state else {
            Issue.record("the account is not signed in: \(engine.state)")
            return
        }
        #expect(expired.account == "alice" && expired.reason == .unavailable)
        let fetches = fetcher.totalRequests
        let retried = await harness.clock.advance(upTo: .seconds(600)) { fetcher.totalRequests > fetches }
        #expect(retried, "the engine stopped fetching after the deadline")
        #expect(engine.metrics.waiters == 0)
        await engine.shutdown()
    }

    /// The backend recovers after the deadline: the account, still signed in, becomes identified without another
    /// call.
    @Test func theAccountBecomesIdentifiedWhenTheBackendRecoversAfterTheDeadline() async throws {
        let harness = EngineHarness(configuration: SessionConfiguration(randomSeed: 22))
        let engine = harness.engine
        harness.fetcher.setResponder { _ in throw Self.outage }
        let ended = Locked(false)
        let signIn = await engine.startCall { engine in
            defer { ended.withLock { $0 = true } }
            try await engine.signIn("alice", timeout: .seconds(10))
        }
        _ = await harness.clock.advance(upTo: .seconds(20)) { ended.value }
        await #expect(throws: SessionError.self) { try await signIn.value }

        harness.fetcher.setResponder(harness.signingResponder())
        let identified = await harness.clock.advance(upTo: .seconds(600)) { engine.state.isIdentified }
        #expect(identified)
        #expect(engine.state.account == "alice")
        #expect(try engine.identityHeaders()[IdentityHeaders.emailName] == "alice@example.com")
        await engine.shutdown()
    }

    /// A backend that answers in time: the call returns as `signIn(_:)` does and leaves no deadline task behind.
    @Test func aSignInThatSucceedsInTimeReturnsAndLeavesNoDeadlineBehind() async throws {
        let harness = EngineHarness(configuration: SessionConfiguration(randomSeed: 23))
        let engine = harness.engine
        let signIn = await engine.startCall { try await $0.signIn("alice", timeout: .seconds(30)) }
        harness.clock.advance(by: .seconds(2))
        await harness.answerNext(with: .success(harness.credential(for: "alice")))
        try await signIn.value
        await engine.waitUntilIdle()
        #expect(engine.state.isIdentified)
        #expect(engine.metrics.liveTasks == 0, "the renewal timer waits in the deadline queue, in no task")
        #expect(harness.clock.sleeperCount == 1)
        await engine.shutdown()
    }

    /// Cancelling the caller ends its wait at once, and its deadline with it; the sign-in goes on.
    @Test func cancellingTheCallerEndsTheWaitAndTheDeadline() async throws {
        let harness = EngineHarness(configuration: SessionConfiguration(randomSeed: 24))
        let engine = harness.engine
        harness.fetcher.setResponder { _ in throw Self.outage }
        let signIn = await engine.startCall { try await $0.signIn("alice", timeout: .seconds(60)) }
        await engine.waitUntilIdle()
        #expect(engine.metrics.waiters == 1)
        signIn.cancel()
        await #expect(throws: CancellationError.self) { try await signIn.value }
        await engine.waitUntilIdle()
        #expect(engine.metrics.waiters == 0)
        #expect(engine.metrics.liveTasks == 0, "the deadline ended with the caller; the retry timer is no task")
        #expect(engine.state.account == "alice")

        harness.fetcher.setResponder(harness.signingResponder())
        let identified = await harness.clock.advance(upTo: .seconds(600)) { engine.state.isIdentified }
        #expect(identified)
        await engine.shutdown()
    }

    /// The deadline covers the change's preparation too: work of the previous account that ignores cancellation
    /// cannot hold the caller past it.
    @Test func theDeadlineCoversThePreviousAccountsWorkDraining() async throws {
        let harness = EngineHarness(configuration: SessionConfiguration(randomSeed: 25))
        let engine = harness.engine
        try await harness.signIn("alice")
        let gate = Gate(clock: harness.clock)
        let work = await engine.startCall { engine in
            try await engine.withIdentity { _ in await gate.wait() }
        }
        let switchToBob = await engine.startCall { try await $0.signIn("bob", timeout: .seconds(5)) }
        harness.clock.advance(by: .seconds(5))
        await engine.waitUntilIdle()
        do {
            try await switchToBob.value
            Issue.record("the sign-in returned while alice's work still ran")
        } catch let error as SessionError {
            #expect(error.code == .signInTimedOut)
            #expect(error.reason.contains("draining"), "\(error.reason)")
        }
        #expect(engine.state == .switching(from: "alice", to: "bob"))

        gate.open()
        _ = try? await work.value
        await harness.answerNext(with: .success(harness.credential(for: "bob")))
        await engine.waitUntilIdle()
        #expect(engine.state.isIdentified && engine.state.account == "bob")
        await engine.shutdown()
    }

    /// `switchAccount(to:timeout:)` keeps the same deadline: past it the caller fails with `SIGN_IN_TIMED_OUT`, no
    /// credential of the account left is handed out, and the next account becomes identified once the backend
    /// answers.
    @Test func aSwitchWithADeadlineFailsTheCallerAtTheDeadlineAndGoesOn() async throws {
        let harness = EngineHarness(configuration: SessionConfiguration(randomSeed: 27))
        let engine = harness.engine
        try await harness.signIn("alice")
        harness.fetcher.setResponder { _ in throw Self.outage }
        let clock = harness.clock
        let ended = Locked<Duration?>(nil)
        let started = clock.uptime
        let switchToBob = await engine.startCall { engine in
            defer { ended.withLock { $0 = clock.uptime } }
            try await engine.switchAccount(to: "bob", timeout: .seconds(20))
        }
        let endedEarly = await harness.clock.advance(upTo: .seconds(19)) { ended.value != nil }
        #expect(!endedEarly, "the call ended before its deadline")
        _ = await harness.clock.advance(upTo: .seconds(5)) { ended.value != nil }
        #expect(ended.value == started + .seconds(20))
        do {
            try await switchToBob.value
            Issue.record("the switch succeeded during an outage")
        } catch let error as SessionError {
            #expect(error.code == .signInTimedOut)
            #expect(error.reason.contains("bob") && error.reason.contains("20 s"), "\(error.reason)")
        }
        #expect(engine.state.account == "bob")
        #expect(throws: SessionError.self) { try engine.identityHeaders() }

        harness.fetcher.setResponder(harness.signingResponder())
        let identified = await harness.clock.advance(upTo: .seconds(600)) { engine.state.isIdentified }
        #expect(identified)
        #expect(try engine.identityHeaders()[IdentityHeaders.emailName] == "bob@example.com")
        #expect(engine.metrics.waiters == 0)
        await engine.shutdown()
    }

    /// A change that supersedes the sign-in fails it with `ACCOUNT_CHANGED`, as without a deadline.
    @Test func aSupersedingChangeFailsTheCallerWithAccountChanged() async throws {
        let harness = EngineHarness(configuration: SessionConfiguration(randomSeed: 26))
        let engine = harness.engine
        let signIn = await engine.startCall { try await $0.signIn("alice", timeout: .seconds(60)) }
        let switchToBob = await engine.startCall { try await $0.signIn("bob") }
        do {
            try await signIn.value
            Issue.record("the superseded sign-in succeeded")
        } catch let error as SessionError {
            #expect(error.code == .accountChanged)
        }
        await harness.answerNext(with: .success(harness.credential(for: "bob")))
        try await switchToBob.value
        await engine.waitUntilIdle()
        #expect(engine.metrics.liveTasks == 0, "no deadline is left; the renewal timer is no task")
        await engine.shutdown()
    }
}
