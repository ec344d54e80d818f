import Foundation
import SessionEngine
import SessionEngineBackend
import SessionEngineTestKit
import Testing

/// Error classes, Retry-After and clock skew through `HTTPCredentialFetcher` and the loopback backend
/// (`Fixtures/backend/identity_backend.py`), with the engine on virtual time.
@Suite(
    .enabled(if: LoopbackBackend.isAvailable, "python3 is not on PATH, so the loopback backend cannot start"),
    .timeLimit(TimeLimits.minutes(1))
)
struct DaemonHTTPTests {
    static let start: Int64 = 1_800_000_000
    private let http = HTTPCredentialFetcherTests()

    // MARK: - Error classes

    @Test func only401AndA403ThatSaysSoEndTheSession() async throws {
        try await withLoopbackBackend { backend in
            let clock = ManualClock(now: Date(timeIntervalSince1970: TimeInterval(Self.start)))
            let cases: [(query: String, account: AccountID, ends: Bool)] = [
                ("", "nobody", true),  // 401
                ("mode=status&code=401", "alice", true),
                ("mode=status&code=403&error=session_ended", "alice", true),
                ("mode=status&code=403", "alice", false),  // JSON that does not say so
                ("mode=html&code=403", "alice", false),  // a proxy's or firewall's page
                ("mode=status&code=429", "alice", false),
                ("mode=status&code=500", "alice", false),
                ("mode=status&code=503", "alice", false),
            ]
            for (query, account, ends) in cases {
                let error = await http.fetchError(backend.fetcher(query: query, clock: clock), account)
                #expect(error?.code == (ends ? .backendSessionEnded : .fetchFailed), "\(query)")
                #expect(error?.isTransient == !ends, "\(query)")
                #expect(error?.reason.contains("Forbidden") == false, "the body leaked into the error")
            }
            // The HTML 403 through the engine: the account stays signed in and is retried.
            let engine = SessionEngine(
                fetcher: RealTimeFetcher(backend.fetcher(query: "mode=html&code=403", clock: clock), clock: clock),
                configuration: SessionConfiguration(randomSeed: 1),
                clock: clock
            )
            _ = await engine.startCall { engine in try await engine.signIn("alice") }
            #expect(engine.state.expiredReason == .unavailable)
            #expect(engine.metrics.fetchesFailed[.fetchFailed] == 1)
            await engine.shutdown()
        }
    }

    @Test func aHostsOwnClassifierDecides() async throws {
        try await withLoopbackBackend { backend in
            let clock = ManualClock()
            let teapot = HTTPFailureClassifier { response in
                response.status == 418 && response.header("content-type") == "application/json"
                    ? .sessionEnded : .transient
            }
            let ended = await http.fetchError(
                backend.fetcher(query: "mode=status&code=418", classifier: teapot, clock: clock), "alice")
            #expect(ended?.code == .backendSessionEnded)
            // With this classifier even a 401 is transient.
            let retried = await http.fetchError(backend.fetcher(classifier: teapot, clock: clock), "nobody")
            #expect(retried?.code == .fetchFailed)
        }
    }

    // MARK: - Retry-After

    @Test func retryAfterInSecondsOrAsAnHTTPDateIsReported() async throws {
        try await withLoopbackBackend { backend in
            let clock = ManualClock(now: Date(timeIntervalSince1970: TimeInterval(Self.start)))
            let seconds = await http.fetchError(
                backend.fetcher(query: "mode=status&code=429&retry=120", clock: clock), "alice")
            #expect(seconds?.retryAfter == .seconds(120))
            #expect(seconds?.isTransient == true)
            // A date is read against the backend's own Date header, so a skewed host gets the same delay.
            let date = await http.fetchError(
                backend.fetcher(query: "mode=status&code=503&retry_date=90", backendOffset: -3600, clock: clock),
                "alice"
            )
            #expect(date?.retryAfter == .seconds(90))
            // Retry-After on other statuses, or a value that is neither form, is ignored.
            let other = await http.fetchError(
                backend.fetcher(query: "mode=status&code=500&retry=120", clock: clock), "alice")
            #expect(other?.retryAfter == nil)
            let garbage = await http.fetchError(
                backend.fetcher(query: "mode=status&code=429&retry=soon", clock: clock), "alice")
            #expect(garbage?.retryAfter == nil)
        }
    }

