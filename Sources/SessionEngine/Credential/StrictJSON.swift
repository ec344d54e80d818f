/// A JSON value as the credential decoders read it: objects keep their members in order, numbers their literal text.
indirect enum JSONValue {
    case object([JSONMember])
    case array([JSONValue])
    /// A string; `replacedLoneSurrogate` says that a `\uD800`–`\uDFFF` escape without its pair was decoded as U+FFFD.
    case string(String, replacedLoneSurrogate: Bool)
    case number(String)
    case boolean(Bool)
    case null
}

/// One member of a JSON object.
struct JSONMember {
    let key: String
    let value: JSONValue
}

/// A strict RFC 8259 JSON parser for untrusted credentials.
///
/// Foundation's decoders keep the first of two equal keys, where JavaScript's `JSON.parse` keeps the last, so the
/// same bytes could mean one thing to this package and another to a JavaScript service; this parser refuses a
/// repeated key in any object instead. It also refuses a byte-order mark, invalid UTF-8, control characters inside
/// strings and nesting deeper than ``maximumDepth``. An escaped lone surrogate (`"\udc00"`, which `JSON.stringify`
/// writes for a string JavaScript cannot encode as UTF-8) is decoded as U+FFFD, exactly as JavaScript's UTF-8
/// encoder turns it into bytes, and flagged. Failures describe the problem and its byte offset, never the text.
enum StrictJSON {
    /// How deeply arrays and objects may nest.
    static let maximumDepth = 16

    /// Why the input is not accepted; safe to show, as it never quotes the input.
    struct Failure: Error {
        let problem: String
    }

    /// Parses one JSON value that spans the whole input, allowing white space around it.
    static func parse(_ bytes: [UInt8]) throws(Failure) -> JSONValue {
        var parser = Parser(bytes: bytes)
        parser.skipWhiteSpace()
        let value = try parser.value(depth: 0)
        parser.skipWhiteSpace()
        guard parser.index == bytes.count else { throw parser.failure("there is more after the JSON value") }
        return value
    }

    private struct Parser {
        let bytes: [UInt8]
        var index = 0

        init(bytes: [UInt8]) {
            self.bytes = bytes
        }

        func failure(_ problem: String) -> Failure {
            Failure(problem: "\(problem) (at byte \(index))")
        }

        mutating func skipWhiteSpace() {
            while index < bytes.count, [0x20, 0x09, 0x0A, 0x0D].contains(bytes[index]) { index += 1 }
        }

        mutating func value(depth: Int) throws(Failure) -> JSONValue {
            guard index < bytes.count else { throw failure("the input ends where a value should be") }
            switch bytes[index] {
            case UInt8(ascii: "{"):
                return try object(depth: depth + 1)
            case UInt8(ascii: "["):
                return try array(depth: depth + 1)
            case UInt8(ascii: "\""):
                let (text, replaced) = try string()
                return .string(text, replacedLoneSurrogate: replaced)
            case UInt8(ascii: "t"):
                try literal("true")
                return .boolean(true)
            case UInt8(ascii: "f"):
                try literal("false")
                return .boolean(false)
            case UInt8(ascii: "n"):
                try literal("null")
                return .null
            case UInt8(ascii: "-"), UInt8(ascii: "0")...UInt8(ascii: "9"):
                return .number(try number())
            default:
                throw failure("a value cannot start here")
            }
        }

        mutating func literal(_ word: String) throws(Failure) {
            let expected = Array(word.utf8)
            guard index + expected.count <= bytes.count, bytes[index..<index + expected.count].elementsEqual(expected)
            else { throw failure("an unknown literal") }
            index += expected.count
        }

