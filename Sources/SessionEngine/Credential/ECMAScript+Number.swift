extension ECMAScript {
    /// Returns ECMAScript `Number::toString(x)` with radix 10, which is what `String(x)` and template literals
    /// produce in JavaScript.
    ///
    /// The digits are the shortest decimal digits that round-trip to `value` (the closest such digits when
    /// several qualify), taken from Swift's shortest round-trip formatting. They are laid out as plain decimal
    /// when 1e-7 <= |x| < 1e21 — "100", "0.000001", "123456789012345680000" — and in exponent form otherwise —
    /// "1e+21", "1.5e-7", "5e-324", "1.7976931348623157e+308". Negative zero gives "0", NaN gives "NaN" and
    /// the infinities give "Infinity" and "-Infinity".
    package static func numberToString(_ value: Double) -> String {
        if value.isNaN {
            return "NaN"
        }
        if value.isInfinite {
            return value < 0 ? "-Infinity" : "Infinity"
        }
        if value == 0 {
            return "0"
        }
        if value.magnitude < 0x1p53 {
            // Integers below 2^53 print as their exact decimal digits.
            let integer = Int64(value)
            if Double(integer) == value {
                return String(integer)
            }
        }
        let decimal = ShortestDecimal(value.magnitude)
        return withUnsafeTemporaryAllocation(of: UInt8.self, capacity: ShortestDecimal.maximumFormattedLength) {
            buffer in
            var length = 0
            if value < 0 {
                buffer[0] = UInt8(ascii: "-")
                length = 1
            }
            decimal.format(into: buffer, at: &length)
            return String(decoding: UnsafeBufferPointer(rebasing: buffer[..<length]), as: UTF8.self)
        }
    }

    /// The shortest round-trip decimal representation of a positive finite `Double`.
    ///
    /// The value equals `significand` × 10^(`exponent` − `digitCount`), where `significand` has exactly
    /// `digitCount` digits (1 to 17) and no trailing zero. These are the `s`, `k` and `n` of the ECMAScript
    /// `Number::toString` algorithm.
    private struct ShortestDecimal {
        /// The upper bound on the length of a formatted number, sign included: "-0.000001" followed by 17
        /// digits, or "-" followed by 17 digits, a point and "e-324".
        static let maximumFormattedLength = 32

        /// The significant digits `s` as an integer, without trailing zeros.
        var significand: UInt64 = 0

        /// The number of digits `k` in `significand`.
        var digitCount = 0

        /// The decimal exponent `n`: the value is `significand` × 10^(`n` − `digitCount`).
        var exponent = 0

        /// Extracts the digits and exponent from Swift's shortest round-trip description of `value`.
        ///
        /// `Double.description` produces forms such as "123.45", "0.001", "1e-05" and "1.5e+300"; the digits
        /// before the exponent marker form the significand and the optional exponent shifts it.
        init(_ value: Double) {
            var integerDigitCount = 0
            var seenPoint = false
            var inExponent = false
            var explicitExponent = 0
            var exponentIsNegative = false
            for byte in value.description.utf8 {
                switch byte {
                case UInt8(ascii: "0")...UInt8(ascii: "9"):
                    let digit = byte &- UInt8(ascii: "0")
                    if inExponent {
                        explicitExponent = explicitExponent * 10 + Int(digit)
                    } else if digitCount == 0, digit == 0 {
                        // A leading zero after the point only shifts the exponent.
                        if seenPoint {
                            integerDigitCount -= 1
                        }
                    } else {
                        significand = significand * 10 + UInt64(digit)
                        digitCount += 1
                        if !seenPoint {
                            integerDigitCount += 1
                        }
                    }
                case UInt8(ascii: "."):
                    seenPoint = true
                case UInt8(ascii: "e"), UInt8(ascii: "E"):
                    inExponent = true
                case UInt8(ascii: "-"):
                    exponentIsNegative = inExponent
                default:
                    break
                }
            }
            while digitCount > 1, significand % 10 == 0 {
                significand /= 10
                digitCount -= 1
            }
            exponent = integerDigitCount + (exponentIsNegative ? -explicitExponent : explicitExponent)
        }

        /// Writes the ECMAScript layout of the number into `buffer` starting at `length`, advancing `length`.
        ///
        /// The layout is plain decimal when `exponent` is between -5 and 21, and exponent form ("d.ddde+n",
        /// "de-n") otherwise.
        func format(into buffer: UnsafeMutableBufferPointer<UInt8>, at length: inout Int) {
            if digitCount <= exponent, exponent <= 21 {
                // Digits followed by zeros: "100", "123456789012345680000".
                Self.write(significand, digitCount: digitCount, into: buffer, at: &length)
                Self.writeZeros(exponent - digitCount, into: buffer, at: &length)
            } else if 0 < exponent, exponent <= 21 {
                // A point inside the digits: "1.5", "123.456".
                let start = length
                Self.write(significand, digitCount: digitCount, into: buffer, at: &length)
                Self.insertPoint(into: buffer, at: start + exponent, length: &length)
            } else if -6 < exponent, exponent <= 0 {
                // Leading zeros: "0.5", "0.000001".
                buffer[length] = UInt8(ascii: "0")
                buffer[length + 1] = UInt8(ascii: ".")
                length += 2
                Self.writeZeros(-exponent, into: buffer, at: &length)
                Self.write(significand, digitCount: digitCount, into: buffer, at: &length)
            } else {
                // Exponent form: "1e+21", "1.5e-7".
                let start = length
                Self.write(significand, digitCount: digitCount, into: buffer, at: &length)
                if digitCount > 1 {
                    Self.insertPoint(into: buffer, at: start + 1, length: &length)
                }
                let power = exponent - 1
                buffer[length] = UInt8(ascii: "e")
                buffer[length + 1] = power < 0 ? UInt8(ascii: "-") : UInt8(ascii: "+")
                length += 2
                let magnitude = UInt64(power.magnitude)
                let powerDigitCount = magnitude >= 100 ? 3 : magnitude >= 10 ? 2 : 1
                Self.write(magnitude, digitCount: powerDigitCount, into: buffer, at: &length)
            }
        }

        /// Shifts the bytes from `position` to `length` one place right and writes a decimal point at
        /// `position`.
        private static func insertPoint(
            into buffer: UnsafeMutableBufferPointer<UInt8>,
            at position: Int,
            length: inout Int
        ) {
            var index = length
            while index > position {
                buffer[index] = buffer[index - 1]
                index -= 1
            }
            buffer[position] = UInt8(ascii: ".")
            length += 1
        }

        /// Writes the `digitCount` decimal digits of `number` at `length`, advancing `length`.
        private static func write(
            _ number: UInt64,
            digitCount: Int,
            into buffer: UnsafeMutableBufferPointer<UInt8>,
            at length: inout Int
        ) {
            var remaining = number
            var index = length + digitCount
            while index > length {
                index -= 1
                buffer[index] = UInt8(ascii: "0") + UInt8(truncatingIfNeeded: remaining % 10)
                remaining /= 10
            }
            length += digitCount
        }

        /// Writes `count` zero digits at `length`, advancing `length`.
        private static func writeZeros(
            _ count: Int,
            into buffer: UnsafeMutableBufferPointer<UInt8>,
            at length: inout Int
        ) {
            for index in length..<(length + count) {
                buffer[index] = UInt8(ascii: "0")
            }
            length += count
        }
    }
}
