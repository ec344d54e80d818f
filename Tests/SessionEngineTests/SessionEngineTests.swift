import Foundation
import SessionEngineBackend
import SessionEngineModel
import SessionEngineTestKit
import Synchronization
import Testing

@testable import SessionEngine

@Suite(.timeLimit(TimeLimits.minutes(1)))
struct SessionEngineTests {
    // MARK: - Sign-in and the fast path

    @Test func signInPassesThroughSwitchingAndInstallsAVerifiableCredential() async throws {
        let harness = EngineHarness()
        var events = harness.engine.events(bufferLimit: .max).makeAsyncIterator()
        try await harness.signIn("alice")

        #expect(await events.next()?.kind == .stateChanged(.signedOut))
        #expect(await events.next()?.kind == .stateChanged(.switching(from: nil, to: "alice")))
        // The credential is installed, then the state published, then the renewal reported.
        let identified = await events.next()
        guard case .stateChanged(.identified(let identity)) = identified?.kind else {
            Issue.record("expected the identified state, got \(String(describing: identified))")
            return
        }
        #expect(identity.account == "alice")
        let renewed = await events.next()
        guard case .renewed(let installed, let fetch) = renewed?.kind else {
            Issue.record("expected the renewal, got \(String(describing: renewed))")
            return
        }
        #expect(installed == identity)
        #expect(fetch.number == 1)

        let headers = try harness.engine.identityHeaders()
        let verifier = try IdentityVerifier(
            projectID: EngineHarness.projectID,
            secret: EngineHarness.secret,
            clock: harness.clock
        )
        #expect(verifier.verify(headers: headers).isValid)
        #expect(harness.engine.hasValidIdentity(at: harness.clock.now))
        #expect(!harness.engine.hasValidIdentity(at: Date(timeIntervalSince1970: TimeInterval(identity.expiresAt))))
    }

    @Test func fastPathSaysSignedOutOrSwitchingWithDistinctErrors() async throws {
        let harness = EngineHarness()
        #expect(throws: SessionError.self) { try harness.engine.identityHeaders() }
        do {
            _ = try harness.engine.identityHeaders()
        } catch {
            #expect(error.code == .signedOut)
        }
        let engine = harness.engine
        let signIn = Task { try await engine.signIn("alice") }
        let request = await harness.fetcher.nextRequest()
        do {
            _ = try harness.engine.identityHeaders()
            Issue.record("headers were handed out while switching")
        } catch {
            #expect(error.code == .switching)
        }
        harness.fetcher.respond(to: request, with: .success(harness.credential(for: "alice")))
        try await signIn.value
        #expect(try harness.engine.identityHeaders()[IdentityHeaders.emailName] == "alice@example.com")
    }

    // MARK: - Renewal

    @Test(arguments: [1, 2, 3, 4, 5, 6, 7, 8] as [UInt64])
    func proactiveRenewalStartsWithinTheJitterWindow(seed: UInt64) async throws {
        let harness = EngineHarness(configuration: SessionConfiguration(randomSeed: seed))
        try await harness.signIn("alice", lifetime: 900)
        let installedAt = harness.clock.uptime
        // Default policy: two thirds of the lifetime, plus or minus a quarter: 375 s ... 825 s.
        let renewedEarly = await harness.clock.advance(upTo: .seconds(374)) { harness.engine.state.isRenewing }
        #expect(!renewedEarly, "renewed before 375 s")
        #expect(harness.fetcher.totalRequests == 1)
        let renewedInWindow = await harness.clock.advance(upTo: .seconds(451)) { harness.engine.state.isRenewing }
        #expect(renewedInWindow, "no renewal by 825 s")
        let elapsed = harness.clock.uptime - installedAt
        #expect(elapsed >= .seconds(375) && elapsed <= .seconds(825))
        let request = await harness.fetcher.nextRequest()
        #expect(request.account == "alice")
        harness.fetcher.respond(to: request, with: .success(harness.credential(for: "alice")))
        await harness.engine.waitUntilIdle()
        #expect(harness.engine.state.isIdentified)
    }

    @Test func renewalTimesOfAFleetAreSpreadByJitter() async throws {
        var offsets: Set<Int> = []
        for seed in 0..<12 as Range<UInt64> {
            let harness = EngineHarness(configuration: SessionConfiguration(randomSeed: seed))
            try await harness.signIn("alice", lifetime: 900)
            let start = harness.clock.uptime
            _ = await harness.clock.advance(upTo: .seconds(850)) { harness.engine.state.isRenewing }
            offsets.insert(Int((harness.clock.uptime - start).components.seconds))
            await harness.engine.shutdown()
        }
        #expect(offsets.count >= 8, "renewal times should differ between processes: \(offsets.sorted())")
        #expect(offsets.allSatisfy { (375...825).contains($0) })
    }

