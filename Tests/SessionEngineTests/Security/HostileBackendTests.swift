import Foundation
import SessionEngine
import Synchronization
import Testing

#if canImport(FoundationNetworking)
    import FoundationNetworking
#endif

/// `HTTPCredentialFetcher` against backends that attack it: bodies too large, endless, compressed or slow.
///
/// Every attack must fail within the fetcher's timeout and ``lateness`` (by its size limit, for an attack on size),
/// and the process's resident memory must not grow by 64 MiB while it runs, on each route a request can take: plain
/// `http` to loopback and `https` over real TLS, both on libcurl, the one transfer of Linux. The server is
/// `Fixtures/backend/hostile_backend.py`, started by the suite on loopback (once plain, once with TLS and a fresh
/// self-signed certificate the fetcher is told to trust) and shared by its tests, which run one at a time so that
/// each memory measurement is its own.
@Suite(
    .serialized,
    .enabled(if: PythonServer.python != nil, "python3 is not on PATH, so the hostile backend cannot start"),
    .timeLimit(TimeLimits.minutes(2))
)
struct HostileBackendTests {
    /// One attack: a path of the hostile server, what the fetcher must say, and the fetcher's timeout.
    ///
    /// An attack on size must be stopped by the size limit, not by the deadline, so its timeout is long: every
    /// transfer of the process shares libcurl's one thread, and a burst of TLS handshakes elsewhere in the suite (100
    /// fetches in flight) can hold it for seconds when both cores are busy. Slow attacks end at a short deadline,
    /// which is what they test.
    struct Attack: Sendable, CustomTestStringConvertible {
        let path: String
        let reason: String
        var timeout: Duration = .seconds(30)
        /// The code the fetch fails with: a compressed body is a misconfiguration, not an outage.
        var code = SessionError.Code.fetchFailed

        var testDescription: String { path }
    }

    /// The way a request reaches the backend.
    enum Route: String, Sendable, CaseIterable, CustomTestStringConvertible {
        /// Plain `http` to loopback.
        case http
        /// `https`, over TLS.
        case https

        var testDescription: String { rawValue }
    }

    static let attacks = [
        Attack(path: "/huge", reason: "Content-Length is larger than 65536 bytes"),
        Attack(path: "/huge-unsized", reason: "larger than 65536 bytes; the transfer was stopped"),
        Attack(path: "/endless", reason: "larger than 65536 bytes; the transfer was stopped"),
        Attack(path: "/big-chunk", reason: "larger than 65536 bytes; the transfer was stopped"),
        Attack(path: "/gzip-bomb", reason: "compressed body", code: .backendMisconfigured),
        Attack(path: "/trickle", reason: "did not answer within 1 s", timeout: .seconds(1)),
        Attack(path: "/slow-headers", reason: "did not answer within 1 s", timeout: .seconds(1)),
    ]

    static let timeout: Duration = .seconds(1)
    /// How long past its timeout a failing fetch may end: the deadline fires on a thread that a machine with both
    /// cores busy may schedule late, and a bound of a few seconds past a 1-second deadline was missed that way. Every
    /// slow attack would otherwise run for minutes (one byte a second), so the bound still proves the deadline.
    static let lateness: Duration = .seconds(10)
    static let memoryBound = 64 << 20

    /// The hostile server, started once for the suite; it exits with the test process.
    static let server = Task { try await PythonServer.start("hostile_backend.py") }
    /// The same server over TLS, with the directory of the certificate it made.
    static let tlsServer = Task {
        let directory = try PythonServer.certificateDirectory()
        return (server: try await PythonServer.start("hostile_backend.py", tls: directory), directory: directory)
    }

    /// The server a route reaches.
    static func server(of route: Route) async throws -> PythonServer {
        switch route {
        case .http: try await server.value
        case .https: try await tlsServer.value.server
        }
    }

    static func fetcher(_ path: String, route: Route = .http, timeout: Duration = timeout) async throws
        -> HTTPCredentialFetcher
    {
        let endpoint: URL
        var trust = CertificateTrust.system
        switch route {
        case .http:
            endpoint = URL(string: "http://127.0.0.1:\(try await server.value.port)\(path)")!
        case .https:
            let (server, directory) = try await tlsServer.value
            endpoint = URL(string: "https://localhost:\(server.port)\(path)")!
            let path = directory.appendingPathComponent("certificate.pem").path
            trust = .authorities([try CertificateAuthorities(pemFile: path)])
        }
        return HTTPCredentialFetcher(
            endpoint: endpoint,
            timeout: timeout,
            trust: trust
        ) { _, request in
            request.setValue("Bearer hostile-test-token", forHTTPHeaderField: "Authorization")
        }
    }

