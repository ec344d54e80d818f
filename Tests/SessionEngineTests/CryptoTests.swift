import Testing

@testable import SessionEngine
@testable import SessionEngineBackend

@Suite struct CryptoTests {
    // MARK: - SHA-256 known answers

    @Test func sha256MatchesFIPSExampleForEmptyMessage() {
        #expect(SHA256.hash("").hexString == "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855")
        #expect(SHA256.hash([UInt8]()).hexString == SHA256.hash("").hexString)
    }

    @Test func sha256MatchesFIPSExampleForAbc() {
        #expect(SHA256.hash("abc").hexString == "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad")
    }

    @Test func sha256MatchesFIPSExampleFor448BitMessage() {
        let message = "abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq"
        #expect(SHA256.hash(message).hexString == "248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1")
    }

    @Test func sha256MatchesFIPSExampleFor896BitMessage() {
        let message =
            "abcdefghbcdefghicdefghijdefghijkefghijklfghijklmghijklmnhijklmnoijklmnopjklmnopqklmnopqrlmnopqrsmnopqrstnopqrstu"
        #expect(SHA256.hash(message).hexString == "cf5b16a778af8380036ce59e7b0492370b249b11e8f07a51afac45037afee9d1")
    }

    @Test func sha256MatchesFIPSExampleForOneMillionAs() {
        let expected = "cdc76e5c9914fb9281a1c7e284d73e67f1809a48a497200e046d39ccc7112cd0"
        #expect(SHA256.hash([UInt8](repeating: 0x61, count: 1_000_000)).hexString == expected)

        var hasher = SHA256()
        let thousandAs = String(repeating: "a", count: 1000)
        for _ in 0..<1000 {
            hasher.update(thousandAs)
        }
        #expect(hasher.finalize().hexString == expected)
    }

    @Test(arguments: [
        (55, "463eb28e72f82e0a96c0a4cc53690c571281131f672aa229e0d45ae59b598b59"),
        (56, "da2ae4d6b36748f2a318f23e7ab1dfdf45acdc9d049bd80e59de82a60895f562"),
        (57, "2fe741af801cc238602ac0ec6a7b0c3a8a87c7fc7d7f02a3fe03d1c12eac4d8f"),
        (63, "29af2686fd53374a36b0846694cc342177e428d1647515f078784d69cdb9e488"),
        (64, "fdeab9acf3710362bd2658cdc9a29e8f9c757fcf9811603a8c447cd1d9151108"),
        (65, "4bfd2c8b6f1eec7a2afeb48b934ee4b2694182027e6d0fc075074f2fabb31781"),
        (119, "da18797ed7c3a777f0847f429724a2d8cd5138e6ed2895c3fa1a6d39d18f7ec6"),
        (120, "f52b23db1fbb6ded89ef42a23ce0c8922c45f25c50b568a93bf1c075420bbb7c"),
        (121, "335a461692b30bba1d647cc71604e88e676c90e4c22455d0b8c83f4bd7c8ac9b"),
        (127, "92ca0fa6651ee2f97b884b7246a562fa71250fedefe5ebf270d31c546bfea976"),
        (128, "471fb943aa23c511f6f72f8d1652d9c880cfa392ad80503120547703e56a2be5"),
        (129, "5099c6a56203f9687f7d33f4bfdf576d31dc91f6b695ecea38b2770c87631135"),
        (1000, "4e4c294b331f7a2099a379bec34b9f9fc03dc46ab465d998f4d683da53487e6d"),
    ])
    func sha256MatchesKnownDigestsAroundPaddingBoundaries(length: Int, expected: String) {
        let message = (0..<length).map { UInt8($0 % 251) }
        #expect(SHA256.hash(message).hexString == expected)
    }

    @Test func sha256AcceptsEmptyBuffersWithoutStorage() {
        let empty = UnsafeRawBufferPointer(start: nil, count: 0)
        #expect(SHA256.hash(empty) == SHA256.hash(""))
        var hasher = SHA256()
        hasher.update(empty)
        hasher.update([])
        hasher.update("")
        #expect(hasher.finalize() == SHA256.hash(""))
    }

    @Test func sha256HashesStringsAsTheirUTF8Bytes() {
        let text = "héllo wörld ✓ 🔐"
        let expected = "2070457200b03242ccbd068166dcd62daedcfd5e8083f9eb9e18924d2278531d"
        #expect(SHA256.hash(text).hexString == expected)
        #expect(SHA256.hash(Array(text.utf8)) == SHA256.hash(text))
    }

