import Foundation
import SessionEngine
import SessionEngineBackend
import SessionEngineTestKit
import Synchronization
import Testing

/// The four Verify steps of the verified-identity contract, end to end in one process: a backend that signs with
/// `IdentitySigner`, the engine, and a stand-in for the service that checks identity headers with `IdentityVerifier`
/// and keeps each account's private reports and chat.
///
/// `SessionEngineDemo` runs the same checks in its daemon scenario; these prove them on every change.
@Suite(.timeLimit(TimeLimits.minutes(1)))
struct VerifyChecksTests {
    // MARK: - 1. Submit an identified action with a real backend-issued credential

    @Test func check1AnIdentifiedActionWithABackendIssuedCredentialIsAccepted() async throws {
        let world = VerifyWorld()
        try await world.engine.signIn("alice")
        let reply = try await world.identified(.submitAction("vote"))
        #expect(reply == .accepted(email: "alice@example.com"))
        #expect(world.service.requests().map(\.accepted) == [true])
    }

    // MARK: - 2. Change one signed field, then test an expired credential; both must fail

    @Test(arguments: [
        IdentityHeaders.emailName, IdentityHeaders.expiresAtName, IdentityHeaders.propertiesName,
        IdentityHeaders.versionName,
    ])
    func check2AChangedSignedFieldIsRefused(header: String) async throws {
        let world = VerifyWorld()
        try await world.engine.signIn("bob")
        let headers = try world.engine.identityHeaders()
        #expect(world.service.handle(.submitAction("vote"), headers: headers) == .accepted(email: "bob@example.com"))
        let changed: String
        switch header {
        case IdentityHeaders.emailName: changed = "mallory@example.com"
        case IdentityHeaders.expiresAtName: changed = String(Int64(headers[header]!)! + 60)
        case IdentityHeaders.propertiesName: changed = base64URL(#"{"beta":true,"plan":"pro","seats":30}"#)
        default: changed = "v1"
        }
        let tampered = IdentityHeaders(
            requestHeaders: headers.map { (name: $0.name, value: $0.name == header ? changed : $0.value) }
        )
        let reply = world.service.handle(.submitAction("vote"), headers: tampered)
        // Dropping to v1 with the properties header still present is malformed; every other change breaks the
        // signature.
        #expect(reply == .refused(header == IdentityHeaders.versionName ? .malformed : .signatureMismatch))
    }

    @Test func check2AnExpiredCredentialIsRefusedAndTheEngineBlocksItLocally() async throws {
        let world = VerifyWorld()
        try await world.engine.signIn("alice")
        let issued = try await world.engine.withIdentity { $0 }
        world.backend.outage(true)
        let expired = await world.harness.clock.advance(upTo: .seconds(20 * 60)) { world.engine.state.isExpired }
        #expect(expired)
        #expect(world.engine.state.expiredReason == .expired)

        // The service refuses the backend-issued credential once it has expired.
        #expect(world.service.handle(.submitAction("vote"), headers: IdentityHeaders(issued)) == .refused(.expired))

        // The engine never sends it: identified work fails locally with INVALID_IDENTITY.
        let sent = world.service.requestCount
        await #expect(throws: SessionError.self) { try await world.identified(.submitAction("vote")) }
        do {
            _ = try world.engine.identityHeaders()
            Issue.record("an expired credential was handed out")
        } catch {
            #expect(error.code.rawValue == "INVALID_IDENTITY")
        }
        #expect(world.service.requestCount == sent, "nothing reached the service")

        world.backend.outage(false)
        let recovered = await world.harness.clock.advance(upTo: .seconds(10 * 60)) { world.engine.state.isIdentified }
        #expect(recovered)
        #expect(try await world.identified(.submitAction("vote")) == .accepted(email: "alice@example.com"))
    }

    // MARK: - 3. Sign out; another account cannot see the previous account's private report or chat

    @Test func check3AfterASwitchTheOtherAccountCannotSeeThePreviousAccountsPrivateData() async throws {
        let world = VerifyWorld()
        let engine = world.engine
        let cleared = Recorder<AccountChange>()
        await engine.addAccountChangeHook { cleared.append($0) }
        try await engine.signIn("alice")
        guard case .reportPosted(let report) = try await world.identified(.postReport("alice's private report")) else {
            Issue.record("the report was not filed")
            return
        }
        _ = try await world.identified(.postChat("alice: a private question"))

        // Alice's poll runs as scoped work, waking every five minutes.
        let clock = world.harness.clock
        let poll = await engine.startCall { engine in
            try await engine.withIdentity { _ in
                while true {
                    try await clock.sleep(for: .seconds(300))
                    _ = try await world.identified(.readInbox)
                }
            }
        }
        // The engine's timer and the poll are both asleep; five minutes later the poll has read the inbox once.
        #expect(clock.sleeperCount == 2)
        clock.advance(by: .seconds(300))
        await engine.waitUntilIdle()
        #expect(world.service.requestCount == 3, "the poll read the inbox once")

        let marker = world.service.requestCount
        await engine.signOut()
        try await engine.signIn("bob")

        do {
            try await poll.value
            Issue.record("alice's poll outlived the switch")
        } catch let error as SessionError {
            #expect(error.code == .accountChanged)
        }
        #expect(cleared.values.map(\.to) == ["alice", nil, "bob"])
        let late = world.service.requests(after: marker).filter { $0.claimedEmail == "alice@example.com" }
        #expect(late.isEmpty, "alice's work reached the service after the switch")

        #expect(try await world.identified(.readInbox) == .inbox(reports: [], chat: []))
        #expect(try await world.identified(.readReport(report)) == .notFound)
    }

    // MARK: - 4. Rotate the secret; old credentials no longer work, and the engine renews once

    @Test func check4AfterRotationOldCredentialsAreRefusedAndTheEngineRenewsOnce() async throws {
        let world = VerifyWorld()
        try await world.engine.signIn("alice")
        let old = try await world.engine.withIdentity { $0 }
        // Past the minimum interval between fetches, so the renewal after the rejection starts at once.
        world.harness.clock.advance(by: .seconds(10))

        world.backend.rotate(to: "rotated-secret")
        try world.service.rotateSecret(to: "rotated-secret")
        #expect(
            world.service.handle(.submitAction("vote"), headers: IdentityHeaders(old)) == .refused(.signatureMismatch))

        let fetches = world.engine.metrics.fetchesStarted
        let attempts = Recorder<IdentityCredential>()
        let reply = try await world.engine.withIdentity { credential in
            attempts.append(credential)
            return try world.call(.submitAction("vote"), with: credential)
        }
        #expect(reply == .accepted(email: "alice@example.com"))
        #expect(attempts.values.count == 2)
        #expect(attempts.values.first == old)
        #expect(world.engine.metrics.fetchesStarted == fetches + 1, "the engine renews exactly once")
        #expect(world.engine.state.isIdentified)
        #expect(
            world.service.handle(.submitAction("vote"), headers: IdentityHeaders(old)) == .refused(.signatureMismatch))
    }
}