    @Test(
        .enabled(if: MemoryProbe.isAvailable, "resident memory is read from /proc"),
        arguments: Route.allCases, attacks
    )
    func aHostileBackendFailsWithinTheTimeoutAndBoundedMemory(_ route: Route, _ attack: Attack) async throws {
        let fetcher = try await Self.fetcher(attack.path, route: route, timeout: attack.timeout)
        let started = ContinuousClock.now
        let (outcome, growth) = await MemoryProbe.peakGrowth {
            do {
                return Result<IdentityCredential, any Error>.success(try await fetcher.fetchCredential(for: "alice"))
            } catch {
                return .failure(error)
            }
        }
        let elapsed = started.duration(to: .now)
        print("hostile \(route) \(attack.path): failed after \(elapsed), resident memory grew by \(growth >> 10) KiB")
        guard case .failure(let error as SessionError) = outcome else {
            Issue.record("\(attack.path) did not fail with a SessionError: \(outcome)")
            return
        }
        #expect(error.code == attack.code)
        #expect(error.reason.contains(attack.reason), "\(error.reason)")
        #expect(!error.reason.contains("xxxx"), "the response body leaked into the error")
        #expect(elapsed < attack.timeout + Self.lateness, "the fetch outlived its timeout")
        #expect(growth < Self.memoryBound, "resident memory grew by \(growth >> 20) MiB")
    }

    @Test(arguments: Route.allCases)
    func cancellingTheCallerStopsTheTransferAtOnce(_ route: Route) async throws {
        let tag = UUID().uuidString.filter(\.isHexDigit)
        // The trickle would last 200 s and the timeout is 120 s: ending within 10 s of the cancellation, a margin that
        // holds with both cores busy, can only be the cancellation's doing.
        let fetcher = try await Self.fetcher("/trickle?arrival=\(tag)", route: route, timeout: .seconds(120))
        let fetch = Task { try await fetcher.fetchCredential(for: "alice") }
        // The server reports the request before it answers, one byte a second: the cancellation lands mid-transfer.
        try await Self.server(of: route).printed("arrived \(tag)")
        let cancelled = ContinuousClock.now
        fetch.cancel()
        await #expect(throws: CancellationError.self) { try await fetch.value }
        #expect(cancelled.duration(to: .now) < .seconds(10), "the cancelled fetch waited for the backend")
    }

    /// Every transfer runs on its own thread or shares one driven by events; either way a backend that hangs holds up
    /// only its own fetch.
    ///
    /// No deadline decides it: the hanging fetch has arrived at the server before the quick ones start, every quick
    /// fetch has a timeout of a minute, and the test asserts that all twenty were answered while the hanging fetch
    /// was still in flight (it ends only when cancelled afterwards). Quick fetches held up behind it could not finish
    /// before it did. Twenty TLS handshakes can take seconds with both cores busy, so a short timeout on them would
    /// fail for a slow machine rather than for a held-up transfer.
    @Test(arguments: Route.allCases)
    func aHangingTransferDoesNotHoldUpOthers(_ route: Route) async throws {
        let tag = UUID().uuidString.filter(\.isHexDigit)
        let hanging = try await Self.fetcher("/slow-headers?arrival=\(tag)", route: route, timeout: .seconds(600))
        let hangingEnded = Atomic(false)
        let stuck = Task {
            defer { hangingEnded.store(true, ordering: .sequentiallyConsistent) }
            return try await hanging.fetchCredential(for: "alice")
        }
        try await Self.server(of: route).printed("arrived \(tag)")
        let quick = try await Self.fetcher("/ok", route: route, timeout: .seconds(60))
        let codes = try await withThrowingTaskGroup(of: SessionError.Code?.self) { group in
            for _ in 0..<20 {
                group.addTask {
                    do {
                        _ = try await quick.fetchCredential(for: "alice")
                        return nil
                    } catch let error as SessionError {
                        return error.code
                    }
                }
            }
            return try await group.reduce(into: []) { $0.append($1) }
        }
        let hangingEndedFirst = hangingEnded.load(ordering: .sequentiallyConsistent)
        #expect(codes == Array(repeating: .invalidCredential, count: 20))
        #expect(!hangingEndedFirst, "the hanging fetch ended before the quick ones were answered")
        stuck.cancel()
        await #expect(throws: CancellationError.self) { try await stuck.value }
    }