        mutating func object(depth: Int) throws(Failure) -> JSONValue {
            guard depth <= StrictJSON.maximumDepth else { throw failure("objects and arrays nest too deeply") }
            index += 1
            var members: [JSONMember] = []
            var seen: Set<String> = []
            skipWhiteSpace()
            if index < bytes.count, bytes[index] == UInt8(ascii: "}") {
                index += 1
                return .object(members)
            }
            while true {
                skipWhiteSpace()
                guard index < bytes.count, bytes[index] == UInt8(ascii: "\"") else {
                    throw failure("an object key must be a string")
                }
                let keyStart = index
                let (key, _) = try string()
                guard seen.insert(key).inserted else {
                    index = keyStart
                    throw failure("a key appears twice in one object")
                }
                skipWhiteSpace()
                guard index < bytes.count, bytes[index] == UInt8(ascii: ":") else { throw failure("a ':' is missing") }
                index += 1
                skipWhiteSpace()
                members.append(JSONMember(key: key, value: try value(depth: depth)))
                skipWhiteSpace()
                guard index < bytes.count else { throw failure("the input ends inside an object") }
                if bytes[index] == UInt8(ascii: ",") {
                    index += 1
                    continue
                }
                guard bytes[index] == UInt8(ascii: "}") else { throw failure("a ',' or '}' is missing") }
                index += 1
                return .object(members)
            }
        }

        mutating func array(depth: Int) throws(Failure) -> JSONValue {
            guard depth <= StrictJSON.maximumDepth else { throw failure("objects and arrays nest too deeply") }
            index += 1
            var elements: [JSONValue] = []
            skipWhiteSpace()
            if index < bytes.count, bytes[index] == UInt8(ascii: "]") {
                index += 1
                return .array(elements)
            }
            while true {
                skipWhiteSpace()
                elements.append(try value(depth: depth))
                skipWhiteSpace()
                guard index < bytes.count else { throw failure("the input ends inside an array") }
                if bytes[index] == UInt8(ascii: ",") {
                    index += 1
                    continue
                }
                guard bytes[index] == UInt8(ascii: "]") else { throw failure("a ',' or ']' is missing") }
                index += 1
                return .array(elements)
            }
        }

        mutating func number() throws(Failure) -> String {
            let start = index
            func digits(_ index: inout Int, _ bytes: [UInt8]) -> Int {
                let first = index
                while index < bytes.count, bytes[index] >= 0x30, bytes[index] <= 0x39 { index += 1 }
                return index - first
            }
            if bytes[index] == UInt8(ascii: "-") { index += 1 }
            guard index < bytes.count, bytes[index] >= 0x30, bytes[index] <= 0x39 else {
                throw failure("a number has no digits")
            }
            if bytes[index] == 0x30 {
                index += 1
                guard index >= bytes.count || bytes[index] < 0x30 || bytes[index] > 0x39 else {
                    throw failure("a number has a leading zero")
                }
            } else {
                _ = digits(&index, bytes)
            }
            if index < bytes.count, bytes[index] == UInt8(ascii: ".") {
                index += 1
                guard digits(&index, bytes) > 0 else { throw failure("a number has no digits after '.'") }
            }
            if index < bytes.count, bytes[index] == UInt8(ascii: "e") || bytes[index] == UInt8(ascii: "E") {
                index += 1
                if index < bytes.count, bytes[index] == UInt8(ascii: "+") || bytes[index] == UInt8(ascii: "-") {
                    index += 1
                }
                guard digits(&index, bytes) > 0 else { throw failure("a number has no exponent digits") }
            }
            return String(decoding: bytes[start..<index], as: UTF8.self)
        }

