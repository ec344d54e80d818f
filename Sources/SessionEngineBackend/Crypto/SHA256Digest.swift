import SessionEngine

/// A 32-byte SHA-256 digest.
///
/// The digest is stored as the eight final chaining words rather than as an array, so it is cheap to create, copy,
/// compare and hash. The byte representation is the big-endian serialisation of those words.
package struct SHA256Digest: Hashable, Sendable {
    let word0: UInt32
    let word1: UInt32
    let word2: UInt32
    let word3: UInt32
    let word4: UInt32
    let word5: UInt32
    let word6: UInt32
    let word7: UInt32

    /// Creates a digest from the final chaining state of a SHA-256 computation.
    init(state: SHA256.State) {
        word0 = state.a
        word1 = state.b
        word2 = state.c
        word3 = state.d
        word4 = state.e
        word5 = state.f
        word6 = state.g
        word7 = state.h
    }

    /// The 32 digest bytes.
    package var bytes: [UInt8] {
        withUnsafeBytes { Array($0) }
    }

    /// Calls `body` with the 32 digest bytes in a temporary buffer.
    ///
    /// The buffer is valid only for the duration of the call.
    package func withUnsafeBytes<R>(_ body: (UnsafeRawBufferPointer) throws -> R) rethrows -> R {
        let serialized = (
            word0.bigEndian, word1.bigEndian, word2.bigEndian, word3.bigEndian,
            word4.bigEndian, word5.bigEndian, word6.bigEndian, word7.bigEndian
        )
        return try Swift.withUnsafeBytes(of: serialized, body)
    }

    /// The digest as 64 lowercase hexadecimal characters.
    package var hexString: String {
        String(unsafeUninitializedCapacity: 64) { buffer in
            let base = UnsafeMutableRawPointer(buffer.baseAddress!)
            base.storeBytes(of: Hex.lowercaseDigits(of: word0), toByteOffset: 0, as: UInt64.self)
            base.storeBytes(of: Hex.lowercaseDigits(of: word1), toByteOffset: 8, as: UInt64.self)
            base.storeBytes(of: Hex.lowercaseDigits(of: word2), toByteOffset: 16, as: UInt64.self)
            base.storeBytes(of: Hex.lowercaseDigits(of: word3), toByteOffset: 24, as: UInt64.self)
            base.storeBytes(of: Hex.lowercaseDigits(of: word4), toByteOffset: 32, as: UInt64.self)
            base.storeBytes(of: Hex.lowercaseDigits(of: word5), toByteOffset: 40, as: UInt64.self)
            base.storeBytes(of: Hex.lowercaseDigits(of: word6), toByteOffset: 48, as: UInt64.self)
            base.storeBytes(of: Hex.lowercaseDigits(of: word7), toByteOffset: 56, as: UInt64.self)
            return 64
        }
    }
}
