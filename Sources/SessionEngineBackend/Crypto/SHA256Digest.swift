package import SessionEngine

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
        try signature.withUnsafeBytes(body)
    }

    /// The digest as a credential's signature.
    package var signature: IdentityCredential.Signature {
        IdentityCredential.Signature(word0, word1, word2, word3, word4, word5, word6, word7)
    }

    /// The digest as 64 lowercase hexadecimal characters.
    package var hexString: String { signature.text }
}
