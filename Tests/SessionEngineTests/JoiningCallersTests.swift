import Foundation
import SessionEngineBackend
import SessionEngineTestKit
import Testing

@testable import SessionEngine

/// Callers that join what another caller began: a sign-in joining an account change, and work rejected with an
/// earlier credential joining the renewal another rejection began. Each gets what the first caller gets.
@Suite struct JoiningCallersTests {
    /// A sign-in that joined an account change, failed by a later change, still returns only once the change it joined
    /// is prepared, as the caller that began it does: never while the previous account's work still runs.
    @Test func aJoinedSignInSupersededReturnsOnlyOnceThePreviousWorkHasDrained() async throws {
        let clock = ManualClock()
        let signer = try IdentitySigner(projectID: "proj_join", secret: "join-secret", clock: clock)
        let fetcher = ScriptedCredentialFetcher(clock: clock) { request in
            .credential(try signer.sign(email: "\(request.account.rawValue)@example.com"))
        }
        let engine = SessionEngine(fetcher: fetcher, configuration: SessionConfiguration(randomSeed: 1), clock: clock)
        try await engine.signIn("alice")
        // alice's work notices its cancellation only once the clock has moved.
        let work = await engine.startCall { engine in
            try await engine.withIdentity { _ in await clock.sleepIgnoringCancellation(for: .seconds(10)) }
        }
        let returned = Locked<[String]>()
        let switching = await engine.startCall { engine in
            defer { returned.append("switch") }
            try await engine.switchAccount(to: "bob")
        }
        let joined = await engine.startCall { engine in
            defer { returned.append("joined") }
            try await engine.signIn("bob")
        }
        let signOut = await engine.startCall { engine in
            await engine.signOut()
            returned.append("sign-out")
        }
        #expect(returned.value.isEmpty, "a caller returned while alice's work still ran")
        clock.advance(by: .seconds(10))
        _ = try? await work.value
        for call in [switching, joined] {
            await #expect(throws: SessionError.self) { try await call.value }
        }
        try await signOut.value
        #expect(Set(returned.value) == ["switch", "joined", "sign-out"])
        #expect(engine.state == .signedOut)
    }

    /// Work rejected with a credential that a newer one had replaced while it ran, while the newer one's rejection is
    /// being renewed, waits for that renewal and runs once more with its credential, as the work rejected with the
    /// newer one does; before, it failed with `INVALID_IDENTITY`, as if the renewed credential had been rejected too.
    @Test func workRejectedWithAnEarlierCredentialWaitsForTheRenewalUnderWay() async throws {
        let clock = ManualClock()
        let signer = try IdentitySigner(projectID: "proj_join", secret: "join-secret", clock: clock)
        let fetcher = ScriptedCredentialFetcher(clock: clock)
        let engine = SessionEngine(fetcher: fetcher, configuration: SessionConfiguration(randomSeed: 1), clock: clock)
        let first = try signer.sign(email: "alice@example.com")
        let signIn = await engine.startCall { try await $0.signIn("alice") }
        #expect(fetcher.respond(to: await fetcher.nextRequest(), with: .success(first)))
        try await signIn.value
        let held = Gate()
        // W1 runs with the first credential until the gate opens, then the service rejects it.
        let earlier = await engine.startCall { engine in
            try await engine.withIdentity { credential -> IdentityCredential in
                if credential == first {
                    await held.wait()
                    throw SessionError.credentialRejected
                }
                return credential
            }
        }
        // Past the minimum interval since the first fetch, so that a rejection renews at once.
        clock.advance(by: .seconds(10))
        let second = try signer.sign(email: "alice@example.com")
        try await engine.setIdentityCredential(second, for: "alice")
        // W2 runs with the second, which the service rejects at once: the engine renews.
        let later = await engine.startCall { engine in
            try await engine.withIdentity { credential -> IdentityCredential in
                if credential == second { throw SessionError.credentialRejected }
                return credential
            }
        }
        try #require(fetcher.pendingCount == 1, "the rejection of the second credential renews it")
        let renewal = try #require(fetcher.requests.last)
        held.open()
        await engine.waitUntilIdle()
        clock.advance(by: .seconds(1))
        let third = try signer.sign(email: "alice@example.com")
        #expect(fetcher.respond(to: renewal, with: .success(third)))
        #expect(try await later.value == third)
        #expect(try await earlier.value == third, "the work rejected with the earlier credential got no retry")
        await engine.shutdown()
    }
}
