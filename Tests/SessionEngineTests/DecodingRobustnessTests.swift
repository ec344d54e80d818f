import Foundation
import SessionEngine
import SessionEngineBackend
import SessionEngineModel
import SessionEngineTestKit
import Testing

/// Feeds arbitrary and mutated input to every decoder of untrusted data: nothing may crash, every rejection is a
/// ``CredentialError`` (the decoders' typed `throws` guarantee the type), and everything accepted obeys the contract.
@Suite struct DecodingRobustnessTests {
    /// A small seeded generator, so a failure reproduces from the printed seed.
    struct Random {
        var base: SplitMix64

        init(state: UInt64) {
            base = SplitMix64(seed: state)
        }

        mutating func next() -> UInt64 { base.next() }

        mutating func below(_ bound: Int) -> Int { Int(next() % UInt64(bound)) }

        mutating func bytes(_ count: Int) -> [UInt8] { (0..<count).map { _ in UInt8(truncatingIfNeeded: next()) } }
    }

    static let seed: UInt64 =
        ProcessInfo.processInfo.environment["SESSIONENGINE_ROBUSTNESS_SEED"].flatMap { UInt64($0) }
        ?? 0x5E55_1010

    static let validResponses: [String] = {
        let clock = ManualClock(now: Date(timeIntervalSince1970: 1_800_000_000))
        let signer = try! IdentitySigner(projectID: "proj_fuzz", secret: "fuzz-secret", clock: clock)
        let encoder = JSONEncoder()
        encoder.outputFormatting = .sortedKeys
        let credentials = [
            try! signer.sign(email: "alice@example.com"),
            try! signer.sign(email: "Zoë@Exämple.com", properties: .empty),
            try! signer.sign(
                email: "bob@example.com",
                properties: IdentityProperties([
                    "plan": .string("pro\n\"x\""), "seats": .number(1e21), "beta": .boolean(true),
                ])
            ),
        ]
        return credentials.map { String(decoding: try! encoder.encode($0), as: UTF8.self) }
    }()

    /// Checks what a decoder accepted: it must be a credential the contract allows.
    static func checkAccepted(_ credential: IdentityCredential) {
        #expect(IdentityEmail.normalize(credential.email).utf8.elementsEqual(credential.email.utf8))
        #expect(credential.signature.utf8.count == 64)
        #expect(credential.expiresAt > 0)
        #expect((credential.properties?.canonicalJSON.utf8.count ?? 0) <= IdentityProperties.maximumCanonicalByteCount)
        // It re-encodes and decodes to itself, through JSON and through headers.
        let json = try? JSONEncoder().encode(credential)
        #expect(json.flatMap { try? IdentityCredential(json: $0) } == credential)
        #expect((try? IdentityHeaders(credential).credential()) == credential)
    }

    /// 100,000 inputs (an eighth under the thread sanitizer, which has no thread to watch here): random bytes, valid
    /// responses mutated, and structured JSON, each decoded or refused with a reason.
    @Test func arbitraryBytesAndMutatedResponsesNeverCrashTheDecoders() {
        var random = Random(state: Self.seed)
        var accepted = 0
        var rejected: [String: Int] = [:]
        let iterations = PropertySettings.scaledForSanitizer(100_000)
        for iteration in 0..<iterations {
            let input: [UInt8]
            switch iteration % 4 {
            case 0:
                input = random.bytes(random.below(160))
            case 1, 2:
                input = Self.mutate(Array(Self.validResponses[random.below(Self.validResponses.count)].utf8), &random)
            default:
                input = Array(Self.structuredJSON(&random).utf8)
            }
            do {
                Self.checkAccepted(try IdentityCredential(json: Data(input)))
                accepted += 1
            } catch {
                rejected[error.code.rawValue, default: 0] += 1
                #expect(!error.reason.contains("fuzz-secret"))
            }
        }
        print(
            "decoding robustness: \(iterations) inputs, \(accepted) accepted, \(rejected.values.reduce(0, +)) rejected as \(rejected.sorted { $0.key < $1.key }), seed \(Self.seed)"
        )
        #expect(accepted > 100, "mutations that keep the response valid must still decode")
        #expect(rejected.keys.count >= 5, "rejections must name their rules")
    }

