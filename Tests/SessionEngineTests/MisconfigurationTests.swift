import CSessionEngineCurl
import Foundation
import SessionEngineTestKit
import Testing

@testable import SessionEngine

/// A misconfiguration is not an outage: its own code and class, its own counter, a log record at error, and a
/// slower retry schedule that still recovers once someone fixes the backend.
@Suite(.timeLimit(TimeLimits.minutes(1)))
struct MisconfigurationTests {
    @Test func everyFetchFailureHasAClassAHostCanSwitchOn() {
        #expect(SessionError.backendSessionEnded().failureClass == .sessionEnded)
        #expect(SessionError.fetchFailed("the backend answered 503").failureClass == .outage)
        #expect(
            SessionError(.fetchFailed, reason: "refused endpoint", isTransient: false).failureClass == .misconfiguration
        )
        let misconfigured = SessionError.backendMisconfigured("the backend redirected the request")
        #expect(misconfigured.code.rawValue == "BACKEND_MISCONFIGURED")
        #expect(misconfigured.isTransient && misconfigured.failureClass == .misconfiguration)
        #expect(
            SessionError(.identityMismatch, reason: "another user", isTransient: true).failureClass == .misconfiguration
        )
        #expect(
            SessionError(.invalidCredential, reason: "not a credential", isTransient: true).failureClass
                == .misconfiguration)
        #expect(SessionError(.signedOut, reason: "signed out").failureClass == nil)
        #expect(SessionError(.shutDown, reason: "shut down").failureClass == nil)
        // A fetcher that knows better says so.
        let custom = SessionError(.fetchFailed, reason: "WAF page", isTransient: true, failureClass: .misconfiguration)
        #expect(custom.failureClass == .misconfiguration)
        #expect(AccountShard.classify(custom).failureClass == .misconfiguration)
        #expect(SessionError.FailureClass.misconfiguration.rawValue == "misconfiguration")
    }

    /// What waiting cannot fix in a libcurl transfer is a misconfiguration; what may pass is an outage; a proxy's
    /// failure before its tunnel opened is the proxy's. Each of these is also met against a real server in
    /// `CertificateTrustTests` and `ProxyTests`; this pins the classes of the codes no server there produces.
    @Test func libcurlFailuresAreClassedByWhatTheyAskOfTheHost() {
        func outcome(_ code: Int32, connect: Int = 0, proxyVerify: Int = 0) -> se_curl_outcome {
            se_curl_outcome(
                code: code, ssl_verify_result: 0, connect_code: connect, proxy_error: 0,
                proxy_ssl_verify_result: proxyVerify)
        }
        let cases: [(se_curl_outcome, Bool, SessionError.FailureClass, String)] = [
            (outcome(SE_CURL_SETUP_FAILED), false, .misconfiguration, "the transfer could not be set up"),
            (outcome(SE_CURL_SETUP_FAILED), true, .misconfiguration, "the transfer could not be set up"),
            (outcome(77), false, .misconfiguration, "the trusted certificate authorities could not be loaded"),
            (outcome(7), false, .outage, "the backend could not be reached"),
            (outcome(56, connect: 407), true, .misconfiguration, "the proxy requires authentication"),
            (outcome(56, connect: 403), true, .misconfiguration, "the proxy refused the tunnel"),
            (outcome(56, connect: 502), true, .outage, "the proxy could not reach the backend"),
            (outcome(56), true, .outage, "the proxy closed the connection"),
            (outcome(52), true, .outage, "the proxy closed the connection"),
            (outcome(56, connect: 200), true, .outage, "the connection to the backend failed"),
            (outcome(60, proxyVerify: 10), true, .misconfiguration, "the proxy's certificate was not trusted"),
            (outcome(35), true, .outage, "the secure connection to the proxy failed"),
            (outcome(35, connect: 200), true, .outage, "the secure connection to the backend failed"),
        ]
        for (outcome, throughProxy, failureClass, reason) in cases {
            let error = CurlTransfer.failure(outcome, throughProxy: throughProxy)
            #expect(error.failureClass == failureClass, "\(outcome.code) \(outcome.connect_code): \(error)")
            #expect(error.reason.hasPrefix(reason), "\(outcome.code) \(outcome.connect_code): \(error)")
            #expect(AccountShard.classify(error).failureClass == failureClass)
        }
    }

    /// `HTTPCredentialFetcher` refuses plain http to a remote host before any connection: the engine reports
    /// `BACKEND_MISCONFIGURED`, counts it, logs it at error and retries only after a minute or more.
    @Test func aRefusedEndpointIsAMisconfigurationRetriedSlowlyAndLoggedAtError() async throws {
        let records = Recorder<SessionLogRecord>()
        let clock = ManualClock()
        let fetcher = HTTPCredentialFetcher(endpoint: URL(string: "http://identity.example.com/token")!, clock: clock) {
            _, _ in
        }
        let engine = SessionEngine(
            fetcher: fetcher,
            configuration: SessionConfiguration(randomSeed: 31, log: { records.append($0) }),
            clock: clock
        )
        var events = engine.events(bufferLimit: .max).makeAsyncIterator()
        let signIn = await engine.startCall { try await $0.signIn("alice", timeout: .seconds(30)) }
        let failure = try #require(await events.nextFailure())
        #expect(failure.error.code == .backendMisconfigured)
        #expect(failure.error.failureClass == .misconfiguration)
        #expect(failure.error.reason.contains("plain http"))
        let retryIn = try #require(failure.retryIn)
        #expect(retryIn >= .seconds(65) && retryIn < .seconds(125), "retry in \(retryIn)")
        await engine.waitUntilIdle()
        let metrics = engine.metrics
        #expect(metrics.misconfigurations == 1)
        #expect(metrics.fetchesFailed == [.backendMisconfigured: 1])
        let logged = try #require(
            records.values.first { $0.metadata["code"] == SessionError.Code.backendMisconfigured.rawValue })
        #expect(logged.level == .error)
        #expect(logged.metadata["class"] == "misconfiguration")

        // The deadline tells the host which class held the sign-in up.
        clock.advance(by: .seconds(30))
        do {
            try await signIn.value
            Issue.record("signed in through a refused endpoint")
        } catch let error as SessionError {
            #expect(error.code == .signInTimedOut)
            #expect(error.failureClass == .misconfiguration)
            #expect(error.reason.contains("BACKEND_MISCONFIGURED"))
        }
        await engine.shutdown()
    }

    /// The slow schedule grows to its cap and never stops; once the backend is fixed the account becomes identified.
    @Test func aMisconfigurationKeepsBeingRetriedAndRecoversOnceFixed() async throws {
        let harness = EngineHarness(
            configuration: SessionConfiguration(
                misconfigurationRetry: RetryPolicy(initial: .seconds(60), multiplier: 2, cap: .seconds(240)),
                randomSeed: 32
            ))
        let engine = harness.engine
        harness.fetcher.setResponder { _ in
            throw SessionError.backendMisconfigured("the backend's answer lacks Cache-Control: no-store")
        }
        var events = engine.events(bufferLimit: .max).makeAsyncIterator()
        let signIn = await engine.startCall { try await $0.signIn("alice") }
        var delays: [Duration] = []
        while delays.count < 5 {
            let failed = delays.count + 1
            let retried = await harness.clock.advance(upTo: .seconds(1000)) {
                engine.metrics.fetchesFailedTotal >= failed
            }
            #expect(retried, "no retry after failure \(delays.count)")
            let failure = try #require(await events.nextFailure())
            delays.append(try #require(failure.retryIn))
        }
        let ceilings: [Duration] = [.seconds(60), .seconds(120), .seconds(240), .seconds(240), .seconds(240)]
        for (delay, ceiling) in zip(delays, ceilings) {
            // Above the minimum interval's 5 s floor, a draw in the upper half of the ceiling.
            let slow = delay - .seconds(5)
            #expect(slow >= ceiling / 2 && slow < ceiling, "\(delay) is not 5 s plus the upper half of \(ceiling)")
        }
        #expect(engine.metrics.misconfigurations == 5)

        harness.fetcher.setResponder(harness.signingResponder())
        let identified = await harness.clock.advance(upTo: .seconds(300)) { engine.state.isIdentified }
        #expect(identified)
        try await signIn.value
        await engine.shutdown()
    }

    /// An outage keeps the quick schedule, logs at info and counts no misconfiguration.
    @Test func anOutageIsNotAMisconfiguration() async throws {
        let records = Recorder<SessionLogRecord>()
        let harness = EngineHarness(configuration: SessionConfiguration(randomSeed: 33, log: { records.append($0) }))
        let engine = harness.engine
        var events = engine.events(bufferLimit: .max).makeAsyncIterator()
        let signIn = await engine.startCall { try await $0.signIn("alice") }
        await harness.answerNext(with: .failure(SessionError.fetchFailed("the backend could not be reached")))
        let failure = try #require(await events.nextFailure())
        #expect(failure.error.failureClass == .outage)
        #expect(try #require(failure.retryIn) < .seconds(6), "the 5 s minimum interval and a draw below 1 s")
        await engine.waitUntilIdle()
        #expect(engine.metrics.misconfigurations == 0)
        #expect(records.values.allSatisfy { $0.level < .error })
        signIn.cancel()
        await engine.shutdown()
    }
}
