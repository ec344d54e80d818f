import CSessionEngineCurl
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
/// Everything that can be checked is checked when the value is made, so a fetcher does not start with a trust it
/// cannot use: the text must hold at least one certificate; every block must be a well-formed `CERTIFICATE` block;
/// its DER must have the structure of an X.509 certificate (a signed part holding, in order, an optional version, a
/// serial number, an algorithm, an issuer, a validity of two times, a subject and a public key, then the signature's
/// algorithm and the signature); where the libcurl in the process uses OpenSSL (Debian's and Ubuntu's do), OpenSSL's
/// parser, the one libcurl reads authorities with, must decode it; and a private key anywhere refuses the whole text
/// (a key does not belong in a trust file, and a fetcher must not carry it). The certificates written as PEM must
/// also fit in what libcurl takes (``CertificateTrust/maximumBundleSize``). Where OpenSSL cannot be asked (libcurl
/// built on another TLS library, Apple platforms), a certificate with that structure but content its TLS library
/// refuses passes here; a fetch then fails with ``SessionError/Code/backendMisconfigured``. Signatures, validity
/// dates and whether a certificate may act as an authority are checked when a server's chain is verified, not here.
/// Text outside the blocks, such as the comments of a system bundle or the output of `openssl x509 -text`, is
/// ignored. The certificates are kept as DER; a self-signed server certificate works as its own authority.
///
/// ```swift
/// let authorities = try CertificateAuthorities(pemFile: "/etc/myapp/private-ca.pem")
/// let fetcher = HTTPCredentialFetcher(endpoint: endpoint, trust: .authorities([authorities])) { account, request in
///     …
/// }
/// ```
///
/// The description says how many certificates there are, never what they hold.
public struct CertificateAuthorities: Sendable, Hashable, CustomStringConvertible, CustomReflectable {
    /// The largest PEM text read: 8 MiB, far more than a system's whole bundle (about 200 KiB).
    public static let maximumPEMSize = 8 << 20

    /// The certificates, in DER, in the order of their blocks.
    package let certificates: [[UInt8]]

    /// How many certificates there are.
    public var count: Int { certificates.count }

    /// Reads the authorities from PEM text.
    ///
    /// - Parameter pem: The PEM text: one or more `CERTIFICATE` blocks, with any text between them.
    /// - Throws: ``CertificateTrustError`` when the text is too large, or its certificates as PEM are larger than
    ///   libcurl takes; when it holds no certificate, a block is malformed, is not a certificate, or is a private
    ///   key. The error never quotes the text.
    public init(pem: some Sequence<UInt8>) throws(CertificateTrustError) {
        let bytes = Array(pem)
        guard bytes.count <= Self.maximumPEMSize else {
            throw CertificateTrustError(
                .tooLarge, reason: "the PEM text is larger than \(Self.maximumPEMSize >> 20) MiB")
        }
        certificates = try Self.parse(bytes)
        let size = certificates.reduce(0) { $0 + Self.pemSize(of: $1) }
        guard size <= CertificateTrust.maximumBundleSize else {
            throw CertificateTrustError(
                .tooLarge,
                reason: "the certificates take \(size) bytes as PEM; libcurl takes at most "
                    + "\(CertificateTrust.maximumBundleSize)"
            )
        }
    }

    /// Authorities taken as they are, unchecked; for tests of what a transfer does with ones its TLS library refuses.
    package init(unchecked certificates: [[UInt8]]) {
        self.certificates = certificates
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
        var text: [UInt8] = []
        text.reserveCapacity(certificates.reduce(0) { $0 + Self.pemSize(of: $1) })
        for certificate in certificates {
            text += Self.begin
            // 64 characters a line, each ended by a line feed (Foundation ends all but the last).
            text += Data(certificate).base64EncodedData(options: [.lineLength64Characters, .endLineWithLineFeed])
            text += [UInt8(ascii: "\n")] + Self.end
        }
        return text
    }

    private static let begin = Array("-----BEGIN CERTIFICATE-----\n".utf8)
    private static let end = Array("-----END CERTIFICATE-----\n".utf8)

    /// How many bytes ``pem`` writes for one certificate.
    private static func pemSize(of certificate: [UInt8]) -> Int {
        let encoded = (certificate.count + 2) / 3 * 4
        let lines = (encoded + 63) / 64
        return begin.count + encoded + lines + end.count
    }

    /// `CertificateAuthorities(N certificates)`.
    public var description: String {
        "CertificateAuthorities(\(count) certificate\(count == 1 ? "" : "s"))"
    }

    /// A mirror with how many certificates there are, instead of their bytes.
    public var customMirror: Mirror {
        Mirror(self, children: ["count": count], displayStyle: .struct)
    }

    // MARK: - Reading

