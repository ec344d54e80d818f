import Foundation
import SessionEngine
import SessionEngineBackend
import SessionEngineTestKit
import Testing

#if canImport(FoundationNetworking)
    import FoundationNetworking
#endif

/// Every public value, printed every way Swift prints it, holds no secret, no signature, no HMAC key state and no
/// property value.
@Suite(.timeLimit(TimeLimits.minutes(1))) struct RedactionTests {
    static let secret = "SECRET-redaction-0001"
    static let propertyValue = "PROPERTY-VALUE-0042"
    static let token = "BEARER-TOKEN-0007"
    static let proxyPassword = "PROXY-PASSWORD-0099"
    /// Names the key state goes by inside the signer and the verifier; a mirror that shows them leaks it.
    static let keyStateNames = ["hmac", "innerState", "outerState", "HMACSHA256", "SHA256"]

    /// `print`, `String(describing:)`, `String(reflecting:)` and `dump` of a value.
    static func printed(_ value: Any) -> [String] {
        var printedText = ""
        print(value, to: &printedText)
        var dumped = ""
        dump(value, to: &dumped)
        return [printedText, String(describing: value), String(reflecting: value), dumped]
    }

    /// Records an issue for every form of every value that shows something it must not.
    static func expectNoLeak(
        _ values: [(String, Any)], signatures: [String], sourceLocation: SourceLocation = #_sourceLocation
    ) {
        let forbidden = [secret, propertyValue, token, proxyPassword, "42.125", "free"] + signatures
        for (name, value) in values {
            for text in printed(value) {
                for needle in forbidden where text.contains(needle) {
                    Issue.record("\(name) shows '\(needle)': \(text)", sourceLocation: sourceLocation)
                }
                for needle in keyStateNames where text.contains(needle) {
                    Issue.record("\(name) shows its key state (\(needle)): \(text)", sourceLocation: sourceLocation)
                }
            }
        }
    }

    @Test func noBackendOrTransportValueShowsASecretASignatureOrAPropertyValue() throws {
        let clock = ManualClock(now: Date(timeIntervalSince1970: 1_800_000_000))
        let signer = try IdentitySigner(projectID: "proj_redaction", secret: Self.secret, clock: clock)
        var verifier = try IdentityVerifier(projectID: "proj_redaction", secret: Self.secret, clock: clock)
        let properties = try IdentityProperties([
            "plan": .string("free"), "note": .string(Self.propertyValue), "seats": .number(42.125),
            "beta": .boolean(true),
        ])
        let credential = try signer.sign(email: "alice@example.com", properties: properties)
        let headers = IdentityHeaders(credential)
        let valid = verifier.verify(headers: headers)
        try verifier.rotateSecret(to: Self.secret + "-rotated")
        let mismatch = verifier.verify(headers: headers)
        guard case .invalid(let failure) = mismatch else {
            Issue.record("the rotated verifier accepted the credential")
            return
        }
        #expect(failure.signedPayload?.contains(Self.propertyValue) == true, "the payload is there, for the tool")
        let fetcher = HTTPCredentialFetcher(endpoint: URL(string: "https://api.example.com/id?t=\(Self.token)")!) {
            _, request in
            request.setValue("Bearer \(Self.token)", forHTTPHeaderField: "Authorization")
        }
        var values: [(String, Any)] = [
            ("signer", signer), ("verifier", verifier), ("credential", credential), ("headers", headers),
            ("properties", properties), ("valid verification", valid), ("mismatch", mismatch), ("failure", failure),
            ("fetcher", fetcher), ("optional credential", Optional(credential) as Any),
            ("credential array", [credential]),
        ]
        values += headers.fields.map { ("field \($0.name)", $0) }
        values += properties.values.map { ("property \($0.key)", $0.value) }
        Self.expectNoLeak(values, signatures: [credential.signature])
    }

    @Test func noEngineEventErrorOrConfigurationShowsThem() async throws {
        let clock = ManualClock(now: Date(timeIntervalSince1970: 1_800_000_000))
        let signer = try IdentitySigner(projectID: "proj_redaction", secret: Self.secret, clock: clock)
        let credential = try signer.sign(
            email: "alice@example.com",
            properties: IdentityProperties(["plan": .string("free"), "note": .string(Self.propertyValue)])
        )
        let fetcher = ScriptedCredentialFetcher()
        let configuration = SessionConfiguration(randomSeed: 7)
        let engine = SessionEngine(fetcher: fetcher, configuration: configuration, clock: clock)
        var events = engine.events(bufferLimit: .max).makeAsyncIterator()
        async let signedIn: Void = engine.signIn("alice")
        fetcher.respond(to: await fetcher.nextRequest(), with: .success(credential))
        try await signedIn
        // The renewal is due between 540 s and 660 s into the 900 s lifetime; it fails transiently.
        await clock.waitForSleepers(count: 1)
        clock.advance(by: .seconds(700))
        fetcher.respond(
            to: await fetcher.nextRequest(),
            with: .failure(SessionError.fetchFailed("the backend answered 503"))
        )
        var seen: [SessionEvent] = []
        while let event = await events.next() {
            seen.append(event)
            if case .fetchFailed = event.kind { break }
        }
        #expect(seen.contains { if case .stateChanged(.identified) = $0.kind { true } else { false } })
        let error: SessionError
        do {
            _ = try engine.identityHeaders()
            error = SessionError.credentialRejected
        } catch let thrown {
            error = thrown
        }
        var values: [(String, Any)] = [
            ("configuration", configuration), ("state", engine.state), ("error", error),
            ("headers result", Result { try engine.identityHeaders() }), ("engine", engine),
            ("metrics", engine.metrics),
        ]
        values += seen.map { ("event \($0)", $0) }
        Self.expectNoLeak(values, signatures: [credential.signature])
        await engine.shutdown()
    }

    /// Every public type that can hold a credential, a secret, a proxy's password or what a backend sent, dumped with
    /// such a value inside.
    @Test func everyPublicTypeThatCanHoldASecretIsRedactedInItsMirror() async throws {
        let clock = ManualClock(now: Date(timeIntervalSince1970: 1_800_000_000))
        let signer = try IdentitySigner(projectID: "proj_redaction", secret: Self.secret, clock: clock)
        let credential = try signer.sign(
            email: "alice@example.com", properties: IdentityProperties(["note": .string(Self.propertyValue)]))
        let proxyURL = URL(string: "http://relay:\(Self.proxyPassword)@proxy.internal:3128")!
        let proxies: [HTTPProxy] = [
            .url(proxyURL), .url(proxyURL, includingLoopback: true),
            .environment(["https_proxy": proxyURL.absoluteString, "ALL_PROXY": proxyURL.absoluteString]),
        ]
        let endpoint = URL(string: "https://api.example.com/identity")!
        let fetchers = proxies.map { proxy in
            HTTPCredentialFetcher(endpoint: endpoint, proxy: proxy) { _, request in
                request.setValue("Bearer \(Self.token)", forHTTPHeaderField: "Authorization")
            }
        }
        let failure = HTTPFailureResponse(
            status: 403,
            headers: [("Set-Cookie", "session=\(Self.token)"), ("X-Secret", Self.secret)],
            body: Array("{\"token\":\"\(Self.token)\"}".utf8)
        )
        let identity = SessionIdentity(account: "alice", credential: credential, epoch: 1)
        let scripted = ScriptedCredentialFetcher { _ in credential }
        let standIn = try ServiceStandIn(projectID: "proj_redaction", secret: Self.secret, clock: clock)
        let trust = CertificateTrust.authorities([], includingSystem: true)
        var values: [(String, Any)] = proxies.map { ("proxy \($0)", $0) }
        values += fetchers.map { ("fetcher \($0.proxy)", $0) }
        values += [
            ("failure response", failure), ("fetched credential", FetchedCredential(credential)),
            ("identity", identity), ("identified", SessionState.identified(identity)),
            ("renewing", SessionState.renewing(identity)), ("scripted fetcher", scripted),
            ("closure fetcher", ClosureCredentialFetcher { _ in credential }), ("service stand-in", standIn),
            ("trust", trust), ("system trust", CertificateTrust.system),
        ]
        Self.expectNoLeak(values, signatures: [credential.signature])
        // What was left out is still there for a classifier, and the mirrors show the shape.
        #expect(failure.header("x-secret") == Self.secret)
        #expect(Self.printed(failure)[3].contains("Set-Cookie") && Self.printed(failure)[3].contains("bodySize"))
        #expect(Self.printed(proxies[0])[3].contains("proxy at proxy.internal:3128"))
        // The system's bundle is in the trust, and not in its dump.
        #expect(Self.printed(trust)[3].count < 200, "\(Self.printed(trust)[3].prefix(300))")
    }
}
