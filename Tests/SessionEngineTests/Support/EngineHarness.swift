import Foundation
import SessionEngine
import SessionEngineBackend
import SessionEngineModel
import SessionEngineTestKit
import Synchronization
import Testing

/// An engine wired to a manual clock, a scripted fetcher and a signer, with helpers to step through it.
struct EngineHarness {
    static let projectID = "proj_test"
    static let secret = "test-secret-for-the-suite"

    let clock: ManualClock
    let fetcher: ScriptedCredentialFetcher
    let signer: IdentitySigner
    let engine: SessionEngine

    init(
        configuration: SessionConfiguration = SessionConfiguration(randomSeed: 42),
        clock: ManualClock = ManualClock(),
        responder: (@Sendable (AccountID) throws -> IdentityCredential)? = nil
    ) {
        self.clock = clock
        self.fetcher = ScriptedCredentialFetcher(responder: responder)
        self.signer = try! IdentitySigner(projectID: Self.projectID, secret: Self.secret, clock: clock)
        self.engine = SessionEngine(fetcher: fetcher, configuration: configuration, clock: clock)
    }

    /// The email the backend signs for an account.
    /// A credential for the account that expires `lifetime` seconds from the clock's now.
    func credential(for account: AccountID, lifetime: Int64 = 900, email: String? = nil) -> IdentityCredential {
        let now = Int64(clock.now.timeIntervalSince1970.rounded(.down))
        return try! signer.sign(
            email: email ?? exampleEmail(for: account),
            properties: nil,
            expiresAt: now + lifetime
        )
    }

    /// A responder that signs a fresh credential for whichever account is asked for.
    func signingResponder(lifetime: Int64 = 900) -> @Sendable (AccountID) throws -> IdentityCredential {
        let signer = self.signer
        let clock = self.clock
        return { account in
            let now = Int64(clock.now.timeIntervalSince1970.rounded(.down))
            return try signer.sign(email: exampleEmail(for: account), properties: nil, expiresAt: now + lifetime)
        }
    }

    /// Signs in, answering the first fetch with a credential of the given lifetime.
    func signIn(_ account: AccountID, lifetime: Int64 = 900) async throws {
        let engine = self.engine
        async let signedIn: Void = engine.signIn(account)
        let request = await fetcher.nextRequest()
        #expect(request.account == account)
        fetcher.respond(to: request, with: .success(credential(for: account, lifetime: lifetime)))
        try await signedIn
    }

    /// Answers the next fetch.
    @discardableResult
    func answerNext(with result: Result<IdentityCredential, any Error>) async -> ScriptedCredentialFetcher.Request {
        let request = await fetcher.nextRequest()
        fetcher.respond(to: request, with: result)
        return request
    }
}

extension SessionEvents.Iterator {
    /// The next event that matches, skipping others; `nil` when the stream ends first.
    mutating func next(where predicate: (SessionEvent) -> Bool) async -> SessionEvent? {
        while let event = await next() {
            if predicate(event) { return event }
        }
        return nil
    }

    /// The next failed fetch, skipping other events; `nil` when the stream ends first.
    mutating func nextFailure() async -> FetchFailure? {
        while let event = await next() {
            if case .fetchFailed(let failure) = event.kind { return failure }
        }
        return nil
    }

    /// Waits for the next state change to a state that matches.
    mutating func state(where predicate: (SessionState) -> Bool) async -> SessionState? {
        let event = await next { event in
            if case .stateChanged(let state) = event.kind { return predicate(state) }
            return false
        }
        guard case .stateChanged(let state) = event?.kind else { return nil }
        return state
    }
}
