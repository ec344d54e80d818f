import Foundation
import SessionEngine
import SessionEngineRedis
import Testing

/// How long a call may take at most when the server cannot be reached: its timeouts (connect 500 ms, command
/// 250 ms) many times over, a bound only a call that waits on the server for ever reaches, however busy the machine.
private let callBound: Duration = .seconds(10)

/// Why a server speaking TLS cannot start here, or `nil` when it can.
private var tlsUnavailableReason: String? {
    RedisServer.unavailableReason ?? (PrivateAuthority.openssl == nil ? "openssl is not on PATH" : nil)
}

/// The coordinator on a `redis-server` that speaks TLS only and asks for client certificates (Redis's default): the
/// server proven by a private authority and its name, the replica by a certificate that authority signed, and every
/// failure to prove either a typed error within the call's timeouts that names no secret.
@Suite(.serialized, .enabled(if: tlsUnavailableReason == nil, Comment(rawValue: tlsUnavailableReason ?? "")))
struct RedisTLSTests {
    @Test func aServerSpeakingOnlyTLSIsReachedWithItsAuthorityAndAClientCertificate() async throws {
        let authority = try await PrivateAuthority.make()
        let server = try await RedisServer.start(password: "tls-horse-battery", authority: authority)
        defer { Task { await server.stop() } }
        let tls = try RedisFleetCoordinator.Configuration.TLS(
            trust: .authorities([CertificateAuthorities(pemFile: authority.certificate)]),
            certificateFile: authority.clientCertificate, keyFile: authority.clientKey)
        let limits = FleetLimits(sharesCredentials: true)
        // A handshake with a client certificate under the thread sanitizer on a busy machine: timeouts far above it.
        let coordinator = try RedisFleetCoordinator(
            configuration: server.configuration(
                limits: limits, connectTimeout: .seconds(5), commandTimeout: .seconds(5), tls: tls))
        try await coordinator.ping()
        let fetch = FleetFetch(account: "alice", isNeeded: true, heldExpiry: nil)
        guard case .start(let lease) = try await coordinator.decide(fetch) else {
            Issue.record("a fetch over TLS did not start")
            return
        }
        try await coordinator.fetchEnded(fetch, lease: lease, outcome: .abandoned)

        // The URL's form, by the name the certificate gives: a second replica sees the first one's fleet.
        let parsed = try RedisFleetCoordinator.Configuration(
            url: "rediss://:tls-horse-battery@localhost:\(server.port)", keyPrefix: "test", limits: limits, tls: tls)
        #expect(parsed.host == "localhost" && parsed.password == "tls-horse-battery" && parsed.tls == tls)
        let byURL = try RedisFleetCoordinator(
            configuration: .init(
                host: parsed.host, port: parsed.port, password: parsed.password, keyPrefix: parsed.keyPrefix,
                limits: limits, connectTimeout: .seconds(5), commandTimeout: .seconds(5), tls: parsed.tls))
        let renewal = FleetFetch(account: "alice", isNeeded: false, heldExpiry: Date().addingTimeInterval(300))
        guard case .start(let other) = try await byURL.decide(renewal) else {
            Issue.record("a fetch over TLS by the URL did not start")
            return
        }
        guard case .awaitPeer = try await coordinator.decide(renewal) else {
            Issue.record("the replica over TLS did not see the other one's lease")
            return
        }
        try await byURL.fetchEnded(renewal, lease: other, outcome: .abandoned)
    }

    @Test func aServerThatCannotProveItselfOrAClientWithoutACertificateFailsTypedWithinTheTimeouts() async throws {
        let authority = try await PrivateAuthority.make()
        let server = try await RedisServer.start(password: "tls-horse-battery", authority: authority)
        let impostor = try await RedisServer.start(authority: authority, presentingOtherHost: true)
        defer {
            Task {
                await server.stop()
                await impostor.stop()
            }
        }
        typealias TLS = RedisFleetCoordinator.Configuration.TLS
        let client = (certificate: authority.clientCertificate, key: authority.clientKey)
        let privateTrust = CertificateTrust.authorities([try CertificateAuthorities(pemFile: authority.certificate)])
        let cases: [(String, RedisFleetCoordinator.Configuration)] = [
            // The system's authorities do not know the private one.
            (
                "trusting the system's authorities",
                try server.configuration(
                    tls: TLS(certificateFile: client.certificate, keyFile: client.key))
            ),
            // The certificate is the authority's, for another name.
            (
                "a certificate for another host",
                try impostor.configuration(
                    tls: TLS(
                        trust: privateTrust, certificateFile: client.certificate, keyFile: client.key))
            ),
            // The server asks for a client certificate and gets none.
            (
                "no client certificate",
                try server.configuration(tls: TLS(trust: privateTrust))
            ),
            // Plain bytes to a port that speaks TLS only.
            ("plain TCP to a TLS port", try server.configuration()),
        ]
        for (name, configuration) in cases {
            let coordinator = try RedisFleetCoordinator(configuration: configuration)
            let start = ContinuousClock.now
            do {
                _ = try await coordinator.decide(FleetFetch(account: "bob", isNeeded: true, heldExpiry: nil))
                Issue.record("\(name): the call was answered")
            } catch let error as RedisCoordinatorError {
                #expect(error.code == .connectionFailed || error.code == .connectionLost, "\(name): \(error)")
                #expect(!"\(error)".contains("tls-horse-battery"), "\(name): \(error)")
            }
            #expect(ContinuousClock.now - start < callBound, "\(name)")
        }
        // The server that refused the others still answers a replica that proves itself.
        let proven = try RedisFleetCoordinator(
            configuration: server.configuration(
                connectTimeout: .seconds(5), commandTimeout: .seconds(5),
                tls: TLS(trust: privateTrust, certificateFile: client.certificate, keyFile: client.key)))
        try await proven.ping()
    }

    @Test func tlsOptionsAreCheckedWhenTheyAreMadeAndNamedInTheDescription() async throws {
        let large = try CertificateAuthorities(pemFile: try await PrivateAuthority.make().largeCertificate)
        let missing = "/nonexistent/session-engine-\(UUID().uuidString).pem"
        typealias TLS = RedisFleetCoordinator.Configuration.TLS
        for (make, named) in [
            ({ _ = try TLS(certificateFile: missing) }, missing),
            ({ _ = try TLS(certificateFile: #filePath, keyFile: missing) }, missing),
            ({ _ = try TLS(keyFile: #filePath) }, "needs a client certificate"),
            ({ _ = try TLS(certificateFile: "") }, "1 to 4096 bytes"),
            ({ _ = try TLS(trust: .authorities(Array(repeating: large, count: 200))) }, "libcurl takes at most"),
            (
                { _ = try RedisFleetCoordinator.Configuration(url: "redis://10.0.0.5", tls: TLS()) },
                "use rediss://"
            ),
        ] as [(() throws -> Void, String)] {
            #expect {
                try make()
            } throws: { error in
                let error = error as? RedisCoordinatorError
                return error?.code == .invalidConfiguration && error?.reason.contains(named) == true
            }
        }
        let configuration = try RedisFleetCoordinator.Configuration(
            url: "rediss://app:s3cret-pw@cache.internal:6380")
        #expect(configuration.tls == (try TLS()))
        #expect(configuration.description == "rediss://app@cache.internal:6380 prefix session-engine")
        #expect(!String(reflecting: configuration).contains("s3cret"))
    }
}
