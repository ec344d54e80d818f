import Foundation
import SessionEngine
import SessionEngineBackend
import SessionEngineTestKit
import Testing

/// The interop vectors produced by the JavaScript reference backend (and checked with Python's `hmac`), read from
/// `Fixtures/interop-vectors.json`. The Swift signer must reproduce every valid case byte for byte and reject every
/// invalid case with the same rule.
@Suite struct InteropVectorTests {
    struct Vectors: Decodable {
        let cases: [Case]
    }

    struct Case: Decodable, CustomTestStringConvertible {
        let name: String
        let projectId: String
        let secret: String
        let email: String
        let expiresAt: Int64
        let properties: [[PropertyEntry]]?
        let expected: Expected?
        let expectedError: ExpectedError?

        var testDescription: String { name }
    }

    /// One `[key, value]` pair: the key decodes as a string, the value as a typed object.
    enum PropertyEntry: Decodable {
        case key(String)
        case value(Value)

        init(from decoder: any Decoder) throws {
            let container = try decoder.singleValueContainer()
            if let key = try? container.decode(String.self) {
                self = .key(key)
            } else {
                self = .value(try container.decode(Value.self))
            }
        }
    }

    struct Value: Decodable {
        let type: String
        let value: ValuePayload?
        let bits: String?
    }

    enum ValuePayload: Decodable {
        case string(String)
        case boolean(Bool)

        init(from decoder: any Decoder) throws {
            let container = try decoder.singleValueContainer()
            if let bool = try? container.decode(Bool.self) {
                self = .boolean(bool)
            } else {
                self = .string(try container.decode(String.self))
            }
        }
    }

    struct Expected: Decodable {
        let email: String
        let version: String
        let canonicalProperties: String?
        let payload: String
        let signature: String
    }

    struct ExpectedError: Decodable {
        let code: String
        let key: String?
    }

    static let vectors: [Case] = {
        let url = URL(fileURLWithPath: #filePath).deletingLastPathComponent()
            .appendingPathComponent("Fixtures/interop-vectors.json")
        do {
            return try JSONDecoder().decode(Vectors.self, from: Data(contentsOf: url)).cases
        } catch {
            Issue.record("cannot read the interop vectors: \(error)")
            return []
        }
    }()

    @Test func theFixtureHoldsEnoughCases() {
        #expect(Self.vectors.count >= 500)
        #expect(Self.vectors.filter { $0.expectedError != nil }.count >= 50)
    }

    @Test(arguments: vectors)
    func swiftSignerMatchesTheReferenceBackend(_ vector: Case) throws {
        // The signer's clock is set shortly before the case's expiry, so the 24-hour rule admits it.
        let clock = ManualClock(now: Date(timeIntervalSince1970: TimeInterval(vector.expiresAt - 600)))
        let signer = try IdentitySigner(projectID: vector.projectId, secret: vector.secret, clock: clock)
        let result: Result<IdentityCredential, CredentialError>
        do {
            let properties = try Self.properties(of: vector)
            result = .success(try signer.sign(email: vector.email, properties: properties, expiresAt: vector.expiresAt))
        } catch {
            result = .failure(error)
        }
        switch (result, vector.expected, vector.expectedError) {
        case (.success(let credential), let expected?, nil):
            #expect(Array(credential.email.utf8) == Array(expected.email.utf8))
            #expect(credential.version.rawValue == expected.version)
            #expect(
                credential.properties.map { Array($0.canonicalJSON.utf8) }
                    == expected.canonicalProperties.map { Array($0.utf8) })
            #expect(Array(credential.signingPayload(projectID: vector.projectId).utf8) == Array(expected.payload.utf8))
            #expect(credential.signature == expected.signature)
            // What the backend returns decodes and verifies on the service side.
            let json = try JSONEncoder().encode(credential)
            let decoded = try IdentityCredential(json: json)
            #expect(decoded == credential)
            let verifier = try IdentityVerifier(projectID: vector.projectId, secret: vector.secret, clock: clock)
            #expect(verifier.verify(headers: IdentityHeaders(decoded)) == .valid(credential))
        case (.failure(let error), nil, let expected?):
            #expect(error.code.rawValue == expected.code)
            if let key = expected.key {
                if error.code == .invalidPropertyKey {
                    // An invalid key may be anything a response holds: it is never quoted back.
                    #expect(error.key == nil)
                    if key.count >= 3 { #expect(!error.reason.contains(key)) }
                } else {
                    #expect(error.key == key)
                }
            }
            #expect(!error.reason.contains(vector.secret))
        case (.success, _, let expected?):
            Issue.record("accepted an input the reference rejects with \(expected.code)")
        case (.failure(let error), _, _):
            Issue.record("rejected a valid input: \(error)")
        default:
            Issue.record("the case has neither an expectation nor an expected error")
        }
    }

    static func properties(of vector: Case) throws(CredentialError) -> IdentityProperties? {
        guard let entries = vector.properties else { return nil }
        var values: [String: IdentityProperty] = [:]
        for entry in entries {
            guard entry.count == 2, case .key(let key) = entry[0], case .value(let value) = entry[1] else {
                Issue.record("malformed property entry in \(vector.name)")
                continue
            }
            switch (value.type, value.value, value.bits) {
            case ("string", .string(let string)?, _):
                values[key] = .string(string)
            case ("boolean", .boolean(let bool)?, _):
                values[key] = .boolean(bool)
            case ("number", _, let bits?):
                values[key] = .number(Double(bitPattern: UInt64(bits, radix: 16)!))
            default:
                Issue.record("unknown property value in \(vector.name)")
            }
        }
        return try IdentityProperties(values)
    }
}