    // MARK: - SHA-256 incremental hashing

    @Test func incrementalUpdatesInRandomChunksMatchOneShotHashing() {
        var generator = SplitMix64(seed: 0x5EED_0001)
        for length in 0...300 {
            let message = generator.bytes(count: length)
            let expected = SHA256.hash(message)

            for _ in 0..<4 {
                var hasher = SHA256()
                var offset = 0
                while offset < length {
                    let chunk = min(Int.random(in: 0...80, using: &generator), length - offset)
                    let slice = Array(message[offset..<(offset + chunk)])
                    switch Int.random(in: 0..<3, using: &generator) {
                    case 0: hasher.update(slice)
                    case 1: slice.withUnsafeBytes { hasher.update($0) }
                    default:
                        message.withUnsafeBytes { whole in
                            hasher.update(UnsafeRawBufferPointer(rebasing: whole[offset..<(offset + chunk)]))
                        }
                    }
                    offset += chunk
                }
                #expect(hasher.finalize() == expected, "length \(length)")
            }

            var byteAtATime = SHA256()
            for byte in message {
                byteAtATime.update([byte])
            }
            #expect(byteAtATime.finalize() == expected, "length \(length)")
        }
    }

    @Test func copyingAHasherForksTheComputation() {
        var prefix = SHA256()
        prefix.update("session:")
        var first = prefix
        var second = prefix
        first.update("alpha")
        second.update("beta")
        #expect(first.finalize() == SHA256.hash("session:alpha"))
        #expect(second.finalize() == SHA256.hash("session:beta"))
        #expect(prefix.finalize() == SHA256.hash("session:"))
    }

    // MARK: - Digest representation

    @Test func digestExposesBytesHexAndRawBufferConsistently() {
        let digest = SHA256.hash("abc")
        let bytes = digest.bytes
        #expect(bytes.count == 32)
        #expect(bytes.prefix(4) == [0xba, 0x78, 0x16, 0xbf])
        #expect(Hex.lowercase(bytes) == digest.hexString)
        #expect(digest.withUnsafeBytes { Array($0) } == bytes)
        #expect(digest.hexString.utf8.count == 64)
    }

    @Test func digestsAreHashableByValue() {
        let digests: Set = [SHA256.hash("a"), SHA256.hash("a"), SHA256.hash("b")]
        #expect(digests.count == 2)
        #expect(SHA256.hash("a") != SHA256.hash("b"))
    }

    // MARK: - HMAC-SHA256 known answers (RFC 4231)

