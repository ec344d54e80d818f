import Foundation
import SessionEngine
import SessionEngineBackend
import SessionEngineTestKit
import Testing

#if canImport(FoundationNetworking)
    import FoundationNetworking
#endif

/// `HTTPCredentialFetcher` against a real TLS server nobody here wrote: nginx 1.22 in front of the loopback identity
/// backend (`proxy_pass`), with a certificate from a private authority made by openssl for the test, over HTTP/1.1
/// and HTTP/2, and with fronts that rewrite the backend's `Date`.
///
/// Each test starts its own backend and nginx and stops them at its end. Where nginx, openssl or python3 is missing
/// the suite is skipped and Swift Testing prints why; `Scripts/install-test-servers.sh` installs nginx.
@Suite(
    .enabled(if: NginxFront.unavailableReason == nil, Comment(rawValue: NginxFront.unavailableReason ?? "")),
    .timeLimit(TimeLimits.minutes(2))
)
struct NginxFrontTests {
    static let authority = Task { try await PrivateAuthority.make() }
    static let start: Int64 = 1_800_000_000

    /// The server blocks every test's nginx has, in this order.
    enum Front: Int, CaseIterable, Sendable, CustomTestStringConvertible {
        /// HTTP/1.1 only; nginx writes its own `Date`.
        case http1
        /// HTTP/2 offered by ALPN; nginx writes its own `Date`.
        case http2
        /// HTTP/2; the backend's `Date` hidden and a second one, far off, added (`proxy_hide_header`, `add_header`).
        case addedDate
        /// HTTP/2; the backend's own `Date` passed through (`proxy_pass_header Date`).
        case passedDate
        /// HTTP/2, with a certificate from the same authority for another host.
        case otherHost
        /// Plain HTTP/1.1, no TLS.
        case plain

        var server: NginxFront.Server {
            switch self {
            case .http1: NginxFront.Server(http2: false)
            case .http2: NginxFront.Server(http2: true)
            case .addedDate:
                NginxFront.Server(
                    http2: true,
                    directives: #"proxy_hide_header Date; add_header Date "Sat, 01 Jan 2000 00:00:00 GMT" always;"#)
            case .passedDate: NginxFront.Server(http2: true, directives: "proxy_pass_header Date;")
            case .otherHost: NginxFront.Server(http2: true, otherHost: true)
            case .plain: NginxFront.Server(http2: false, tls: false)
            }
        }

        var testDescription: String { "\(self)" }
    }

    /// Where the fetcher's trust comes from.
    enum Source: String, CaseIterable, Sendable {
        case file, bytes
    }

    @Test(arguments: [Front.http1, .http2])
    func theFrontIsRefusedWithoutItsAuthority(_ front: Front) async throws {
        try await withFront { nginx, _ in
            let fetcher = Self.fetcher(nginx, front, trust: .system, clock: ManualClock())
            let error = await #expect(throws: SessionError.self) { try await fetcher.fetchCredential(for: "bob") }
            #expect(error?.code == .backendMisconfigured)
            #expect(error?.failureClass == .misconfiguration)
            #expect(error?.reason.contains("certificate was not trusted") == true, "\(String(describing: error))")
            #expect(error?.reason.contains("not signed by an authority the fetcher trusts") == true)
            for leak in ["localhost", "127.0.0.1", String(nginx.ports[front.rawValue]), "identity"] {
                #expect(
                    error?.reason.contains(leak) == false, "the refusal names the URL: \(String(describing: error))")
            }
        }
    }

