import Foundation
import SessionEngine
import SessionEngineBackend
import SessionEngineTestKit
import Testing

#if canImport(FoundationNetworking)
    import FoundationNetworking
#endif

/// Which proxy the fetcher takes for an endpoint, read from the environment as curl reads it.
@Suite struct HTTPProxyTests {
    static let https = URL(string: "https://api.example.com/identity")!
    static let http = URL(string: "http://api.example.com/identity")!

    @Test func theEnvironmentIsReadAsCurlReadsIt() {
        let proxy = "http://proxy.internal:3128"
        #expect(HTTPProxy.environment(["HTTPS_PROXY": proxy]).proxy(for: Self.https) == proxy)
        #expect(HTTPProxy.environment(["https_proxy": proxy, "HTTPS_PROXY": "x"]).proxy(for: Self.https) == proxy)
        #expect(HTTPProxy.environment(["ALL_PROXY": proxy]).proxy(for: Self.https) == proxy)
        #expect(HTTPProxy.environment(["all_proxy": proxy]).proxy(for: Self.http) == proxy)
        #expect(HTTPProxy.environment(["http_proxy": proxy]).proxy(for: Self.http) == proxy)
        // HTTP_PROXY is never read (a CGI request can set it), and https_proxy is not for plain http.
        #expect(HTTPProxy.environment(["HTTP_PROXY": proxy]).proxy(for: Self.http) == nil)
        #expect(HTTPProxy.environment(["https_proxy": proxy]).proxy(for: Self.http) == nil)
        #expect(HTTPProxy.environment(["https_proxy": ""]).proxy(for: Self.https) == nil)
        #expect(HTTPProxy.environment([:]).proxy(for: Self.https) == nil)
        #expect(HTTPProxy.none.proxy(for: Self.https) == nil)
        #expect(HTTPProxy.url(URL(string: proxy)!).proxy(for: Self.http) == proxy)
        // Loopback is reached directly unless the proxy was given for it too.
        for endpoint in ["https://127.0.0.1:8443/identity", "http://localhost:8080/identity", "https://[::1]/x"] {
            let url = URL(string: endpoint)!
            #expect(HTTPProxy.environment(["HTTPS_PROXY": proxy, "ALL_PROXY": proxy]).proxy(for: url) == nil)
            #expect(HTTPProxy.url(URL(string: proxy)!).proxy(for: url) == nil)
            #expect(HTTPProxy.url(URL(string: proxy)!, includingLoopback: true).proxy(for: url) == proxy)
        }
    }

    @Test func noProxyListsHostsReachedDirectly() {
        for (list, host) in [
            ("*", "api.example.com"), ("example.com", "api.example.com"), (".example.com", "api.example.com"),
            ("other.org, example.com", "example.com"), ("10.0.0.0/8", "10.1.2.3"), ("10.1.2.3", "10.1.2.3"),
            ("EXAMPLE.com.", "api.example.com"), ("[::5]", "[::5]"),
        ] {
            #expect(HTTPProxy.matches(host, list), "\(list) \(host)")
        }
        for (list, host) in [
            ("ample.com", "api.example.com"), ("10.0.0.0/8", "11.1.2.3"), ("", "example.com"),
            ("api.example.com", "example.com"),
        ] {
            #expect(!HTTPProxy.matches(host, list), "\(list) \(host)")
        }
        let variables = ["HTTPS_PROXY": "http://proxy:3128", "NO_PROXY": "example.com"]
        #expect(HTTPProxy.environment(variables).proxy(for: HTTPProxyTests.https) == nil)
        #expect(HTTPProxy.environment(variables).proxy(for: URL(string: "https://example.org/")!) != nil)
    }

    @Test func descriptionsNameNoCredentials() {
        let proxy = HTTPProxy.url(URL(string: "http://user:secret-password@proxy.internal:3128")!)
        #expect(proxy.description == "proxy at proxy.internal:3128")
        let fetcher = HTTPCredentialFetcher(endpoint: Self.https, proxy: proxy) { _, _ in }
        #expect(!String(describing: fetcher).contains("secret-password"))
        #expect(String(describing: fetcher).contains("proxy: proxy at proxy.internal:3128"))
        #expect(HTTPProxy.environment.description == "environment")
        // The mirror, what dump prints, shows what the description shows.
        var dumped = ""
        dump(proxy, to: &dumped)
        #expect(!dumped.contains("secret-password") && dumped.contains("proxy at proxy.internal:3128"), "\(dumped)")
        dumped = ""
        dump(HTTPProxy.environment(["https_proxy": "http://u:secret-password@p:1"]), to: &dumped)
        #expect(!dumped.contains("secret-password"), "\(dumped)")
        #expect(Mirror(reflecting: proxy).children.map(\.label) == ["setting", "includesLoopback"])
    }
}

