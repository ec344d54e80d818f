/// Why the coordinator on Redis could not be made or could not answer.
///
/// A fleet's coordination fails open: a replica that sees one of these from ``RedisFleetCoordinator/decide(_:)`` or
/// ``RedisFleetCoordinator/fetchEnded(_:lease:outcome:)`` decides locally, as `FleetCoordination` describes. The
/// reason never holds the password, a credential, or the server's own words after an authentication failure.
public struct RedisCoordinatorError: Error, Sendable, Hashable, CustomStringConvertible {
    /// What went wrong.
    public enum Code: String, Sendable, Hashable {
        /// A configuration value is out of range or malformed.
        case invalidConfiguration
        /// hiredis 0.14 (`libhiredis.so.0.14`, Debian's `libhiredis0.14`) or libcurl (`libcurl.so.4`) is not
        /// installed.
        case libraryMissing
        /// The server could not be reached within the connect timeout.
        case connectionFailed
        /// The server refused the username or password.
        case authenticationFailed
        /// The connection broke or a reply did not come within the command timeout; the next command reconnects.
        case connectionLost
        /// The command's deadline passed before it could be sent: earlier commands held the connection.
        case timedOut
        /// Too many commands are waiting for the connection already.
        case busy
        /// The server answered with an error.
        case serverError
        /// The server's reply is not what the coordinator's scripts return.
        case unexpectedReply
    }

    /// What went wrong.
    public let code: Code
    /// Why, in words.
    public let reason: String

    /// Creates an error.
    ///
    /// - Parameters:
    ///   - code: What went wrong.
    ///   - reason: Why, in words; never a secret.
    public init(_ code: Code, reason: String) {
        self.code = code
        self.reason = reason
    }

    /// The code and the reason.
    public var description: String { "\(code.rawValue): \(reason)" }
}
