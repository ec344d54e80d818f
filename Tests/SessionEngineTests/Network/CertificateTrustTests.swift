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
