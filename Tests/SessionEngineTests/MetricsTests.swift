import Foundation
import SessionEngineTestKit
import Synchronization
import Testing

@testable import SessionEngine
@testable import SessionEngineBackend

@Suite struct MetricsTests {
    /// A scenario whose every outcome is scripted: each counter, gauge and latency is known, and so is the time of
    /// every event.
    @Test func everyCounterAndEventTimeMatchesAScriptedScenario() async throws {
        let clock = ManualClock()
        let start = clock.now
        let fetcher = ScriptedCredentialFetcher()
        let signer = try IdentitySigner(projectID: EngineHarness.projectID, secret: EngineHarness.secret, clock: clock)
        let published = Recorder<SessionEvent>()
        var configuration = SessionConfiguration(
            retry: RetryPolicy(initial: .seconds(1), multiplier: 2, cap: .seconds(4)),
            minimumFetchInterval: .seconds(5),
            randomSeed: 11
        )
        // The renewal below hangs until the credential has expired: its deadline lies past the expiry.
        configuration.fetchTimeout = .seconds(3_600)
        let engine = SessionEngine(
            fetcher: fetcher, configuration: configuration, clock: clock, observer: { published.append($0) })
        func credential(lifetime: Int64) throws -> IdentityCredential {
            let now = Int64(clock.now.timeIntervalSince1970.rounded(.down))
            return try signer.sign(email: "alice@example.com", properties: nil, expiresAt: now + lifetime)
        }
        /// Advances to each timer until the next fetch has started; returns it.
        func nextFetch() async -> ScriptedCredentialFetcher.Request {
            let started = fetcher.totalRequests
            await clock.advance(upTo: .seconds(86_400)) { fetcher.totalRequests > started }
            return await fetcher.nextRequest()
        }
        // A subscriber that never reads: it keeps one event and loses every other.
        let stalled = engine.events(bufferLimit: 1)
        #expect(engine.metrics == SessionMetrics(subscribers: 1))

        // Sign in; the backend answers after 2 s with a 600 s credential.
        let signIn = await engine.startCall { try await $0.signIn("alice") }
        let first = await fetcher.nextRequest()
        #expect(first.attempt == 1 && first.epoch == 1)
        clock.advance(by: .seconds(2))
        fetcher.respond(to: first, with: .success(try credential(lifetime: 600)))
        try await signIn.value
        await engine.waitUntilIdle()
        var metrics = engine.metrics
        #expect(metrics.credentialRemainingLifetime == .seconds(600))
        #expect(metrics.fetchLatency == LatencySummary(of: [.seconds(2)]))

        // A renewal fails after 1 s, is retried after backoff, and the retry succeeds after 3 s.
        clock.advance(by: .seconds(10))
        let renewal = await engine.startCall { try await $0.renew() }
        let failing = await fetcher.nextRequest()
        clock.advance(by: .seconds(1))
        fetcher.respond(to: failing, with: .failure(SessionError.fetchFailed("the backend answered 503")))
        await #expect(throws: SessionError.self) { try await renewal.value }
        let retry = await nextFetch()
        #expect(retry.attempt == 2)
        clock.advance(by: .seconds(3))
        fetcher.respond(to: retry, with: .success(try credential(lifetime: 600)))

        // The service rejects the renewed credential: one renewal, which succeeds at once.
        await engine.waitUntilIdle()
        let installed = try #require(try? engine.identityHeaders().credential())
        await engine.credentialRejected(installed)
        let afterRejection = await nextFetch()
        fetcher.respond(to: afterRejection, with: .success(try credential(lifetime: 600)))
        await engine.waitUntilIdle()

        // Two pieces of scoped work start and sleep; the next renewal hangs until the credential has expired.
        let work = await engine.startCalls(2) { engine, _ in
            try await engine.withIdentity { _ in try await clock.sleep(for: .seconds(86_400)) }
        }
        metrics = engine.metrics
        #expect(metrics.scopedWork == 2 && metrics.liveTasks == 2, "two pieces of work; the timer is no task")
        let hanging = await nextFetch()
        #expect(await clock.advance(upTo: .seconds(3_600)) { engine.state.isExpired })
        #expect(engine.metrics.credentialRemainingLifetime == nil)

        // The backend ends the session: the engine signs out and cancels the work.
        fetcher.respond(to: hanging, with: .failure(SessionError.backendSessionEnded()))
        for task in work { await #expect(throws: SessionError.self) { try await task.value } }
        await engine.waitUntilIdle()

        metrics = engine.metrics
        let events = published.values
        #expect(metrics.fetchesStarted == 5)
        #expect(metrics.fetchesSucceeded == 3)
        #expect(metrics.fetchesFailed == [.fetchFailed: 1, .backendSessionEnded: 1])
        #expect(metrics.fetchesFailedTotal == 2)
        #expect(metrics.credentialsInstalled == 3)
        #expect(metrics.renewals == 2)
        #expect(metrics.rejections == 1)
        #expect(metrics.expiries == 1)
        #expect(metrics.accountChanges == 2, "the sign-in and the sign-out after the backend ended the session")
        #expect(metrics.scopedWorkCancelled == 2)
        #expect(metrics.eventsPublished == events.count)
        #expect(metrics.eventsDropped == events.count, "the stalled subscriber lost every event after the first")
        #expect(metrics.fetchLatency == LatencySummary(of: [.seconds(2), .seconds(3), .zero]), "successes only")
        #expect(metrics.failedFetchLatency.count == 2, "the failed renewal and the fetch the backend ended")
        #expect(metrics.failedFetchLatency.max >= .seconds(1))
        #expect(metrics.credentialRemainingLifetime == nil)
        #expect(metrics.liveTasks == 0 && metrics.waiters == 0 && metrics.scopedWork == 0)
        #expect(metrics.subscribers == 1)
        #expect(engine.state == .signedOut)

        // Every event carries its step's time on the engine's clock, its epoch and the next sequence number.
        #expect(events.map(\.sequence) == Array(1...UInt64(events.count)))
        for (earlier, later) in zip(events, events.dropFirst()) {
            #expect(earlier.time.uptime <= later.time.uptime)
        }
        for event in events {
            let drift = event.time.wall.timeIntervalSince(start) - event.time.uptime.timeInterval
            #expect(abs(drift) < 1e-6, "the clock's wall time never jumped")
        }
        let renewals = events.compactMap { event -> (SessionEvent, FetchAttempt)? in
            guard case .renewed(_, let fetch) = event.kind else { return nil }
            return (event, fetch)
        }
        #expect(
            renewals.map(\.1) == [
                FetchAttempt(number: 1, duration: .seconds(2)),
                FetchAttempt(number: 2, duration: .seconds(3)),
                FetchAttempt(number: 1, duration: .zero),
            ])
        #expect(renewals.first?.0.time.uptime == .seconds(2))
        #expect(renewals.first?.0.epoch == 1)
        let failures = events.compactMap { event -> (SessionEvent, FetchFailure)? in
            guard case .fetchFailed(let failure) = event.kind else { return nil }
            return (event, failure)
        }
        #expect(failures.map(\.1.fetch.number) == [1, 1])
        #expect(failures.first?.1.fetch.duration == .seconds(1))
        #expect(failures.first?.0.time.uptime == .seconds(13))
        #expect(failures.last?.1.retryIn == nil)
        let signOut = try #require(events.last { $0.state == .switching(from: "alice", to: nil) })
        #expect(signOut.epoch == 2)
        #expect(signOut.time == failures.last?.0.time, "the sign-out begins in the step of the terminal failure")
        _ = stalled
    }
}

/// The latency rings keep four bytes a duration: to the microsecond, clamped, and the last `capacity` of them.
@Suite struct LatencyRingTests {
    @Test func durationsAreKeptToTheMicrosecondAndClamped() {
        #expect(LatencyRing.microseconds(.milliseconds(200)) == 200_000)
        #expect(LatencyRing.microseconds(.nanoseconds(1_999)) == 1, "rounded down")
        #expect(LatencyRing.microseconds(.zero - .seconds(1)) == 0, "a negative duration counts as none")
        #expect(LatencyRing.microseconds(.seconds(4_294)) == 4_294_000_000)
        #expect(LatencyRing.microseconds(.seconds(4_295)) == .max, "beyond about 71 minutes")
        #expect(LatencyRing.microseconds(.seconds(Int64.max)) == .max)
    }

    @Test func theRingKeepsTheLastCapacityDurations() {
        var ring = LatencyRing(capacity: 3)
        for milliseconds in [5, 1, 4, 2, 3] { ring.record(.milliseconds(milliseconds)) }
        #expect(ring.durations.sorted() == [.milliseconds(2), .milliseconds(3), .milliseconds(4)])
        #expect(LatencySummary(of: ring.durations).max == .milliseconds(4))
    }
}