    @Test func thousandConcurrentRenewCallersShareOneFetch() async throws {
        let harness = EngineHarness()
        try await harness.signIn("alice")
        harness.clock.advance(by: .seconds(10))
        let engine = harness.engine
        let callers = await engine.startCalls(1000) { engine, _ in try await engine.renew() }
        let request = await harness.fetcher.nextRequest()
        #expect(engine.metrics.waiters == 1000)
        let fresh = harness.credential(for: "alice", lifetime: 1200)
        harness.fetcher.respond(to: request, with: .success(fresh))
        for caller in callers {
            #expect(try await caller.value == fresh)
        }
        #expect(harness.fetcher.totalRequests == 2)
    }

    @Test func cancelledWaiterLeavesTheSharedFetchRunning() async throws {
        let harness = EngineHarness()
        try await harness.signIn("alice")
        harness.clock.advance(by: .seconds(10))
        let engine = harness.engine
        let cancelled = await engine.startCall { try await $0.renew() }
        let request = await harness.fetcher.nextRequest()
        let patient = await engine.startCall { try await $0.renew() }
        #expect(engine.metrics.waiters == 2)
        cancelled.cancel()
        await #expect(throws: CancellationError.self) { try await cancelled.value }
        #expect(harness.fetcher.cancelledCount == 0)
        #expect(harness.fetcher.pendingCount == 1)
        let fresh = harness.credential(for: "alice", lifetime: 1200)
        harness.fetcher.respond(to: request, with: .success(fresh))
        #expect(try await patient.value == fresh)
        #expect(harness.fetcher.totalRequests == 2)
    }

    @Test func renewWithinTheMinimumIntervalReturnsTheCurrentCredential() async throws {
        let harness = EngineHarness()
        try await harness.signIn("alice")
        let current = try await harness.engine.renew()
        #expect(current.email == "alice@example.com")
        #expect(harness.fetcher.totalRequests == 1)
    }

    // MARK: - Failures and backoff