    @Test func theEngineWaitsAsLongAsTheBackendAsksOverHTTP() async throws {
        try await withLoopbackBackend { backend in
            let clock = ManualClock(now: Date(timeIntervalSince1970: TimeInterval(Self.start)))
            let engine = SessionEngine(
                fetcher: RealTimeFetcher(
                    backend.fetcher(query: "mode=status&code=429&retry=120", clock: clock), clock: clock),
                configuration: SessionConfiguration(
                    retry: RetryPolicy(initial: .seconds(1), multiplier: 2, cap: .seconds(30)),
                    randomSeed: 5
                ),
                clock: clock
            )
            var events = engine.events(bufferLimit: .max).makeAsyncIterator()
            _ = await engine.startCall { engine in try await engine.signIn("alice") }
            guard let failure = await events.nextFailure() else {
                Issue.record("no failure reported")
                return
            }
            #expect(failure.serverRetryAfter == .seconds(120))
            #expect(failure.retryIn == .seconds(120))
            // Idle first, so the retry's timer sleeps on the clock before it moves: a timer that read the time
            // before an advance and slept after it would wait a whole delay longer.
            await engine.waitUntilIdle()
            clock.advance(by: .seconds(119))
            await engine.waitUntilIdle()
            #expect(engine.metrics.fetchesStarted == 1)
            clock.advance(by: .seconds(1))
            await engine.waitUntilIdle()
            #expect(engine.metrics.fetchesStarted == 2)
            #expect(engine.metrics.serverDirectedDelays == 2)
            await engine.shutdown()
        }
    }

    // MARK: - Clock skew

    @Test func aHostAnHourAheadBecomesIdentifiedAndStaysSoForADay() async throws {
        try await withLoopbackBackend { backend in
            let clock = ManualClock(now: Date(timeIntervalSince1970: TimeInterval(Self.start)))
            let engine = SessionEngine(
                fetcher: RealTimeFetcher(backend.fetcher(backendOffset: -3600, clock: clock), clock: clock),
                configuration: SessionConfiguration(randomSeed: 11),
                clock: clock
            )
            let backendClock = OffsetClock(base: clock, offset: -3600)
            let verifier = try IdentityVerifier(
                projectID: LoopbackBackend.projectID, secret: LoopbackBackend.secret, clock: backendClock)
            try await engine.signIn("alice")
            #expect(engine.metrics.appliedClockOffset.map { abs($0.timeInterval + 3600) <= 1 } == true)
            var blocked = 0
            for _ in 0..<(86_400 / 30) {
                clock.advance(by: .seconds(30))
                await engine.waitUntilIdle()
                guard let headers = try? engine.identityHeaders() else {
                    blocked += 1
                    continue
                }
                #expect(verifier.verify(headers: headers).isValid)
            }
            #expect(blocked == 0, "identified work was blocked \(blocked) times")
            #expect(engine.state.isIdentified || engine.state.isRenewing)
            #expect(engine.metrics.renewals >= 86_400 / 900)
            #expect(engine.metrics.clockOffset.map { abs($0.timeInterval + 3600) <= 1 } == true)
            await engine.shutdown()
        }
    }

    @Test func aHostAnHourBehindRenewsBeforeTheRealExpiryAndNeverSendsAnExpiredCredential() async throws {
        try await withLoopbackBackend { backend in
            let clock = ManualClock(now: Date(timeIntervalSince1970: TimeInterval(Self.start)))
            let engine = SessionEngine(
                fetcher: RealTimeFetcher(backend.fetcher(backendOffset: 3600, clock: clock), clock: clock),
                configuration: SessionConfiguration(randomSeed: 12),
                clock: clock
            )
            let backendClock = OffsetClock(base: clock, offset: 3600)
            let verifier = try IdentityVerifier(
                projectID: LoopbackBackend.projectID, secret: LoopbackBackend.secret, clock: backendClock)
            var events = engine.events(bufferLimit: .max).makeAsyncIterator()
            try await engine.signIn("alice")
            var sent = 0
            for _ in 0..<(6 * 3600 / 30) {
                clock.advance(by: .seconds(30))
                await engine.waitUntilIdle()
                guard let headers = try? engine.identityHeaders() else { continue }
                sent += 1
                // The service runs on the backend's clock: it must never see an expired credential.
                let result = verifier.verify(headers: headers)
                #expect(result.isValid, "\(result)")
            }
            #expect(sent == 6 * 3600 / 30)
            // Every renewal landed before the previous credential's real expiry (on the backend's clock).
            var previousExpiry: Int64?
            var renewals = 0
            await engine.shutdown()
            while let event = await events.next() {
                guard case .renewed(let identity, _) = event.kind else { continue }
                let backendNow = Int64(event.time.wall.timeIntervalSince1970) + 3600
                if let previousExpiry { #expect(backendNow < previousExpiry) }
                previousExpiry = identity.expiresAt
                renewals += 1
            }
            #expect(renewals >= 6 * 3600 / 700)
        }
    }
}

/// A clock `offset` seconds from another: the backend's and the service's clock in the skew tests.
struct OffsetClock: SessionClock {
    let base: ManualClock
    let offset: Int64

    var now: Date { base.now.addingTimeInterval(TimeInterval(offset)) }
    var uptime: Duration { base.uptime }
    func sleep(for duration: Duration) async throws { try await base.sleep(for: duration) }
}
