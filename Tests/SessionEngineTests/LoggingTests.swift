import Foundation
import SessionEngineTestKit
import Testing

@testable import SessionEngine

/// The engine logs like a library: routine work at `debug`, what a daemon expects now and then at `info`, and `error`
/// only where the host must act.
@Suite struct LoggingTests {
    @Test func anOutageARejectionAndTheirRecoveryLogNothingAboveInfo() async throws {
        let records = Recorder<SessionLogRecord>()
        let harness = EngineHarness(configuration: SessionConfiguration(randomSeed: 7, log: { records.append($0) }))
        try await harness.signIn("alice")

        // The backend is down for one renewal, then answers again.
        harness.clock.advance(by: .seconds(10))
        let renewal = await harness.engine.startCall { try await $0.renew() }
        await harness.answerNext(with: .failure(SessionError.fetchFailed("the backend could not be reached")))
        await harness.engine.waitUntilIdle()
        harness.fetcher.setResponder(harness.signingResponder())
        let recovered = await harness.clock.advance(upTo: .seconds(600)) { harness.engine.metrics.renewals >= 1 }
        #expect(recovered)
        _ = try? await renewal.value

        // The service rejects the credential once; the engine renews.
        harness.clock.advance(by: .seconds(10))
        _ = try? await harness.engine.withIdentity { _ -> Int in throw SessionError.credentialRejected }
        await harness.engine.signOut()

        let failed = records.values.filter { $0.metadata["code"] == SessionError.Code.fetchFailed.rawValue }
        #expect(failed.count == 1 && failed.allSatisfy { $0.level == .info })
        #expect(records.values.contains { $0.metadata["renewing"] != nil && $0.level == .info })
        #expect(records.values.contains { $0.metadata["expiresAt"] != nil && $0.level == .debug })
        let loud = records.values.filter { $0.level == .warning || $0.level == .error }
        #expect(loud.isEmpty, "records above info: \(loud.map(\.message))")
    }

    @Test func aCredentialThatCanNeverBeUsedLogsAnErrorAndAnEndedBackendSessionDoesNot() async throws {
        let records = Recorder<SessionLogRecord>()
        let harness = EngineHarness(configuration: SessionConfiguration(randomSeed: 8, log: { records.append($0) }))

        // The backend ends the session: the user signed out elsewhere, nothing for the host to fix.
        let first = await harness.engine.startCall { try await $0.signIn("alice") }
        await harness.answerNext(with: .failure(SessionError.backendSessionEnded()))
        await #expect(throws: SessionError.self) { try await first.value }
        #expect(records.values.filter { $0.level == .error }.isEmpty)

        // The backend hands out another user's credential on renewal: a misconfiguration someone must fix.
        try await harness.signIn("bob")
        harness.clock.advance(by: .seconds(10))
        let second = await harness.engine.startCall { try await $0.renew() }
        await harness.answerNext(with: .success(harness.credential(for: "bob", email: "mallory@example.com")))
        let mismatch = await harness.clock.advance(upTo: .seconds(3600)) {
            records.values.contains { $0.metadata["code"] == SessionError.Code.identityMismatch.rawValue }
        }
        #expect(mismatch)
        let logged = records.values.last { $0.metadata["code"] == SessionError.Code.identityMismatch.rawValue }
        #expect(logged?.level == .error)
        second.cancel()
        await harness.engine.signOut()
    }

    @Test func theLevelOfAFailedFetchDependsOnWhetherTheHostMustAct() {
        func failure(_ code: SessionError.Code, retryIn: Duration?) -> FetchFailure {
            FetchFailure(
                account: "alice",
                error: SessionError(code, reason: "a reason", isTransient: retryIn != nil),
                fetch: FetchAttempt(number: 1, duration: .seconds(1)),
                retryIn: retryIn
            )
        }
        #expect(AccountShard.logLevel(for: failure(.fetchFailed, retryIn: .seconds(5))) == .info)
        #expect(AccountShard.logLevel(for: failure(.lifetimeTooLong, retryIn: .seconds(5))) == .error)
        #expect(AccountShard.logLevel(for: failure(.backendMisconfigured, retryIn: .seconds(90))) == .error)
        #expect(AccountShard.logLevel(for: failure(.backendSessionEnded, retryIn: nil)) == .info)
        #expect(AccountShard.logLevel(for: failure(.invalidCredential, retryIn: nil)) == .error)
        #expect(AccountShard.logLevel(for: failure(.identityMismatch, retryIn: .seconds(5))) == .error)
    }
}
