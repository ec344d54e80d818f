/// The reversible, printable-ASCII encodings used by ``IdentityHeaders``.
enum HeaderEncoding {
    private static let upperHex = Array("0123456789ABCDEF".utf8)

    /// Keeps `!`…`~` except `%`; writes every other UTF-8 byte as `%XX` with uppercase hex.
    static func percentEncode(_ text: String) -> String {
        // Text with nothing to escape is its own encoding, and shares its storage: an address usually is.
        if text.utf8.allSatisfy({ $0 >= 0x21 && $0 <= 0x7E && $0 != 0x25 }) { return text }
        var bytes: [UInt8] = []
        bytes.reserveCapacity(text.utf8.count)
        for byte in text.utf8 {
            if byte >= 0x21 && byte <= 0x7E && byte != 0x25 {
                bytes.append(byte)
            } else {
                bytes.append(0x25)
                bytes.append(upperHex[Int(byte >> 4)])
                bytes.append(upperHex[Int(byte & 0x0F)])
            }
        }
        return String(decoding: bytes, as: UTF8.self)
    }

    /// Reverses ``percentEncode(_:)`` strictly: only the canonical encoding of valid UTF-8 is accepted.
    static func percentDecode(_ text: String, header: String) throws(CredentialError) -> String {
        let input = Array(text.utf8)
        var bytes: [UInt8] = []
        bytes.reserveCapacity(input.count)
        var index = 0
        while index < input.count {
            let byte = input[index]
            if byte == 0x25 {
                guard index + 2 < input.count, let high = upperHexValue(input[index + 1]),
                    let low = upperHexValue(input[index + 2])
                else {
                    throw invalid(header, "holds a malformed %-escape")
                }
                bytes.append(high << 4 | low)
                index += 3
            } else {
                bytes.append(byte)
                index += 1
            }
        }
        guard let decoded = String(validating: bytes, as: UTF8.self) else {
            throw invalid(header, "does not decode to UTF-8")
        }
        guard percentEncode(decoded) == text else {
            throw invalid(header, "is not in canonical %-encoding")
        }
        return decoded
    }

    private static let base64URLAlphabet = Array(
        "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_".utf8)

    /// Unpadded base64url of the text's UTF-8.
    static func base64URLEncode(_ text: String) -> String {
        let input = Array(text.utf8)
        var output: [UInt8] = []
        output.reserveCapacity((input.count * 4 + 2) / 3)
        var index = 0
        while index + 3 <= input.count {
            let chunk = UInt32(input[index]) << 16 | UInt32(input[index + 1]) << 8 | UInt32(input[index + 2])
            for shift in [18, 12, 6, 0] { output.append(base64URLAlphabet[Int(chunk >> UInt32(shift) & 0x3F)]) }
            index += 3
        }
        let remaining = input.count - index
        if remaining == 1 {
            let chunk = UInt32(input[index]) << 16
            for shift in [18, 12] { output.append(base64URLAlphabet[Int(chunk >> UInt32(shift) & 0x3F)]) }
        } else if remaining == 2 {
            let chunk = UInt32(input[index]) << 16 | UInt32(input[index + 1]) << 8
            for shift in [18, 12, 6] { output.append(base64URLAlphabet[Int(chunk >> UInt32(shift) & 0x3F)]) }
        }
        return String(decoding: output, as: UTF8.self)
    }

    /// Reverses ``base64URLEncode(_:)`` strictly: unpadded, canonical (unused bits zero), valid UTF-8.
    static func base64URLDecode(_ text: String, header: String) throws(CredentialError) -> String {
        let input = Array(text.utf8)
        guard input.count % 4 != 1 else { throw invalid(header, "is not unpadded base64url") }
        var output: [UInt8] = []
        output.reserveCapacity(input.count * 3 / 4)
        var accumulator: UInt32 = 0
        var bits = 0
        for byte in input {
            guard let value = base64URLValue(byte) else { throw invalid(header, "is not unpadded base64url") }
            accumulator = accumulator << 6 | UInt32(value)
            bits += 6
            if bits >= 8 {
                bits -= 8
                output.append(UInt8(truncatingIfNeeded: accumulator >> UInt32(bits)))
                accumulator &= (1 << UInt32(bits)) - 1
            }
        }
        guard accumulator == 0 else { throw invalid(header, "is not canonical base64url") }
        guard let decoded = String(validating: output, as: UTF8.self) else {
            throw invalid(header, "does not decode to UTF-8")
        }
        return decoded
    }

    private static func upperHexValue(_ byte: UInt8) -> UInt8? {
        switch byte {
        case 0x30...0x39: byte - 0x30
        case 0x41...0x46: byte - 0x41 + 10
        default: nil
        }
    }

    private static func base64URLValue(_ byte: UInt8) -> UInt8? {
        switch byte {
        case 0x41...0x5A: byte - 0x41
        case 0x61...0x7A: byte - 0x61 + 26
        case 0x30...0x39: byte - 0x30 + 52
        case 0x2D: 62
        case 0x5F: 63
        default: nil
        }
    }

    private static func invalid(_ header: String, _ problem: String) -> CredentialError {
        CredentialError(.invalidHeader, key: header, reason: "\(header) \(problem)")
    }
}
