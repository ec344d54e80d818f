/// Which certificate authorities an `https` endpoint's certificate must chain to.
///
/// ``system`` (the default) trusts what the system trusts: on Linux the bundle libcurl was built to read (Debian:
/// `/etc/ssl/certs/ca-certificates.crt` and `/etc/ssl/certs`, maintained by `update-ca-certificates`), on Apple
/// platforms the system's trust settings. ``authorities(_:includingSystem:)`` trusts given authorities, a private CA
/// for example, instead of the system's or beside them. The certificate's name must match the endpoint's host in
/// every case; nothing here turns verification off.
///
/// ```swift
/// let privateCA = try CertificateAuthorities(pemFile: "/etc/myapp/ca.pem")
/// let fetcher = HTTPCredentialFetcher(endpoint: endpoint, trust: .authorities([privateCA])) { account, request in
///     …
/// }
/// ```
///
/// Environment variables such as `SSL_CERT_FILE` or `CURL_CA_BUNDLE` change nothing: libcurl, unlike the `curl`
/// command, does not read them, and the fetcher does not either.
public struct CertificateTrust: Sendable, Hashable, CustomStringConvertible {
    /// The authorities trusted besides or instead of the system's.
    public let authorities: [CertificateAuthorities]
    /// Whether the system's authorities are trusted too.
    public let includesSystem: Bool

    private init(authorities: [CertificateAuthorities], includesSystem: Bool) {
        self.authorities = authorities
        self.includesSystem = includesSystem
    }

    /// The system's authorities, and no others.
    public static let system = CertificateTrust(authorities: [], includesSystem: true)

    /// The given authorities, and the system's too when `includingSystem`.
    ///
    /// - Parameters:
    ///   - authorities: The authorities to trust, for example a private CA read with
    ///     ``CertificateAuthorities/init(pemFile:)``. With none and `includingSystem` false, no certificate is
    ///     trusted and every `https` fetch fails.
    ///   - includingSystem: Whether the system's authorities are trusted as well. `false` (the default) pins the
    ///     endpoint to the given ones, as curl's `--cacert` does: a certificate from a public authority is refused.
    /// - Returns: The trust.
    public static func authorities(_ authorities: [CertificateAuthorities], includingSystem: Bool = false)
        -> CertificateTrust
    {
        CertificateTrust(authorities: authorities, includesSystem: includingSystem)
    }

    /// Whether this is exactly the system's trust, with nothing added or taken away.
    package var isSystem: Bool { includesSystem && authorities.isEmpty }

    /// Every given certificate, in DER.
    package var certificates: [[UInt8]] { authorities.flatMap(\.certificates) }

    /// Every given certificate as one PEM text.
    package var pem: [UInt8] { authorities.flatMap(\.pem) }

    /// `system`, or how many certificates are trusted and whether the system's are too; never what they hold.
    public var description: String {
        guard !isSystem else { return "system" }
        let count = authorities.reduce(0) { $0 + $1.count }
        return "\(count) certificate\(count == 1 ? "" : "s")" + (includesSystem ? " and the system's" : " only")
    }
}
