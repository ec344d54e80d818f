/// The host's key for one of its users: whatever identifies the backend session the engine fetches credentials for.
///
/// It is opaque to the engine and is shown in events and logs, so it should not be a secret itself. An engine or a
/// pool signs in only an account whose ID passes ``validate()``: not empty, at most ``maximumLength`` bytes of UTF-8,
/// and without control characters, so an ID can neither forge a log line nor grow an error's reason without bound.
/// ``description`` shows any ID safely: control characters escaped, a long one cut short.
public struct AccountID: Hashable, Sendable, Codable, ExpressibleByStringLiteral, CustomStringConvertible {
    /// The host's identifier.
    public let rawValue: String

    /// Creates an account ID.
    ///
    /// - Parameter rawValue: The host's identifier for the user.
    public init(_ rawValue: String) {
        self.rawValue = rawValue
    }

    /// Creates an account ID from a string literal.
    ///
    /// - Parameter value: The host's identifier for the user.
    public init(stringLiteral value: String) {
        self.rawValue = value
    }

    /// The longest ID, in bytes of UTF-8, that an engine or a pool signs in: 256.
    public static let maximumLength = 256

    /// Checks that the ID can name an account: not empty, at most ``maximumLength`` bytes of UTF-8, and free of
    /// control characters (U+0000 to U+001F, U+007F to U+009F, and the line and paragraph separators U+2028 and
    /// U+2029).
    ///
    /// Every call of ``SessionEngine`` and ``SessionPool`` that signs an account in or switches to it checks its ID
    /// first. The error's reason never repeats the ID.
    ///
    /// - Throws: ``SessionError`` with ``SessionError/Code/invalidAccount`` saying which rule the ID breaks.
    public func validate() throws(SessionError) {
        if rawValue.isEmpty {
            throw SessionError(.invalidAccount, reason: "the account ID is empty")
        }
        let length = rawValue.utf8.count
        if length > Self.maximumLength {
            throw SessionError(
                .invalidAccount,
                reason: "the account ID is \(length) bytes long, over the bound of \(Self.maximumLength) bytes")
        }
        if let offset = rawValue.unicodeScalars.firstIndex(where: Self.isControl) {
            let position = rawValue.unicodeScalars.distance(from: rawValue.unicodeScalars.startIndex, to: offset)
            throw SessionError(
                .invalidAccount,
                reason: "the account ID has a control character at position \(position); IDs appear in log records")
        }
    }

    static func isControl(_ scalar: Unicode.Scalar) -> Bool {
        switch scalar.value {
        case 0x00...0x1F, 0x7F...0x9F, 0x2028, 0x2029: true
        default: false
        }
    }

    /// The ID as logs and error reasons show it: control characters escaped (`\u{A}`), and an ID over
    /// ``maximumLength`` bytes cut to its first 64 characters and its length.
    public var description: String {
        guard rawValue.utf8.count > Self.maximumLength || rawValue.unicodeScalars.contains(where: Self.isControl)
        else { return rawValue }
        var shown = ""
        for scalar in rawValue.unicodeScalars.prefix(64) {
            shown +=
                Self.isControl(scalar) ? "\\u{\(String(scalar.value, radix: 16, uppercase: true))}" : String(scalar)
        }
        return rawValue.unicodeScalars.count > 64 ? shown + "… (\(rawValue.utf8.count) bytes)" : shown
    }
}