    @Test func transientFailuresBackOffWithFullJitterUpToTheCap() async throws {
        let retry = RetryPolicy(initial: .seconds(1), multiplier: 2, cap: .seconds(60))
        let harness = EngineHarness(
            configuration: SessionConfiguration(retry: retry, minimumFetchInterval: .milliseconds(100), randomSeed: 7)
        )
        try await harness.signIn("alice", lifetime: 3600)
        var events = harness.engine.events(bufferLimit: .max).makeAsyncIterator()
        let engine = harness.engine
        harness.clock.advance(by: .seconds(1))
        let renewal = Task { try await engine.renew() }
        var delays: [Duration] = []
        for attempt in 1...10 {
            await harness.answerNext(with: .failure(URLError(.timedOut)))
            guard let failure = await events.nextFailure(), let delay = failure.retryIn else {
                Issue.record("no failure event for attempt \(attempt)")
                return
            }
            #expect(failure.consecutiveFailures == attempt)
            #expect(failure.error.code == .fetchFailed)
            #expect(failure.error.isTransient)
            // Full jitter above the floor the minimum fetch interval still requires (100 ms, the fetch failed at once).
            #expect(delay <= retry.ceiling(afterFailures: attempt) + .milliseconds(100))
            #expect(delay >= .milliseconds(100) - .milliseconds(1))
            delays.append(delay)
            if attempt == 1 { await #expect(throws: SessionError.self) { try await renewal.value } }
            // The retry must not start before its delay.
            let startedEarly = await harness.clock.advance(upTo: delay - .milliseconds(2)) {
                engine.metrics.fetchesStarted > attempt + 1
            }
            #expect(!startedEarly)
            harness.clock.advance(by: .milliseconds(2))
        }
        #expect(delays.contains { $0 > .seconds(10) }, "the ceiling should grow: \(delays)")
        #expect(delays.allSatisfy { $0 <= .seconds(60) + .milliseconds(100) })
        #expect(Set(delays).count == delays.count, "full jitter draws a different delay each time")
    }

    @Test func terminalFailureEndsTheSessionAndRunsHooks() async throws {
        let harness = EngineHarness()
        let changes = Recorder<AccountChange>()
        await harness.engine.addAccountChangeHook { changes.append($0) }
        try await harness.signIn("alice")
        let engine = harness.engine
        harness.clock.advance(by: .seconds(10))
        let renewal = Task { try await engine.renew() }
        await harness.answerNext(with: .failure(SessionError.backendSessionEnded()))
        await #expect(throws: SessionError.backendSessionEnded()) { try await renewal.value }
        await harness.engine.waitUntilIdle()
        #expect(harness.engine.state == .signedOut)
        #expect(changes.values == [AccountChange(from: nil, to: "alice"), AccountChange(from: "alice", to: nil)])
    }

    @Test func terminalFailureOfTheFirstFetchFailsSignIn() async throws {
        let harness = EngineHarness()
        let engine = harness.engine
        let signIn = Task { try await engine.signIn("alice") }
        await harness.answerNext(with: .failure(SessionError.backendSessionEnded("401 from the backend")))
        do {
            try await signIn.value
            Issue.record("sign-in succeeded")
        } catch let error as SessionError {
            #expect(error.code == .backendSessionEnded)
        }
        await harness.engine.waitUntilIdle()
        #expect(harness.engine.state == .signedOut)
    }

    @Test func aCredentialThatCanNeverVerifyEndsTheSessionInsteadOfRetrying() async throws {
        for refusal in [
            CredentialError(.unpairedSurrogate, key: "note", reason: "a property value holds a lone surrogate"),
            SessionError(.invalidCredential, reason: "the backend's credential can never verify", isTransient: false),
        ] as [any Error] {
            let harness = EngineHarness()
            let engine = harness.engine
            let signIn = await engine.startCall { try await $0.signIn("alice") }
            await harness.answerNext(with: .failure(refusal))
            await #expect(throws: SessionError.self) { try await signIn.value }
            do {
                try await signIn.value
            } catch let error as SessionError {
                #expect(error.code == .invalidCredential)
                #expect(!error.isTransient)
            }
            let later = await harness.clock.advance(upTo: .seconds(3600)) { harness.fetcher.totalRequests > 1 }
            #expect(!later, "the engine fetched again")
            #expect(engine.state == .signedOut)
            #expect(engine.metrics.fetchesFailed == [.invalidCredential: 1])
        }
    }

    @Test func signInWaitsThroughTransientFailuresAsUnavailable() async throws {
        let harness = EngineHarness()
        let engine = harness.engine
        let signIn = Task { try await engine.signIn("alice") }
        await harness.answerNext(with: .failure(URLError(.cannotConnectToHost)))
        await harness.engine.waitUntilIdle()
        #expect(harness.engine.state.expiredReason == .unavailable)
        do {
            _ = try harness.engine.identityHeaders()
            Issue.record("headers without a credential")
        } catch {
            #expect(error.code == .invalidIdentity)
        }
        let retried = await harness.clock.advance(upTo: .seconds(10)) { engine.metrics.fetchesStarted == 2 }
        #expect(retried)
        await harness.answerNext(with: .success(harness.credential(for: "alice")))
        try await signIn.value
        #expect(harness.engine.state.isIdentified)
    }

    // MARK: - Expiry

    @Test func expiredIdentityIsBlockedLocallyWhileRenewalKeepsTrying() async throws {
        let harness = EngineHarness(
            configuration: SessionConfiguration(
                retry: RetryPolicy(initial: .seconds(30), cap: .seconds(30)), randomSeed: 3)
        )
        try await harness.signIn("alice", lifetime: 120)
        let engine = harness.engine
        // Every renewal fails until the credential is past its expiry.
        harness.fetcher.setResponder { _ in throw URLError(.notConnectedToInternet) }
        let expired = await harness.clock.advance(upTo: .seconds(200)) { engine.state.isExpired }
        #expect(expired)
        #expect(engine.state.expiredReason == .expired)
        #expect(!engine.hasValidIdentity(at: harness.clock.now))
        do {
            _ = try engine.identityHeaders()
            Issue.record("an expired credential was handed out")
        } catch {
            #expect(error.code == .invalidIdentity)
            #expect(error.code.rawValue == "INVALID_IDENTITY")
        }
        await #expect(
            throws: SessionError(
                .invalidIdentity, reason: "the identity credential has expired or was rejected; it is being renewed")
        ) {
            try await engine.withIdentity { _ in "anonymous must never happen" }
        }
        let before = engine.metrics.fetchesStarted
        let kept = await harness.clock.advance(upTo: .seconds(120)) { engine.metrics.fetchesStarted > before }
        #expect(kept, "renewal keeps trying in the background")
        harness.fetcher.setResponder(harness.signingResponder())
        _ = await harness.clock.advance(upTo: .seconds(120)) { engine.state.isIdentified }
        await engine.waitUntilIdle()
        #expect(engine.state.isIdentified)
        #expect(try engine.identityHeaders()[IdentityHeaders.emailName] == "alice@example.com")
    }

    @Test func theFastPathBlocksAtExpiryEvenBeforeTheTimerNotices() async throws {
        let harness = EngineHarness()
        try await harness.signIn("alice", lifetime: 900)
        harness.clock.jumpWallClock(by: .seconds(900))
        do {
            _ = try harness.engine.identityHeaders()
            Issue.record("a credential was handed out at its expiresAt")
        } catch {
            #expect(error.code == .invalidIdentity)
        }
        #expect(harness.engine.state.isIdentified, "the timer has not woken yet")
    }

    @Test func aWallClockJumpIsNoticedWithinThirtySeconds() async throws {
        let harness = EngineHarness()
        try await harness.signIn("alice", lifetime: 900)
        await harness.clock.waitForSleepers(count: 1)
        harness.clock.jumpWallClock(by: .seconds(7200))
        harness.clock.advance(by: .seconds(30))
        await harness.engine.waitUntilIdle()
        #expect(harness.engine.state.isExpired)
        #expect(harness.engine.state.expiredReason == .expired)
        let request = await harness.fetcher.nextRequest()
        #expect(request.id == 2, "renewal starts at once")
    }

