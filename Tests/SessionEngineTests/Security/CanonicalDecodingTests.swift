import Foundation
import SessionEngine
import SessionEngineBackend
import SessionEngineTestKit
import Testing

/// The verifier accepts only canonical headers, and every credential decoder refuses repeated keys, so a client
/// cannot make the verifier accept one text while a JavaScript service behind it reads another.
@Suite struct CanonicalDecodingTests {
    static let clock = ManualClock(now: Date(timeIntervalSince1970: 1_800_000_000))
    static let signer = try! IdentitySigner(projectID: "proj_canonical", secret: "s3cret", clock: clock)
    static let verifier = try! IdentityVerifier(projectID: "proj_canonical", secret: "s3cret", clock: clock)

    /// The headers of `credential` with the properties header replaced by `json`.
    static func headers(_ credential: IdentityCredential, properties json: String, expiresAt: String? = nil)
        -> IdentityHeaders
    {
        IdentityHeaders(
            requestHeaders: IdentityHeaders(credential).fields.map { field in
                switch field.name {
                case IdentityHeaders.propertiesName: (field.name, base64URL(json))
                case IdentityHeaders.expiresAtName: (field.name, expiresAt ?? field.value)
                default: (field.name, field.value)
                }
            }
        )
    }

    static func base64URL(_ text: String) -> String {
        Data(text.utf8).base64EncodedString()
            .replacingOccurrences(of: "+", with: "-").replacingOccurrences(of: "/", with: "_")
            .replacingOccurrences(of: "=", with: "")
    }

