import Foundation

#if canImport(FoundationNetworking)
    import FoundationNetworking
#endif

/// The request the host's `authenticate` closure prepared, checked so that nothing in it can break a request line or
/// a header line when libcurl sends it.
struct CheckedHTTPRequest: Sendable {
    /// The absolute URL.
    var url: String
    /// The method, an HTTP token.
    var method: String
    /// The header fields, `Host` first; every name is a token and no value holds a control character.
    var fields: [(name: String, value: String)]
    /// The body.
    var body: [UInt8]

    /// Converts the request the host's `authenticate` closure prepared.
    ///
    /// - Throws: ``SessionError`` (not transient) for a method, header name or header value that would not survive
    ///   as one HTTP/1.1 line; the reason names the header, never its value.
    init(_ request: URLRequest) throws(SessionError) {
        guard let url = request.url, let host = url.host,
            let components = URLComponents(url: url, resolvingAgainstBaseURL: false)
        else {
            throw SessionError(.fetchFailed, reason: "the request has no usable URL", isTransient: false)
        }
        let method = request.httpMethod ?? "GET"
        guard Self.isToken(method) else {
            throw SessionError(.fetchFailed, reason: "the request's method is not an HTTP token", isTransient: false)
        }
        var bare = host
        if bare.hasPrefix("["), bare.hasSuffix("]") { bare = String(bare.dropFirst().dropLast()) }
        let path = components.percentEncodedPath.isEmpty ? "/" : components.percentEncodedPath
        let target = path + (components.percentEncodedQuery.map { "?" + $0 } ?? "")
        guard target.utf8.allSatisfy({ $0 > 0x20 && $0 < 0x7F }) else {
            throw SessionError(
                .fetchFailed, reason: "the request's URL path is not printable ASCII", isTransient: false)
        }
        let hostHeader = (bare.contains(":") ? "[\(bare)]" : bare) + (url.port.map { ":\($0)" } ?? "")
        let body = request.httpBody.map { Array($0) } ?? []
        // The transfer owns framing, compression and the connection's lifetime; the host owns everything else.
        let owned: Set<String> = ["host", "connection", "content-length", "transfer-encoding", "accept-encoding", "te"]
        var fields: [(name: String, value: String)] = [("Host", hostHeader)]
        for (name, value) in (request.allHTTPHeaderFields ?? [:]).sorted(by: { $0.key < $1.key })
        where !owned.contains(name.lowercased()) {
            guard Self.isToken(name) else {
                throw SessionError(
                    .fetchFailed, reason: "a request header name is not an HTTP token", isTransient: false)
            }
            guard value.utf8.allSatisfy({ $0 == 0x09 || ($0 >= 0x20 && $0 != 0x7F) }) else {
                throw SessionError(
                    .fetchFailed,
                    reason: "the request header \(name) holds a control character such as CR or LF",
                    isTransient: false
                )
            }
            fields.append((name, value))
        }
        fields.append(("Accept-Encoding", "identity"))
        fields.append(("Connection", "close"))
        if !body.isEmpty || method == "POST" || method == "PUT" {
            fields.append(("Content-Length", String(body.count)))
        }
        self.url = url.absoluteString
        self.method = method
        self.fields = fields
        self.body = body
    }

    /// The header lines for a transfer that writes the request line, `Host`, `Connection` and the body's framing
    /// itself; `Expect:` keeps it from waiting for a `100 Continue` before sending a body.
    var headerLines: [String] {
        let framing: Set<String> = ["host", "connection", "content-length"]
        return fields.filter { !framing.contains($0.name.lowercased()) }.map { "\($0.name): \($0.value)" } + ["Expect:"]
    }

    private static func isToken(_ text: String) -> Bool {
        !text.isEmpty
            && text.utf8.allSatisfy { byte in
                switch byte {
                case 0x30...0x39, 0x41...0x5A, 0x61...0x7A: true
                default: Array("!#$%&'*+-.^_`|~".utf8).contains(byte)
                }
            }
    }
}