    // MARK: - Refused credentials

    @Test func aRenewalForAnotherUserIsRefusedAndReported() async throws {
        let harness = EngineHarness()
        try await harness.signIn("alice")
        var events = harness.engine.events(bufferLimit: .max).makeAsyncIterator()
        let engine = harness.engine
        harness.clock.advance(by: .seconds(10))
        let renewal = Task { try await engine.renew() }
        await harness.answerNext(with: .success(harness.credential(for: "alice", email: "mallory@example.com")))
        await #expect(throws: SessionError.self) { try await renewal.value }
        guard let failure = await events.nextFailure() else {
            Issue.record("no failure event")
            return
        }
        #expect(failure.error.code == .identityMismatch)
        #expect(try engine.identityHeaders()[IdentityHeaders.emailName] == "alice@example.com")
    }

    @Test func expiredOnArrivalCredentialsAreReportedAsClockSkewAndCannotCauseAStorm() async throws {
        let minimum = Duration.seconds(5)
        let harness = EngineHarness(
            configuration: SessionConfiguration(
                retry: RetryPolicy(initial: .milliseconds(1), multiplier: 1, cap: .milliseconds(1)),
                // A credential no clock makes plausible is a misconfiguration: even its schedule at its quickest
                // cannot beat the minimum interval.
                misconfigurationRetry: RetryPolicy(initial: .milliseconds(1), multiplier: 1, cap: .milliseconds(1)),
                minimumFetchInterval: minimum,
                randomSeed: 9
            )
        )
        try await harness.signIn("alice", lifetime: 60)
        var events = harness.engine.events(bufferLimit: .max).makeAsyncIterator()
        let engine = harness.engine
        harness.clock.advance(by: .seconds(6))
        let renewal = Task { try await engine.renew() }
        var starts: [Duration] = []
        var skewReports = 0
        for _ in 0..<6 {
            let request = await harness.fetcher.nextRequest()
            starts.append(harness.clock.uptime)
            harness.fetcher.respond(to: request, with: .success(harness.credential(for: "alice", lifetime: -30)))
            // The engine refuses the credential, reports the skew and plans the next fetch.
            while let event = await events.next() {
                if case .clockSkewSuspected = event.kind { skewReports += 1 }
                if case .fetchFailed(let failure) = event.kind {
                    #expect(failure.error.code == .credentialExpiredOnArrival)
                    break
                }
            }
            let next = starts.count + 2
            let started = await harness.clock.advance(upTo: .seconds(10)) { engine.metrics.fetchesStarted >= next }
            #expect(started)
        }
        _ = try? await renewal.value
        for (earlier, later) in zip(starts, starts.dropFirst()) {
            #expect(later - earlier >= minimum)
        }
        #expect(skewReports == 6)
        #expect(!engine.state.isIdentified, "an expired credential is never installed")
    }

    // MARK: - Stale epochs

    @Test func aRenewalThatLandsAfterSignOutInstallsNothing() async throws {
        let clock = ManualClock()
        let signer = try IdentitySigner(projectID: EngineHarness.projectID, secret: EngineHarness.secret, clock: clock)
        let first = try signer.sign(email: "alice@example.com", properties: nil, expiresAt: 1_800_000_900)
        // The renewal's answer is already on the wire: the fetch ignores cancellation and ends only when it arrives.
        let fetcher = ScriptedCredentialFetcher(clock: clock) { request in
            request.id == 1 ? .credential(first) : .held(ignoringCancellation: true)
        }
        let engine = SessionEngine(fetcher: fetcher, configuration: SessionConfiguration(randomSeed: 1), clock: clock)
        try await engine.signIn("alice")
        var events = engine.events(bufferLimit: .max).makeAsyncIterator()
        clock.advance(by: .seconds(10))
        let renewal = Task { try await engine.renew() }
        let renewalFetch = await fetcher.nextRequest()
        await engine.signOut()
        #expect(engine.state == .signedOut)
        // The backend's answer arrives after the sign-out: it must be discarded.
        let late = try signer.sign(email: "alice@example.com", properties: nil, expiresAt: 1_800_001_800)
        #expect(fetcher.respond(to: renewalFetch, with: .success(late)))
        await #expect(throws: SessionError.self) { try await renewal.value }
        await engine.waitUntilIdle()
        #expect(engine.metrics.liveTasks == 0)
        #expect(engine.state == .signedOut)
        do {
            _ = try engine.identityHeaders()
            Issue.record("the previous user's credential was installed after sign-out")
        } catch {
            #expect(error.code == .signedOut)
        }
        await engine.shutdown()
        var seen: [SessionEvent] = []
        while let event = await events.next() { seen.append(event) }
        #expect(!seen.contains { if case .renewed = $0.kind { return true } else { return false } })
    }

