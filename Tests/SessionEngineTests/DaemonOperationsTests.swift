import Foundation
import SessionEngine
import SessionEngineTestKit
import Synchronization
import Testing

/// What a daemon needs beyond renewal: a graceful shutdown, a backend's requested delay, and credentials the host
/// hands over. All on virtual time; the HTTP side is in `DaemonHTTPTests`.
@Suite(.timeLimit(TimeLimits.minutes(1)))
struct DaemonOperationsTests {
    // MARK: - Graceful shutdown

    @Test func aGracefulShutdownLetsWorkFinishWithinTheGracePeriodThenSignsOutWithHooks() async throws {
        let harness = EngineHarness()
        let engine = harness.engine
        let changes = SanitizedMutex<[AccountChange]>([])
        await engine.addAccountChangeHook { change in changes.withLock { $0.append(change) } }
        try await harness.signIn("alice")
        let gate = Gate(clock: harness.clock)
        let work = await engine.startCall { engine in
            try await engine.withIdentity { credential in
                await gate.wait()
                return credential.email
            }
        }
        let run = await engine.startCall { engine in try await engine.run() }
        let shutdown = await engine.startCall { engine in await engine.shutdown(gracePeriod: .seconds(30)) }

        // New work receives no identity; the running work keeps its identity, which is still renewed.
        await #expect(throws: SessionError.self) { try await engine.withIdentity { _ in 1 } }
        do {
            _ = try await engine.withIdentity { _ in 1 }
        } catch let error as SessionError {
            #expect(error.code == .shutDown)
        }
        #expect(engine.state.isIdentified)
        #expect(try engine.identityHeaders()[IdentityHeaders.emailName] == "alice@example.com")
        harness.clock.advance(by: .seconds(29))
        await engine.waitUntilIdle()
        #expect(engine.state.isIdentified, "the grace period ended early")

        // The work finishes inside the grace period: the engine signs out with hooks and shuts down at once.
        gate.open()
        #expect(try await work.value == "alice@example.com")
        try await shutdown.value
        try await run.value
        #expect(engine.state == .signedOut)
        #expect(
            changes.withLock { $0 } == [AccountChange(from: nil, to: "alice"), AccountChange(from: "alice", to: nil)])
        #expect(engine.metrics.scopedWorkCancelled == 0)
        await #expect(throws: SessionError.self) { try await engine.signIn("bob") }
        await engine.waitUntilIdle()
        #expect(engine.metrics.liveTasks == 0)
    }

    @Test func workThatOutlastsTheGracePeriodIsCancelledAndDrainedBeforeTheSignOut() async throws {
        let harness = EngineHarness()
        let engine = harness.engine
        let clock = harness.clock
        let changes = SanitizedMutex<[AccountChange]>([])
        await engine.addAccountChangeHook { change in changes.withLock { $0.append(change) } }
        try await harness.signIn("alice")
        let work = await engine.startCall { engine in
            try await engine.withIdentity { _ in try await clock.sleep(for: .seconds(3600)) }
        }
        var events = engine.events(bufferLimit: .max).makeAsyncIterator()
        let shutdown = await engine.startCall { engine in await engine.shutdown(gracePeriod: .seconds(30)) }
        clock.advance(by: .seconds(29))
        await engine.waitUntilIdle()
        #expect(engine.state.isIdentified)
        #expect(changes.withLock { $0.count } == 1)

        clock.advance(by: .seconds(1))
        try await shutdown.value
        await #expect(throws: SessionError.self) { try await work.value }
        #expect(changes.withLock { $0.last } == AccountChange(from: "alice", to: nil))
        #expect(engine.metrics.scopedWorkCancelled == 1)
        var kinds: [SessionEvent.Kind] = []
        while let event = await events.next() { kinds.append(event.kind) }
        #expect(kinds.contains(.workCancelled(account: "alice", count: 1)))
        #expect(kinds.last == .stateChanged(.signedOut))
        await engine.waitUntilIdle()
        #expect(engine.metrics.liveTasks == 0)
    }

    @Test func aGracefulShutdownWithoutWorkEndsAtOnce() async throws {
        let harness = EngineHarness()
        try await harness.signIn("alice")
        await harness.engine.shutdown(gracePeriod: .seconds(600))
        #expect(harness.engine.state == .signedOut)
        await harness.engine.waitUntilIdle()
        #expect(harness.engine.metrics.liveTasks == 0)
    }

    // MARK: - Server-directed backoff

    @Test func aRetryAfterLongerThanTheBackoffCapIsHonoured() async throws {
        let configuration = SessionConfiguration(
            retry: RetryPolicy(initial: .seconds(1), multiplier: 2, cap: .seconds(30)),
            randomSeed: 7
        )
        let harness = EngineHarness(configuration: configuration)
        let engine = harness.engine
        try await harness.signIn("alice")
        var events = engine.events(bufferLimit: .max).makeAsyncIterator()
        // Past the minimum interval, renew() fetches.
        harness.clock.advance(by: .seconds(60))
        let renewal = await engine.startCall { engine in try await engine.renew() }
        let busy = SessionError(
            .fetchFailed, reason: "the backend answered 429", isTransient: true, retryAfter: .seconds(120))
        await harness.answerNext(with: .failure(busy))
        await #expect(throws: SessionError.self) { try await renewal.value }
        guard let failure = await events.nextFailure() else {
            Issue.record("no failure reported")
            return
        }
        #expect(failure.serverRetryAfter == .seconds(120))
        #expect(failure.retryIn == .seconds(120))
        #expect(engine.metrics.serverDirectedDelays == 1)

        // Nothing makes the engine fetch before the backend's delay has passed: not the timer, not renew().
        let requests = harness.fetcher.totalRequests
        let early = await engine.startCall { engine in try await engine.renew() }
        // Idle first, so the retry's timer sleeps on the clock before it moves: a timer that read the time
        // before an advance and slept after it would wait a whole delay longer.
        await engine.waitUntilIdle()
        harness.clock.advance(by: .seconds(119))
        await engine.waitUntilIdle()
        #expect(harness.fetcher.totalRequests == requests)
        harness.clock.advance(by: .seconds(1))
        let request = await harness.fetcher.nextRequest()
        harness.fetcher.respond(to: request, with: .success(harness.credential(for: "alice")))
        _ = try await early.value
        #expect(harness.fetcher.totalRequests == requests + 1)
        await engine.shutdown()
    }

    @Test func aRetryAfterIsBoundedByItsMaximumAndNeverShortensTheBackoff() async throws {
        let configuration = SessionConfiguration(
            retry: RetryPolicy(initial: .seconds(200), multiplier: 1, cap: .seconds(200)),
            maximumRetryAfter: .seconds(600),
            randomSeed: 3
        )
        let harness = EngineHarness(configuration: configuration)
        let engine = harness.engine
        var events = engine.events(bufferLimit: .max).makeAsyncIterator()
        let signIn = await engine.startCall { engine in try await engine.signIn("alice") }
        let huge = SessionError(.fetchFailed, reason: "503", isTransient: true, retryAfter: .seconds(86_400))
        await harness.answerNext(with: .failure(huge))
        guard let bounded = await events.nextFailure() else {
            Issue.record("no failure reported")
            return
        }
        #expect(bounded.serverRetryAfter == .seconds(600))
        #expect(bounded.retryIn == .seconds(600))

        await engine.waitUntilIdle()
        harness.clock.advance(by: .seconds(600))
        let tiny = SessionError(.fetchFailed, reason: "429", isTransient: true, retryAfter: .seconds(1))
        await harness.answerNext(with: .failure(tiny))
        guard let short = await events.nextFailure(), let retryIn = short.retryIn else {
            Issue.record("no failure reported")
            return
        }
        #expect(short.serverRetryAfter == .seconds(1))
        // The backoff's own draw (here 0 … 200 s) and the 5 s minimum interval still apply.
        #expect(retryIn >= .seconds(5))
        #expect(engine.metrics.serverDirectedDelays == 2)
        await engine.waitUntilIdle()
        harness.clock.advance(by: retryIn)
        await harness.answerNext(with: .success(harness.credential(for: "alice")))
        try await signIn.value
        await engine.shutdown()
    }

    // MARK: - Credentials the host hands over

    @Test func signingInWithAHeldCredentialInstallsItWithoutFetching() async throws {
        let harness = EngineHarness()
        let engine = harness.engine
        let changes = SanitizedMutex<[AccountChange]>([])
        await engine.addAccountChangeHook { change in changes.withLock { $0.append(change) } }
        try await engine.signIn("alice", with: harness.credential(for: "alice"))
        #expect(engine.state.isIdentified)
        #expect(harness.fetcher.totalRequests == 0)
        #expect(changes.withLock { $0 } == [AccountChange(from: nil, to: "alice")])
        #expect(engine.metrics.credentialsPushed == 1)
        #expect(engine.metrics.fetchesSucceeded == 0)

        // Renewal then goes through the fetcher, at the usual time.
        harness.fetcher.setResponder(harness.signingResponder())
        // The default renewal point lies between 375 s and 825 s of the 900 s lifetime.
        let renewed = await harness.clock.advance(upTo: .seconds(900)) { harness.fetcher.totalRequests == 1 }
        #expect(renewed)
        await engine.shutdown()
    }

    @Test func aHeldCredentialIsValidatedLikeAFetchedOne() async throws {
        let harness = EngineHarness()
        let engine = harness.engine
        // Refused at sign-in: nothing changes.
        await expectRefusal(.credentialExpiredOnArrival) {
            try await engine.signIn("alice", with: harness.credential(for: "alice", lifetime: -1))
        }
        await expectRefusal(.lifetimeTooLong) {
            try await engine.signIn("alice", with: longLived(harness, lifetime: 2 * 86_400))
        }
        #expect(engine.state == .signedOut)
        // Refused when signed out: the engine left (or never entered) the account.
        await expectRefusal(.accountChanged) {
            try await engine.setIdentityCredential(harness.credential(for: "alice"), for: "alice")
        }

        try await harness.signIn("alice")
        let installed = try engine.identityHeaders()
        await expectRefusal(.identityMismatch) {
            try await engine.setIdentityCredential(
                harness.credential(for: "alice", email: "mallory@example.com"), for: "alice")
        }
        await expectRefusal(.credentialExpiredOnArrival) {
            try await engine.setIdentityCredential(harness.credential(for: "alice", lifetime: 0), for: "alice")
        }
        await expectRefusal(.lifetimeTooLong) {
            try await engine.setIdentityCredential(longLived(harness, lifetime: 90_000), for: "alice")
        }
        await expectRefusal(.accountChanged) {
            try await engine.setIdentityCredential(harness.credential(for: "bob"), for: "bob")
        }
        #expect(try engine.identityHeaders() == installed)
        #expect(engine.metrics.credentialsPushed == 0)

        // An accepted one replaces the installed credential at once.
        harness.clock.advance(by: .seconds(60))
        let pushed = harness.credential(for: "alice")
        try await engine.setIdentityCredential(pushed, for: "alice")
        #expect(try engine.identityHeaders() == IdentityHeaders(pushed))
        #expect(engine.metrics.credentialsPushed == 1)
        await engine.shutdown()
    }

    @Test func aPushedRenewalReplacesARunningFetchWhoseResultIsDiscarded() async throws {
        let harness = EngineHarness()
        let engine = harness.engine
        try await harness.signIn("alice")
        harness.clock.advance(by: .seconds(60))
        let renewal = await engine.startCall { engine in try await engine.renew() }
        let request = await harness.fetcher.nextRequest()
        let pushed = harness.credential(for: "alice", lifetime: 600)
        try await engine.setIdentityCredential(pushed, for: "alice")
        // The caller waiting for a renewal receives the pushed credential.
        #expect(try await renewal.value == pushed)
        await engine.waitUntilIdle()
        #expect(harness.fetcher.cancelledCount == 1)
        #expect(!harness.fetcher.respond(to: request, with: .success(harness.credential(for: "alice"))))
        #expect(try engine.identityHeaders() == IdentityHeaders(pushed))
        await engine.shutdown()
    }

    @Test func aCredentialForAnAccountBeingLeftIsRefused() async throws {
        let harness = EngineHarness()
        let engine = harness.engine
        let gate = Gate(clock: harness.clock)
        try await harness.signIn("alice")
        await engine.addAccountChangeHook { _ in await gate.wait() }
        let switching = await engine.startCall { engine in try await engine.switchAccount(to: "bob") }
        // The switch away from alice has begun: her renewal pushed now is refused, never installed.
        await expectRefusal(.accountChanged) {
            try await engine.setIdentityCredential(harness.credential(for: "alice"), for: "alice")
        }
        // Bob's own credential, handed over during his sign-in, is installed once the change is prepared.
        try await engine.setIdentityCredential(harness.credential(for: "bob"), for: "bob")
        gate.open()
        try await switching.value
        #expect(engine.state.account == "bob")
        #expect(harness.fetcher.requestedAccounts == ["alice"])
        await engine.shutdown()
    }

    /// A credential the signer would refuse to issue: it lives longer than 24 hours.
    private func longLived(_ harness: EngineHarness, lifetime: Int64) throws -> IdentityCredential {
        try IdentityCredential(
            email: "alice@example.com",
            expiresAt: Int64(harness.clock.now.timeIntervalSince1970) + lifetime,
            signature: String(repeating: "ab", count: 32)
        )
    }

    private func expectRefusal(
        _ code: SessionError.Code,
        sourceLocation: SourceLocation = #_sourceLocation,
        _ body: () async throws -> Void
    ) async {
        do {
            try await body()
            Issue.record("the credential was accepted", sourceLocation: sourceLocation)
        } catch let error as SessionError {
            #expect(error.code == code, sourceLocation: sourceLocation)
        } catch {
            Issue.record("unexpected \(error)", sourceLocation: sourceLocation)
        }
    }
}
