/// HMAC-SHA256 message authentication (RFC 2104) with a fixed key.
///
/// The SHA-256 chaining states after absorbing the inner (`key ^ ipad`) and outer (`key ^ opad`) key blocks are
/// computed once at initialisation. Each `authenticate` call starts from copies of those states, so it only
/// compresses the message with its padding and then a single outer block holding the inner digest. The value holds
/// no heap storage, a tag is computed without allocating, and the value is safe to share between tasks.
///
/// The compression runs on the CPU's SHA-256 instructions where it has them; see ``SHA256/Implementation``.
package struct HMACSHA256: Sendable {
    /// The chaining state after absorbing the 64-byte block `key ^ ipad`.
    let innerState: SHA256.State
    /// The chaining state after absorbing the 64-byte block `key ^ opad`.
    let outerState: SHA256.State

    /// Creates an authenticator for `key`.
    ///
    /// Keys longer than the 64-byte block size are replaced by their SHA-256 digest, and shorter keys are padded
    /// with zero bytes, as RFC 2104 specifies. Any key length, including zero, is accepted.
    ///
    /// - Parameters:
    ///   - key: The secret key.
    ///   - implementation: The compression function that precomputes the key states; the process's active one by
    ///     default. The states are the same whichever implementation computes them.
    package init(key: [UInt8], using implementation: SHA256.Implementation = .active) {
        var block: (UInt64, UInt64, UInt64, UInt64, UInt64, UInt64, UInt64, UInt64) = (0, 0, 0, 0, 0, 0, 0, 0)
        withUnsafeMutableBytes(of: &block) { blockBytes in
            if key.count > 64 {
                SHA256.hash(key, using: implementation).withUnsafeBytes { digest in
                    blockBytes.baseAddress!.copyMemory(from: digest.baseAddress!, byteCount: digest.count)
                }
            } else {
                key.withUnsafeBytes { keyBytes in
                    if let source = keyBytes.baseAddress, !keyBytes.isEmpty {
                        blockBytes.baseAddress!.copyMemory(from: source, byteCount: keyBytes.count)
                    }
                }
            }
        }
        innerState = Self.state(afterAbsorbing: block, xoredWith: 0x3636_3636_3636_3636, using: implementation)
        outerState = Self.state(afterAbsorbing: block, xoredWith: 0x5c5c_5c5c_5c5c_5c5c, using: implementation)
    }

    /// Returns the chaining state after compressing the padded key block with every byte XORed with a pad byte.
    private static func state(
        afterAbsorbing keyBlock: (UInt64, UInt64, UInt64, UInt64, UInt64, UInt64, UInt64, UInt64),
        xoredWith pad: UInt64,
        using implementation: SHA256.Implementation
    ) -> SHA256.State {
        let padded = (
            keyBlock.0 ^ pad, keyBlock.1 ^ pad, keyBlock.2 ^ pad, keyBlock.3 ^ pad,
            keyBlock.4 ^ pad, keyBlock.5 ^ pad, keyBlock.6 ^ pad, keyBlock.7 ^ pad
        )
        var state = SHA256.State.initial
        withUnsafeBytes(of: padded) { state.compress($0.baseAddress!, blocks: 1, using: implementation) }
        return state
    }

    /// Returns the HMAC-SHA256 tag of the bytes in a raw buffer.
    package func authenticate(_ message: UnsafeRawBufferPointer) -> SHA256Digest {
        authenticate(message, using: .active)
    }

    /// Returns the HMAC-SHA256 tag of the bytes in a raw buffer, computed with a given compression function.
    ///
    /// - Parameters:
    ///   - message: The message.
    ///   - implementation: The compression function; ``SHA256/Implementation/hardware`` only when it is among
    ///     ``SHA256/Implementation/available``.
    package func authenticate(_ message: UnsafeRawBufferPointer, using implementation: SHA256.Implementation)
        -> SHA256Digest
    {
        var inner = innerState
        inner.absorbMessage(message, prefixLength: 64, using: implementation)
        // The outer message is the 32-byte inner digest after one 64-byte key block: 96 bytes, 768 bits, which
        // together with the padding fills exactly one block. It goes through the same block function as every
        // other block so that only one copy of the unrolled rounds is hot in the instruction cache.
        let block: SHA256.Block = (
            inner.a.bigEndian, inner.b.bigEndian, inner.c.bigEndian, inner.d.bigEndian,
            inner.e.bigEndian, inner.f.bigEndian, inner.g.bigEndian, inner.h.bigEndian,
            UInt32(0x8000_0000).bigEndian, 0, 0, 0, 0, 0, 0, UInt32(768).bigEndian
        )
        var outer = outerState
        withUnsafeBytes(of: block) { outer.compress($0.baseAddress!, blocks: 1, using: implementation) }
        return SHA256Digest(state: outer)
    }

    /// Returns the HMAC-SHA256 tag of a byte array.
    ///
    /// - Parameters:
    ///   - message: The message.
    ///   - implementation: The compression function; the process's active one by default.
    package func authenticate(_ message: [UInt8], using implementation: SHA256.Implementation = .active)
        -> SHA256Digest
    {
        message.withUnsafeBytes { authenticate($0, using: implementation) }
    }

    /// Returns the HMAC-SHA256 tag of a string's UTF-8 encoding.
    ///
    /// Native strings are authenticated in place from their contiguous UTF-8 storage without copying.
    package func authenticate(_ message: String) -> SHA256Digest {
        var message = message
        return message.withUTF8 { authenticate(UnsafeRawBufferPointer($0)) }
    }
}