    @Test func aFetchForTheFormerAccountThatLandsDuringASwitchIsDiscarded() async throws {
        let clock = ManualClock()
        let signer = try IdentitySigner(projectID: EngineHarness.projectID, secret: EngineHarness.secret, clock: clock)
        let alice = try signer.sign(email: "alice@example.com", properties: nil, expiresAt: 1_800_000_900)
        let bob = try signer.sign(email: "bob@example.com", properties: nil, expiresAt: 1_800_000_900)
        // Alice's renewal, the second fetch, is already on the wire: it ignores cancellation.
        let script = ScriptedCredentialFetcher(clock: clock) { request in
            .held(ignoringCancellation: request.id == 2)
        }
        let engine = SessionEngine(fetcher: script, configuration: SessionConfiguration(randomSeed: 1), clock: clock)
        async let signedIn: Void = engine.signIn("alice")
        script.respond(to: await script.nextRequest(), with: .success(alice))
        try await signedIn
        clock.advance(by: .seconds(10))
        let renewal = Task { try await engine.renew() }
        let aliceRenewal = await script.nextRequest()
        let handedOut = Recorder<String>()
        let observer = Task {
            for await event in engine.events(bufferLimit: .max) {
                if case .stateChanged(.identified(let identity)) = event.kind { handedOut.append(identity.email) }
            }
        }
        async let switched: Void = engine.switchAccount(to: "bob")
        let bobRequest = await script.nextRequest()
        #expect(bobRequest.account == "bob")
        // Alice's renewal lands while Bob's first fetch is still open.
        #expect(script.respond(to: aliceRenewal, with: .success(alice)))
        await #expect(throws: SessionError.self) { try await renewal.value }
        do {
            _ = try engine.identityHeaders()
            Issue.record("a credential was handed out during the switch")
        } catch {
            #expect(error.code == .switching)
        }
        script.respond(to: bobRequest, with: .success(bob))
        try await switched
        #expect(try engine.identityHeaders()[IdentityHeaders.emailName] == "bob@example.com")
        await engine.shutdown()
        await observer.value
        // The observer subscribed while Alice was renewing: the only identity it may see installed is Bob's.
        #expect(handedOut.values == ["bob@example.com"])
    }

    // MARK: - Scoped work and account changes

    @Test func aSwitchCancelsAndDrainsScopedWorkBeforeHooksAndTheNextIdentity() async throws {
        let harness = EngineHarness()
        let journal = Recorder<String>()
        let engine = harness.engine
        await engine.addAccountChangeHook { change in
            journal.append(
                "hook1 \(change.from?.rawValue ?? "-")>\(change.to?.rawValue ?? "-") work=\(engine.metrics.scopedWork)"
            )
        }
        await engine.addAccountChangeHook { _ in journal.append("hook2") }
        try await harness.signIn("alice")
        let clock = harness.clock
        let work = await engine.startCalls(3) { engine, index in
            try await engine.withIdentity { credential -> String in
                do {
                    try await clock.sleep(for: .seconds(3600))
                } catch {
                    journal.append("work\(index) cancelled as \(credential.email)")
                    throw error
                }
                return "finished"
            }
        }
        #expect(engine.metrics.scopedWork == 3)
        var events = engine.events(bufferLimit: .max).makeAsyncIterator()
        async let switched: Void = engine.switchAccount(to: "bob")
        let request = await harness.fetcher.nextRequest()
        journal.append("fetch \(request.account)")
        harness.fetcher.respond(to: request, with: .success(harness.credential(for: "bob")))
        try await switched
        for task in work {
            do {
                _ = try await task.value
                Issue.record("cancelled work finished")
            } catch let error as SessionError {
                #expect(error.code == .accountChanged)
            }
        }
        let entries = journal.values
        #expect(entries.count == 8)
        let cancellations = entries.filter { $0.hasPrefix("work") }
        #expect(Set(cancellations).count == 3)
        #expect(cancellations.allSatisfy { $0.hasSuffix("cancelled as alice@example.com") })
        // Work is drained before the hooks run; the next account is fetched only after the hooks.
        let lastCancellation = entries.lastIndex { $0.hasPrefix("work") }!
        let switchHook = entries.firstIndex(of: "hook1 alice>bob work=0")
        #expect(switchHook != nil && lastCancellation < switchHook!)
        let order = entries.filter { !$0.hasPrefix("work") }
        #expect(order == ["hook1 ->alice work=0", "hook2", "hook1 alice>bob work=0", "hook2", "fetch bob"])
        let cancelled = await events.next { if case .workCancelled = $0.kind { return true } else { return false } }
        #expect(cancelled?.kind == .workCancelled(account: "alice", count: 3))
        let identified = await events.state { $0.isIdentified }
        #expect(identified?.account == "bob")
    }

