extension ECMAScript {
    /// Reports whether a scalar is an ECMAScript `WhiteSpace` or `LineTerminator` code point.
    ///
    /// These are the code points `String.prototype.trim()` removes: U+0009, U+000B, U+000C, U+0020, U+00A0,
    /// U+FEFF, every `Zs` (space separator) character — U+1680, U+2000–U+200A, U+202F, U+205F, U+3000 — and the
    /// line terminators U+000A, U+000D, U+2028 and U+2029. U+0085 (NEL) and U+180E (MONGOLIAN VOWEL SEPARATOR)
    /// are not included: JavaScript treats neither as white space.
    package static func isWhiteSpaceOrLineTerminator(_ scalar: Unicode.Scalar) -> Bool {
        switch scalar.value {
        case 0x0009...0x000D, 0x0020, 0x00A0, 0x1680, 0x2000...0x200A, 0x2028, 0x2029, 0x202F, 0x205F, 0x3000,
            0xFEFF:
            return true
        default:
            return false
        }
    }

    /// Returns `String.prototype.trim()` of a string.
    ///
    /// Removes every leading and trailing scalar for which ``isWhiteSpaceOrLineTerminator(_:)`` is true and
    /// keeps everything in between unchanged. A string that needs no trimming is returned as is, without
    /// copying.
    package static func trim(_ string: String) -> String {
        let scalars = string.unicodeScalars
        var start = scalars.startIndex
        var end = scalars.endIndex
        while start != end, isWhiteSpaceOrLineTerminator(scalars[start]) {
            scalars.formIndex(after: &start)
        }
        while start != end {
            let last = scalars.index(before: end)
            guard isWhiteSpaceOrLineTerminator(scalars[last]) else { break }
            end = last
        }
        if start == scalars.startIndex, end == scalars.endIndex {
            return string
        }
        return String(scalars[start..<end])
    }

    /// Returns `String.prototype.toLowerCase()` of a string.
    ///
    /// This is the locale-independent full Unicode lowercase mapping: every scalar maps through its
    /// `Lowercase_Mapping`, which includes the unconditional mappings of `SpecialCasing.txt` (for example
    /// U+0130 LATIN CAPITAL LETTER I WITH DOT ABOVE becomes the two scalars U+0069 U+0307). On top of that the
    /// context-sensitive `Final_Sigma` rule applies to U+03A3 GREEK CAPITAL LETTER SIGMA: it becomes U+03C2
    /// (final ς) when it is preceded by a cased scalar and not followed by one, skipping case-ignorable scalars
    /// in both directions, and U+03C3 (σ) otherwise. As in ICU, which JavaScript engines use, a scalar that is
    /// both cased and case-ignorable (such as U+02B0 or U+0345) counts as case-ignorable. So "ΟΔΥΣΣΕΥΣ" becomes
    /// "οδυσσευς", which `String.lowercased()` does not produce.
    ///
    /// The mapping works scalar by scalar, so combining sequences are never merged or reordered. All-ASCII
    /// input takes a byte-mapping fast path, and a string that has nothing to lowercase is returned as is.
    ///
    /// The mapping data and the cased and case-ignorable properties come from the Swift standard library, so
    /// they follow its Unicode version. Swift 6.3 and Node 20.20 (ICU 78) both implement Unicode 17.0 and agree
    /// on every scalar; a JavaScript engine with a different Unicode version differs only for the cased letters
    /// added in between.
    package static func toLowerCase(_ string: String) -> String {
        var contiguous = string
        return contiguous.withUTF8 { utf8 in
            var hasUppercaseASCII = false
            for byte in utf8 {
                if byte >= 0x80 {
                    return unicodeLowercased(string)
                }
                if byte &- UInt8(ascii: "A") < 26 {
                    hasUppercaseASCII = true
                }
            }
            guard hasUppercaseASCII else { return string }
            return String(unsafeUninitializedCapacity: utf8.count) { buffer in
                for index in utf8.indices {
                    let byte = utf8[index]
                    buffer[index] = byte &- UInt8(ascii: "A") < 26 ? byte | 0x20 : byte
                }
                return utf8.count
            }
        }
    }

    /// Returns JavaScript's `string.length`: the number of UTF-16 code units in the string.
    ///
    /// Scalars in the Basic Multilingual Plane count one, supplementary scalars (such as most emoji) count two,
    /// because JavaScript strings store them as surrogate pairs.
    package static func utf16Length(_ string: String) -> Int {
        string.utf16.count
    }

    /// Lowercases a string that contains at least one non-ASCII scalar.
    private static func unicodeLowercased(_ string: String) -> String {
        let scalars = string.unicodeScalars
        var bytes: [UInt8] = []
        bytes.reserveCapacity(string.utf8.count + 8)
        var index = scalars.startIndex
        while index != scalars.endIndex {
            let scalar = scalars[index]
            let value = scalar.value
            if value < 0x80 {
                let byte = UInt8(truncatingIfNeeded: value)
                bytes.append(byte &- UInt8(ascii: "A") < 26 ? byte | 0x20 : byte)
            } else if value == 0x03A3 {
                let isFinal =
                    isPrecededByCasedScalar(scalars, before: index)
                    && !isFollowedByCasedScalar(scalars, after: index)
                // U+03C2 and U+03C3 in UTF-8.
                bytes.append(0xCF)
                bytes.append(isFinal ? 0x82 : 0x83)
            } else {
                bytes.append(contentsOf: scalar.properties.lowercaseMapping.utf8)
            }
            scalars.formIndex(after: &index)
        }
        return String(decoding: bytes, as: UTF8.self)
    }

    /// Classifies a scalar for the `Final_Sigma` context scan: `true` for cased, `false` for neither cased nor
    /// case-ignorable, `nil` for case-ignorable (which is skipped, even when the scalar is also cased).
    private static func finalSigmaContext(of scalar: Unicode.Scalar) -> Bool? {
        let properties = scalar.properties
        if properties.isCaseIgnorable {
            return nil
        }
        return properties.isCased
    }

    /// Reports whether the scalars before `index` end in a cased scalar followed by case-ignorable scalars.
    private static func isPrecededByCasedScalar(
        _ scalars: String.UnicodeScalarView,
        before index: String.UnicodeScalarView.Index
    ) -> Bool {
        var position = index
        while position != scalars.startIndex {
            scalars.formIndex(before: &position)
            if let isCased = finalSigmaContext(of: scalars[position]) {
                return isCased
            }
        }
        return false
    }

    /// Reports whether the scalars after `index` start with case-ignorable scalars followed by a cased scalar.
    private static func isFollowedByCasedScalar(
        _ scalars: String.UnicodeScalarView,
        after index: String.UnicodeScalarView.Index
    ) -> Bool {
        var position = scalars.index(after: index)
        while position != scalars.endIndex {
            if let isCased = finalSigmaContext(of: scalars[position]) {
                return isCased
            }
            scalars.formIndex(after: &position)
        }
        return false
    }
}
