/// The status and header fields of a backend's response, as the fetcher's transfers receive them.
struct HTTPResponseHead: Sendable {
    /// The status code.
    var status: Int
    /// The header fields, in the order received; names as sent.
    var fields: [(name: String, value: String)]
    /// The HTTP version of the status line (`1.1`, `2`), or empty when the transfer does not say.
    var version = ""

    init(status: Int, fields: [(name: String, value: String)], version: String = "") {
        self.status = status
        self.fields = fields
        self.version = version
    }

    /// Every value of the header with this name (matched case-insensitively), in order.
    func values(_ name: String) -> [String] {
        let lowered = name.lowercased()
        return fields.filter { $0.name.lowercased() == lowered }.map(\.value)
    }

    /// The values of the header with this name joined with `, `, or `nil` when absent.
    func value(_ name: String) -> String? {
        let all = values(name)
        return all.isEmpty ? nil : all.joined(separator: ", ")
    }

    /// The HTTP version and the status of a status line `HTTP/<version> <three digits>[ <reason>]`, or `nil` when it
    /// is malformed. Each transfer decides which versions it speaks.
    static func statusLine(_ line: String) -> (version: Substring, status: Int)? {
        let parts = line.split(separator: " ", maxSplits: 2, omittingEmptySubsequences: false)
        guard parts.count >= 2, parts[0].hasPrefix("HTTP/"), parts[1].utf8.count == 3,
            parts[1].utf8.allSatisfy({ $0 >= 0x30 && $0 <= 0x39 }), let status = Int(parts[1]), status >= 100
        else { return nil }
        return (parts[0].dropFirst("HTTP/".count), status)
    }

    /// The name and value of one header line without its CRLF, or `nil` when it is malformed: no colon, an empty
    /// name, a space in the name, or leading white space (an obsolete folded line). Both transfers read fields so.
    static func field(_ line: String) -> (name: String, value: String)? {
        guard let colon = line.firstIndex(of: ":"), colon != line.startIndex, !line.hasPrefix(" "),
            !line.hasPrefix("\t"), !line[..<colon].contains(" ")
        else { return nil }
        return (String(line[..<colon]), line[line.index(after: colon)...].trimmingASCIISpaces())
    }
}

/// How the body of an accepted response is framed.
enum BodyFraming: Equatable {
    /// Exactly this many bytes follow the head.
    case length(Int)
    /// `Transfer-Encoding: chunked`.
    case chunked
    /// The body ends when the server closes the connection.
    case untilClose
}

/// The checks every response passes before its body is read, shared by both transfers.
///
/// They run on the head alone, so a response that is refused (a status that is not 2xx, a missing `no-store`, a
/// compressed or oversized body) is never read further.
enum ResponsePolicy {
    /// The largest response body accepted.
    static let maximumBodySize = 64 * 1024
    /// The largest response head read, status line and fields (and, after a chunked body, trailers) together.
    static let maximumHeadSize = 16 * 1024
    /// How many informational (1xx) heads may come before the final one.
    static let maximumInformationalResponses = 4

    /// Checks a response's head and says how its body is framed.
    ///
    /// A response whose status is not 2xx passes with its body, within the same limits, so the fetcher can
    /// classify it (a 403's JSON body may say the session ended); only a 2xx must carry `no-store`.
    ///
    /// - Throws: ``SessionError`` with ``SessionError/Code/backendMisconfigured`` for what only a change to the
    ///   backend fixes (no `no-store`, a compressed body), ``SessionError/Code/fetchFailed`` for any other refusal.
    ///   No reason quotes a header value.
    static func check(_ head: HTTPResponseHead, requiresNoStore: Bool) throws(SessionError) -> BodyFraming {
        if requiresNoStore, (200...299).contains(head.status), !hasNoStore(head.value("Cache-Control")) {
            throw SessionError.backendMisconfigured(
                "the backend's response lacks Cache-Control: no-store, so the credential could be cached"
            )
        }
        for encoding in head.values("Content-Encoding") {
            let codings = encoding.split(separator: ",").map { $0.trimmingASCIISpaces().lowercased() }
            guard codings.allSatisfy({ $0.isEmpty || $0 == "identity" }) else {
                throw SessionError.backendMisconfigured(
                    "the backend sent a compressed body (Content-Encoding) although the fetcher asked for identity; "
                        + "compressed bodies are refused, never decompressed"
                )
            }
        }
        let transferEncodings = head.values("Transfer-Encoding")
            .flatMap { $0.split(separator: ",") }
            .map { $0.trimmingASCIISpaces().lowercased() }
            .filter { !$0.isEmpty }
        let lengths = head.values("Content-Length")
        if !transferEncodings.isEmpty {
            guard transferEncodings == ["chunked"] else {
                throw SessionError.backendMisconfigured(
                    "the backend's Transfer-Encoding is not plain chunked; compressed bodies are refused"
                )
            }
            guard lengths.isEmpty else {
                throw SessionError.fetchFailed("the backend's response has both Content-Length and Transfer-Encoding")
            }
            return .chunked
        }
        guard !lengths.isEmpty else { return .untilClose }
        let declared = Set(lengths.flatMap { $0.split(separator: ",") }.map { $0.trimmingASCIISpaces() })
        guard declared.count == 1, let text = declared.first, !text.isEmpty, text.utf8.count <= 19,
            text.utf8.allSatisfy({ $0 >= 0x30 && $0 <= 0x39 }), let length = Int(text)
        else {
            throw SessionError.fetchFailed("the backend's Content-Length is not one decimal number")
        }
        guard length <= maximumBodySize else {
            throw tooLarge(declared: true)
        }
        return .length(length)
    }

    /// The error for a body past ``maximumBodySize``.
    static func tooLarge(declared: Bool) -> SessionError {
        SessionError.fetchFailed(
            declared
                ? "the backend's Content-Length is larger than \(maximumBodySize) bytes; the body was not read"
                : "the backend's response is larger than \(maximumBodySize) bytes; the transfer was stopped there"
        )
    }

    /// The error for a response that breaks HTTP, or the head's limits; `problem` says what the backend did, and never
    /// quotes it.
    static func protocolError(_ problem: String) -> SessionError {
        SessionError.fetchFailed("the backend \(problem)")
    }

    /// Whether a `Cache-Control` value holds the `no-store` directive.
    static func hasNoStore(_ value: String?) -> Bool {
        guard let value else { return false }
        return value.split(separator: ",").contains { directive in
            directive.trimmingASCIISpaces().lowercased() == "no-store"
        }
    }
}

extension StringProtocol {
    /// The text without leading and trailing spaces and tabs.
    func trimmingASCIISpaces() -> String {
        let scalars = unicodeScalars
        guard let first = scalars.firstIndex(where: { $0 != " " && $0 != "\t" }),
            let last = scalars.lastIndex(where: { $0 != " " && $0 != "\t" })
        else { return "" }
        return String(String.UnicodeScalarView(scalars[first...last]))
    }
}
