import Foundation

#if canImport(Glibc)
    import Glibc
#elseif canImport(Musl)
    import Musl
#elseif canImport(Darwin)
    import Darwin
#endif

/// Certificate authorities read from PEM, as curl's `--cacert` reads them: one or more
/// `-----BEGIN CERTIFICATE-----` blocks, each an X.509 certificate in DER, base64-encoded.
///
/// Everything is checked when the value is made, so a fetcher never starts with a trust it cannot use: the text must
/// hold at least one certificate, every block must be a well-formed `CERTIFICATE` block whose DER has the shape of a
/// certificate, and a private key anywhere refuses the whole text (a key does not belong in a trust file, and a
/// fetcher must not carry it). Text outside the blocks, such as the comments of a system bundle or the output of
/// `openssl x509 -text`, is ignored. The certificates are kept as DER; a self-signed server certificate works as
/// its own authority.
///
/// ```swift
/// let authorities = try CertificateAuthorities(pemFile: "/etc/myapp/private-ca.pem")
/// let fetcher = HTTPCredentialFetcher(endpoint: endpoint, trust: .authorities([authorities])) { account, request in
///     …
/// }
/// ```
///
/// The description says how many certificates there are, never what they hold.
public struct CertificateAuthorities: Sendable, Hashable, CustomStringConvertible {
    /// The largest PEM text read: 8 MiB, far more than a system's whole bundle (about 200 KiB).
    public static let maximumPEMSize = 8 << 20

    /// The certificates, in DER, in the order of their blocks.
    package let certificates: [[UInt8]]

    /// How many certificates there are.
    public var count: Int { certificates.count }

    /// Reads the authorities from PEM text.
    ///
    /// - Parameter pem: The PEM text: one or more `CERTIFICATE` blocks, with any text between them.
    /// - Throws: ``CertificateTrustError`` when the text is too large, holds no certificate, a block is malformed,
    ///   is not a certificate, or is a private key. The error never quotes the text.
    public init(pem: some Sequence<UInt8>) throws(CertificateTrustError) {
        let bytes = Array(pem)
        guard bytes.count <= Self.maximumPEMSize else {
            throw CertificateTrustError(
                .tooLarge, reason: "the PEM text is larger than \(Self.maximumPEMSize >> 20) MiB")
        }
        certificates = try Self.parse(bytes)
    }

    /// Reads the authorities from a PEM file, as curl's `--cacert` does.
    ///
    /// - Parameter path: The file's path.
    /// - Throws: ``CertificateTrustError`` with ``CertificateTrustError/Code/unreadable`` when the file cannot be
    ///   read, and what ``init(pem:)`` throws for its content. The error names neither the path nor the content.
    public init(pemFile path: String) throws(CertificateTrustError) {
        try self.init(pem: try Self.readFile(path))
    }

    /// The certificates as PEM, one block each, for a transport that takes PEM.
    package var pem: [UInt8] {
        var text = ""
        for certificate in certificates {
            text += "-----BEGIN CERTIFICATE-----\n"
            let encoded = Data(certificate).base64EncodedString()
            var start = encoded.startIndex
            while start < encoded.endIndex {
                let end = encoded.index(start, offsetBy: 64, limitedBy: encoded.endIndex) ?? encoded.endIndex
                text += encoded[start..<end] + "\n"
                start = end
            }
            text += "-----END CERTIFICATE-----\n"
        }
        return Array(text.utf8)
    }

    /// `CertificateAuthorities(N certificates)`.
    public var description: String {
        "CertificateAuthorities(\(count) certificate\(count == 1 ? "" : "s"))"
    }

    // MARK: - Reading

    private static func readFile(_ path: String) throws(CertificateTrustError) -> [UInt8] {
        let descriptor = open(path, O_RDONLY | O_CLOEXEC)
        guard descriptor >= 0 else { throw unreadable(errno) }
        defer { close(descriptor) }
        var bytes: [UInt8] = []
        var buffer = [UInt8](repeating: 0, count: 64 << 10)
        while true {
            let count = buffer.withUnsafeMutableBytes { read(descriptor, $0.baseAddress, $0.count) }
            if count < 0 {
                if errno == EINTR { continue }
                throw unreadable(errno)
            }
            if count == 0 { return bytes }
            bytes.append(contentsOf: buffer[..<count])
            guard bytes.count <= maximumPEMSize else {
                throw CertificateTrustError(
                    .tooLarge, reason: "the certificate file is larger than \(maximumPEMSize >> 20) MiB")
            }
        }
    }