    @Test func hmacMatchesRFC4231TestCase1() {
        let mac = HMACSHA256(key: [UInt8](repeating: 0x0b, count: 20))
        #expect(
            mac.authenticate("Hi There").hexString
                == "b0344c61d8db38535ca8afceaf0bf12b881dc200c9833da726e9376c2e32cff7"
        )
    }

    @Test func hmacMatchesRFC4231TestCase2() {
        let mac = HMACSHA256(key: Array("Jefe".utf8))
        #expect(
            mac.authenticate("what do ya want for nothing?").hexString
                == "5bdcc146bf60754e6a042426089575c75a003f089d2739839dec58b964ec3843"
        )
    }

    @Test func hmacMatchesRFC4231TestCase3() {
        let mac = HMACSHA256(key: [UInt8](repeating: 0xaa, count: 20))
        #expect(
            mac.authenticate([UInt8](repeating: 0xdd, count: 50)).hexString
                == "773ea91e36800e46854db8ebd09181a72959098b3ef8c122d9635514ced565fe"
        )
    }

    @Test func hmacMatchesRFC4231TestCase4() {
        let mac = HMACSHA256(key: Array(1...25))
        #expect(
            mac.authenticate([UInt8](repeating: 0xcd, count: 50)).hexString
                == "82558a389a443c0ea4cc819899f2083a85f0faa3e578f8077a2e3ff46729665b"
        )
    }

    @Test func hmacMatchesRFC4231TestCase5TruncatedTo128Bits() {
        let mac = HMACSHA256(key: [UInt8](repeating: 0x0c, count: 20))
        let tag = mac.authenticate("Test With Truncation").bytes
        #expect(Array(tag.prefix(16)) == Hex.decode("a3b6167473100ee06e0c796c2955552b"))
    }

    @Test func hmacMatchesRFC4231TestCase6WithKeyLongerThanABlock() {
        let mac = HMACSHA256(key: [UInt8](repeating: 0xaa, count: 131))
        #expect(
            mac.authenticate("Test Using Larger Than Block-Size Key - Hash Key First").hexString
                == "60e431591ee0b67f0d8a26aacbf5b77f8e0bc6213728c5140546040f0ee37f54"
        )
    }

    @Test func hmacMatchesRFC4231TestCase7WithKeyAndDataLongerThanABlock() {
        let mac = HMACSHA256(key: [UInt8](repeating: 0xaa, count: 131))
        let message =
            "This is a test using a larger than block-size key and a larger than block-size data. "
            + "The key needs to be hashed before being used by the HMAC algorithm."
        #expect(
            mac.authenticate(message).hexString
                == "9b09ffa71b942fcb27635fbcd5b0e944bfdc63644f0713938a7f51535c3a35e2"
        )
    }

    // MARK: - HMAC-SHA256 against a reference construction

    @Test func hmacWithPrecomputedStatesMatchesReferenceConstruction() {
        var generator = SplitMix64(seed: 0x5EED_0002)
        for keyLength in 0...200 {
            let key = generator.bytes(count: keyLength)
            let mac = HMACSHA256(key: key)
            for _ in 0..<3 {
                let message = generator.bytes(count: Int.random(in: 0...200, using: &generator))
                let expected = referenceHMAC(key: key, message: message)
                #expect(mac.authenticate(message) == expected, "key length \(keyLength), message \(message.count)")
                #expect(message.withUnsafeBytes { mac.authenticate($0) } == expected)
            }
        }
    }

    @Test func hmacHandlesEmptyKeyAndEmptyMessage() {
        let expected = "b613679a0814d9ec772f95d778c35fc5ff1697c493715653c6c712144292c5ad"
        let mac = HMACSHA256(key: [])
        #expect(mac.authenticate("").hexString == expected)
        #expect(mac.authenticate([UInt8]()).hexString == expected)
        #expect(mac.authenticate(UnsafeRawBufferPointer(start: nil, count: 0)).hexString == expected)
    }

    @Test func hmacAuthenticatesStringsAsTheirUTF8Bytes() {
        let mac = HMACSHA256(key: Array("secret".utf8))
        let message = "user=ünïcødé;exp=1700000000"
        #expect(mac.authenticate(message) == mac.authenticate(Array(message.utf8)))
        #expect(mac.authenticate(message) == referenceHMAC(key: Array("secret".utf8), message: Array(message.utf8)))
    }

    @Test func hmacIsReusableAcrossMessages() {
        let mac = HMACSHA256(key: Array("key".utf8))
        let first = mac.authenticate("one")
        _ = mac.authenticate("two")
        #expect(mac.authenticate("one") == first)
        #expect(mac.authenticate("one") != mac.authenticate("two"))
    }

    // MARK: - Hex

    @Test func hexRoundTripsEveryByteValue() throws {
        let bytes = (0...255).map { UInt8($0) }
        let encoded = Hex.lowercase(bytes)
        #expect(encoded.utf8.count == 512)
        #expect(encoded.hasPrefix("000102"))
        #expect(encoded.hasSuffix("fdfeff"))
        let decoded = try #require(Hex.decode(encoded))
        #expect(decoded == bytes)
    }

    @Test func hexMatchesReferenceEncodingForEveryShortLength() throws {
        var generator = SplitMix64(seed: 0x5EED_0003)
        for length in 0...40 {
            let bytes = generator.bytes(count: length)
            let reference = bytes.map { byte in
                let digits = String(byte, radix: 16)
                return byte < 16 ? "0" + digits : digits
            }.joined()
            let encoded = Hex.lowercase(bytes)
            #expect(encoded == reference, "length \(length)")
            #expect(try #require(Hex.decode(encoded)) == bytes)
            #expect(Hex.decode(encoded.uppercased()) == bytes)
        }
    }

    @Test func hexEncodesAndDecodesEmptyInput() {
        #expect(Hex.lowercase([]) == "")
        #expect(Hex.decode("") == [])
    }

    @Test func hexDecodesUppercaseAndMixedCase() {
        #expect(Hex.decode("DEADBEEF") == [0xde, 0xad, 0xbe, 0xef])
        #expect(Hex.decode("DeadBeef") == [0xde, 0xad, 0xbe, 0xef])
        #expect(Hex.decode("0aF9") == [0x0a, 0xf9])
    }

    @Test(arguments: ["a", "abc", "0g", "zz", "12 4", "é1", "0x12", "ab:d", "+1", "@@", "GG", "`a"])
    func hexRejectsOddLengthOrNonHexCharacters(input: String) {
        #expect(Hex.decode(input) == nil)
    }

    @Test func aSignatureKeepsItsBytesAndGivesBackTheTextItWasReadFrom() throws {
        let digest = SHA256.hash("abc")
        let text = digest.hexString
        #expect(text == Hex.lowercase(digest.bytes))
        #expect(IdentityCredential.Signature(lowercaseHex: text) == digest.signature)
        var generator = SplitMix64(seed: 0x5EED_0004)
        for _ in 0..<200 {
            let random = Hex.lowercase(generator.bytes(count: 32))
            let signature = try #require(IdentityCredential.Signature(lowercaseHex: random))
            #expect(signature.text == random)
        }
        #expect(IdentityCredential.Signature(lowercaseHex: String(repeating: "0", count: 64))?.text.utf8.count == 64)
    }

    @Test func aSignatureIsReadOnlyFromSixtyFourLowercaseHexadecimalDigits() {
        let text = SHA256.hash("abc").hexString
        let allButLast = String(text.dropLast())
        let invalid: [String] = [
            "", allButLast, text + "0", text.uppercased(), allButLast + "g", allButLast + "/", allButLast + ":",
            allButLast + "`", String(text.dropLast(2)) + "é", "0123456789abcdef",
        ]
        for candidate in invalid {
            #expect(IdentityCredential.Signature(lowercaseHex: candidate) == nil, "\(candidate.utf8.count) bytes")
        }
    }

    @Test func aSignatureNeverShowsItsBytes() {
        let signature = SHA256.hash("abc").signature
        #expect(String(describing: signature) == "<redacted>")
        #expect(String(reflecting: signature) == "<redacted>")
        var dumped = ""
        dump(signature, to: &dumped)
        // The digest's first eight bytes, as text and as the number a mirror of the words would show.
        for shown in ["ba7816bf", String(UInt64(0xba78_16bf_8f01_cfea)), String(UInt32(0xba78_16bf))] {
            #expect(!dumped.contains(shown))
        }
        #expect(Mirror(reflecting: signature).children.isEmpty)
    }

    // MARK: - Constant-time comparison

    @Test func constantTimeEqualsAcceptsIdenticalInputs() throws {
        #expect(ConstantTime.equals([1, 2, 3], [1, 2, 3]))
        #expect(ConstantTime.equals([UInt8](), []))
        let signature = SHA256.hash("abc").signature
        #expect(
            ConstantTime.equals(signature, try #require(IdentityCredential.Signature(lowercaseHex: signature.text))))
        let digest = SHA256.hash("abc").bytes
        #expect(digest.withUnsafeBytes { a in SHA256.hash("abc").withUnsafeBytes { b in ConstantTime.equals(a, b) } })
    }

    @Test func constantTimeEqualsRejectsDifferingBytesAtAnyPosition() {
        let reference = (0..<64).map { UInt8($0) }
        for position in reference.indices {
            var altered = reference
            altered[position] ^= 0x01
            #expect(!ConstantTime.equals(reference, altered), "position \(position)")
        }
        // A signature that differs from another in one bit of any of its 32 bytes.
        let signature = SHA256.hash("abc").signature
        signature.withUnsafeBytes { bytes in
            for position in 0..<32 {
                var altered = Array(bytes)
                altered[position] ^= 0x01
                let other = IdentityCredential.Signature(lowercaseHex: Hex.lowercase(altered))
                #expect(other.map { !ConstantTime.equals(signature, $0) } == true, "byte \(position)")
            }
        }
    }

    @Test func constantTimeEqualsRejectsDifferentLengths() {
        #expect(!ConstantTime.equals([1, 2, 3], [1, 2]))
        #expect(!ConstantTime.equals([], [0]))
        #expect(!ConstantTime.equals([0], []))
    }
}

/// The textbook HMAC construction `H((K' ^ opad) || H((K' ^ ipad) || m))` used as an independent reference.
private func referenceHMAC(key: [UInt8], message: [UInt8]) -> SHA256Digest {
    var blockKey = key.count > 64 ? SHA256.hash(key).bytes : key
    blockKey += [UInt8](repeating: 0, count: 64 - blockKey.count)
    let innerDigest = SHA256.hash(blockKey.map { $0 ^ 0x36 } + message)
    return SHA256.hash(blockKey.map { $0 ^ 0x5c } + innerDigest.bytes)
}

extension SplitMix64 {
    fileprivate mutating func bytes(count: Int) -> [UInt8] {
        (0..<count).map { _ in UInt8(truncatingIfNeeded: next()) }
    }
}
