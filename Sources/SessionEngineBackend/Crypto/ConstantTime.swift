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

    /// Returns whether the UTF-8 encodings of two strings are equal, without an early exit on the first difference.
    ///
    /// Intended for comparing encoded secrets such as two hexadecimal signatures. Strings whose UTF-8 lengths
    /// differ compare unequal immediately. No Unicode normalisation is applied.
    package static func equals(_ a: String, _ b: String) -> Bool {
        var a = a
        var b = b
        return a.withUTF8 { a in
            b.withUTF8 { b in equals(UnsafeRawBufferPointer(a), UnsafeRawBufferPointer(b)) }
        }
    }
}
