import CSessionEngineCurl
import Synchronization

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
/// The bundle a transfer hands to libcurl (the given certificates as PEM, followed by the system's bundle when it is
/// included, since libcurl reads one or the other) is made once, when the trust is made: the system's bundle is read
/// then and not again for each transfer. libcurl takes at most ``maximumBundleSize`` bytes of it;
/// ``init(authorities:includingSystem:)`` refuses a larger one, and a fetcher given one from
/// ``authorities(_:includingSystem:)`` fails every fetch as a misconfiguration before connecting. libcurl parses the
/// bundle again for each new connection, on the one thread that drives every transfer of the process: keep it to the
/// authorities the endpoint needs (a bundle of 12,000 certificates, 7.9 MB, took about 2 s per connection on a busy
/// two-core machine, while the other transfers waited).
///
/// Environment variables such as `SSL_CERT_FILE` or `CURL_CA_BUNDLE` change nothing: libcurl, unlike the `curl`
/// command, does not read them, and the fetcher does not either. One it does read: where libcurl uses OpenSSL (as
/// Debian's does), `SSLKEYLOGFILE` makes it write every connection's TLS keys to that file, so that anyone with the
/// file and a capture of the traffic reads the credentials in it. It is a debugging aid for whoever sets the
/// process's environment; keep it unset in production.
public struct CertificateTrust: Sendable, Hashable, CustomStringConvertible, CustomReflectable {
    /// The authorities trusted besides or instead of the system's.
    public let authorities: [CertificateAuthorities]
    /// Whether the system's authorities are trusted too.
    public let includesSystem: Bool
    /// The bundle a libcurl transfer trusts: `nil` for exactly the system's trust, libcurl's own.
    package let bundle: [UInt8]?
    /// Why the bundle cannot be used, when it is larger than libcurl takes.
    package let problem: CertificateTrustError?

    /// The largest bundle of authorities libcurl takes, in bytes: 8,000,000, its limit for any one option.
    ///
    /// The bundle is the given certificates written as PEM (64 characters a line, without the text between the
    /// blocks), followed, when the system's are included, by the system's whole bundle file (about 200 KiB on
    /// Debian).
    public static let maximumBundleSize = 8_000_000

    private init(checked authorities: [CertificateAuthorities], includesSystem: Bool) {
        self.authorities = authorities
        self.includesSystem = includesSystem
        guard !(includesSystem && authorities.isEmpty) else {
            bundle = nil
            problem = nil
            return
        }
        var bytes = authorities.flatMap(\.pem)
        if includesSystem {
            bytes.append(UInt8(ascii: "\n"))
            bytes += Self.systemBundle()
        }
        if bytes.count > Self.maximumBundleSize {
            bundle = []
            problem = CertificateTrustError(
                .tooLarge,
                reason: "the trusted certificates take \(bytes.count) bytes as PEM"
                    + (includesSystem ? " with the system's bundle" : "")
                    + "; libcurl takes at most \(Self.maximumBundleSize)"
            )
        } else {
            bundle = bytes
            problem = nil
        }
    }

    /// The given authorities, and the system's too when `includingSystem`; refused when libcurl could not take them.
    ///
    /// The same trust as ``authorities(_:includingSystem:)``, checked now: the bundle, the system's included when it
    /// is, must fit in ``maximumBundleSize``.
    ///
    /// - Parameters:
    ///   - authorities: The authorities to trust.
    ///   - includingSystem: Whether the system's authorities are trusted as well; `false` by default.
    /// - Throws: ``CertificateTrustError`` with ``CertificateTrustError/Code/tooLarge`` when the bundle is larger
    ///   than ``maximumBundleSize``.
    public init(authorities: [CertificateAuthorities], includingSystem: Bool = false) throws(CertificateTrustError) {
        self.init(checked: authorities, includesSystem: includingSystem)
        if let problem { throw problem }
    }

    /// The system's authorities, and no others.
    public static let system = CertificateTrust(checked: [], includesSystem: true)

    /// The given authorities, and the system's too when `includingSystem`.
    ///
    /// The system's bundle, when included, is read now, once for this trust. A bundle larger than
    /// ``maximumBundleSize`` makes every fetch fail as a misconfiguration, before any connection;
    /// ``init(authorities:includingSystem:)`` refuses it here instead.
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
        CertificateTrust(checked: authorities, includesSystem: includingSystem)
    }

    /// Whether this is exactly the system's trust, with nothing added or taken away.
    package var isSystem: Bool { includesSystem && authorities.isEmpty }

    /// Every given certificate, in DER.
    package var certificates: [[UInt8]] { authorities.flatMap(\.certificates) }

    /// Every given certificate as one PEM text, without the system's bundle.
    package var pem: [UInt8] { authorities.flatMap(\.pem) }

    /// `system`, or how many certificates are trusted and whether the system's are too; never what they hold.
    public var description: String {
        guard !isSystem else { return "system" }
        let count = authorities.reduce(0) { $0 + $1.count }
        return "\(count) certificate\(count == 1 ? "" : "s")" + (includesSystem ? " and the system's" : " only")
    }

    /// A mirror with how many certificates are given and whether the system's are included, instead of the bundle's
    /// bytes.
    public var customMirror: Mirror {
        Mirror(
            self,
            children: ["certificates": authorities.reduce(0) { $0 + $1.count }, "includesSystem": includesSystem],
            displayStyle: .struct
        )
    }

    /// Two trusts are equal when they trust the same given authorities and both include the system's or neither.
    public static func == (lhs: CertificateTrust, rhs: CertificateTrust) -> Bool {
        lhs.authorities == rhs.authorities && lhs.includesSystem == rhs.includesSystem
    }

    /// Hashes what ``==(_:_:)`` compares.
    public func hash(into hasher: inout Hasher) {
        hasher.combine(authorities)
        hasher.combine(includesSystem)
    }

    // MARK: - The system's bundle

    /// Counts the reads of the system's bundle made by the task that sets it, and by its child tasks; for tests.
    package final class BundleReads: Sendable {
        private let count = SanitizedMutex(0)

        package init() {}

        /// How many reads there were.
        package var value: Int { count.withLock { $0 } }

        fileprivate func add() {
            count.withLock { $0 += 1 }
        }
    }

    /// Where the reads of the system's bundle are counted, if anywhere.
    @TaskLocal package static var bundleReads: BundleReads?

    /// The system's bundle file, or nothing when there is none to read (then libcurl's directory is the system's).
    private static func systemBundle() -> [UInt8] {
        bundleReads?.add()
        var bytes: UnsafeMutablePointer<UInt8>?
        var length = 0
        guard se_curl_read_system_bundle(&bytes, &length) == 0, let bytes else { return [] }
        defer { se_curl_free(bytes) }
        return Array(UnsafeBufferPointer(start: bytes, count: length))
    }
}