/// `HTTPCredentialFetcher` through a real forward proxy: tinyproxy tunnelling with `CONNECT` to nginx in front of
/// the loopback backend, over TLS and plain HTTP; and the failures of a dead proxy, a proxy that refuses the tunnel
/// and one that cannot reach the backend, each named as the proxy's or the backend's.
@Suite(
    .enabled(if: TinyProxy.unavailableReason == nil, Comment(rawValue: TinyProxy.unavailableReason ?? "")),
    .timeLimit(TimeLimits.minutes(2))
)
struct ProxyTests {
    static let authority = Task { try await PrivateAuthority.make() }
    static let start: Int64 = 1_800_000_000

    @Test func fetchesThroughATunnellingProxyOverTLSAndPlainHTTP() async throws {
        try await withServers { nginx, backend, trust in
            let clock = ManualClock(now: Date(timeIntervalSince1970: TimeInterval(Self.start)))
            // One proxy for the explicit setting, one named by the (given) environment.
            for fromEnvironment in [false, true] {
                let proxy = try await TinyProxy.start(connectPorts: nginx.ports)
                let url = proxy.url.absoluteString
                let setting =
                    fromEnvironment
                    ? HTTPProxy.environment(["https_proxy": url, "http_proxy": url], includingLoopback: true)
                    : HTTPProxy.url(proxy.url, includingLoopback: true)
                for endpoint in Self.endpoints(nginx) {
                    let fetcher = Self.fetcher(endpoint, trust: trust, proxy: setting, clock: clock)
                    let credential = try await fetcher.fetchCredential(for: "bob")
                    #expect(try backend.verifier(clock: clock).verify(credential).isValid, "\(endpoint) \(setting)")
                }
                // Each endpoint went through its own tunnel, plain HTTP included.
                let tunnels = try await proxy.tunnels(atLeast: 2)
                await proxy.stop()
                #expect(tunnels == ["localhost:\(nginx.ports[0])", "127.0.0.1:\(nginx.ports[1])"], "\(tunnels)")
            }
        }
    }

    @Test func loopbackEndpointsAreReachedDirectlyUnlessTheProxyIsForThemToo() async throws {
        try await withServers { nginx, _, trust in
            let dead = URL(string: "http://127.0.0.1:\(try LoopbackPorts.free(count: 1)[0])")!
            let clock = ManualClock(now: Date(timeIntervalSince1970: TimeInterval(Self.start)))
            let settings: [HTTPProxy] = [
                .url(dead), .environment(["HTTPS_PROXY": dead.absoluteString, "ALL_PROXY": dead.absoluteString]),
                .none,
            ]
            for setting in settings {
                for endpoint in Self.endpoints(nginx) {
                    _ = try await Self.fetcher(endpoint, trust: trust, proxy: setting, clock: clock)
                        .fetchCredential(for: "bob")
                }
            }
            // libcurl never reads the process's proxy variables by itself: the fetcher decides.
            setenv("https_proxy", dead.absoluteString, 1)
            defer { unsetenv("https_proxy") }
            _ = try await Self.fetcher(Self.endpoints(nginx)[0], trust: trust, proxy: .environment, clock: clock)
                .fetchCredential(for: "bob")
        }
    }

