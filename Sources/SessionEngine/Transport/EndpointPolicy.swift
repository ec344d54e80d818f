package import Foundation

/// Which endpoints the HTTP fetcher may send the host's authentication to.
///
/// Only `https`, except plain `http` to a loopback host (`127.0.0.0/8`, `::1`, `localhost`), which never leaves the
/// machine (RFC 8252, section 8.3), or any host when the host opted in explicitly. The check runs before the host's
/// `authenticate` closure and again on the request it returns, so a refused endpoint never sees a connection.
package enum EndpointPolicy {
    /// Checks an endpoint.
    ///
    /// - Parameters:
    ///   - url: The endpoint.
    ///   - allowsInsecureHTTP: Whether the host opted in to plain `http` for any host.
    /// - Returns: Whether the transfer runs over plain HTTP.
    /// - Throws: ``SessionError`` with ``SessionError/Code/fetchFailed`` (not transient) saying why the endpoint is
    ///   refused. The reason never quotes the URL, which may hold a token.
    package static func check(_ url: URL?, allowsInsecureHTTP: Bool) throws(SessionError) -> Bool {
        guard let url, let scheme = url.scheme?.lowercased(), let host = url.host, !host.isEmpty else {
            throw refusal("the endpoint is not an absolute http or https URL with a host")
        }
        switch scheme {
        case "https":
            return false
        case "http":
            guard isLoopback(host) || allowsInsecureHTTP else {
                throw refusal(
                    "the endpoint uses plain http:// to a host that is not loopback, so the credential and the "
                        + "host's authentication would cross the network in clear; use https:// (plain http is "
                        + "allowed only to 127.0.0.0/8, ::1 and localhost, or with allowsInsecureHTTP: true)"
                )
            }
            return true
        default:
            throw refusal("the endpoint's scheme is neither https nor http")
        }
    }

    /// Whether a URL host names this machine: `localhost`, an IPv4 address in `127.0.0.0/8`, or `::1`.
    package static func isLoopback(_ host: String) -> Bool {
        var host = host.lowercased()
        if host.hasPrefix("["), host.hasSuffix("]") { host = String(host.dropFirst().dropLast()) }
        if host.hasSuffix(".") { host.removeLast() }
        if host == "localhost" { return true }
        if let address = IPv6Address(host) { return address == IPv6Address.loopback }
        let parts = host.split(separator: ".", omittingEmptySubsequences: false)
        guard parts.count == 4, parts.first == "127" else { return false }
        return parts.allSatisfy { part in
            !part.isEmpty && part.utf8.count <= 3 && part.utf8.allSatisfy { $0 >= 0x30 && $0 <= 0x39 }
                && Int(part)! <= 255
        }
    }

    private static func refusal(_ reason: String) -> SessionError {
        SessionError(.fetchFailed, reason: reason, isTransient: false)
    }
}

/// The sixteen bytes of an IPv6 address, parsed from its text form (without brackets or a zone).
struct IPv6Address: Equatable {
    static let loopback = IPv6Address(words: [0, 0, 0, 0, 0, 0, 0, 1])

    let words: [UInt16]

    private init(words: [UInt16]) {
        self.words = words
    }

    init?(_ text: String) {
        guard text.contains(":"), !text.contains("%") else { return nil }
        let halves = text.components(separatedBy: "::")
        guard halves.count <= 2 else { return nil }
        func parse(_ part: String) -> [UInt16]? {
            guard !part.isEmpty else { return [] }
            var words: [UInt16] = []
            for group in part.split(separator: ":", omittingEmptySubsequences: false) {
                guard !group.isEmpty, group.utf8.count <= 4, let word = UInt16(group, radix: 16) else { return nil }
                words.append(word)
            }
            return words
        }
        guard let head = parse(halves[0]) else { return nil }
        if halves.count == 2 {
            guard let tail = parse(halves[1]), head.count + tail.count < 8 else { return nil }
            words = head + Array(repeating: 0, count: 8 - head.count - tail.count) + tail
        } else {
            guard head.count == 8 else { return nil }
            words = head
        }
    }
}
