import Foundation
import Testing

@testable import SessionEngine

/// Checks the ECMAScript primitives against results produced by Node.js.
///
/// The named tables hold edge cases, pasted from Node.js 20.20 (V8 with ICU 78, Unicode 17.0). The fixture
/// `Fixtures/ecmascript-vectors.json` holds a few hundred more cases, written by
/// `Fixtures/generate-ecmascript-vectors.mjs`; running the tests does not need Node.js.
@Suite struct ECMAScriptTests {
    // MARK: - White space

    @Test(
        arguments: [
            0x0009, 0x000A, 0x000B, 0x000C, 0x000D, 0x0020, 0x00A0, 0x1680, 0x2000, 0x2005, 0x200A, 0x2028, 0x2029,
            0x202F, 0x205F, 0x3000, 0xFEFF,
        ] as [UInt32])
    func whiteSpaceAndLineTerminatorsAreRecognized(value: UInt32) {
        #expect(ECMAScript.isWhiteSpaceOrLineTerminator(Unicode.Scalar(value)!))
    }

    @Test(
        arguments: [
            0x0000, 0x0008, 0x000E, 0x001C, 0x001F, 0x0041, 0x0085, 0x180E, 0x200B, 0x200C, 0x200D, 0x2060, 0x3001,
            0xFFFE, 0x1_0000,
        ] as [UInt32])
    func otherScalarsAreNotWhiteSpace(value: UInt32) {
        #expect(!ECMAScript.isWhiteSpaceOrLineTerminator(Unicode.Scalar(value)!))
    }

    // MARK: - trim

    @Test(
        arguments: [
            ("", ""),
            ("   ", ""),
            ("a", "a"),
            ("  a b  ", "a b"),
            ("\u{0009}\u{000A}\u{000B}\u{000C}\u{000D} a \u{000D}\u{000A}", "a"),
            ("\u{00A0}\u{FEFF}a\u{3000}", "a"),
            ("\u{1680}\u{2000}\u{200A}\u{2028}\u{2029}\u{202F}\u{205F}a\u{205F}", "a"),
            ("\u{0085}a\u{0085}", "\u{0085}a\u{0085}"),
            ("\u{180E}a\u{180E}", "\u{180E}a\u{180E}"),
            ("\u{200B}a\u{200B}", "\u{200B}a\u{200B}"),
            (" e\u{0301} ", "e\u{0301}"),
            (" \u{0301} ", "\u{0301}"),
            ("x\u{00A0}y", "x\u{00A0}y"),
        ])
    func trimRemovesLeadingAndTrailingWhiteSpace(input: String, expected: String) {
        #expect(scalarValues(ECMAScript.trim(input)) == scalarValues(expected))
    }

    // MARK: - toLowerCase

    @Test(
        arguments: [
            ("", ""),
            ("HELLO, World! 123", "hello, world! 123"),
            ("already lower", "already lower"),
            ("Stra\u{00DF}e", "stra\u{00DF}e"),
            ("\u{00C0}\u{00C9}\u{00CE}\u{00D5}\u{00DC}", "\u{00E0}\u{00E9}\u{00EE}\u{00F5}\u{00FC}"),
            ("\u{0130}stanbul", "i\u{0307}stanbul"),
            ("E\u{0301}", "e\u{0301}"),
            ("\u{212A}\u{212B}\u{2126}", "k\u{00E5}\u{03C9}"),
            ("\u{1E9E}", "\u{00DF}"),
            ("\u{01C5}", "\u{01C6}"),
            ("\u{10400}", "\u{10428}"),
            ("\u{16EA0}", "\u{16EBB}"),
            ("A\u{1F600}B", "a\u{1F600}b"),
        ])
    func toLowerCaseAppliesFullLowercaseMapping(input: String, expected: String) {
        #expect(scalarValues(ECMAScript.toLowerCase(input)) == scalarValues(expected))
    }

