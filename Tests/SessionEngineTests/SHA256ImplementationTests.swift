import Foundation
import SessionEngineModel
import Testing

@testable import SessionEngine
@testable import SessionEngineBackend

/// The SHA-256 compression on every implementation this machine has: the known answers of FIPS 180-4 and RFC 4231,
/// and the hardware compression against the portable one on random input.
@Suite struct SHA256ImplementationTests {
    /// Every implementation this CPU can run; the portable one always.
    static let implementations = SHA256.Implementation.available

    // MARK: - Which implementation runs

    @Test func hardwareImplementationIsAvailableExactlyWhenTheCPUAdvertisesSHAInstructions() throws {
        #if os(Linux) && (arch(x86_64) || arch(arm64))
            let cpuinfo = try String(contentsOfFile: "/proc/cpuinfo", encoding: .utf8)
            #if arch(x86_64)
                let feature = "sha_ni"
            #else
                let feature = "sha2"
            #endif
            let flags = cpuinfo.split(separator: "\n")
                .filter { $0.hasPrefix("flags") || $0.hasPrefix("Features") }
                .flatMap { $0.split(separator: " ") }
            let advertised = flags.contains { $0 == feature }
            #expect(Self.implementations.contains(.hardware) == advertised)
        #endif
        #expect(Self.implementations.first == .portable)
    }

    @Test func environmentVariableChoosesThePortablePath() {
        let setting = ProcessInfo.processInfo.environment["SESSIONENGINE_PORTABLE_SHA256"] ?? ""
        let forced = !setting.isEmpty && setting != "0"
        let expected: SHA256.Implementation =
            forced || !Self.implementations.contains(.hardware) ? .portable : .hardware
        #expect(SHA256.Implementation.active == expected)
        #expect(SHA256().implementation == expected)
    }

    // MARK: - FIPS 180-4 known answers

    @Test(arguments: implementations)
    func sha256MatchesFIPS180Examples(implementation: SHA256.Implementation) {
        let examples = [
            ("", "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"),
            ("abc", "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"),
            (
                "abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq",
                "248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1"
            ),
            (
                "abcdefghbcdefghicdefghijdefghijkefghijklfghijklmghijklmnhijklmnoijklmnopjklmnopqklmnopqrlmnopqrsmnopqrstnopqrstu",
                "cf5b16a778af8380036ce59e7b0492370b249b11e8f07a51afac45037afee9d1"
            ),
        ]
        for (message, expected) in examples {
            #expect(SHA256.hash(message, using: implementation).hexString == expected, "\(message)")
            var hasher = SHA256(using: implementation)
            for byte in message.utf8 { hasher.update([byte]) }
            #expect(hasher.finalize().hexString == expected, "\(message), byte by byte")
        }
    }

    @Test(arguments: implementations)
    func sha256MatchesFIPS180ExampleForOneMillionAs(implementation: SHA256.Implementation) {
        let expected = "cdc76e5c9914fb9281a1c7e284d73e67f1809a48a497200e046d39ccc7112cd0"
        let message = [UInt8](repeating: 0x61, count: 1_000_000)
        #expect(SHA256.hash(message, using: implementation).hexString == expected)

        var hasher = SHA256(using: implementation)
        message.withUnsafeBytes { bytes in
            // Uneven pieces, so blocks cross update calls and whole blocks are compressed several at a time.
            var offset = 0
            var piece = 1
            while offset < bytes.count {
                let end = min(offset + piece, bytes.count)
                hasher.update(UnsafeRawBufferPointer(rebasing: bytes[offset..<end]))
                offset = end
                piece = piece * 7 % 1000 + 1
            }
        }
        #expect(hasher.finalize().hexString == expected)
    }

    // MARK: - RFC 4231 known answers

    /// The seven HMAC-SHA256 test cases of RFC 4231, section 4: key, data and the expected tag (case 5 truncated to
    /// 128 bits).
    static let rfc4231: [(key: [UInt8], data: [UInt8], tag: String)] = [
        (
            [UInt8](repeating: 0x0b, count: 20), Array("Hi There".utf8),
            "b0344c61d8db38535ca8afceaf0bf12b881dc200c9833da726e9376c2e32cff7"
        ),
        (
            Array("Jefe".utf8), Array("what do ya want for nothing?".utf8),
            "5bdcc146bf60754e6a042426089575c75a003f089d2739839dec58b964ec3843"
        ),
        (
            [UInt8](repeating: 0xaa, count: 20), [UInt8](repeating: 0xdd, count: 50),
            "773ea91e36800e46854db8ebd09181a72959098b3ef8c122d9635514ced565fe"
        ),
        (
            Array(1...25), [UInt8](repeating: 0xcd, count: 50),
            "82558a389a443c0ea4cc819899f2083a85f0faa3e578f8077a2e3ff46729665b"
        ),
        ([UInt8](repeating: 0x0c, count: 20), Array("Test With Truncation".utf8), "a3b6167473100ee06e0c796c2955552b"),
        (
            [UInt8](repeating: 0xaa, count: 131), Array("Test Using Larger Than Block-Size Key - Hash Key First".utf8),
            "60e431591ee0b67f0d8a26aacbf5b77f8e0bc6213728c5140546040f0ee37f54"
        ),
        (
            [UInt8](repeating: 0xaa, count: 131),
            Array(
                ("This is a test using a larger than block-size key and a larger than block-size data. "
                    + "The key needs to be hashed before being used by the HMAC algorithm.").utf8
            ),
            "9b09ffa71b942fcb27635fbcd5b0e944bfdc63644f0713938a7f51535c3a35e2"
        ),
    ]