    /// 100,000 header sets (an eighth under the thread sanitizer) of valid credentials with one value mutated and
    /// sometimes a field dropped, each decoded or refused.
    @Test func mutatedIdentityHeadersNeverCrashTheHeaderDecoder() throws {
        var random = Random(state: Self.seed ^ 0xFF)
        let valid = try Self.validResponses.map { IdentityHeaders(try IdentityCredential(json: Data($0.utf8))) }
        var accepted = 0
        var rejected = 0
        let alphabet = Array("%0123456789ABCDEFabcdef-_.@+=/ !\r\n\u{0}é😀{}\":,".unicodeScalars)
        let iterations = PropertySettings.scaledForSanitizer(100_000)
        for _ in 0..<iterations {
            var fields = valid[random.below(valid.count)].fields.map { (name: $0.name, value: $0.value) }
            let target = random.below(fields.count)
            var scalars = Array(fields[target].value.unicodeScalars)
            for _ in 0...random.below(3) {
                let position = random.below(scalars.count + 1)
                switch random.below(3) {
                case 0 where !scalars.isEmpty: scalars.remove(at: min(position, scalars.count - 1))
                case 1: scalars.insert(alphabet[random.below(alphabet.count)], at: position)
                default:
                    if !scalars.isEmpty {
                        scalars[min(position, scalars.count - 1)] = alphabet[random.below(alphabet.count)]
                    }
                }
            }
            var value = ""
            value.unicodeScalars.append(contentsOf: scalars)
            fields[target].value = value
            if random.below(10) == 0 { fields.remove(at: random.below(fields.count)) }
            do {
                Self.checkAccepted(try IdentityHeaders(requestHeaders: fields).credential())
                accepted += 1
            } catch {
                rejected += 1
            }
        }
        print(
            "header robustness: \(iterations) header sets, \(accepted) accepted, \(rejected) rejected, seed \(Self.seed ^ 0xFF)"
        )
        #expect(rejected > iterations / 2)
    }

    static func mutate(_ input: [UInt8], _ random: inout Random) -> [UInt8] {
        var bytes = input
        for _ in 0...random.below(4) {
            let position = random.below(bytes.count + 1)
            switch random.below(5) {
            case 0 where !bytes.isEmpty: bytes.remove(at: min(position, bytes.count - 1))
            case 1: bytes.insert(UInt8(truncatingIfNeeded: random.next()), at: position)
            case 2 where !bytes.isEmpty: bytes[min(position, bytes.count - 1)] ^= UInt8(1 << random.below(8))
            case 3:
                let tokens = ["null", "[]", "{}", "\"\"", "-0", "1e400", "\"\\u0000\"", "true", "\"constructor\"", ","]
                bytes.insert(contentsOf: Array(tokens[random.below(tokens.count)].utf8), at: position)
            default:
                break
            }
        }
        return bytes
    }

    static func structuredJSON(_ random: inout Random) -> String {
        func value(_ random: inout Random, depth: Int) -> String {
            switch random.below(depth > 2 ? 6 : 8) {
            case 0: return "null"
            case 1: return random.below(2) == 0 ? "true" : "false"
            case 2:
                return ["0", "-0", "1e21", "1e-7", "5e-324", "1.7976931348623157e308", "-1", "1e400"][random.below(8)]
            case 3: return String(random.next() % 4_000_000_000)
            case 4, 5:
                let pool = [
                    "a@x.io", "A@X.IO", " a@x.io", "", "é", String(repeating: "x", count: 201), "\\u0085a@x.io",
                    String(repeating: "ab", count: 32), String(repeating: "AB", count: 32),
                ]
                return "\"\(pool[random.below(pool.count)])\""
            case 6:
                return "[" + (0..<random.below(3)).map { _ in value(&random, depth: depth + 1) }.joined(separator: ",")
                    + "]"
            default:
                let keys = ["email", "expiresAt", "signature", "properties", "constructor", "a", "1a", "k.k"]
                return "{"
                    + (0..<random.below(6)).map { _ in
                        "\"\(keys[random.below(keys.count)])\":\(value(&random, depth: depth + 1))"
                    }.joined(separator: ",") + "}"
            }
        }
        let signature = random.below(3) == 0 ? String(repeating: "ab", count: 32) : "x"
        let properties = random.below(2) == 0 ? ",\"properties\":\(value(&random, depth: 1))" : ""
        return
            "{\"email\":\(value(&random, depth: 1)),\"expiresAt\":\(value(&random, depth: 1)),\"signature\":\"\(signature)\"\(properties)}"
    }
}
