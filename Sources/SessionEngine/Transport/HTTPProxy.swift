public import Foundation

/// Whether the fetcher reaches its endpoint directly or through a forward proxy, which it tunnels through with
/// `CONNECT` (`https` and plain `http` alike).
///
/// - ``environment`` (the default) reads the proxy variables as curl, Go and Python do: for an `https` endpoint
///   `https_proxy`, then `HTTPS_PROXY`, then `all_proxy`, then `ALL_PROXY`; for plain `http` `http_proxy` (never
///   `HTTP_PROXY`, which a CGI request can set), then `all_proxy`, then `ALL_PROXY`. `no_proxy` (or `NO_PROXY`)
///   lists hosts reached directly: `*` for every host, a domain (with or without a leading dot) for itself and its
///   subdomains, an IP address, or an IPv4 range such as `10.0.0.0/8`. They are read at each fetch.
/// - ``none`` never uses a proxy, whatever the environment says.
/// - ``url(_:includingLoopback:)`` always uses the given one.
///
/// A loopback endpoint (`127.0.0.0/8`, `::1`, `localhost`) is reached directly unless the proxy was given with
/// `includingLoopback: true`: a sidecar on the same machine is never sent through a proxy by accident. The proxy's
/// URL takes libcurl's forms: `http://host:port` (the default scheme), `https://host:port` (its certificate checked
/// against the system's authorities), `socks5h://host:port`; credentials in it (`http://user:password@host:port`)
/// are sent to the proxy only and never appear in a description, a mirror (what `dump` prints) or an error.
///
/// What waiting cannot fix is a misconfiguration (``SessionError/Code/backendMisconfigured``) that names the proxy,
/// never its address or credentials: a proxy setting that is not such a URL (checked before any connection: a
/// scheme other than `http`, `https`, `socks4`, `socks4a`, `socks5`, `socks5h`, no host, a bad port, a value with
/// spaces), and a proxy that answers `CONNECT` with 407 (it wants credentials, or refused the ones given), 403 or
/// another 4xx. A proxy that cannot be reached, closes the connection before the tunnel opens, or answers 5xx is an
/// outage of the proxy (``SessionError/Code/fetchFailed``), and an `https` proxy whose certificate is not trusted is
/// a misconfiguration of the proxy, with its verification result; none of them is blamed on the backend.
///
/// On Linux the fetcher's libcurl transfer applies it. On Apple platforms the fetcher's `URLSession` follows the
/// system's proxy settings instead, and this value is not applied.
public struct HTTPProxy: Sendable, Hashable, CustomStringConvertible, CustomDebugStringConvertible, CustomReflectable {
    private enum Kind: Hashable {
        case environment([String: String]?)
        case none
        case url(URL)
    }

    private let kind: Kind
    /// Whether loopback endpoints go through the proxy too.
    public let includesLoopback: Bool

    private init(kind: Kind, includesLoopback: Bool) {
        self.kind = kind
        self.includesLoopback = includesLoopback
    }

    /// The proxy the process's environment names, as curl reads it; loopback endpoints are reached directly.
    public static let environment = HTTPProxy(kind: .environment(nil), includesLoopback: false)

    /// No proxy, whatever the environment says.
    public static let none = HTTPProxy(kind: .none, includesLoopback: false)

    /// Always the given proxy.
    ///
    /// - Parameters:
    ///   - url: The proxy, for example `http://proxy.internal:3128`.
    ///   - includingLoopback: Whether a loopback endpoint goes through it too; `false` by default.
    /// - Returns: The proxy setting.
    public static func url(_ url: URL, includingLoopback: Bool = false) -> HTTPProxy {
        HTTPProxy(kind: .url(url), includesLoopback: includingLoopback)
    }

    /// The proxy `variables` name, read as ``environment`` reads the process's; for tests.
    package static func environment(_ variables: [String: String], includingLoopback: Bool = false) -> HTTPProxy {
        HTTPProxy(kind: .environment(variables), includesLoopback: includingLoopback)
    }

    /// The proxy for `endpoint`, as libcurl takes it, or `nil` to connect directly.
    package func proxy(for endpoint: URL) -> String? {
        choice(for: endpoint)?.value
    }

    /// The proxy for `endpoint`, checked: `nil` to connect directly.
    ///
    /// - Throws: ``SessionError/Code/backendMisconfigured`` when the setting is not a proxy URL libcurl can use; the
    ///   error names the setting (the variable, or the given URL), never its value.
    package func checkedProxy(for endpoint: URL) throws(SessionError) -> String? {
        guard let (value, source) = choice(for: endpoint) else { return nil }
        guard Self.isUsable(value) else {
            throw SessionError.backendMisconfigured(
                "the proxy setting (\(source)) is not a proxy URL the fetcher can use: it needs a scheme of http, "
                    + "https, socks4, socks4a, socks5 or socks5h, a host and at most a port, and no spaces")
        }
        return value
    }