    @Test(arguments: implementations)
    func hmacMatchesRFC4231TestCases(implementation: SHA256.Implementation) {
        for (number, testCase) in Self.rfc4231.enumerated() {
            let mac = HMACSHA256(key: testCase.key, using: implementation)
            let tag = mac.authenticate(testCase.data, using: implementation).hexString
            #expect(tag.hasPrefix(testCase.tag), "RFC 4231 test case \(number + 1)")
        }
    }

    // MARK: - Hardware against portable on random input

    /// One million random chaining states and blocks, compressed by both implementations (an eighth of them under
    /// the thread sanitizer, which has no thread to watch here).
    ///
    /// The compression is the only code the two paths do not share, so this compares it directly: in a debug build
    /// a portable compression costs about 2 µs, where a whole random HMAC through the shared Swift code costs about
    /// 10 µs. The end-to-end comparison below covers the shared code on fewer messages.
    @Test(.enabled(if: implementations.contains(.hardware)))
    func hardwareCompressionMatchesPortableOnOneMillionRandomBlocks() async {
        let total = PropertySettings.scaledForSanitizer(1_000_000)
        let slices = 4
        let mismatches = await withTaskGroup(of: Int.self) { group in
            for slice in 0..<slices {
                group.addTask {
                    var random = SplitMix64(seed: 0x5348_4132_3536 &+ UInt64(slice))
                    var mismatches = 0
                    var block = [UInt64](repeating: 0, count: 8)
                    for _ in 0..<(total / slices) {
                        for index in 0..<8 { block[index] = random.next() }
                        let words = (random.next(), random.next(), random.next(), random.next())
                        let start = SHA256.State(
                            a: UInt32(truncatingIfNeeded: words.0), b: UInt32(truncatingIfNeeded: words.0 >> 32),
                            c: UInt32(truncatingIfNeeded: words.1), d: UInt32(truncatingIfNeeded: words.1 >> 32),
                            e: UInt32(truncatingIfNeeded: words.2), f: UInt32(truncatingIfNeeded: words.2 >> 32),
                            g: UInt32(truncatingIfNeeded: words.3), h: UInt32(truncatingIfNeeded: words.3 >> 32)
                        )
                        var portable = start
                        var hardware = start
                        block.withUnsafeBytes { bytes in
                            portable.compress(bytes.baseAddress!, blocks: 1, using: .portable)
                            hardware.compress(bytes.baseAddress!, blocks: 1, using: .hardware)
                        }
                        if SHA256Digest(state: portable) != SHA256Digest(state: hardware) { mismatches += 1 }
                    }
                    return mismatches
                }
            }
            return await group.reduce(0, +)
        }
        #expect(mismatches == 0, "\(mismatches) of \(total) random blocks compressed differently")
    }

    /// Random messages of 0 to 300 bytes under random keys of 0 to 200 bytes: SHA-256 and HMAC-SHA256 through the
    /// whole API agree on both paths, and so do multi-block compressions of the same bytes.
    @Test(.enabled(if: implementations.contains(.hardware)))
    func hardwarePathMatchesPortableOnRandomMessagesAndKeys() {
        var random = SplitMix64(seed: 4231)
        var mismatches: [String] = []
        for trial in 0..<PropertySettings.scaledForSanitizer(20_000) {
            let key = (0..<Int(random.next() % 201)).map { _ in UInt8(truncatingIfNeeded: random.next()) }
            let message = (0..<Int(random.next() % 301)).map { _ in UInt8(truncatingIfNeeded: random.next()) }
            let portable = HMACSHA256(key: key, using: .portable)
            let hardware = HMACSHA256(key: key, using: .hardware)
            let portableTag = portable.authenticate(message, using: .portable)
            if hardware.authenticate(message, using: .hardware) != portableTag
                || portable.authenticate(message, using: .hardware) != portableTag
                || SHA256.hash(message, using: .hardware) != SHA256.hash(message, using: .portable)
            {
                mismatches.append("trial \(trial): key \(key.count) B, message \(message.count) B")
            }
            let blocks = message.count / 64
            if blocks > 0 {
                var portableState = SHA256.State.initial
                var hardwareState = SHA256.State.initial
                message.withUnsafeBytes { bytes in
                    portableState.compress(bytes.baseAddress!, blocks: blocks, using: .portable)
                    hardwareState.compress(bytes.baseAddress!, blocks: blocks, using: .hardware)
                }
                if SHA256Digest(state: portableState) != SHA256Digest(state: hardwareState) {
                    mismatches.append("trial \(trial): \(blocks) blocks at once")
                }
            }
        }
        #expect(mismatches.isEmpty, "\(mismatches.prefix(5))")
    }
}