    /// The control path: a small answer crosses each route whole and is then judged as a credential.
    @Test(arguments: Route.allCases)
    func aSmallAnswerCrossesEveryRoute(_ route: Route) async throws {
        let fetcher = try await Self.fetcher("/ok", route: route)
        let error = await #expect(throws: SessionError.self) { try await fetcher.fetchCredential(for: "alice") }
        #expect(error?.code == .invalidCredential, "\(String(describing: error))")
    }

    @Test func aCertificateTheFetcherDoesNotTrustIsRefused() async throws {
        let (server, _) = try await Self.tlsServer.value
        let fetcher = HTTPCredentialFetcher(endpoint: URL(string: "https://localhost:\(server.port)/ok")!) {
            _, request in
            request.setValue("Bearer hostile-test-token", forHTTPHeaderField: "Authorization")
        }
        let error = await #expect(throws: SessionError.self) { try await fetcher.fetchCredential(for: "alice") }
        #expect(error?.code == .backendMisconfigured)
        #expect(error?.failureClass == .misconfiguration)
        #expect(error?.reason.contains("certificate was not trusted") == true, "\(String(describing: error))")
        #expect(error?.reason.contains("localhost") == false, "the refusal quotes the URL")
    }

    // MARK: - Schemes

    @Test func plainHTTPToANonLoopbackHostIsRefusedBeforeAnyConnection() async throws {
        let calls = SanitizedMutex(0)
        for endpoint in [
            "http://api.example.com/identity", "http://10.0.0.8/identity", "http://127.0.0.1.example.com/identity",
            "ftp://127.0.0.1/identity", "http://localhost.example.com/identity",
        ] {
            let fetcher = HTTPCredentialFetcher(endpoint: URL(string: endpoint)!) { _, _ in
                calls.withLock { $0 += 1 }
            }
            do {
                _ = try await fetcher.fetchCredential(for: "alice")
                Issue.record("\(endpoint) was not refused")
            } catch let error as SessionError {
                #expect(error.code == .fetchFailed)
                #expect(error.isTransient == false)
                #expect(!error.reason.contains("example.com"), "the refusal quotes the URL")
            }
        }
        // Refused before `authenticate` ran, so no token was even computed, let alone sent.
        #expect(calls.withLock { $0 } == 0)

        // `authenticate` cannot move the request to a plain-HTTP host either.
        let moved = HTTPCredentialFetcher(endpoint: URL(string: "https://127.0.0.1:9/identity")!) { _, request in
            request.url = URL(string: "http://api.example.com/identity")
        }
        await #expect(throws: SessionError.self) { try await moved.fetchCredential(for: "alice") }
    }

    @Test func loopbackHostsAndTheOptInAreTheOnlyPlainHTTPAllowed() throws {
        for host in [
            "127.0.0.1", "127.255.3.9", "localhost", "LOCALHOST", "localhost.", "::1", "[::1]", "0:0:0:0:0:0:0:1",
        ] {
            #expect(EndpointPolicy.isLoopback(host), "\(host)")
        }
        for host in [
            "128.0.0.1", "127.0.0.1.example.com", "localhost.example.com", "0.0.0.0", "::", "::2", "127.0.0",
            "127.0.0.256", "::ffff:127.0.0.1", "example.com",
        ] {
            #expect(!EndpointPolicy.isLoopback(host), "\(host)")
        }
        let remote = URL(string: "http://api.example.com/identity")!
        #expect(throws: SessionError.self) { try EndpointPolicy.check(remote, allowsInsecureHTTP: false) }
        #expect(try EndpointPolicy.check(remote, allowsInsecureHTTP: true))
        #expect(try !EndpointPolicy.check(URL(string: "https://api.example.com/identity")!, allowsInsecureHTTP: false))
        #expect(try EndpointPolicy.check(URL(string: "http://[::1]:8080/identity")!, allowsInsecureHTTP: false))
    }
}