    /// The proxy for `endpoint` and where it was set, or `nil` to connect directly.
    private func choice(for endpoint: URL) -> (value: String, source: String)? {
        guard let host = endpoint.host?.lowercased(), let scheme = endpoint.scheme?.lowercased() else { return nil }
        if EndpointPolicy.isLoopback(host) && !includesLoopback { return nil }
        switch kind {
        case .none:
            return nil
        case .url(let url):
            return (url.absoluteString, "HTTPProxy.url")
        case .environment(let variables):
            let variables = variables ?? ProcessInfo.processInfo.environment
            func first(_ names: String...) -> (value: String, source: String)? {
                names.lazy.compactMap { name in variables[name].map { ($0, name) } }.first { !$0.0.isEmpty }
            }
            let proxy =
                scheme == "https"
                ? first("https_proxy", "HTTPS_PROXY", "all_proxy", "ALL_PROXY")
                : first("http_proxy", "all_proxy", "ALL_PROXY")
            guard let proxy else { return nil }
            if let excluded = first("no_proxy", "NO_PROXY"), Self.matches(host, excluded.value) { return nil }
            return proxy
        }
    }

    /// The schemes libcurl speaks to a proxy.
    private static let schemes: Set<String> = ["http", "https", "socks4", "socks4a", "socks5", "socks5h"]

    /// Whether libcurl can use `value` as a proxy: `scheme://[user:password@]host[:port][/]`, the scheme `http`
    /// when there is none, as libcurl reads it.
    package static func isUsable(_ value: String) -> Bool {
        guard !value.isEmpty, value.unicodeScalars.allSatisfy({ $0.value > 0x20 && $0.value < 0x7F }) else {
            return false
        }
        let text = value.contains("://") ? value : "http://" + value
        guard let components = URLComponents(string: text), let scheme = components.scheme?.lowercased(),
            schemes.contains(scheme), let host = components.host, !host.isEmpty,
            components.path.isEmpty || components.path == "/", components.query == nil, components.fragment == nil
        else { return false }
        if let port = components.port, !(1...65535).contains(port) { return false }
        return true
    }

    /// Whether `host` is in a `no_proxy` list.
    package static func matches(_ host: String, _ list: String) -> Bool {
        var host = host.lowercased()
        if host.hasPrefix("["), host.hasSuffix("]") { host = String(host.dropFirst().dropLast()) }
        if host.hasSuffix(".") { host.removeLast() }
        for item in list.split(whereSeparator: { $0 == "," || $0 == " " }) {
            var entry = item.trimmingASCIISpaces().lowercased()
            if entry == "*" { return true }
            if entry.hasPrefix("[") {
                entry = String(entry.dropFirst().prefix { $0 != "]" })
            } else if entry.hasPrefix(".") {
                entry.removeFirst()
            }
            if entry.hasSuffix(".") { entry.removeLast() }
            guard !entry.isEmpty else { continue }
            if let range = IPv4Range(entry) {
                if let address = IPv4Range.address(host), range.contains(address) { return true }
                continue
            }
            if host == entry || host.hasSuffix("." + entry) { return true }
        }
        return false
    }

    /// `environment`, `none`, or `proxy at host:port` (never credentials), with `, loopback too` when it applies
    /// to loopback endpoints.
    public var description: String {
        let loopback = includesLoopback ? ", loopback too" : ""
        switch kind {
        case .environment: return "environment" + loopback
        case .none: return "none"
        case .url(let url):
            let port = url.port.map { ":\($0)" } ?? ""
            return "proxy at \(url.host ?? "?")\(port)" + loopback
        }
    }

    /// The same as ``description``.
    public var debugDescription: String { description }

    /// A mirror with the same fields as ``description``: the setting without credentials, and whether it applies to
    /// loopback endpoints. The environment's variables and the URL's user and password are left out.
    public var customMirror: Mirror {
        let setting: String =
            switch kind {
            case .environment: "environment"
            case .none: "none"
            case .url(let url): "proxy at \(url.host ?? "?")" + (url.port.map { ":\($0)" } ?? "")
            }
        return Mirror(
            self, children: ["setting": setting, "includesLoopback": includesLoopback], displayStyle: .struct)
    }
}

/// An IPv4 address range in CIDR form, `a.b.c.d/n`, or one address.
private struct IPv4Range {
    let network: UInt32
    let mask: UInt32

    init?(_ text: String) {
        let parts = text.split(separator: "/", omittingEmptySubsequences: false)
        guard parts.count <= 2, let address = Self.address(String(parts[0])) else { return nil }
        var bits = 32
        if parts.count == 2 {
            guard let value = Int(parts[1]), (0...32).contains(value) else { return nil }
            bits = value
        }
        mask = bits == 0 ? 0 : UInt32.max << UInt32(32 - bits)
        network = address & mask
    }

    func contains(_ address: UInt32) -> Bool {
        address & mask == network
    }

    static func address(_ text: String) -> UInt32? {
        let parts = text.split(separator: ".", omittingEmptySubsequences: false)
        guard parts.count == 4 else { return nil }
        var value: UInt32 = 0
        for part in parts {
            guard !part.isEmpty, part.utf8.count <= 3, part.utf8.allSatisfy({ $0 >= 0x30 && $0 <= 0x39 }),
                let byte = UInt32(part), byte <= 255
            else { return nil }
            value = value << 8 | byte
        }
        return value
    }
}