    /// Reads a regular file. Opened without blocking and refused unless it is a regular file: a named pipe or a
    /// device at the path would otherwise hold the caller for as long as its writer, or for ever.
    private static func readFile(_ path: String) throws(CertificateTrustError) -> [UInt8] {
        let descriptor = open(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK | O_NOCTTY)
        guard descriptor >= 0 else { throw unreadable(errno) }
        defer { close(descriptor) }
        var status = stat()
        guard fstat(descriptor, &status) == 0 else { throw unreadable(errno) }
        guard status.st_mode & S_IFMT == S_IFREG else {
            throw CertificateTrustError(
                .unreadable, reason: "the certificate file could not be read: it is not a regular file")
        }
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
        let lines = self.lines(bytes)
        var certificates: [[UInt8]] = []
        var block = 0
        var index = 0
        while index < lines.count {
            guard let label = boundary(begin: true, lines[index]) else {
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
            var body: [UInt8] = []
            index += 1
            while index < lines.count, boundary(begin: false, lines[index]) == nil {
                body += lines[index]
                index += 1
            }
            guard index < lines.count, boundary(begin: false, lines[index]) == label else {
                throw CertificateTrustError(
                    .malformed, reason: "block \(block) of the PEM text has no matching END line")
            }
            index += 1
            guard let der = Data(base64Encoded: Data(body)), !der.isEmpty else {
                throw CertificateTrustError(.malformed, reason: "block \(block) of the PEM text is not valid base64")
            }
            let certificate = Array(der)
            guard isCertificate(certificate) else {
                throw CertificateTrustError(
                    .notACertificate, reason: "block \(block) of the PEM text does not hold an X.509 certificate")
            }
            guard certificate.withUnsafeBufferPointer({ se_curl_check_certificate($0.baseAddress!, $0.count) }) != 0
            else {
                throw CertificateTrustError(
                    .notACertificate,
                    reason: "block \(block) of the PEM text does not hold an X.509 certificate OpenSSL can decode")
            }
            certificates.append(certificate)
        }
        guard !certificates.isEmpty else {
            throw CertificateTrustError(
                .noCertificate, reason: "the PEM text holds no -----BEGIN CERTIFICATE----- block")
        }
        return certificates
    }

    /// The text's lines, each without the white space at its ends, as `trimmingCharacters(in:
    /// .whitespacesAndNewlines)` leaves it: taken byte by byte while a line is ASCII (a system bundle of 200 KiB, or a
    /// text of 8 MiB, in a blink, also unoptimized), as a `String` otherwise, since Unicode has white space beyond
    /// ASCII's.
    private static func lines(_ bytes: [UInt8]) -> [ArraySlice<UInt8>] {
        // ASCII's white space: tab, line feed, vertical tab, form feed, carriage return and space.
        func isSpace(_ byte: UInt8) -> Bool { byte == 0x20 || (byte >= 0x09 && byte <= 0x0D) }
        var lines: [ArraySlice<UInt8>] = []
        bytes.withUnsafeBufferPointer { bytes in
            var start = 0
            while start <= bytes.count {
                var end = start
                var ascii = true
                while end < bytes.count && bytes[end] != UInt8(ascii: "\n") {
                    if bytes[end] >= 0x80 { ascii = false }
                    end += 1
                }
                if ascii {
                    var (first, last) = (start, end)
                    while first < last && isSpace(bytes[first]) { first += 1 }
                    while last > first && isSpace(bytes[last - 1]) { last -= 1 }
                    lines.append(ArraySlice(bytes[first..<last]))
                } else {
                    let line = String(decoding: bytes[start..<end], as: UTF8.self)
                    lines.append(ArraySlice(line.trimmingCharacters(in: .whitespacesAndNewlines).utf8))
                }
                start = end + 1
            }
        }
        return lines
    }

    /// The label of a `-----BEGIN label-----` line, or of an `-----END label-----` one when not `begin`.
    private static func boundary(begin: Bool, _ line: ArraySlice<UInt8>) -> String? {
        let prefix = begin ? beginPrefix : endPrefix
        guard line.count >= prefix.count + dashes.count, line.starts(with: prefix),
            line.suffix(dashes.count).elementsEqual(dashes)
        else { return nil }
        return String(decoding: line.dropFirst(prefix.count).dropLast(dashes.count), as: UTF8.self)
    }

    private static let beginPrefix = Array("-----BEGIN ".utf8)
    private static let endPrefix = Array("-----END ".utf8)
    /// What ends a boundary line.
    private static let dashes = Array("-----".utf8)

    // MARK: - DER

    /// Whether DER has the structure of an X.509 certificate (RFC 5280, section 4.1): a SEQUENCE of exactly the
    /// signed part, a SEQUENCE (the signature's algorithm) and a BIT STRING (the signature); the signed part a
    /// SEQUENCE of an optional `[0]` version, an INTEGER serial number, the SEQUENCEs of the algorithm, the issuer,
    /// the validity (two times), the subject and the public key, and then only the optional `[1]`, `[2]` and `[3]`.
    package static func isCertificate(_ der: [UInt8]) -> Bool {
        guard let outer = element(der, at: 0), outer.tag == 0x30, outer.end == der.count,
            let parts = children(der, outer), parts.map(\.tag) == [0x30, 0x30, 0x03],
            let signed = children(der, parts[0])
        else { return false }
        var fields = signed[...]
        if fields.first?.tag == 0xA0 { fields.removeFirst() }
        guard fields.count >= 6, fields.prefix(6).map(\.tag) == [0x02, 0x30, 0x30, 0x30, 0x30, 0x30],
            fields[fields.startIndex].contentStart < fields[fields.startIndex].end,
            let validity = children(der, fields[fields.startIndex + 3]), validity.count == 2,
            validity.allSatisfy({ $0.tag == 0x17 || $0.tag == 0x18 })
        else { return false }
        var last: UInt8 = 0xA0
        for field in fields.dropFirst(6) {
            guard [0xA1, 0xA2, 0xA3].contains(field.tag), field.tag > last else { return false }
            last = field.tag
        }
        return true
    }

    /// The elements inside a constructed element, which must fill it exactly; `nil` when they do not.
    private static func children(_ der: [UInt8], _ parent: (tag: UInt8, contentStart: Int, end: Int))
        -> [(tag: UInt8, contentStart: Int, end: Int)]?
    {
        var offset = parent.contentStart
        var elements: [(tag: UInt8, contentStart: Int, end: Int)] = []
        while offset < parent.end {
            guard let inner = element(der, at: offset), inner.end <= parent.end else { return nil }
            elements.append(inner)
            offset = inner.end
        }
        return elements
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