    @Test(
        arguments: [
            ("\u{03A3}", "\u{03C3}"),
            ("A\u{03A3}", "a\u{03C2}"),
            ("A\u{03A3}B", "a\u{03C3}b"),
            ("A\u{03A3}.", "a\u{03C2}."),
            ("A.\u{03A3}", "a.\u{03C2}"),
            ("A\u{03A3}'B", "a\u{03C3}'b"),
            ("A'\u{03A3}", "a'\u{03C2}"),
            ("\u{0391}\u{03A3}\u{0301}", "\u{03B1}\u{03C2}\u{0301}"),
            ("\u{10400}\u{03A3}", "\u{10428}\u{03C2}"),
            ("\u{03A3}\u{0391}", "\u{03C3}\u{03B1}"),
            ("1\u{03A3}", "1\u{03C3}"),
            ("A1\u{03A3}", "a1\u{03C3}"),
            ("A\u{03A3}1", "a\u{03C2}1"),
            (
                "\u{039F}\u{0394}\u{03A5}\u{03A3}\u{03A3}\u{0395}\u{03A5}\u{03A3}",
                "\u{03BF}\u{03B4}\u{03C5}\u{03C3}\u{03C3}\u{03B5}\u{03C5}\u{03C2}"
            ),
            (
                "\u{038C}\u{03A3}\u{039F}\u{03A3} \u{03A3}\u{0391}\u{03A3}",
                "\u{03CC}\u{03C3}\u{03BF}\u{03C2} \u{03C3}\u{03B1}\u{03C2}"
            ),
            ("\u{02B0}\u{03A3}", "\u{02B0}\u{03C3}"),
            ("A\u{02B0}\u{03A3}", "a\u{02B0}\u{03C2}"),
            ("A\u{03A3}\u{0345}", "a\u{03C2}\u{0345}"),
            ("\u{01C5}\u{03A3}", "\u{01C6}\u{03C2}"),
        ])
    func toLowerCaseAppliesFinalSigma(input: String, expected: String) {
        #expect(scalarValues(ECMAScript.toLowerCase(input)) == scalarValues(expected))
    }

    @Test func toLowerCaseKeepsCombiningSequencesScalarByScalar() {
        let input = "\u{0130}\u{0301}A\u{0308}"
        #expect(scalarValues(ECMAScript.toLowerCase(input)) == [0x69, 0x307, 0x301, 0x61, 0x308])
    }

    // MARK: - utf16Length

    @Test(
        arguments: [
            ("", 0),
            ("abc", 3),
            ("\u{00E9}", 1),
            ("e\u{0301}", 2),
            ("\u{20AC}", 1),
            ("\u{1F600}", 2),
            ("\u{1F468}\u{200D}\u{1F469}\u{200D}\u{1F467}", 8),
            ("\u{10FFFF}", 2),
        ])
    func utf16LengthCountsCodeUnits(input: String, expected: Int) {
        #expect(ECMAScript.utf16Length(input) == expected)
    }

    // MARK: - numberToString

    @Test(
        arguments: [
            (0, "0"),
            (-0.0, "0"),
            (.nan, "NaN"),
            (.infinity, "Infinity"),
            (-.infinity, "-Infinity"),
            (1, "1"),
            (-1, "-1"),
            (100, "100"),
            (0.1, "0.1"),
            (0.1 + 0.2, "0.30000000000000004"),
            (1.0 / 3.0, "0.3333333333333333"),
            (-2.5, "-2.5"),
            (4.35, "4.35"),
            (12_345_678.9, "12345678.9"),
            (1e-7, "1e-7"),
            (1.5e-7, "1.5e-7"),
            (0.000001, "0.000001"),
            (0.00001, "0.00001"),
            (123e-20, "1.23e-18"),
            (1e16, "10000000000000000"),
            (1e20, "100000000000000000000"),
            (1e21, "1e+21"),
            (9.999999999999999e20, "999999999999999900000"),
            (1.2345678901234568e20, "123456789012345680000"),
            (1.5e300, "1.5e+300"),
            (.leastNonzeroMagnitude, "5e-324"),
            (2.2250738585072014e-308, "2.2250738585072014e-308"),
            (1.7976931348623157e308, "1.7976931348623157e+308"),
            (-1.7976931348623157e308, "-1.7976931348623157e+308"),
            (0x1p53, "9007199254740992"),
            (0x1p53 + 2, "9007199254740994"),
            (0x1p64, "18446744073709552000"),
        ] as [(Double, String)])
    func numberToStringMatchesJavaScript(value: Double, expected: String) {
        #expect(ECMAScript.numberToString(value) == expected)
    }

    // MARK: - appendJSONString

