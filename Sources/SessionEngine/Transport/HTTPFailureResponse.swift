import Foundation

/// A response of the credential endpoint whose status is not 2xx, as ``HTTPCredentialFetcher`` hands it to its
/// ``HTTPFailureClassifier``.
///
/// The body is the one the endpoint sent, read within the fetcher's size limit. It may hold anything the backend or a
/// proxy in front of it wrote: a classifier may look at it, but must never copy it into an error, a log or an event.
/// Its description and its mirror (what `dump` prints) show the status, the header names and the body's size, never
/// a header value or the body, which may carry a session cookie or a token.
public struct HTTPFailureResponse: Sendable, CustomStringConvertible, CustomDebugStringConvertible, CustomReflectable {
    /// The status code.
    public let status: Int
    /// The response body, at most ``HTTPCredentialFetcher/maximumResponseSize`` bytes.
    public let body: [UInt8]
    /// The delay the backend asked for with `Retry-After` (delay-seconds, or an HTTP date read against the
    /// response's `Date`), if it sent one on a 429 or 503.
    public let retryAfter: Duration?
    private let fields: [(name: String, value: String)]

    /// Creates a failure response.
    ///
    /// - Parameters:
    ///   - status: The status code.
    ///   - headers: The header fields, names as sent.
    ///   - body: The response body.
    ///   - retryAfter: The delay the backend asked for, if any.
    public init(status: Int, headers: [(name: String, value: String)], body: [UInt8], retryAfter: Duration? = nil) {
        self.status = status
        self.fields = headers
        self.body = body
        self.retryAfter = retryAfter
    }

    /// The value of a header (matched case-insensitively; repeated fields joined with `, `), or `nil` when absent.
    ///
    /// - Parameter name: The header's name.
    /// - Returns: Its value.
    public func header(_ name: String) -> String? {
        HTTPResponseHead(status: status, fields: fields).value(name)
    }

    /// Whether the body is a JSON object whose `error` member is the string `session_ended`: the endpoint's own
    /// statement that the account's backend session has ended.
    ///
    /// This is the shape ``HTTPFailureClassifier/standard`` requires before a 403 ends the session:
    ///
    /// ```json
    /// {"error": "session_ended"}
    /// ```
    ///
    /// Other members are allowed and ignored. An HTML page, a JSON body with another `error`, or no body at all does
    /// not say so.
    public var saysSessionEnded: Bool {
        guard !body.isEmpty,
            let object = try? JSONSerialization.jsonObject(with: Data(body)) as? [String: Any],
            let error = object["error"] as? String
        else { return false }
        return error == HTTPFailureClassifier.sessionEndedError
    }

    /// `HTTPFailureResponse(status: 403, headers: [Content-Type, Set-Cookie], body: 120 bytes)`: no header value,
    /// nothing of the body.
    public var description: String {
        "HTTPFailureResponse(status: \(status), headers: [\(fields.map(\.name).joined(separator: ", "))], "
            + "body: \(body.count) bytes)"
    }

    /// The same as ``description``.
    public var debugDescription: String { description }

    /// A mirror with the status, the header names, the body's size and the requested delay; no header value, nothing
    /// of the body.
    public var customMirror: Mirror {
        Mirror(
            self,
            children: [
                "status": status, "headerNames": fields.map(\.name), "bodySize": body.count,
                "retryAfter": retryAfter as Any,
            ],
            displayStyle: .struct
        )
    }
}