    @Test(arguments: [Front.http1, .http2], Source.allCases)
    func theFetcherTrustsTheAuthorityFromAFileOrBytesOverEitherVersion(_ front: Front, _ source: Source) async throws {
        try await withFront { nginx, backend in
            let authority = try await Self.authority.value
            let authorities =
                switch source {
                case .file: try CertificateAuthorities(pemFile: authority.certificate)
                case .bytes:
                    try CertificateAuthorities(pem: Data(contentsOf: URL(fileURLWithPath: authority.certificate)))
                }
            let clock = ManualClock(now: Date(timeIntervalSince1970: TimeInterval(Self.start)))
            let fetcher = Self.fetcher(nginx, front, trust: .authorities([authorities]), clock: clock)
            let (fetched, version) = try await fetcher.fetch(account: "bob")
            #expect(try backend.verifier(clock: clock).verify(fetched.credential).isValid)
            #expect(fetched.credential.email == "bob@example.com")
            // The transfer read the version from the status line; nginx's log says the same.
            #expect(version == (front == .http2 ? "2" : "1.1"))
            let log = try await nginx.accessLog(atLeast: 1)
            let port = nginx.ports[front.rawValue]
            #expect(
                log.last?.hasPrefix("\(port) \(front == .http2 ? "HTTP/2.0" : "HTTP/1.1") ") == true, "\(log)")
            #expect(log.last?.contains("\" 200 ") == true, "\(log)")
        }
    }

    @Test func aCertificateForAnotherHostIsRefusedEvenFromTheTrustedAuthority() async throws {
        try await withFront { nginx, _ in
            let authority = try await Self.authority.value
            let trust = CertificateTrust.authorities([try CertificateAuthorities(pemFile: authority.certificate)])
            let fetcher = Self.fetcher(nginx, .otherHost, trust: trust, clock: ManualClock())
            let error = await #expect(throws: SessionError.self) { try await fetcher.fetchCredential(for: "bob") }
            #expect(error?.reason.contains("does not name the endpoint's host") == true, "\(String(describing: error))")
        }
    }

    /// nginx replaces the backend's `Date` with its own, so the fetcher measures nginx's clock, not the signer's.
    /// The fetcher still delivers the credential in every case; what it reports as the backend's clock offset is
    /// recorded here (the engine decides what to do with it).
    @Test func aFrontThatRewritesDateStillDeliversCredentials() async throws {
        try await withFront { nginx, backend in
            let authority = try await Self.authority.value
            let trust = CertificateTrust.authorities([try CertificateAuthorities(pemFile: authority.certificate)])
            // The signer signs on the test's clock, far from the real time nginx's clock keeps.
            let clock = ManualClock(now: Date(timeIntervalSince1970: TimeInterval(Self.start)))
            let verifier = try backend.verifier(clock: clock)
            var offsets: [Front: Duration?] = [:]
            for front in [Front.http2, .http1, .addedDate, .passedDate] {
                let (fetched, _) = try await Self.fetcher(nginx, front, trust: trust, clock: clock).fetch(
                    account: "bob")
                #expect(verifier.verify(fetched.credential).isValid, "\(front)")
                offsets[front] = fetched.serverClockOffset
                print("nginx front \(front): serverClockOffset \(fetched.serverClockOffset.map { "\($0)" } ?? "nil")")
            }
            let realOffset = Date().timeIntervalSince1970 - TimeInterval(Self.start)
            for front in [Front.http2, .http1] {
                let measured = try #require(offsets[front] ?? nil).timeInterval
                #expect(abs(measured - realOffset) < 5, "\(front): nginx's own Date, measured \(measured) s")
            }
            // Two Date fields (nginx's and the added one) are no date at all: no offset is reported.
            #expect(offsets[.addedDate] == .some(nil))
            // The backend's own Date agrees with its signer.
            let passed = try #require(offsets[.passedDate] ?? nil).timeInterval
            #expect(abs(passed) < 2, "the backend's own Date, measured \(passed) s")
        }
    }

    /// Fetches reuse a connection, but a retry (attempt 2 and later) opens a new one: after an nginx reload, the
    /// connection to an old worker would otherwise be asked again and again.
    @Test(arguments: [Front.http2, .http1, .plain])
    func aRetryOpensANewConnection(_ front: Front) async throws {
        try await withFront { nginx, _ in
            let authority = try await Self.authority.value
            let trust = CertificateTrust.authorities([try CertificateAuthorities(pemFile: authority.certificate)])
            let clock = ManualClock(now: Date(timeIntervalSince1970: TimeInterval(Self.start)))
            let fetcher = Self.fetcher(nginx, front, trust: trust, clock: clock)
            for (id, attempt) in [1, 1, 2].enumerated() {
                let request = FetchRequest(id: UInt64(id + 1), account: "bob", epoch: 1, attempt: attempt)
                _ = try await fetcher.fetch(request)
            }
            let connections = try await nginx.accessLog(atLeast: 3).compactMap { $0.split(separator: " ").last }
            #expect(connections.count == 3, "\(connections)")
            guard connections.count == 3 else { return }
            #expect(connections[0] == connections[1], "the second fetch did not reuse the connection")
            #expect(connections[2] != connections[1], "the retry reused the connection")
        }
    }

    /// A fetcher's idle connection outlives other fetchers' traffic to other hosts: libcurl's own default keeps four
    /// connections per transfer running, so a process's fifth idle connection closed its oldest, and the next fetch
    /// paid a new connection (a TLS handshake, over `https`).
    @Test func anIdleConnectionOutlivesOtherFetchersTraffic() async throws {
        try await withFront { nginx, _ in
            let authority = try await Self.authority.value
            let trust = CertificateTrust.authorities([try CertificateAuthorities(pemFile: authority.certificate)])
            let clock = ManualClock(now: Date(timeIntervalSince1970: TimeInterval(Self.start)))
            let fetcher = Self.fetcher(nginx, .plain, trust: trust, clock: clock)
            _ = try await fetcher.fetchCredential(for: "bob")
            // One connection to each other server, each left idle in turn: five idle connections with the first.
            for front in [Front.http1, .http2, .addedDate, .passedDate] {
                _ = try await Self.fetcher(nginx, front, trust: trust, clock: clock).fetchCredential(for: "bob")
            }
            _ = try await fetcher.fetchCredential(for: "bob")
            let lines = try await nginx.accessLog(atLeast: 6)
            let plain = String(nginx.ports[Front.plain.rawValue])
            let connections = lines.filter { $0.hasPrefix("\(plain) ") }.compactMap { $0.split(separator: " ").last }
            #expect(connections.count == 2, "\(lines)")
            #expect(Set(connections).count == 1, "the second fetch opened a new connection: \(connections)")
        }
    }

    /// Every request names the package and its version in `User-Agent` unless the host's `authenticate` sets its
    /// own, on every transfer: libcurl over TLS, the plain HTTP/1.1 transfer and `URLSession`.
    @Test func theUserAgentNamesThePackageUnlessTheHostReplacesIt() async throws {
        try await withFront { nginx, _ in
            let authority = try await Self.authority.value
            let trust = CertificateTrust.authorities([try CertificateAuthorities(pemFile: authority.certificate)])
            let clock = ManualClock(now: Date(timeIntervalSince1970: TimeInterval(Self.start)))
            let fetchers = [
                Self.fetcher(nginx, .http2, trust: trust, clock: clock),
                Self.fetcher(nginx, .plain, trust: trust, clock: clock),
                Self.fetcher(nginx, .plain, trust: trust, transfer: .urlSession, clock: clock),
                Self.fetcher(
                    nginx, .http1, trust: trust, userAgent: "ExampleDaemon/2.0 (ops@example.com)", clock: clock),
                Self.fetcher(
                    nginx, .plain, trust: trust, userAgent: "ExampleDaemon/2.0 (ops@example.com)", clock: clock),
            ]
            for fetcher in fetchers { _ = try await fetcher.fetchCredential(for: "bob") }
            let agents = try await nginx.accessLog(atLeast: fetchers.count).map { line in
                line.split(separator: "\"").dropFirst().first.map(String.init) ?? line
            }
            #expect(HTTPCredentialFetcher.defaultUserAgent == "SessionEngine/0.1.0")
            #expect(
                agents == Array(repeating: "SessionEngine/0.1.0", count: 3)
                    + Array(repeating: "ExampleDaemon/2.0 (ops@example.com)", count: 2))
        }
    }

    /// A fetcher for `front` that authenticates as the account's session and lets the backend sign on `clock`.
    static func fetcher(
        _ nginx: NginxFront, _ front: Front, trust: CertificateTrust,
        transfer: HTTPCredentialFetcher.TransferChoice = .automatic, userAgent: String? = nil, clock: ManualClock
    ) -> HTTPCredentialFetcher {
        let origin = front == .plain ? "http://127.0.0.1" : "https://localhost"
        return HTTPCredentialFetcher(
            endpoint: URL(string: "\(origin):\(nginx.ports[front.rawValue])/identity")!,
            timeout: .seconds(60),  // every fetch here is expected to be answered; no busy machine comes near it
            transfer: transfer,
            trust: trust,
            clock: clock
        ) { account, request in
            request.setValue("Bearer session-\(account.rawValue)", forHTTPHeaderField: "Authorization")
            request.setValue(String(Int64(clock.now.timeIntervalSince1970)), forHTTPHeaderField: "X-Demo-Clock")
            if let userAgent { request.setValue(userAgent, forHTTPHeaderField: "User-Agent") }
        }
    }

    /// Runs `body` with a loopback backend and an nginx with every ``Front`` in front of it, and stops both.
    func withFront(_ body: (NginxFront, LoopbackBackend) async throws -> Void) async throws {
        let authority = try await Self.authority.value
        let backend = try await LoopbackBackend.start()
        let nginx: NginxFront
        do {
            nginx = try await NginxFront.start(
                Front.allCases.map(\.server), authority: authority, backendPort: backend.port)
        } catch {
            await backend.stop()
            throw error
        }
        do {
            try await body(nginx, backend)
        } catch {
            await nginx.stop()
            await backend.stop()
            throw error
        }
        await nginx.stop()
        await backend.stop()
    }
}