/// A backend, the engine and a service stand-in, all on one manual clock.
struct VerifyWorld {
    static let projectID = "proj_verify"

    let harness: EngineHarness
    let backend: SigningBackend
    let service: ServiceStandIn

    var engine: SessionEngine { harness.engine }

    init() {
        let clock = ManualClock()
        let backend = SigningBackend(projectID: Self.projectID, secret: "verify-secret", clock: clock)
        self.backend = backend
        harness = EngineHarness(clock: clock, responder: { try backend.issue(for: $0) })
        service = try! ServiceStandIn(projectID: Self.projectID, secret: "verify-secret", clock: clock)
    }

    /// Sends a request with the engine's credential; the service's refusal asks the engine to renew once.
    func identified(_ operation: ServiceStandIn.Operation) async throws -> ServiceStandIn.Reply {
        let service = self.service
        return try await engine.withIdentity { credential in try Self.call(service, operation, with: credential) }
    }

    /// Sends one request; throws ``SessionError/credentialRejected`` when the service answers `INVALID_IDENTITY`.
    func call(_ operation: ServiceStandIn.Operation, with credential: IdentityCredential) throws
        -> ServiceStandIn.Reply
    {
        try Self.call(service, operation, with: credential)
    }

    private static func call(
        _ service: ServiceStandIn,
        _ operation: ServiceStandIn.Operation,
        with credential: IdentityCredential
    ) throws -> ServiceStandIn.Reply {
        let reply = service.handle(operation, headers: IdentityHeaders(credential))
        if case .refused = reply { throw SessionError.credentialRejected }
        return reply
    }
}

/// The host's backend: signs the session's email with `IdentitySigner`, can fail (an outage) and rotate.
final class SigningBackend: Sendable {
    private struct State {
        var signer: IdentitySigner
        var outage = false
    }

    private let state: SanitizedMutex<State>
    private let projectID: String
    private let clock: ManualClock

    init(projectID: String, secret: String, clock: ManualClock) {
        self.projectID = projectID
        self.clock = clock
        state = SanitizedMutex(State(signer: try! IdentitySigner(projectID: projectID, secret: secret, clock: clock)))
    }

    /// Issues a credential for the account's session, as the contract's handler does.
    func issue(for account: AccountID) throws -> IdentityCredential {
        try state.withLock { state throws -> IdentityCredential in
            guard !state.outage else { throw SessionError.fetchFailed("the backend answered 503") }
            // Bob's session carries signed properties (v2); the others do not (v1).
            let properties =
                account == "bob"
                ? try IdentityProperties(["plan": .string("pro"), "seats": .number(3), "beta": .boolean(true)]) : nil
            return try state.signer.sign(email: " \(account.rawValue.capitalized)@Example.com", properties: properties)
        }
    }

    func outage(_ on: Bool) {
        state.withLock { $0.outage = on }
    }

    func rotate(to secret: String) {
        let signer = try! IdentitySigner(projectID: projectID, secret: secret, clock: clock)
        state.withLock { $0.signer = signer }
    }
}

/// Unpadded base64url, as `X-AppNorth-Identity-Properties` carries the canonical properties.
func base64URL(_ text: String) -> String {
    Data(text.utf8).base64EncodedString()
        .replacingOccurrences(of: "+", with: "-")
        .replacingOccurrences(of: "/", with: "_")
        .replacingOccurrences(of: "=", with: "")
}