    @Test(
        arguments: [
            ("", "\"\""),
            ("plain", "\"plain\""),
            ("say \"hi\"", "\"say \\\"hi\\\"\""),
            ("C:\\dir", "\"C:\\\\dir\""),
            ("a/b", "\"a/b\""),
            ("\u{0000}\u{0001}\u{001F}", "\"\\u0000\\u0001\\u001f\""),
            ("\u{0008}\u{000C}\u{000A}\u{000D}\u{0009}", "\"\\b\\f\\n\\r\\t\""),
            ("\u{000B}", "\"\\u000b\""),
            ("\u{007F}", "\"\u{007F}\""),
            ("\u{0085}", "\"\u{0085}\""),
            ("\u{00E9}", "\"\u{00E9}\""),
            ("\u{2028}\u{2029}", "\"\u{2028}\u{2029}\""),
            ("\u{FEFF}", "\"\u{FEFF}\""),
            ("\u{1F600}", "\"\u{1F600}\""),
            ("\"\u{0301}", "\"\\\"\u{0301}\""),
            ("e\u{0301}", "\"e\u{0301}\""),
        ])
    func appendJSONStringQuotesLikeJSONStringify(input: String, expected: String) {
        var output = ""
        ECMAScript.appendJSONString(input, to: &output)
        #expect(scalarValues(output) == scalarValues(expected))
    }

    @Test func appendJSONStringKeepsExistingOutput() {
        var output = "{\"k\":"
        ECMAScript.appendJSONString("v\n", to: &output)
        output.append("}")
        #expect(output == "{\"k\":\"v\\n\"}")
    }

    // MARK: - Fixture vectors

    @Test func fixtureMatchesToLowerCase() throws {
        let pairs = try Self.vectors.toLowerCase
        #expect(pairs.count > 100)
        for pair in pairs {
            #expect(scalarValues(ECMAScript.toLowerCase(pair[0])) == scalarValues(pair[1]), "\(pair)")
        }
    }

    @Test func fixtureMatchesTrim() throws {
        let pairs = try Self.vectors.trim
        #expect(pairs.count > 100)
        for pair in pairs {
            #expect(scalarValues(ECMAScript.trim(pair[0])) == scalarValues(pair[1]), "\(pair)")
        }
    }

    @Test func fixtureMatchesUTF16Length() throws {
        let cases = try Self.vectors.utf16Length
        #expect(cases.count > 10)
        for testCase in cases {
            #expect(ECMAScript.utf16Length(testCase.string) == testCase.length, "\(testCase.string)")
        }
    }

    @Test func fixtureMatchesNumberToString() throws {
        let pairs = try Self.vectors.numberToString
        #expect(pairs.count > 250)
        for pair in pairs {
            let bits = try #require(UInt64(pair[0].dropFirst(2), radix: 16))
            #expect(ECMAScript.numberToString(Double(bitPattern: bits)) == pair[1], "\(pair[0])")
        }
    }

    @Test func fixtureMatchesJSONStringify() throws {
        let pairs = try Self.vectors.jsonString
        #expect(pairs.count > 150)
        for pair in pairs {
            var output = ""
            ECMAScript.appendJSONString(pair[0], to: &output)
            #expect(scalarValues(output) == scalarValues(pair[1]), "\(pair)")
        }
    }
}

extension ECMAScriptTests {
    /// The contents of `Fixtures/ecmascript-vectors.json`.
    ///
    /// String cases are `[input, expected]` pairs; number cases are `[bit pattern in hex, expected]` pairs.
    struct Vectors: Decodable {
        /// A `[string, length]` pair of the `utf16Length` table.
        struct LengthCase: Decodable {
            var string: String
            var length: Int

            init(from decoder: any Decoder) throws {
                var container = try decoder.unkeyedContainer()
                string = try container.decode(String.self)
                length = try container.decode(Int.self)
            }
        }

        var toLowerCase: [[String]]
        var trim: [[String]]
        var utf16Length: [LengthCase]
        var numberToString: [[String]]
        var jsonString: [[String]]
    }

    /// The decoded fixture file.
    static var vectors: Vectors {
        get throws {
            let url = URL(fileURLWithPath: #filePath).deletingLastPathComponent()
                .appendingPathComponent("Fixtures/ecmascript-vectors.json")
            return try JSONDecoder().decode(Vectors.self, from: Data(contentsOf: url))
        }
    }

    /// The scalar values of a string, so that comparisons are exact rather than canonical-equivalence based.
    func scalarValues(_ string: String) -> [UInt32] {
        string.unicodeScalars.map(\.value)
    }
}