    @Test func aDeadProxyIsNamedAsTheProxy() async throws {
        try await withServers { nginx, _, trust in
            let dead = URL(string: "http://127.0.0.1:\(try LoopbackPorts.free(count: 1)[0])")!
            for endpoint in Self.endpoints(nginx) {
                let fetcher = Self.fetcher(
                    endpoint, trust: trust, proxy: .url(dead, includingLoopback: true), clock: ManualClock())
                let error = await #expect(throws: SessionError.self) { try await fetcher.fetchCredential(for: "bob") }
                #expect(error?.code == .fetchFailed)
                #expect(error?.isTransient == true)
                #expect(
                    error?.reason.hasPrefix("the proxy could not be reached") == true, "\(String(describing: error))")
                #expect(error?.reason.contains(String(dead.port!)) == false, "the error names the proxy")
            }
        }
    }

    @Test func aProxyThatRefusesTheTunnelOrCannotReachTheBackendSaysSo() async throws {
        try await withServers { nginx, _, trust in
            let closed = try LoopbackPorts.free(count: 1)[0]
            // CONNECT is allowed to the closed port only: nginx's ports are refused, the closed one cannot be reached.
            let proxy = try await TinyProxy.start(connectPorts: [closed])
            defer { Task { await proxy.stop() } }
            let setting = HTTPProxy.url(proxy.url, includingLoopback: true)
            let refused = await #expect(throws: SessionError.self) {
                try await Self.fetcher(Self.endpoints(nginx)[0], trust: trust, proxy: setting, clock: ManualClock())
                    .fetchCredential(for: "bob")
            }
            #expect(
                refused?.reason == "the proxy refused the tunnel to the backend: it answered CONNECT with 403",
                "\(String(describing: refused))")
            // Waiting does not open a tunnel the proxy refuses: someone must change its rules or the endpoint.
            #expect(refused?.code == .backendMisconfigured)
            #expect(refused?.failureClass == .misconfiguration)
            let unreachable = await #expect(throws: SessionError.self) {
                try await Self.fetcher(
                    URL(string: "https://localhost:\(closed)/identity")!, trust: trust, proxy: setting,
                    clock: ManualClock()
                ).fetchCredential(for: "bob")
            }
            #expect(
                unreachable?.reason.hasPrefix("the proxy could not reach the backend: it answered CONNECT with 5")
                    == true,
                "\(String(describing: unreachable))")
            #expect(unreachable?.failureClass == .outage)
        }
    }

    @Test func aProxyAskingForCredentialsIsAMisconfigurationOfTheProxy() async throws {
        try await withServers { nginx, backend, trust in
            let password = "proxy-secret-0451"
            let proxy = try await TinyProxy.start(connectPorts: nginx.ports, basicAuth: ("relay", password))
            defer { Task { await proxy.stop() } }
            let clock = ManualClock(now: Date(timeIntervalSince1970: TimeInterval(Self.start)))
            var wrong = URLComponents(url: proxy.url, resolvingAgainstBaseURL: false)!
            (wrong.user, wrong.password) = ("relay", "not-\(password)")
            for (setting, missing) in [(proxy.url, true), (wrong.url!, false)] {
                for endpoint in Self.endpoints(nginx) {
                    let fetcher = Self.fetcher(
                        endpoint, trust: trust, proxy: .url(setting, includingLoopback: true), clock: clock)
                    let error = await #expect(throws: SessionError.self) {
                        try await fetcher.fetchCredential(for: "bob")
                    }
                    #expect(error?.code == .backendMisconfigured, "\(String(describing: error))")
                    #expect(error?.failureClass == .misconfiguration)
                    // tinyproxy answers CONNECT with 401 rather than 407; both mean the proxy wants credentials.
                    #expect(
                        error?.reason.hasPrefix("the proxy requires authentication: it answered CONNECT with 40")
                            == true, "\(String(describing: error))")
                    #expect(error?.reason.contains("backend") == false, "a 407 is blamed on the backend")
                    #expect(error.map { "\($0)" }?.contains(password) == false, "missing: \(missing)")
                }
            }
            // With the user and password in its URL the proxy opens the tunnel.
            var right = URLComponents(url: proxy.url, resolvingAgainstBaseURL: false)!
            (right.user, right.password) = ("relay", password)
            for endpoint in Self.endpoints(nginx) {
                let fetcher = Self.fetcher(
                    endpoint, trust: trust, proxy: .url(right.url!, includingLoopback: true), clock: clock)
                let credential = try await fetcher.fetchCredential(for: "bob")
                #expect(try backend.verifier(clock: clock).verify(credential).isValid)
                #expect(!"\(fetcher)".contains(password))
            }
        }
    }

    @Test func aMalformedProxySettingIsAMisconfigurationThatNamesTheSettingNotItsValue() async throws {
        try await withServers { nginx, _, trust in
            let endpoint = Self.endpoints(nginx)[0]
            let settings: [(HTTPProxy, String)] = [
                (.environment(["https_proxy": "http://[bad"], includingLoopback: true), "https_proxy"),
                (.environment(["HTTPS_PROXY": "   "], includingLoopback: true), "HTTPS_PROXY"),
                (
                    .environment(["ALL_PROXY": "http://user:pw-0451@proxy .internal:3128"], includingLoopback: true),
                    "ALL_PROXY"
                ),
                (.environment(["all_proxy": "ftp://proxy.internal:21"], includingLoopback: true), "all_proxy"),
                (.environment(["https_proxy": "http://proxy.internal:99999"], includingLoopback: true), "https_proxy"),
                (.url(URL(string: "gopher://proxy.internal:70")!, includingLoopback: true), "HTTPProxy.url"),
                (.url(URL(string: "http:///no-host")!, includingLoopback: true), "HTTPProxy.url"),
            ]
            for (setting, source) in settings {
                let fetcher = Self.fetcher(endpoint, trust: trust, proxy: setting, clock: ManualClock())
                let error = await #expect(throws: SessionError.self) { try await fetcher.fetchCredential(for: "bob") }
                #expect(error?.code == .backendMisconfigured, "\(source): \(String(describing: error))")
                #expect(error?.failureClass == .misconfiguration)
                #expect(error?.reason.hasPrefix("the proxy setting (\(source)) is not a proxy URL") == true)
                for quoted in ["[bad", "pw-0451", "proxy.internal", "ftp", "gopher"] {
                    #expect(error?.reason.contains(quoted) == false, "the error quotes the setting: \(quoted)")
                }
            }
            // The forms libcurl takes pass: no scheme (http), credentials, IPv6, SOCKS.
            for value in [
                "proxy.internal:3128", "http://u:p@proxy.internal:3128/", "https://[::1]:8443", "socks5h://proxy:1080",
            ] {
                #expect(HTTPProxy.isUsable(value), "\(value)")
            }
        }
    }

    @Test func aProxyThatClosesTheConnectionIsTheProxysOutage() async throws {
        try await withServers { nginx, _, trust in
            let closing = try ClosingServer()
            defer { closing.stop() }
            let setting = HTTPProxy.url(URL(string: "http://127.0.0.1:\(closing.port)")!, includingLoopback: true)
            for endpoint in Self.endpoints(nginx) {
                let fetcher = Self.fetcher(endpoint, trust: trust, proxy: setting, clock: ManualClock())
                let error = await #expect(throws: SessionError.self) { try await fetcher.fetchCredential(for: "bob") }
                #expect(error?.code == .fetchFailed, "\(String(describing: error))")
                #expect(error?.failureClass == .outage)
                #expect(
                    error?.reason.hasPrefix("the proxy closed the connection before the tunnel to the backend opened")
                        == true, "\(String(describing: error))")
            }
            #expect(closing.connections >= 2)
        }
    }

    @Test func anHTTPSProxyWhoseCertificateIsUntrustedIsTheProxysMisconfiguration() async throws {
        try await withServers { nginx, _, trust in
            // nginx's TLS port as an https proxy: its certificate comes from the private authority, which the system
            // does not trust, so the handshake with the proxy fails before any CONNECT.
            let setting = HTTPProxy.url(URL(string: "https://localhost:\(nginx.ports[0])")!, includingLoopback: true)
            for endpoint in Self.endpoints(nginx) {
                let fetcher = Self.fetcher(endpoint, trust: trust, proxy: setting, clock: ManualClock())
                let error = await #expect(throws: SessionError.self) { try await fetcher.fetchCredential(for: "bob") }
                #expect(error?.code == .backendMisconfigured, "\(String(describing: error))")
                #expect(error?.failureClass == .misconfiguration)
                #expect(
                    error?.reason.hasPrefix(
                        "the proxy's certificate was not trusted: it is not signed by an authority the system trusts")
                        == true, "\(String(describing: error))")
                // OpenSSL's X509_V_ERR_UNABLE_TO_GET_ISSUER_CERT_LOCALLY (20) or a neighbour, from the proxy's check.
                #expect(error?.reason.contains("the proxy's verification result 2") == true)
                #expect(error?.reason.contains("backend's certificate") == false)
                #expect(error?.reason.contains("endpoint's host") == false)
            }
        }
    }

    /// nginx's TLS front and its plain-HTTP one.
    static func endpoints(_ nginx: NginxFront) -> [URL] {
        [
            URL(string: "https://localhost:\(nginx.ports[0])/identity")!,
            URL(string: "http://127.0.0.1:\(nginx.ports[1])/identity")!,
        ]
    }

    static func fetcher(_ endpoint: URL, trust: CertificateTrust, proxy: HTTPProxy, clock: ManualClock)
        -> HTTPCredentialFetcher
    {
        // A timeout no busy machine comes near: every fetch here is expected to be answered or refused.
        HTTPCredentialFetcher(endpoint: endpoint, timeout: .seconds(60), trust: trust, proxy: proxy, clock: clock) {
            account, request in
            request.setValue("Bearer session-\(account.rawValue)", forHTTPHeaderField: "Authorization")
            request.setValue(String(Int64(clock.now.timeIntervalSince1970)), forHTTPHeaderField: "X-Demo-Clock")
        }
    }

    /// Runs `body` with a loopback backend and an nginx in front of it (TLS with HTTP/2, and plain HTTP), with the
    /// trust in nginx's authority, and stops both.
    func withServers(_ body: (NginxFront, LoopbackBackend, CertificateTrust) async throws -> Void) async throws {
        let authority = try await Self.authority.value
        let trust = CertificateTrust.authorities([try CertificateAuthorities(pemFile: authority.certificate)])
        let backend = try await LoopbackBackend.start()
        let nginx: NginxFront
        do {
            nginx = try await NginxFront.start(
                [NginxFront.Server(http2: true), NginxFront.Server(http2: false, tls: false)], authority: authority,
                backendPort: backend.port)
        } catch {
            await backend.stop()
            throw error
        }
        do {
            try await body(nginx, backend, trust)
        } catch {
            await nginx.stop()
            await backend.stop()
            throw error
        }
        await nginx.stop()
        await backend.stop()
    }
}
