extension IdentityCredential {
    /// A credential's HMAC-SHA256 signature as its 32 bytes, which the credential keeps in place of its 64 characters.
    ///
    /// The text the backend sent and the headers carry is the bytes' lowercase hexadecimal, so the bytes give it back
    /// exactly (``text``). Kept as bytes, a credential holds no string for its signature: an account of a pool that
    /// nobody reads holds 32 bytes for it instead of a 128-byte allocation. The text is made when it is asked for,
    /// which the first read of a credential does once to build its headers.
    ///
    /// A signature is secret until its credential expires: its description and mirror are `<redacted>`.
    package struct Signature: Sendable, Hashable, BitwiseCopyable, CustomStringConvertible,
        CustomDebugStringConvertible, CustomReflectable
    {
        /// The bytes, eight to a word, each word's most significant byte first: the text's first 16 digits are the
        /// first word's.
        private let words: (UInt64, UInt64, UInt64, UInt64)

        /// Reads `text` if it is 64 lowercase hexadecimal digits, the only form a credential's signature takes.
        package init?(lowercaseHex text: String) {
            guard text.utf8.count == 64 else { return nil }
            var words: (UInt64, UInt64, UInt64, UInt64) = (0, 0, 0, 0)
            var valid = true
            var text = text
            text.withUTF8 { utf8 in
                for word in 0..<4 {
                    var value: UInt64 = 0
                    for unit in utf8[(word &* 16)..<(word &* 16 &+ 16)] {
                        let isDigit = unit &- 0x30 < 10
                        let isLetter = unit &- 0x61 < 6
                        valid = valid && (isDigit || isLetter)
                        value = value &<< 4 | UInt64(isDigit ? unit &- 0x30 : unit &- 0x57)
                    }
                    switch word {
                    case 0: words.0 = value
                    case 1: words.1 = value
                    case 2: words.2 = value
                    default: words.3 = value
                    }
                }
            }
            guard valid else { return nil }
            self.words = words
        }

        /// A signature from its bytes as eight 32-bit words, each word's most significant byte first (a SHA-256
        /// digest's final state).
        package init(
            _ word0: UInt32, _ word1: UInt32, _ word2: UInt32, _ word3: UInt32,
            _ word4: UInt32, _ word5: UInt32, _ word6: UInt32, _ word7: UInt32
        ) {
            words = (
                UInt64(word0) &<< 32 | UInt64(word1), UInt64(word2) &<< 32 | UInt64(word3),
                UInt64(word4) &<< 32 | UInt64(word5), UInt64(word6) &<< 32 | UInt64(word7)
            )
        }

        /// Calls `body` with the 32 bytes in order, in a buffer valid only for the call.
        package func withUnsafeBytes<R>(_ body: (UnsafeRawBufferPointer) throws -> R) rethrows -> R {
            let serialized = (words.0.bigEndian, words.1.bigEndian, words.2.bigEndian, words.3.bigEndian)
            return try Swift.withUnsafeBytes(of: serialized, body)
        }

        /// The signature as 64 lowercase hexadecimal characters, as the backend sent it.
        package var text: String {
            String(unsafeUninitializedCapacity: 64) { buffer in
                let base = UnsafeMutableRawPointer(buffer.baseAddress!)
                func store(_ word: UInt64, at offset: Int) {
                    base.storeBytes(
                        of: Hex.lowercaseDigits(of: UInt32(truncatingIfNeeded: word &>> 32)), toByteOffset: offset,
                        as: UInt64.self)
                    base.storeBytes(
                        of: Hex.lowercaseDigits(of: UInt32(truncatingIfNeeded: word)), toByteOffset: offset &+ 8,
                        as: UInt64.self)
                }
                store(words.0, at: 0)
                store(words.1, at: 16)
                store(words.2, at: 32)
                store(words.3, at: 48)
                return 64
            }
        }

        /// Whether two signatures have the same bytes. It stops at the first word that differs, so it is for the
        /// engine's own comparisons of credentials it holds, not for checking a signature against an expected one.
        package static func == (lhs: Self, rhs: Self) -> Bool {
            lhs.words == rhs.words
        }

        /// Hashes the bytes that ``==(_:_:)`` compares.
        package func hash(into hasher: inout Hasher) {
            hasher.combine(words.0)
            hasher.combine(words.1)
            hasher.combine(words.2)
            hasher.combine(words.3)
        }

        /// `<redacted>`: a signature is secret until its credential expires.
        package var description: String { "<redacted>" }

        /// `<redacted>`, as ``description``.
        package var debugDescription: String { description }

        /// A mirror without the bytes, so `dump(_:)` does not reveal them.
        package var customMirror: Mirror { Mirror(self, children: [:], displayStyle: .struct) }
    }
}
