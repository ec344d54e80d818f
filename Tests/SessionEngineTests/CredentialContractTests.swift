import Foundation
import SessionEngine
import SessionEngineBackend
import SessionEngineTestKit
import Testing

@Suite struct CredentialContractTests {
    static let signature = String(repeating: "ab", count: 32)
    static let clock = ManualClock(now: Date(timeIntervalSince1970: 1_800_000_000))

    static func signer(secret: String = "s3cret") -> IdentitySigner {
        try! IdentitySigner(projectID: "proj_1", secret: secret, clock: clock)
    }

    static func verifier(secret: String = "s3cret") -> IdentityVerifier {
        try! IdentityVerifier(projectID: "proj_1", secret: secret, clock: clock)
    }

    /// The code of the ``CredentialError`` the body throws, `nil` when it succeeds; any other error fails the test.
    static func code(_ body: () throws -> some Any) -> CredentialError.Code? {
        do {
            _ = try body()
            return nil
        } catch let error as CredentialError {
            return error.code
        } catch {
            Issue.record("not a CredentialError: \(error)")
            return nil
        }
    }

    // MARK: - IdentityCredential

    @Test func aCredentialRejectsEveryBrokenRuleWithItsOwnCode() {
        let ok = Self.signature
        #expect(Self.code { try IdentityCredential(email: "", expiresAt: 1, signature: ok) } == .emptyEmail)
        #expect(
            Self.code { try IdentityCredential(email: "A@x.io", expiresAt: 1, signature: ok) } == .emailNotNormalized)
        #expect(
            Self.code { try IdentityCredential(email: " a@x.io", expiresAt: 1, signature: ok) } == .emailNotNormalized)
        #expect(
            Self.code { try IdentityCredential(email: "a\u{7}@x.io", expiresAt: 1, signature: ok) }
                == .emailControlCharacter)
        #expect(
            Self.code { try IdentityCredential(email: "a\u{85}@x.io", expiresAt: 1, signature: ok) }
                == .emailControlCharacter)
        #expect(Self.code { try IdentityCredential(email: "a@x.io", expiresAt: 0, signature: ok) } == .invalidExpiresAt)
        #expect(
            Self.code { try IdentityCredential(email: "a@x.io", expiresAt: -1, signature: ok) } == .invalidExpiresAt)
        #expect(
            Self.code { try IdentityCredential(email: "a@x.io", expiresAt: 1, signature: ok.uppercased()) }
                == .invalidSignature)
        #expect(
            Self.code { try IdentityCredential(email: "a@x.io", expiresAt: 1, signature: String(ok.dropLast())) }
                == .invalidSignature)
        #expect(
            Self.code { try IdentityCredential(email: "a@x.io", expiresAt: 1, signature: ok + "0") }
                == .invalidSignature)
        #expect(
            Self.code {
                try IdentityCredential(email: "a@x.io", expiresAt: 1, signature: String(repeating: "g", count: 64))
            } == .invalidSignature)
        #expect(Self.code { try IdentityCredential(email: "οδυσσευς@x.gr", expiresAt: 1, signature: ok) } == nil)
        #expect(Self.code { try IdentityCredential(email: "οδυσσευσ@x.gr", expiresAt: 1, signature: ok) } == nil)
        #expect(
            Self.code { try IdentityCredential(email: "ΟΔΥΣΣΕΥΣ@x.gr", expiresAt: 1, signature: ok) }
                == .emailNotNormalized)
    }

    @Test func versionFollowsThePresenceOfProperties() throws {
        #expect(try IdentityCredential(email: "a@x.io", expiresAt: 1, signature: Self.signature).version == .v1)
        #expect(
            try IdentityCredential(email: "a@x.io", expiresAt: 1, signature: Self.signature, properties: [:]).version
                == .v2)
        #expect(
            try IdentityCredential(email: "a@x.io", expiresAt: 1, signature: Self.signature, properties: .empty).version
                == .v2)
    }

    /// A credential is a value: separately made credentials with the same fields are equal and hash alike, and one
    /// that differs in any single field is not, although every copy shares one object for its fields.
    @Test func credentialsCompareAndHashByEveryField() throws {
        let other = String(repeating: "cd", count: 32)
        func make(
            email: String = "a@x.io", expiresAt: Int64 = 1_800_000_900, signature: String = Self.signature,
            properties: [String: IdentityProperty]? = ["plan": .string("pro")]
        ) throws -> IdentityCredential {
            try IdentityCredential(
                email: email, expiresAt: expiresAt, signature: signature,
                properties: properties.map { try IdentityProperties($0) })
        }
        let credential = try make()
        let copy = credential
        let twin = try make()
        let decoded = try IdentityCredential(json: JSONEncoder().encode(credential))
        for same in [copy, twin, decoded] {
            #expect(same == credential)
            #expect(same.hashValue == credential.hashValue)
        }
        #expect(Set([credential, copy, twin, decoded]).count == 1)
        let differing = [
            try make(email: "b@x.io"), try make(expiresAt: 1_800_000_901), try make(signature: other),
            try make(properties: ["plan": .string("free")]), try make(properties: [:]), try make(properties: nil),
        ]
        for different in differing { #expect(different != credential) }
        #expect(Set(differing + [credential]).count == differing.count + 1)
    }

    @Test func identitiesCompareAndHashByTheirFactsNotTheirSignatures() throws {
        func credential(
            _ email: String = "a@x.io", expiresAt: Int64 = 1_800_000_900, signature: String = Self.signature
        )
            throws -> IdentityCredential
        {
            try IdentityCredential(email: email, expiresAt: expiresAt, signature: signature, properties: nil)
        }
        let identity = SessionIdentity(account: "alice", credential: try credential(), epoch: 1)
        let resigned = SessionIdentity(
            account: "alice", credential: try credential(signature: String(repeating: "cd", count: 32)), epoch: 1)
        #expect(identity == resigned && identity.hashValue == resigned.hashValue)
        #expect(identity.email == "a@x.io" && identity.expiresAt == 1_800_000_900 && identity.version == .v1)
        let differing = [
            SessionIdentity(account: "bob", credential: try credential(), epoch: 1),
            SessionIdentity(account: "alice", credential: try credential("b@x.io"), epoch: 1),
            SessionIdentity(account: "alice", credential: try credential(expiresAt: 1_800_000_901), epoch: 1),
            SessionIdentity(account: "alice", credential: try credential(), epoch: 2),
            SessionIdentity(
                account: "alice",
                credential: try IdentityCredential(
                    email: "a@x.io", expiresAt: 1_800_000_900, signature: Self.signature, properties: .empty),
                epoch: 1),
        ]
        for different in differing { #expect(different != identity) }
        #expect(Set(differing + [identity, resigned]).count == differing.count + 1)
    }

    @Test func aCredentialGivesBackItsEmailByteForByte() throws {
        // The credential keeps the email's UTF-8 bytes beside its other fields and makes the text when asked: every
        // length (a short string's inline form and a long one's), every spelling, exactly as it came.
        var emails = (1...64).map { String(repeating: "a", count: $0) + "@x.io" }
        emails += ["josé@x.io", "jose\u{301}@x.io", "ｕｓｅｒ@例え.jp", "😀@x.io", "a\u{FFFD}b@x.io"]
        for email in emails {
            let credential = try IdentityCredential(
                email: email, expiresAt: 1_800_000_900, signature: Self.signature, properties: nil)
            #expect(Array(credential.email.utf8) == Array(email.utf8))
            #expect(Array(credential.signingPayload(projectID: "p").utf8).contains(Array(email.utf8)))
        }
        // Two spellings of one text compare and hash as their strings do, as before.
        let composed = try IdentityCredential(
            email: "josé@x.io", expiresAt: 1_800_000_900, signature: Self.signature, properties: nil)
        let decomposed = try IdentityCredential(
            email: "jose\u{301}@x.io", expiresAt: 1_800_000_900, signature: Self.signature, properties: nil)
        #expect(composed == decomposed && composed.hashValue == decomposed.hashValue)
    }

    @Test func isValidChecksLocalExpiryOnly() throws {
        // A signature nobody signed: isValid(at:) never looks at it.
        let credential = try IdentityCredential(email: "a@x.io", expiresAt: 1_000, signature: Self.signature)
        #expect(credential.isValid(at: Date(timeIntervalSince1970: 999.999)))
        #expect(!credential.isValid(at: Date(timeIntervalSince1970: 1_000)))
        #expect(!credential.isValid(at: Date(timeIntervalSince1970: 5_000)))
    }

    @Test func descriptionsAndMirrorsNeverShowTheSignature() throws {
        let credential = try Self.signer().sign(
            email: "a@x.io", properties: IdentityProperties(["plan": .string("gold-secret-plan")]))
        var dumped = ""
        dump(credential, to: &dumped)
        for text in [
            credential.description, credential.debugDescription, String(reflecting: credential), "\(credential)",
            dumped, IdentityHeaders(credential).description,
        ] {
            #expect(!text.contains(credential.signature))
            #expect(!text.contains("gold-secret-plan"))
            #expect(text.contains("<redacted>"))
        }
        // An identity keeps its credential to read the facts from, and shows the facts alone.
        let identity = SessionIdentity(account: "alice", credential: credential, epoch: 3)
        var dumpedIdentity = ""
        dump(SessionState.identified(identity), to: &dumpedIdentity)
        for text in [identity.description, String(reflecting: identity), dumpedIdentity] {
            #expect(!text.contains(credential.signature))
            #expect(!text.contains("gold-secret-plan"))
            #expect(text.contains("a@x.io"))
        }
        #expect(
            Mirror(reflecting: identity).children.map(\.label) == ["account", "email", "expiresAt", "epoch", "version"])
        #expect(!Self.signer().description.contains("s3cret"))
        #expect(!Self.verifier().description.contains("s3cret"))
    }

    @Test func theBackendResponseDecodesAndMalformedInputIsATypedError() throws {
        let json =
            #"{"email":"a@x.io","expiresAt":1800000900,"signature":"\#(Self.signature)","properties":{"n":1e21,"s":"x","b":false}}"#
        let credential = try IdentityCredential(json: Data(json.utf8))
        #expect(credential.properties?.canonicalJSON == #"{"b":false,"n":1e+21,"s":"x"}"#)
        let bad: [(String, CredentialError.Code)] = [
            ("", .malformedJSON),
            ("{", .malformedJSON),
            ("[]", .malformedJSON),
            (#"{"email":"a@x.io","expiresAt":1}"#, .malformedJSON),
            (#"{"email":"a@x.io","expiresAt":"1","signature":"\#(Self.signature)"}"#, .malformedJSON),
            (#"{"email":"a@x.io","expiresAt":1.5,"signature":"\#(Self.signature)"}"#, .malformedJSON),
            (
                #"{"email":"a@x.io","expiresAt":1,"signature":"\#(Self.signature)","properties":{"o":{}}}"#,
                .invalidPropertyValue
            ),
            (
                #"{"email":"a@x.io","expiresAt":1,"signature":"\#(Self.signature)","properties":{"a":[1]}}"#,
                .invalidPropertyValue
            ),
            (
                #"{"email":"a@x.io","expiresAt":1,"signature":"\#(Self.signature)","properties":{"a":null}}"#,
                .invalidPropertyValue
            ),
            (#"{"email":"a@x.io","expiresAt":1,"signature":"\#(Self.signature)","properties":[]}"#, .malformedJSON),
            (#"{"email":"a@x.io","expiresAt":1,"signature":"\#(Self.signature)","properties":null}"#, .malformedJSON),
            (#"{"email":"A@x.io","expiresAt":1,"signature":"\#(Self.signature)"}"#, .emailNotNormalized),
        ]
        for (text, code) in bad {
            #expect(Self.code { try IdentityCredential(json: Data(text.utf8)) } == code, "\(text)")
        }
    }

    // MARK: - IdentityProperties

    @Test func propertiesEnforceEveryRuleAndNameTheKey() throws {
        func failure(_ values: [String: IdentityProperty]) -> CredentialError? {
            do {
                _ = try IdentityProperties(values)
                return nil
            } catch {
                return error
            }
        }
        let twenty = Dictionary(uniqueKeysWithValues: (0..<20).map { ("k\($0)", IdentityProperty.boolean(true)) })
        #expect(failure(twenty) == nil)
        var twentyOne = twenty
        twentyOne["k20"] = .boolean(false)
        #expect(failure(twentyOne)?.code == .tooManyProperties)
        // An invalid key may be response text: it is neither quoted nor named.
        #expect(failure(["1a-token-from-a-response": .boolean(true)])?.key == nil)
        #expect(failure(["1a-token-from-a-response": .boolean(true)])?.reason.contains("token-from") == false)
        #expect(failure(["1a": .boolean(true)])?.code == .invalidPropertyKey)
        #expect(failure(["a b": .boolean(true)])?.code == .invalidPropertyKey)
        #expect(failure(["ab\n": .boolean(true)])?.code == .invalidPropertyKey)
        #expect(failure(["é": .boolean(true)])?.code == .invalidPropertyKey)
        #expect(failure([String(repeating: "a", count: 64): .boolean(true)]) == nil)
        #expect(failure([String(repeating: "a", count: 65): .boolean(true)])?.code == .invalidPropertyKey)
        #expect(failure(["constructor": .boolean(true)])?.code == .forbiddenPropertyKey)
        #expect(failure(["Constructor": .boolean(true)]) == nil)
        #expect(failure(["s": .string(String(repeating: "x", count: 200))]) == nil)
        #expect(failure(["s": .string(String(repeating: "x", count: 201))])?.code == .propertyStringTooLong)
        // JavaScript counts UTF-16 code units: an emoji is two.
        #expect(failure(["s": .string(String(repeating: "😀", count: 100))]) == nil)
        #expect(failure(["s": .string(String(repeating: "😀", count: 100) + "x")])?.code == .propertyStringTooLong)
        #expect(failure(["n": .number(.nan)])?.code == .propertyNumberNotFinite)
        #expect(failure(["n": .number(-.infinity)])?.key == "n")
        let big = Dictionary(
            uniqueKeysWithValues: (0..<11).map {
                ("k\($0)", IdentityProperty.string(String(repeating: "x", count: 200)))
            })
        #expect(failure(big)?.code == .propertiesTooLarge)
        let secretValue = "value-that-must-not-leak"
        #expect(failure(["1bad": .string(secretValue)])?.reason.contains(secretValue) == false)
    }

    @Test func canonicalJSONSortsByUTF16AndFormatsLikeJavaScript() throws {
        let properties = try IdentityProperties([
            "b": .number(-0.0), "B": .number(1e-7), "a_b": .number(100), "a-b": .boolean(true),
            "a.b": .string("q\"\\/\u{7}\u{2028}é"),
            "a0": .number(0.1 + 0.2), "aB": .number(1.2345678901234568e20),
        ])
        #expect(
            properties.canonicalJSON
                == #"{"B":1e-7,"a-b":true,"a.b":"q\"\\/\u0007"# + "\u{2028}é"
                + #"","a0":0.30000000000000004,"aB":123456789012345680000,"a_b":100,"b":0}"#
        )
    }

    // MARK: - Signer

    @Test func theSignerNormalizesStampsAndRefusesBadConfiguration() throws {
        let signer = Self.signer()
        let credential = try signer.sign(email: "\u{3000} ΟΔΥΣΣΕΥΣ@Example.GR\u{FEFF}")
        #expect(credential.email == "οδυσσευς@example.gr")
        #expect(credential.expiresAt == 1_800_000_000 + 900)
        #expect(credential.version == .v1)
        #expect(Self.code { try IdentitySigner(projectID: "", secret: "s") } == .invalidProjectID)
        #expect(Self.code { try IdentitySigner(projectID: "a\nb", secret: "s") } == .invalidProjectID)
        #expect(Self.code { try IdentitySigner(projectID: "p", secret: "") } == .emptySecret)
        #expect(
            Self.code { try IdentitySigner(projectID: "p", secret: "s", lifetime: .seconds(86_401)) }
                == .lifetimeTooLong)
        #expect(Self.code { try IdentitySigner(projectID: "p", secret: "s", lifetime: .seconds(86_400)) } == nil)
        #expect(Self.code { try IdentitySigner(projectID: "p", secret: "s", lifetime: .zero) } == .invalidExpiresAt)
        #expect(Self.code { try signer.sign(email: " \u{2028} ") } == .emptyEmail)
        #expect(
            Self.code { try signer.sign(email: "a@x.io", properties: nil, expiresAt: 1_800_000_000 + 86_401) }
                == .lifetimeTooLong)
        #expect(
            Self.code { try signer.sign(email: "a@x.io", properties: nil, expiresAt: 1_800_000_000 + 86_400) } == nil)
    }

    // MARK: - Headers

    @Test func headersArePrintableASCIIAndDecodeBackExactly() throws {
        let properties = try IdentityProperties([
            "name": .string("Zoë\r\n\u{0}😀"), "ratio": .number(0.5), "beta": .boolean(false),
        ])
        let credential = try Self.signer().sign(email: "  Ünïcødé+tag%@Exämple.com ", properties: properties)
        let headers = IdentityHeaders(credential)
        #expect(
            headers.fields.map(\.name) == [
                "X-AppNorth-Identity-Version", "X-AppNorth-Identity-Email", "X-AppNorth-Identity-Expires-At",
                "X-AppNorth-Identity-Signature", "X-AppNorth-Identity-Properties",
            ])
        for field in headers.fields {
            #expect(field.value.utf8.allSatisfy { $0 >= 0x21 && $0 <= 0x7E }, "\(field.name)")
        }
        #expect(headers[IdentityHeaders.emailName] == "%C3%BCn%C3%AFc%C3%B8d%C3%A9+tag%25@ex%C3%A4mple.com")
        #expect(try headers.credential() == credential)
        // Names match case-insensitively when read out of a request.
        let request =
            headers.fields.map { (name: $0.name.lowercased(), value: $0.value) } + [(name: "Accept", value: "*/*")]
        #expect(try IdentityHeaders(requestHeaders: request).credential() == credential)
    }

    @Test func malformedHeadersAreTypedErrors() throws {
        let credential = try Self.signer().sign(email: "a@x.io")
        let good = IdentityHeaders(credential).fields.map { (name: $0.name, value: $0.value) }
        func replaced(_ name: String, _ value: String?) -> IdentityHeaders {
            var fields = good.filter { $0.name != name }
            if let value { fields.append((name: name, value: value)) }
            return IdentityHeaders(requestHeaders: fields)
        }
        let cases: [(IdentityHeaders, CredentialError.Code)] = [
            (replaced(IdentityHeaders.versionName, nil), .missingHeader),
            (replaced(IdentityHeaders.versionName, "v3"), .unsupportedVersion),
            (replaced(IdentityHeaders.propertiesName, "e30"), .unsupportedVersion),
            (replaced(IdentityHeaders.versionName, "v2"), .missingHeader),
            (replaced(IdentityHeaders.emailName, "a%2@x.io"), .invalidHeader),
            (replaced(IdentityHeaders.emailName, "a%40x.io"), .invalidHeader),
            (replaced(IdentityHeaders.emailName, "a%c3%a9@x.io"), .invalidHeader),
            (replaced(IdentityHeaders.emailName, "a%FF@x.io"), .invalidHeader),
            (replaced(IdentityHeaders.emailName, "a b@x.io"), .invalidHeader),
            (replaced(IdentityHeaders.expiresAtName, "+1800000900"), .invalidHeader),
            (replaced(IdentityHeaders.expiresAtName, "99999999999999999999"), .invalidHeader),
            (replaced(IdentityHeaders.signatureName, "xyz"), .invalidSignature),
            (
                IdentityHeaders(requestHeaders: good + [(name: IdentityHeaders.emailName, value: "b@x.io")]),
                .invalidHeader
            ),
        ]
        for (headers, code) in cases {
            #expect(Self.code { try headers.credential() } == code, "\(headers)")
        }
        let v2 = good.map { $0.name == IdentityHeaders.versionName ? (name: $0.name, value: "v2") : $0 }
        for bad in ["e30=", "e3", "!!!!", "W10", "eyJhIjpudWxsfQ"] {
            let headers = IdentityHeaders(requestHeaders: v2 + [(name: IdentityHeaders.propertiesName, value: bad)])
            #expect(Self.code { try headers.credential() } != nil, "\(bad)")
        }
    }

    // MARK: - Verifier: the seed's Verify section

    @Test func theVerifierAcceptsARealCredentialAndNamesEachFailedCheck() throws {
        let signer = Self.signer()
        let verifier = Self.verifier()
        let credential = try signer.sign(email: "a@x.io", properties: IdentityProperties(["plan": .string("pro")]))
        #expect(verifier.verify(headers: IdentityHeaders(credential)) == .valid(credential))

        // One signed field changed: the signature no longer matches, and the payload the verifier signed is shown.
        let tampered = try IdentityCredential(
            email: credential.email,
            expiresAt: credential.expiresAt,
            signature: credential.signature,
            properties: IdentityProperties(["plan": .string("enterprise")])
        )
        guard case .invalid(let failure) = verifier.verify(headers: IdentityHeaders(tampered)) else {
            Issue.record("a tampered credential verified")
            return
        }
        #expect(failure.check == .signatureMismatch)
        #expect(failure.signedPayload == "v2\nproj_1\n\(credential.expiresAt)\na@x.io\n{\"plan\":\"enterprise\"}")
        #expect(!failure.description.contains(credential.signature))

        let expired = try signer.sign(email: "a@x.io", properties: nil, expiresAt: 1_800_000_000)
        #expect(
            verifier.verify(expired)
                == .invalid(IdentityVerificationFailure(check: .expired, reason: "the credential has expired")))

        let longClock = ManualClock(now: Date(timeIntervalSince1970: 1_800_000_000 + 3_600))
        let longSigner = try IdentitySigner(projectID: "proj_1", secret: "s3cret", clock: longClock)
        let tooLong = try longSigner.sign(email: "a@x.io", properties: nil, expiresAt: 1_800_000_000 + 3_600 + 86_400)
        guard case .invalid(let lifetime) = verifier.verify(tooLong) else {
            Issue.record("a credential beyond 24 hours verified")
            return
        }
        #expect(lifetime.check == .lifetimeTooLong)

        guard case .invalid(let malformed) = verifier.verify(headers: IdentityHeaders(requestHeaders: [])) else {
            Issue.record("empty headers verified")
            return
        }
        #expect(malformed.check == .malformed)
    }

    @Test func rotatingTheSecretInvalidatesEveryEarlierSignature() throws {
        var verifier = Self.verifier()
        let before = try Self.signer().sign(email: "a@x.io")
        #expect(verifier.verify(before).isValid)
        try verifier.rotateSecret(to: "rotated")
        guard case .invalid(let failure) = verifier.verify(before) else {
            Issue.record("an old signature verified after rotation")
            return
        }
        #expect(failure.check == .signatureMismatch)
        #expect(verifier.verify(try Self.signer(secret: "rotated").sign(email: "a@x.io")).isValid)
        #expect(Self.code { try verifier.rotateSecret(to: "") } == .emptySecret)
    }
}