    @Test func workStartedAfterASwitchBeganIsRefused() async throws {
        let harness = EngineHarness()
        try await harness.signIn("alice")
        let engine = harness.engine
        async let switched: Void = engine.switchAccount(to: "bob")
        let request = await harness.fetcher.nextRequest()
        await #expect(throws: SessionError.self) { try await engine.withIdentity { $0.email } }
        harness.fetcher.respond(to: request, with: .success(harness.credential(for: "bob")))
        try await switched
        #expect(try await engine.withIdentity { $0.email } == "bob@example.com")
    }

    // MARK: - Rejection

    @Test func aRejectedCredentialIsRenewedOnceAndTheWorkRetriedOnce() async throws {
        let harness = EngineHarness()
        try await harness.signIn("alice")
        harness.clock.advance(by: .seconds(10))
        harness.fetcher.setResponder(harness.signingResponder(lifetime: 1000))
        let attempts = Recorder<IdentityCredential>()
        let result = try await harness.engine.withIdentity { credential -> String in
            attempts.append(credential)
            if attempts.values.count == 1 { throw SessionError.credentialRejected }
            return "accepted"
        }
        #expect(result == "accepted")
        #expect(attempts.values.count == 2)
        #expect(attempts.values[0] != attempts.values[1])
        #expect(harness.fetcher.totalRequests == 2)
        #expect(harness.engine.state.isIdentified)
    }

    /// The retry after a rejection starts in the work's account session with whatever usable credential the session
    /// holds then, the renewal's or one installed after it (pushed, or renewed again), and never with the rejected one;
    /// in another session it fails with `ACCOUNT_CHANGED`. The store checks all of it in the lock that registers the
    /// retry. (A retry that required the renewal's own credential failed with `INVALID_IDENTITY` when a push came
    /// between the renewal and the retry, though the session held a fresh credential of the same user.)
    @Test func aRetryStartsWithAnyCredentialOfItsSessionButTheRejectedOne() throws {
        let harness = EngineHarness()
        let store = SessionStore()
        let rejected = harness.credential(for: "alice", lifetime: 900)
        let pushed = harness.credential(for: "alice", lifetime: 1200)
        func install(_ credential: IdentityCredential, epoch: UInt64) {
            let identity = SessionIdentity(account: "alice", credential: credential, epoch: epoch)
            _ = store.install(
                SessionStore.Snapshot(
                    state: .identified(identity), epoch: epoch, credential: credential, shutDown: false,
                    clockOffset: .zero))
        }
        func retry() throws(SessionError) -> IdentityCredential {
            // The work is registered and never runs: only what the store hands out is checked.
            try store.startWork(at: harness.clock.now.timeIntervalSince1970, requiring: (epoch: 1, rejected: rejected))
            {
                _, _ in Task {}
            }.0
        }
        install(pushed, epoch: 1)
        #expect(try retry() == pushed, "a credential of the session installed after the renewal")
        install(rejected, epoch: 1)
        do {
            _ = try retry()
            Issue.record("a retry started with the rejected credential")
        } catch {
            #expect(error.code == .invalidIdentity)
        }
        install(pushed, epoch: 2)
        do {
            _ = try retry()
            Issue.record("a retry started in another account session")
        } catch {
            #expect(error.code == .accountChanged)
        }
    }

    @Test func aSecondRejectionLeavesTheStateExpiredWithoutALoop() async throws {
        let harness = EngineHarness()
        try await harness.signIn("alice")
        harness.clock.advance(by: .seconds(10))
        harness.fetcher.setResponder(harness.signingResponder(lifetime: 1000))
        var events = harness.engine.events(bufferLimit: .max).makeAsyncIterator()
        let attempts = Recorder<Int>()
        do {
            _ = try await harness.engine.withIdentity { _ -> String in
                attempts.append(1)
                throw SessionError.credentialRejected
            }
            Issue.record("rejected work succeeded")
        } catch let error as SessionError {
            #expect(error.code == .invalidIdentity)
        }
        #expect(attempts.values.count == 2)
        #expect(harness.fetcher.totalRequests == 2)
        #expect(harness.engine.state.expiredReason == .rejected)
        var reports: [RejectionReport] = []
        while reports.count < 2, let event = await events.next() {
            if case .credentialRejected(let report) = event.kind { reports.append(report) }
        }
        #expect(reports.map(\.renewing) == [true, false])
        #expect(reports[1].retryIn != nil)
    }