    private static func unreadable(_ error: Int32) -> CertificateTrustError {
        CertificateTrustError(
            .unreadable, reason: "the certificate file could not be read: \(String(cString: strerror(error)))")
    }

    // MARK: - PEM

    private static func parse(_ bytes: [UInt8]) throws(CertificateTrustError) -> [[UInt8]] {
        let lines = bytes.split(separator: UInt8(ascii: "\n"), omittingEmptySubsequences: false).map { line in
            String(decoding: line, as: UTF8.self).trimmingCharacters(in: .whitespacesAndNewlines)
        }
        var certificates: [[UInt8]] = []
        var block = 0
        var index = 0
        while index < lines.count {
            guard let label = boundary("BEGIN", lines[index]) else {
                index += 1
                continue
            }
            block += 1
            if label.hasSuffix("PRIVATE KEY") {
                throw CertificateTrustError(
                    .privateKey,
                    reason: "block \(block) of the PEM text is a private key; pass only certificates, and keep the "
                        + "key out of the trust file"
                )
            }
            guard label == "CERTIFICATE" else {
                throw CertificateTrustError(
                    .notACertificate, reason: "block \(block) of the PEM text is not a CERTIFICATE block")
            }
            var body = ""
            index += 1
            while index < lines.count, boundary("END", lines[index]) == nil {
                body += lines[index]
                index += 1
            }
            guard index < lines.count, boundary("END", lines[index]) == label else {
                throw CertificateTrustError(
                    .malformed, reason: "block \(block) of the PEM text has no matching END line")
            }
            index += 1
            guard let der = Data(base64Encoded: body), !der.isEmpty else {
                throw CertificateTrustError(.malformed, reason: "block \(block) of the PEM text is not valid base64")
            }
            let certificate = Array(der)
            guard isCertificate(certificate) else {
                throw CertificateTrustError(
                    .notACertificate, reason: "block \(block) of the PEM text does not hold an X.509 certificate")
            }
            certificates.append(certificate)
        }
        guard !certificates.isEmpty else {
            throw CertificateTrustError(
                .noCertificate, reason: "the PEM text holds no -----BEGIN CERTIFICATE----- block")
        }
        return certificates
    }

    /// The label of a `-----BEGIN label-----` or `-----END label-----` line.
    private static func boundary(_ kind: String, _ line: String) -> String? {
        let prefix = "-----\(kind) "
        guard line.hasPrefix(prefix), line.hasSuffix("-----"), line.count >= prefix.count + 5 else { return nil }
        return String(line.dropFirst(prefix.count).dropLast(5))
    }

    // MARK: - DER

    /// Whether DER has the shape of an X.509 certificate: a SEQUENCE of exactly a SEQUENCE (the signed part, which
    /// starts with its version or serial number), a SEQUENCE (the algorithm) and a BIT STRING (the signature).
    package static func isCertificate(_ der: [UInt8]) -> Bool {
        guard let outer = element(der, at: 0), outer.tag == 0x30, outer.end == der.count else { return false }
        var offset = outer.contentStart
        var tags: [UInt8] = []
        while offset < outer.end {
            guard let inner = element(der, at: offset), inner.end <= outer.end else { return false }
            if tags.isEmpty {
                guard inner.contentStart < inner.end, [0xA0, 0x02].contains(der[inner.contentStart]) else {
                    return false
                }
            }
            tags.append(inner.tag)
            offset = inner.end
        }
        return tags == [0x30, 0x30, 0x03]
    }

    /// One DER element at `offset`: its tag, where its content starts and where it ends; `nil` when it does not fit.
    private static func element(_ der: [UInt8], at offset: Int) -> (tag: UInt8, contentStart: Int, end: Int)? {
        guard offset + 2 <= der.count else { return nil }
        let tag = der[offset]
        let first = Int(der[offset + 1])
        var length = 0
        var contentStart = offset + 2
        if first < 0x80 {
            length = first
        } else {
            let count = first & 0x7F
            guard (1...4).contains(count), contentStart + count <= der.count else { return nil }
            for byte in der[contentStart..<(contentStart + count)] { length = length << 8 | Int(byte) }
            contentStart += count
        }
        guard contentStart + length <= der.count else { return nil }
        return (tag, contentStart, contentStart + length)
    }
}
