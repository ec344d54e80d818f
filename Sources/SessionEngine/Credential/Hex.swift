/// Hexadecimal encoding and decoding of byte sequences.
///
/// All functions work on UTF-8 code units directly and never allocate per character.
package enum Hex {
    /// Encodes bytes as lowercase hexadecimal, two characters per byte.
    package static func lowercase(_ bytes: [UInt8]) -> String {
        bytes.withUnsafeBytes { lowercase($0) }
    }

    /// Encodes the bytes of a raw buffer as lowercase hexadecimal, two characters per byte.
    package static func lowercase(_ bytes: UnsafeRawBufferPointer) -> String {
        let count = bytes.count
        guard let source = bytes.baseAddress, count > 0 else { return "" }
        return String(unsafeUninitializedCapacity: count * 2) { buffer in
            let destination = UnsafeMutableRawPointer(buffer.baseAddress!)
            var index = 0
            while index &+ 4 <= count {
                let word = UInt32(bigEndian: source.loadUnaligned(fromByteOffset: index, as: UInt32.self))
                destination.storeBytes(of: lowercaseDigits(of: word), toByteOffset: index &* 2, as: UInt64.self)
                index &+= 4
            }
            while index < count {
                let byte = source.load(fromByteOffset: index, as: UInt8.self)
                buffer[index &* 2] = lowercaseDigit(byte &>> 4)
                buffer[index &* 2 &+ 1] = lowercaseDigit(byte & 0x0F)
                index &+= 1
            }
            return count * 2
        }
    }

    /// Decodes a hexadecimal string into bytes.
    ///
    /// Both lowercase and uppercase digits are accepted.
    ///
    /// - Returns: The decoded bytes, or `nil` if the string has an odd length or contains a non-hexadecimal
    ///   character.
    package static func decode(_ hex: String) -> [UInt8]? {
        var hex = hex
        return hex.withUTF8 { utf8 -> [UInt8]? in
            let count = utf8.count
            guard count % 2 == 0 else { return nil }
            var valid = true
            let bytes = [UInt8](unsafeUninitializedCapacity: count / 2) { buffer, initializedCount in
                for index in 0..<(count / 2) {
                    let high = digitValue(utf8[index &* 2])
                    let low = digitValue(utf8[index &* 2 &+ 1])
                    guard high | low < 0x10 else {
                        valid = false
                        initializedCount = index
                        return
                    }
                    buffer[index] = high &<< 4 | low
                }
                initializedCount = count / 2
            }
            return valid ? bytes : nil
        }
    }

    /// Returns the ASCII code of the lowercase hexadecimal digit for a value below 16, without branching.
    @inline(__always)
    package static func lowercaseDigit(_ value: UInt8) -> UInt8 {
        // 0x27 bridges the gap from "9" + 1 to "a"; the mask is all ones exactly when value > 9.
        let letterMask = UInt8(truncatingIfNeeded: (Int8(9) &- Int8(bitPattern: value)) &>> 7)
        return value &+ 0x30 &+ (letterMask & 0x27)
    }

    /// Returns the eight lowercase hexadecimal digits of `word`, most significant first, as eight ASCII bytes in
    /// memory order, ready to be stored with a single unaligned 64-bit store.
    ///
    /// The nibbles are spread into one byte each and converted to ASCII in parallel (SWAR), without branches.
    @inline(__always)
    package static func lowercaseDigits(of word: UInt32) -> UInt64 {
        var nibbles = UInt64(word)
        nibbles = (nibbles | (nibbles &<< 16)) & 0x0000_FFFF_0000_FFFF
        nibbles = (nibbles | (nibbles &<< 8)) & 0x00FF_00FF_00FF_00FF
        nibbles = (nibbles | (nibbles &<< 4)) & 0x0F0F_0F0F_0F0F_0F0F
        // A byte holds 1 exactly when its nibble is 10 or more: adding 6 carries into bit 4 then.
        let letters = ((nibbles &+ 0x0606_0606_0606_0606) &>> 4) & 0x0101_0101_0101_0101
        let ascii = nibbles &+ 0x3030_3030_3030_3030 &+ letters &* 0x27
        return ascii.bigEndian
    }

    /// Returns the value of an ASCII hexadecimal digit of either case, or `0xFF` if `unit` is not one.
    @inline(__always)
    static func digitValue(_ unit: UInt8) -> UInt8 {
        switch unit {
        case 0x30...0x39: unit &- 0x30
        case 0x61...0x66: unit &- 0x57
        case 0x41...0x46: unit &- 0x37
        default: 0xFF
        }
    }
}