    @Test func concurrentRejectionsOfOneCredentialShareOneRenewal() async throws {
        let harness = EngineHarness()
        try await harness.signIn("alice")
        harness.clock.advance(by: .seconds(10))
        let engine = harness.engine
        let rejected = try #require(engine.identityHeaders()[IdentityHeaders.signatureName])
        let attempts = Recorder<String>()
        // Every caller holds the first credential before any of them reports its rejection: a caller that came
        // after the first report would find the credential rejected and fail with INVALID_IDENTITY at once, as
        // identified work must, instead of sharing the renewal.
        let allHoldIt = Gate()
        let callers = 50
        // The service rejects the first credential for every caller and accepts the renewed one.
        let workers = (0..<callers).map { _ in
            Task {
                try await engine.withIdentity { credential -> String in
                    let holding = attempts.withLock { attempts in
                        attempts.append(credential.signature)
                        return attempts.count
                    }
                    if holding == callers { allHoldIt.open() }
                    await allHoldIt.wait()
                    if credential.signature == rejected { throw SessionError.credentialRejected }
                    return credential.email
                }
            }
        }
        let request = await harness.fetcher.nextRequest()
        harness.fetcher.respond(to: request, with: .success(harness.credential(for: "alice", lifetime: 1200)))
        for worker in workers {
            #expect(try await worker.value == "alice@example.com")
        }
        #expect(harness.fetcher.totalRequests == 2, "fifty rejections of one credential renew it once")
        #expect(attempts.values.count <= 100)
        #expect(harness.engine.state.isIdentified)
    }

    @Test func aRejectionOfAnOlderCredentialIsIgnored() async throws {
        let harness = EngineHarness()
        try await harness.signIn("alice")
        let old = try await harness.engine.withIdentity { $0 }
        harness.clock.advance(by: .seconds(10))
        harness.fetcher.setResponder(harness.signingResponder(lifetime: 1000))
        _ = try await harness.engine.renew()
        await harness.engine.credentialRejected(old)
        #expect(harness.engine.state.isIdentified)
        #expect(harness.fetcher.totalRequests == 2)
    }

    /// Work that ends with a rejection as an account change cancels it (an HTTP client that maps the cut request
    /// to the service's `INVALID_IDENTITY`) fails with `ACCOUNT_CHANGED`: it is neither renewed nor run again, and
    /// never sees the next account's credential.
    @Test func workCancelledByASwitchIsNotRetriedAsTheNextAccount() async throws {
        let harness = EngineHarness()
        try await harness.signIn("alice")
        let engine = harness.engine
        let clock = harness.clock
        let runs = Recorder<String>()
        let work = await engine.startCall { engine in
            try await engine.withIdentity { credential -> String in
                runs.append(credential.email)
                do {
                    try await clock.sleep(for: .seconds(3600))
                } catch {
                    throw SessionError.credentialRejected
                }
                return credential.email
            }
        }
        let switched = await engine.startCall { try await $0.switchAccount(to: "bob") }
        let request = await harness.fetcher.nextRequest()
        #expect(request.account == "bob")
        harness.fetcher.respond(to: request, with: .success(harness.credential(for: "bob")))
        try await switched.value
        let error = await #expect(throws: SessionError.self) { try await work.value }
        #expect(error?.code == .accountChanged)
        #expect(runs.values == ["alice@example.com"])
        #expect(harness.fetcher.totalRequests == 2, "no renewal for the rejection of the account that was left")
        #expect(try engine.identityHeaders()[IdentityHeaders.emailName] == "bob@example.com")
    }

