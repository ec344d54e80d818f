package import SessionEngine

/// Comparisons whose running time does not depend on where the inputs differ.
///
/// Use these to compare secrets such as message authentication codes or session signatures, so that an attacker
/// timing the comparison cannot learn how many leading bytes of a forged value were correct.
package enum ConstantTime {
    /// Returns whether two buffers hold the same bytes, without an early exit on the first differing byte.
    ///
    /// Buffers of different lengths compare unequal immediately: the length is not treated as secret.
    package static func equals(_ a: UnsafeRawBufferPointer, _ b: UnsafeRawBufferPointer) -> Bool {
        let count = a.count
        guard count == b.count else { return false }
        var difference: UInt8 = 0
        for index in 0..<count {
            difference |= a[index] ^ b[index]
        }
        return difference == 0
    }

    /// Returns whether two byte arrays are equal, without an early exit on the first differing byte.
    ///
    /// Arrays of different lengths compare unequal immediately: the length is not treated as secret.
    package static func equals(_ a: [UInt8], _ b: [UInt8]) -> Bool {
        a.withUnsafeBytes { a in
            b.withUnsafeBytes { b in equals(a, b) }
        }
    }

    /// Returns whether two signatures have the same bytes, without an early exit on the first difference.
    package static func equals(_ a: IdentityCredential.Signature, _ b: IdentityCredential.Signature) -> Bool {
        a.withUnsafeBytes { a in b.withUnsafeBytes { b in equals(a, b) } }
    }
}
