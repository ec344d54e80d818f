/// The host's key for one of its users: whatever identifies the backend session the engine fetches credentials for.
///
/// It is opaque to the engine and is shown in events and logs, so it should not be a secret itself.
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

    /// The raw value.
    public var description: String { rawValue }
}