    /// A rejection reported after the account changed (the work ended before the change, its caller reached the
    /// engine after it) must not hand the work the next account's credential for its one retry.
    @Test func aRejectionRenewalAfterAnAccountChangeFailsInsteadOfSwitchingAccounts() async throws {
        let harness = EngineHarness()
        try await harness.signIn("alice")
        let engine = harness.engine
        var events = engine.events(bufferLimit: .max).makeAsyncIterator()
        let alice = try #require(
            await events.next { event in
                if case .stateChanged(let state) = event.kind { return state.isIdentified }
                return false
            })
        let aliceCredential = try await engine.withIdentity { $0 }
        let switched = await engine.startCall { try await $0.switchAccount(to: "bob") }
        let request = await harness.fetcher.nextRequest()
        harness.fetcher.respond(to: request, with: .success(harness.credential(for: "bob")))
        try await switched.value
        let error = await #expect(throws: SessionError.self) {
            try await engine.shard.renewAfterRejection(engine.slot, of: aliceCredential, epoch: alice.epoch)
        }
        #expect(error?.code == .accountChanged)
        #expect(harness.fetcher.totalRequests == 2)
        #expect(try engine.identityHeaders()[IdentityHeaders.emailName] == "bob@example.com")
    }

    // MARK: - Events and life cycle

    @Test func subscribersThatStopAreReleased() async throws {
        let harness = EngineHarness()
        let engine = harness.engine
        do {
            let unused = engine.events()
            #expect(engine.metrics.subscribers == 1)
            _ = unused
        }
        #expect(engine.metrics.subscribers == 0)
        let events = engine.events()
        let consumer = Task {
            var count = 0
            for await _ in events { count += 1 }
            return count
        }
        #expect(engine.metrics.subscribers == 1)
        consumer.cancel()
        _ = await consumer.value
        #expect(engine.metrics.subscribers == 0)
        for _ in 0..<1000 {
            var iterator = engine.events().makeAsyncIterator()
            _ = await iterator.next()
        }
        #expect(engine.metrics.subscribers == 0)
    }

    /// An engine makes its broadcaster when the first subscriber comes: until then it keeps only the event of the
    /// current state, which a late subscriber receives first, stamped as it was published.
    @Test func aLateFirstSubscriberStartsFromTheLatestStateChange() async throws {
        let clock = ManualClock()
        let signer = try IdentitySigner(projectID: EngineHarness.projectID, secret: EngineHarness.secret, clock: clock)
        let fetcher = ScriptedCredentialFetcher(responder: { try signer.sign(email: exampleEmail(for: $0)) })
        let published = Recorder<SessionEvent>()
        let engine = SessionEngine(
            fetcher: fetcher, configuration: SessionConfiguration(randomSeed: 3), clock: clock,
            observer: { published.append($0) })
        try await engine.signIn("alice")
        #expect(engine.metrics.subscribers == 0)
        let identified = try #require(published.values.last { $0.state != nil })
        #expect(identified.state?.isIdentified == true)
        #expect(published.values.last?.state == nil, "the renewal came after the state change")
        var events = engine.events(bufferLimit: .max).makeAsyncIterator()
        #expect(await events.next() == identified)
        try await engine.switchAccount(to: "bob")
        await engine.shutdown()
        var rest: [SessionEvent] = []
        while let event = await events.next() { rest.append(event) }
        #expect(rest == published.values.filter { $0.sequence > identified.sequence + 1 })
        // Shut down before anyone subscribed: the final state, then the end.
        let other = SessionEngine(fetcher: fetcher, clock: clock)
        try await other.signIn("carol")
        await other.shutdown()
        var late = other.events().makeAsyncIterator()
        #expect(await late.next()?.state == .signedOut)
        #expect(await late.next() == nil)
    }

    @Test func aSlowSubscriberLosesTheOldestEventsAndIsTold() async throws {
        let harness = EngineHarness()
        var slow = harness.engine.events(bufferLimit: 2).makeAsyncIterator()
        try await harness.signIn("alice")
        // signedOut, switching, identified, renewed: four events into a buffer of two.
        #expect(await slow.next()?.kind == .eventsDropped(count: 2))
        let third = await slow.next()
        guard case .stateChanged(.identified) = third?.kind else {
            Issue.record("expected the identified state, got \(String(describing: third))")
            return
        }
        let fourth = await slow.next()
        guard case .renewed = fourth?.kind else {
            Issue.record("expected the renewal, got \(String(describing: fourth))")
            return
        }
    }

    @Test func runShutsDownCleanlyWhenCancelled() async throws {
        let harness = EngineHarness()
        try await harness.signIn("alice")
        let engine = harness.engine
        let clock = harness.clock
        let work = await engine.startCall {
            try await $0.withIdentity { _ in try await clock.sleep(for: .seconds(3600)) }
        }
        #expect(engine.metrics.scopedWork == 1)
        let events = engine.events()
        let stream = Task {
            var last: SessionEvent?
            for await event in events { last = event }
            return last
        }
        #expect(engine.metrics.subscribers == 1)
        let runner = await engine.startCall { try await $0.run() }
        runner.cancel()
        try await runner.value
        await #expect(throws: SessionError.self) { try await work.value }
        #expect(await stream.value?.kind == .stateChanged(.signedOut))
        await engine.waitUntilIdle()
        #expect(engine.metrics.liveTasks == 0)
        let metrics = engine.metrics
        #expect(metrics.liveTasks == 0 && metrics.subscribers == 0)
        #expect(metrics.waiters == 0 && metrics.scopedWork == 0)
        do {
            _ = try engine.identityHeaders()
        } catch {
            #expect(error.code == .shutDown)
        }
        await #expect(throws: SessionError.self) { try await engine.signIn("bob") }
    }

    @Test func logRecordsNeverHoldSignaturesOrSecrets() async throws {
        let records = Recorder<SessionLogRecord>()
        let harness = EngineHarness(configuration: SessionConfiguration(randomSeed: 5, log: { records.append($0) }))
        try await harness.signIn("alice")
        harness.clock.advance(by: .seconds(10))
        harness.fetcher.setResponder(harness.signingResponder())
        _ = try await harness.engine.renew()
        harness.clock.advance(by: .seconds(10))
        _ = try? await harness.engine.withIdentity { _ -> Int in throw SessionError.credentialRejected }
        await harness.engine.signOut()
        let signatures = harness.fetcher.totalRequests
        #expect(signatures >= 2)
        let text = records.values.map(\.description).joined(separator: "\n")
        #expect(!records.values.isEmpty)
        #expect(!text.contains(EngineHarness.secret))
        #expect(text.range(of: "[0-9a-f]{64}", options: .regularExpression) == nil)
    }
}

/// Values recorded in order, shared between tasks.
typealias Recorder<Element: Sendable> = Locked<[Element]>