    @Test func theVerifierRefusesEveryNonCanonicalPropertiesHeader() throws {
        let free = try Self.signer.sign(email: "a@b.c", properties: IdentityProperties(["plan": .string("free")]))
        #expect(Self.verifier.verify(headers: Self.headers(free, properties: #"{"plan":"free"}"#)).isValid)
        let ten = try Self.signer.sign(
            email: "a@b.c",
            properties: IdentityProperties(["plan": .string("free"), "seats": .number(10)])
        )
        #expect(Self.verifier.verify(headers: Self.headers(ten, properties: #"{"plan":"free","seats":10}"#)).isValid)

        let smuggled: [(IdentityCredential, String)] = [
            // JavaScript's JSON.parse keeps the last "plan": a service behind the verifier would read "pro".
            (ten, #"{"plan":"free","seats":10,"plan":"pro"}"#),
            (free, #"{"plan":"pro","plan":"free"}"#),
            (ten, #"{"seats":10,"plan":"free"}"#),
            (ten, #"{"plan": "free","seats":10}"#),
            (ten, #" {"plan":"free","seats":10}"#),
            (ten, #"{"plan":"free","seats":1.0e1}"#),
            (ten, #"{"plan":"free","seats":10.0}"#),
            (ten, #"{"plan":"free","seats":10,}"#),
            (ten, "\u{FEFF}" + #"{"plan":"free","seats":10}"#),
            (ten, #"{"plan":"fr\u0065e","seats":10}"#),
            (ten, #"{"plan":"free","seats":10}"# + "\n"),
        ]
        for (credential, json) in smuggled {
            guard case .invalid(let failure) = Self.verifier.verify(headers: Self.headers(credential, properties: json))
            else {
                Issue.record("accepted the non-canonical properties \(json)")
                continue
            }
            #expect(failure.check == .malformed, "\(json)")
        }
    }

    @Test func theVerifierRefusesANonCanonicalExpiry() throws {
        let credential = try Self.signer.sign(email: "a@b.c", properties: .empty)
        let canonical = String(credential.expiresAt)
        #expect(Self.verifier.verify(headers: Self.headers(credential, properties: "{}", expiresAt: canonical)).isValid)
        for spelling in ["0" + canonical, "00" + canonical, "+" + canonical, canonical + " ", " " + canonical] {
            let headers = Self.headers(credential, properties: "{}", expiresAt: spelling)
            #expect(!Self.verifier.verify(headers: headers).isValid, "accepted Expires-At '\(spelling)'")
        }
    }

    @Test func aRepeatedKeyIsRefusedWhereverACredentialIsDecoded() throws {
        let credential = try Self.signer.sign(email: "a@b.c")
        let valid = #"{"email":"a@b.c","expiresAt":\#(credential.expiresAt),"signature":"\#(credential.signature)""#
        #expect(try IdentityCredential(json: Data((valid + "}").utf8)) == credential)
        for json in [
            valid + #","email":"evil@b.c"}"#,
            #"{"email":"evil@b.c","# + valid.dropFirst() + "}",
            valid + #","expiresAt":1}"#,
            valid + #","properties":{"plan":"free","plan":"pro"}}"#,
            valid + #","extra":{"a":1,"a":2}}"#,
        ] {
            do {
                let decoded = try IdentityCredential(json: Data(json.utf8))
                Issue.record("accepted a repeated key, as \(decoded)")
            } catch {
                #expect(error.code == .malformedJSON, "\(json)")
                #expect(!error.reason.contains("evil"))
            }
        }
        #expect(throws: CredentialError.self) { try IdentityProperties(json: Data(#"{"a":1,"a":1}"#.utf8)) }
        // The same response through the HTTP fetcher's decoding step.
        #expect(throws: SessionError.self) {
            try HTTPCredentialFetcher.credential(from: Array((valid + #","email":"evil@b.c"}"#).utf8))
        }
    }

    @Test func strictJSONStillAcceptsWhatTheReferenceBackendWrites() throws {
        let credential = try Self.signer.sign(
            email: "zoë@exämple.com",
            properties: IdentityProperties([
                "plan": .string("pro \"x\"\n/é😀"), "n": .number(1e21), "b": .boolean(false),
            ])
        )
        // JSON.stringify's output, pretty-printed JSON and unknown fields all decode.
        let compact = try JSONEncoder().encode(credential)
        #expect(try IdentityCredential(json: compact) == credential)
        let encoder = JSONEncoder()
        encoder.outputFormatting = [.prettyPrinted, .withoutEscapingSlashes]
        #expect(try IdentityCredential(json: encoder.encode(credential)) == credential)
        let extra =
            #"{"kind":"identity","email":"a@b.c","expiresAt":1800000900,"signature":"\#(credential.signature)","meta":[1,{"x":null}]}"#
        #expect(try IdentityCredential(json: Data(extra.utf8)).email == "a@b.c")
        // An integer expiry only: no fraction, no exponent.
        for expiry in ["1800000900.0", "1.8000009e9", "9223372036854775808"] {
            let json = #"{"email":"a@b.c","expiresAt":\#(expiry),"signature":"\#(credential.signature)"}"#
            #expect(throws: CredentialError.self) { try IdentityCredential(json: Data(json.utf8)) }
        }
    }

    // MARK: - Lone surrogates

    @Test func anEscapedLoneSurrogateInTheEmailDecodesAsJavaScriptSignsIt() throws {
        // Node: JSON.stringify writes "a\ud800@b.c"; createHmac encodes the lone surrogate as U+FFFD (EF BF BD).
        // The signature below is what Node computed for v1\nproj_surrogate\n1800000900\na\ud800@b.c under "s3cret".
        let response =
            #"{"email":"a\ud800@b.c","expiresAt":1800000900,"#
            + #""signature":"5f3ae979a81609517add3c3a3dd51a0e329f35d504cb2c5f40a0ae746b46ef9a"}"#
        let credential = try IdentityCredential(json: Data(response.utf8))
        #expect(credential.email == "a\u{FFFD}@b.c")
        let verifier = try IdentityVerifier(projectID: "proj_surrogate", secret: "s3cret", clock: Self.clock)
        #expect(verifier.verify(headers: IdentityHeaders(credential)).isValid)
        // A pair still decodes as one scalar, and a high surrogate followed by a non-low escape is two scalars.
        let pair = try IdentityCredential(
            json: Data(response.replacingOccurrences(of: #"\ud800"#, with: #"\ud83d\ude00"#).utf8))
        #expect(pair.email == "a😀@b.c")
        let broken = try IdentityCredential(
            json: Data(response.replacingOccurrences(of: #"\ud800"#, with: #"\ud800\u0062"#).utf8))
        #expect(broken.email == "a\u{FFFD}b@b.c")
    }

    @Test func anEscapedLoneSurrogateInAPropertyIsRefusedForGood() throws {
        // Node signs {"note":"\udc00"} with the escape itself in the payload, which a Swift string cannot hold: the
        // credential could never verify, so retrying cannot help.
        let credential = try Self.signer.sign(email: "a@b.c", properties: .empty)
        let response =
            #"{"email":"a@b.c","expiresAt":\#(credential.expiresAt),"signature":"\#(credential.signature)","#
            + #""properties":{"note":"\udc00"}}"#
        #expect {
            try IdentityCredential(json: Data(response.utf8))
        } throws: { error in
            (error as? CredentialError)?.code == .unpairedSurrogate && (error as? CredentialError)?.key == "note"
        }
        #expect {
            try HTTPCredentialFetcher.credential(from: Array(response.utf8))
        } throws: { error in
            guard let error = error as? SessionError else { return false }
            return error.code == .invalidCredential && !error.isTransient && error.reason.contains("surrogate")
        }
    }

    // MARK: - Response text in errors

    @Test func noErrorQuotesResponseText() throws {
        let credential = try Self.signer.sign(email: "a@b.c", properties: .empty)
        let marker = "RESPONSE-TEXT-MARKER"
        let bodies = [
            #"{"email":"a@b.c","expiresAt":1800000900,"signature":"\#(credential.signature)","properties":{"1\#(marker)":1}}"#,
            #"{"email":"a@b.c","expiresAt":1800000900,"signature":"\#(credential.signature)","properties":{"\#(marker) x":1}}"#,
            #"{"email":"\#(marker)@B.C","expiresAt":1800000900,"signature":"\#(credential.signature)"}"#,
            #"{"email":"a@b.c","expiresAt":"\#(marker)","signature":"\#(credential.signature)"}"#,
            #"{"email":"a@b.c","expiresAt":1800000900,"signature":"\#(marker)"}"#,
            #"{"\#(marker)":1,"\#(marker)":2}"#,
            #"{"email":"a@b.c",\#(marker)}"#,
        ]
        for body in bodies {
            do {
                _ = try HTTPCredentialFetcher.credential(from: Array(body.utf8))
                Issue.record("accepted \(body)")
            } catch {
                #expect(!"\(error) \(error.reason)".contains(marker), "\(error.reason)")
            }
            do {
                _ = try IdentityCredential(json: Data(body.utf8))
            } catch {
                #expect(!"\(error) \(error.reason) \(error.key ?? "")".contains(marker), "\(error.reason)")
            }
        }
    }
}