        mutating func string() throws(Failure) -> (String, Bool) {
            index += 1
            // Printable ASCII up to the closing quote, as nearly every string of a credential is, is its own UTF-8:
            // one string made from the bytes, of their length. Built a scalar at a time, a 64-character signature
            // held 184 bytes, where 120 hold it; a pool keeps one per account.
            var end = index
            while end < bytes.count, bytes[end] >= 0x20, bytes[end] < 0x80, bytes[end] != 0x22, bytes[end] != 0x5C {
                end += 1
            }
            if end < bytes.count, bytes[end] == UInt8(ascii: "\"") {
                let text = String(decoding: bytes[index..<end], as: UTF8.self)
                index = end + 1
                return (text, false)
            }
            var scalars = String.UnicodeScalarView()
            var replaced = false
            while true {
                guard index < bytes.count else { throw failure("the input ends inside a string") }
                let byte = bytes[index]
                switch byte {
                case UInt8(ascii: "\""):
                    index += 1
                    return (String(scalars), replaced)
                case UInt8(ascii: "\\"):
                    index += 1
                    guard index < bytes.count else { throw failure("the input ends inside an escape") }
                    let escape = bytes[index]
                    index += 1
                    switch escape {
                    case UInt8(ascii: "\""): scalars.append("\"")
                    case UInt8(ascii: "\\"): scalars.append("\\")
                    case UInt8(ascii: "/"): scalars.append("/")
                    case UInt8(ascii: "b"): scalars.append("\u{8}")
                    case UInt8(ascii: "f"): scalars.append("\u{C}")
                    case UInt8(ascii: "n"): scalars.append("\n")
                    case UInt8(ascii: "r"): scalars.append("\r")
                    case UInt8(ascii: "t"): scalars.append("\t")
                    case UInt8(ascii: "u"):
                        let unit = try hexUnit()
                        if (0xD800..<0xDC00).contains(unit), index + 6 <= bytes.count, bytes[index] == 0x5C,
                            bytes[index + 1] == UInt8(ascii: "u")
                        {
                            let saved = index
                            index += 2
                            let low = try hexUnit()
                            if (0xDC00..<0xE000).contains(low) {
                                let value = 0x10000 + (UInt32(unit - 0xD800) << 10) + UInt32(low - 0xDC00)
                                scalars.append(Unicode.Scalar(value)!)
                                continue
                            }
                            index = saved
                        }
                        if let scalar = Unicode.Scalar(unit) {
                            scalars.append(scalar)
                        } else {
                            // A lone surrogate: JavaScript's UTF-8 encoder writes U+FFFD for it.
                            scalars.append("\u{FFFD}")
                            replaced = true
                        }
                    default:
                        index -= 1
                        throw failure("an unknown escape")
                    }
                case 0x00..<0x20:
                    throw failure("a control character inside a string")
                case 0x00..<0x80:
                    scalars.append(Unicode.Scalar(byte))
                    index += 1
                default:
                    scalars.append(try utf8Scalar())
                }
            }
        }

        mutating func hexUnit() throws(Failure) -> UInt16 {
            guard index + 4 <= bytes.count else { throw failure("the input ends inside a \\u escape") }
            var unit: UInt16 = 0
            for byte in bytes[index..<index + 4] {
                let digit: UInt8
                switch byte {
                case 0x30...0x39: digit = byte - 0x30
                case 0x41...0x46: digit = byte - 0x41 + 10
                case 0x61...0x66: digit = byte - 0x61 + 10
                default: throw failure("a \\u escape needs four hexadecimal digits")
                }
                unit = unit << 4 | UInt16(digit)
            }
            index += 4
            return unit
        }

        /// Decodes one multi-byte UTF-8 sequence, refusing overlong forms, surrogates and values past U+10FFFF.
        mutating func utf8Scalar() throws(Failure) -> Unicode.Scalar {
            let lead = bytes[index]
            let (count, minimum, initial): (Int, UInt32, UInt32) =
                switch lead {
                case 0xC2...0xDF: (2, 0x80, UInt32(lead & 0x1F))
                case 0xE0...0xEF: (3, 0x800, UInt32(lead & 0x0F))
                case 0xF0...0xF4: (4, 0x10000, UInt32(lead & 0x07))
                default: (0, 0, 0)
                }
            guard count > 0, index + count <= bytes.count else { throw failure("the input is not valid UTF-8") }
            var value = initial
            for offset in 1..<count {
                let byte = bytes[index + offset]
                guard byte & 0xC0 == 0x80 else { throw failure("the input is not valid UTF-8") }
                value = value << 6 | UInt32(byte & 0x3F)
            }
            guard value >= minimum, let scalar = Unicode.Scalar(value) else {
                throw failure("the input is not valid UTF-8")
            }
            index += count
            return scalar
        }
    }
}
