extension ECMAScript {
    /// Appends `JSON.stringify(string)` to `output`: the string in double quotes with JSON escapes.
    ///
    /// `"` and `\` become `\"` and `\\`; U+0008, U+000C, U+000A, U+000D and U+0009 become `\b`, `\f`, `\n`,
    /// `\r` and `\t`; every other scalar from U+0000 to U+001F becomes a lowercase `\u00XX` escape. Everything
    /// else is copied raw, including `/`, U+007F, U+2028, U+2029 and all other non-ASCII scalars. A Swift
    /// string cannot hold a lone surrogate, so the `\uDXXX` escapes that `JSON.stringify` produces for those
    /// never arise.
    package static func appendJSONString(_ string: String, to output: inout String) {
        let utf8 = string.utf8
        output.append("\"")
        guard utf8.contains(where: needsJSONEscape) else {
            output.append(string)
            output.append("\"")
            return
        }
        let scalars = string.unicodeScalars
        var runStart = utf8.startIndex
        var index = runStart
        while index != utf8.endIndex {
            let byte = utf8[index]
            guard needsJSONEscape(byte) else {
                utf8.formIndex(after: &index)
                continue
            }
            // Escapable bytes are ASCII, so `runStart` and `index` are scalar boundaries.
            output.append(contentsOf: Substring(scalars[runStart..<index]))
            appendJSONEscape(byte, to: &output)
            utf8.formIndex(after: &index)
            runStart = index
        }
        output.append(contentsOf: Substring(scalars[runStart..<index]))
        output.append("\"")
    }

    /// Reports whether a UTF-8 code unit must be escaped inside a JSON string: controls, `"` and `\`.
    private static func needsJSONEscape(_ byte: UInt8) -> Bool {
        byte < 0x20 || byte == UInt8(ascii: "\"") || byte == UInt8(ascii: "\\")
    }

    /// Appends the JSON escape sequence for an ASCII byte that ``needsJSONEscape(_:)`` accepts.
    private static func appendJSONEscape(_ byte: UInt8, to output: inout String) {
        switch byte {
        case UInt8(ascii: "\""): output.append("\\\"")
        case UInt8(ascii: "\\"): output.append("\\\\")
        case 0x08: output.append("\\b")
        case 0x0C: output.append("\\f")
        case 0x0A: output.append("\\n")
        case 0x0D: output.append("\\r")
        case 0x09: output.append("\\t")
        default:
            // Only U+0000–U+001F get here, so the escape is "\u00" followed by "0" or "1" and a hex digit.
            let low = byte & 0x0F
            output.append("\\u00")
            output.unicodeScalars.append(Unicode.Scalar(UInt8(ascii: "0") + (byte >> 4)))
            output.unicodeScalars.append(
                Unicode.Scalar(low < 10 ? UInt8(ascii: "0") + low : UInt8(ascii: "a") + low - 10))
        }
    }
}
