import Foundation
import SessionEngine
import SessionEngineBackend
import SessionEngineTestKit
import Testing

/// Trusting given certificate authorities: PEM validated up front with errors that quote nothing, and the fetcher
/// refusing or accepting a TLS backend as its ``CertificateTrust`` says, on the loopback backend with a self-signed
/// certificate and against a private authority made by openssl.
@Suite(.timeLimit(TimeLimits.minutes(2)))
struct CertificateTrustTests {
    static let authority = Task { try await PrivateAuthority.make() }

    // MARK: - PEM

    @Test func aPEMFileOrPEMBytesWithCertificatesAreRead() async throws {
        let authority = try await Self.authority.value
        let file = try CertificateAuthorities(pemFile: authority.certificate)
        #expect(file.count == 1)
        let bytes = try Data(contentsOf: URL(fileURLWithPath: authority.certificate))
        #expect(try CertificateAuthorities(pem: bytes) == file)
        // A bundle with comments between the blocks, as a system's is, holds every certificate.
        let server = try Data(contentsOf: URL(fileURLWithPath: authority.serverCertificate))
        let bundle = Data("# the private authority\n".utf8) + bytes + Data("\nsome text\r\n".utf8) + server
        #expect(try CertificateAuthorities(pem: bundle).count == 2)
        #expect(String(describing: try CertificateAuthorities(pem: bundle)) == "CertificateAuthorities(2 certificates)")
        #expect(try CertificateAuthorities(pemFile: "/etc/ssl/certs/ca-certificates.crt").count > 50)
        #expect(String(describing: CertificateTrust.authorities([file])) == "1 certificate only")
        #expect(
            String(describing: CertificateTrust.authorities([file], includingSystem: true))
                == "1 certificate and the system's")
        #expect(String(describing: CertificateTrust.system) == "system")
    }

    /// Each line is read without the white space at its ends, Unicode's as well as ASCII's; the PEM the transfer is
    /// given reads back as the same certificates.
    @Test func aPEMTextsLinesAreReadWithoutTheWhiteSpaceAtTheirEnds() async throws {
        let authority = try await Self.authority.value
        let plain = try String(contentsOfFile: authority.certificate, encoding: .utf8)
        let expected = try CertificateAuthorities(pem: Data(plain.utf8))
        let lines = plain.split(separator: "\n").map(String.init)
        let spaced = ["# café, ünïcode comment"] + lines.map { " \t\($0) \r" } + [""]
        #expect(try CertificateAuthorities(pem: Data(spaced.joined(separator: "\n").utf8)) == expected)
        // A no-break space (U+00A0) and an ideographic space (U+3000) are white space too.
        let unicode = lines.enumerated().map { $0.offset % 2 == 0 ? "\u{A0}\($0.element)\u{3000}" : $0.element }
        #expect(try CertificateAuthorities(pem: Data(unicode.joined(separator: "\r\n").utf8)) == expected)
        #expect(try CertificateAuthorities(pem: expected.pem) == expected)
        #expect(String(decoding: expected.pem, as: UTF8.self) == plain)
    }

    /// A named pipe at the path (or anything but a regular file) is refused at once: opened without waiting for a
    /// writer, it would hold the caller for ever.
    @Test func aPathThatIsNotARegularFileIsRefusedAtOnce() throws {
        let directory = FileManager.default.temporaryDirectory.appendingPathComponent("pem-\(UUID().uuidString)")
        try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(at: directory) }
        let pipe = directory.appendingPathComponent("authorities.pem").path
        #expect(mkfifo(pipe, 0o600) == 0)
        for path in [pipe, directory.path] {
            // On a thread of its own: read with a blocking open, a pipe would hold it for ever, and the test fails
            // after ten seconds instead of hanging.
            let outcome = Locked<CertificateTrustError?>(nil)
            let done = DispatchSemaphore(value: 0)
            Thread.detachNewThread {
                do throws(CertificateTrustError) {
                    _ = try CertificateAuthorities(pemFile: path)
                } catch {
                    outcome.withLock { $0 = error }
                }
                done.signal()
            }
            #expect(done.wait(timeout: .now() + 10) == .success, "reading \(path) did not return")
            #expect(outcome.value?.code == .unreadable)
            #expect(outcome.value?.reason.contains("not a regular file") == true)
            #expect(outcome.value.map { !"\($0)".contains(path) } == true, "the error names the path")
        }
    }

    @Test func pemThatIsNotCertificatesIsRefusedWithoutQuotingIt() async throws {
        let authority = try await Self.authority.value
        let certificate = try String(contentsOfFile: authority.certificate, encoding: .utf8)
        let key = try String(contentsOfFile: authority.serverKey, encoding: .utf8)
        let body = certificate.split(separator: "\n").dropFirst().dropLast().joined()
        let cases: [(String, CertificateTrustError.Code)] = [
            ("", .noCertificate),
            ("secret-token-1234 is not PEM", .noCertificate),
            (certificate + key, .privateKey),
            ("-----BEGIN CERTIFICATE-----\n\(body)\n", .malformed),
            ("-----BEGIN CERTIFICATE-----\nsecret-token-1234!!\n-----END CERTIFICATE-----\n", .malformed),
            (
                "-----BEGIN CERTIFICATE-----\n\(Data("secret-token-1234".utf8).base64EncodedString())\n"
                    + "-----END CERTIFICATE-----\n", .notACertificate
            ),
            ("-----BEGIN PUBLIC KEY-----\n\(body)\n-----END PUBLIC KEY-----\n", .notACertificate),
        ]
        for (text, code) in cases {
            do {
                _ = try CertificateAuthorities(pem: Data(text.utf8))
                Issue.record("accepted \(code)")
            } catch {
                #expect(error.code == code, "\(error)")
                let printed = "\(error) \(error.reason)"
                #expect(!printed.contains("secret-token"), "the error quotes the PEM text: \(printed)")
                #expect(!printed.contains(String(body.prefix(16))), "the error quotes the PEM text: \(printed)")
                #expect(!printed.contains(String(key.split(separator: "\n")[1].prefix(16))))
            }
        }
        #expect(throws: CertificateTrustError.self) {
            try CertificateAuthorities(pem: [UInt8](repeating: 0x41, count: CertificateAuthorities.maximumPEMSize + 1))
        }
        let missing = authority.path("missing-secret-name.pem")
        do {
            _ = try CertificateAuthorities(pemFile: missing)
            Issue.record("a missing file was read")
        } catch {
            #expect(error.code == .unreadable)
            #expect(error.reason == "the certificate file could not be read: No such file or directory")
        }
    }

    @Test func aBlockShapedLikeACertificateThatIsNotOneIsRefusedAtCreation() async throws {
        let authority = try await Self.authority.value
        let real = try #require(try CertificateAuthorities(pemFile: authority.certificate).certificates.first)
        // A SEQUENCE of a SEQUENCE starting with an INTEGER, a SEQUENCE and a BIT STRING: the outline of a
        // certificate, and nothing of one inside.
        let outline: [UInt8] = [0x30, 0x0A, 0x30, 0x03, 0x02, 0x01, 0x01, 0x30, 0x00, 0x03, 0x01, 0x00]
        // The real certificate with its version's INTEGER tagged as an OCTET STRING: every structure is in place,
        // and OpenSSL, which libcurl reads authorities with, refuses it.
        var mislabelled = real
        let version: [UInt8] = [0xA0, 0x03, 0x02, 0x01, 0x02]
        let at = try #require((0..<(real.count - 5)).first { Array(real[$0..<($0 + 5)]) == version })
        mislabelled[at + 2] = 0x04
        #expect(CertificateAuthorities.isCertificate(real))
        #expect(!CertificateAuthorities.isCertificate(outline))
        #expect(CertificateAuthorities.isCertificate(mislabelled), "the structure alone passes")
        for (der, openSSL) in [(outline, false), (mislabelled, true)] {
            let pem = "-----BEGIN CERTIFICATE-----\n\(Data(der).base64EncodedString())\n-----END CERTIFICATE-----\n"
            let file = authority.path("shaped-\(der.count).pem")
            try Data(pem.utf8).write(to: URL(fileURLWithPath: file))
            // As PEM bytes, and as a file, the way the demo's --ca-file reads one.
            for error in [
                refusal { _ = try CertificateAuthorities(pem: Data(pem.utf8)) },
                refusal { _ = try CertificateAuthorities(pemFile: file) },
            ] {
                #expect(error?.code == .notACertificate, "\(String(describing: error))")
                #expect(error?.reason.contains("OpenSSL") == openSSL, "\(String(describing: error))")
            }
        }
    }

    @Test func authoritiesTheTLSLibraryRefusesAreAMisconfigurationNotAnOutage() async throws {
        try await withLoopbackBackend(tls: true) { backend in
            let clock = ManualClock(now: Date(timeIntervalSince1970: 1_800_000_000))
            let selfSigned = try CertificateAuthorities(pemFile: try #require(backend.certificate))
            // Authorities that skipped the checks at creation, as on a platform where OpenSSL cannot be asked.
            var mislabelled = try #require(selfSigned.certificates.first)
            let version: [UInt8] = [0xA0, 0x03, 0x02, 0x01, 0x02]
            let at = try #require((0..<(mislabelled.count - 5)).first { Array(mislabelled[$0..<($0 + 5)]) == version })
            mislabelled[at + 2] = 0x04
            let unusable = CertificateAuthorities(unchecked: [mislabelled])
            for trust in [CertificateTrust.authorities([unusable]), .authorities([unusable], includingSystem: true)] {
                let error = await fetchError(backend.fetcher(trust: trust, clock: clock))
                #expect(error?.code == .backendMisconfigured, "\(trust): \(String(describing: error))")
                #expect(error?.failureClass == .misconfiguration)
                #expect(error?.reason.contains("could not be loaded") == true, "\(String(describing: error))")
                #expect(error?.reason.contains("libcurl error 77") == true)
            }
        }
    }

    @Test func aBundleOverLibcurlsLimitIsRefusedAtCreationCountingTheSystemBundle() async throws {
        try await withLoopbackBackend(tls: true) { backend in
            let clock = ManualClock(now: Date(timeIntervalSince1970: 1_800_000_000))
            let authority = try await Self.authority.value
            // Blocks of 64 KiB: a hundred make the text, where the authority's own would take five thousand.
            let block = try String(contentsOfFile: authority.largeCertificate, encoding: .utf8)
            let selfSigned = try CertificateAuthorities(pemFile: try #require(backend.certificate))
            // 8.38 MB of PEM: under the 8 MiB a text may have, over the 8,000,000 bytes libcurl takes.
            let over = String(repeating: block, count: 8_380_000 / block.utf8.count)
            #expect(over.utf8.count <= CertificateAuthorities.maximumPEMSize && over.utf8.count > 8_000_000)
            let tooLarge = refusal { _ = try CertificateAuthorities(pem: Data(over.utf8)) }
            #expect(tooLarge?.code == .tooLarge)
            #expect(
                tooLarge?.reason.contains("libcurl takes at most 8000000") == true, "\(String(describing: tooLarge))")
            // 7.9 MB fits alone, beside the backend's certificate, and not with the system's bundle. (No fetch trusts
            // it here: libcurl parses a bundle for each new connection, about 2 s for this one, on the one thread
            // every transfer of the process shares, which would hold up the other suites' fetches.)
            let large = try CertificateAuthorities(
                pem: Data(String(repeating: block, count: 7_900_000 / block.utf8.count).utf8))
            let pinned = try CertificateTrust(authorities: [large, selfSigned])
            #expect(pinned.bundle?.count ?? .max <= CertificateTrust.maximumBundleSize)
            #expect(pinned.bundle?.count ?? 0 > 7_800_000)
            let withSystem = refusal {
                _ = try CertificateTrust(authorities: [large, selfSigned], includingSystem: true)
            }
            #expect(withSystem?.code == .tooLarge)
            #expect(
                withSystem?.reason.contains("with the system's bundle") == true, "\(String(describing: withSystem))")
            // Made without a check, it fails every fetch as a misconfiguration, before any connection.
            let unchecked = CertificateTrust.authorities([large, selfSigned], includingSystem: true)
            let error = await fetchError(backend.fetcher(trust: unchecked, clock: clock))
            #expect(error?.code == .backendMisconfigured)
            #expect(error?.failureClass == .misconfiguration)
            #expect(error?.reason.contains("libcurl takes at most 8000000") == true, "\(String(describing: error))")
        }
    }

    @Test func theSystemBundleIsReadOncePerTrustNotPerTransfer() async throws {
        try await withLoopbackBackend(tls: true) { backend in
            let clock = ManualClock(now: Date(timeIntervalSince1970: 1_800_000_000))
            let selfSigned = try CertificateAuthorities(pemFile: try #require(backend.certificate))
            let reads = CertificateTrust.BundleReads()
            try await CertificateTrust.$bundleReads.withValue(reads) {
                let trust = CertificateTrust.authorities([selfSigned], includingSystem: true)
                #expect(reads.value == 1)
                // The system's bundle (about 200 KiB on Debian) is in the trust's bundle, after the given certificate.
                let system = try Data(contentsOf: URL(fileURLWithPath: "/etc/ssl/certs/ca-certificates.crt"))
                #expect(trust.bundle?.count == selfSigned.pem.count + 1 + system.count)
                let fetcher = backend.fetcher(trust: trust, clock: clock)
                _ = try await fetcher.fetchCredential(for: "bob")
                try await withThrowingTaskGroup(of: Void.self) { group in
                    for _ in 0..<8 {
                        group.addTask { _ = try await fetcher.fetchCredential(for: "bob") }
                    }
                    try await group.waitForAll()
                }
                #expect(reads.value == 1, "the system's bundle was read again for a transfer")
                _ = CertificateTrust.authorities([selfSigned])
                _ = CertificateTrust.system
                #expect(reads.value == 1, "a trust without the system's bundle read it")
            }
        }
    }

    // MARK: - Fetching

    @Test func aSelfSignedBackendIsRefusedUnlessItsCertificateIsTrusted() async throws {
        try await withLoopbackBackend(tls: true) { backend in
            let clock = ManualClock(now: Date(timeIntervalSince1970: 1_800_000_000))
            let authority = try await Self.authority.value
            let selfSigned = try CertificateAuthorities(pemFile: try #require(backend.certificate))
            let refused: [(CertificateTrust, String)] = [
                (.system, "not signed by an authority the fetcher trusts"),
                (.authorities([try CertificateAuthorities(pemFile: authority.certificate)]), "not signed by"),
            ]
            for (trust, reason) in refused {
                let error = await fetchError(backend.fetcher(trust: trust, clock: clock))
                #expect(error?.code == .backendMisconfigured)
                #expect(error?.failureClass == .misconfiguration)
                #expect(error?.reason.contains("certificate was not trusted") == true, "\(String(describing: error))")
                #expect(error?.reason.contains(reason) == true, "\(String(describing: error))")
                #expect(error?.reason.contains("localhost") == false, "the refusal names the URL")
            }
            let nothing = await fetchError(backend.fetcher(trust: .authorities([]), clock: clock))
            #expect(nothing?.isTransient == false)
            #expect(nothing?.reason.contains("trusts no certificate authority") == true)
            for trust in [
                CertificateTrust.authorities([selfSigned]), .authorities([selfSigned], includingSystem: true),
            ] {
                let credential = try await backend.fetcher(trust: trust, clock: clock).fetchCredential(for: "bob")
                #expect(try backend.verifier(clock: clock).verify(credential).isValid, "\(trust)")
            }
            // A connection opened with the certificate trusted is not reused by a fetcher that does not trust it.
            let trusted = backend.fetcher(trust: .authorities([selfSigned]), clock: clock)
            let untrusted = backend.fetcher(trust: .system, clock: clock)
            for _ in 0..<3 {
                _ = try await trusted.fetchCredential(for: "bob")
                #expect(await fetchError(untrusted)?.reason.contains("certificate was not trusted") == true)
            }
        }
    }

    /// The error `body` throws, or `nil` (recorded as an issue) when it throws none or another.
    func refusal(_ body: () throws -> Void, sourceLocation: SourceLocation = #_sourceLocation) -> CertificateTrustError?
    {
        do {
            try body()
            Issue.record("accepted", sourceLocation: sourceLocation)
        } catch let error as CertificateTrustError {
            return error
        } catch {
            Issue.record("failed with \(error), not a CertificateTrustError", sourceLocation: sourceLocation)
        }
        return nil
    }

    /// The error a fetch for bob fails with, or `nil` (recorded as an issue) when it succeeds.
    func fetchError(_ fetcher: HTTPCredentialFetcher) async -> SessionError? {
        do {
            _ = try await fetcher.fetchCredential(for: "bob")
            Issue.record("the fetch succeeded")
        } catch let error as SessionError {
            return error
        } catch {
            Issue.record("the fetch failed with \(error), not a SessionError")
        }
        return nil
    }
}
