public import Foundation

#if canImport(FoundationNetworking)
    public import FoundationNetworking
#endif

/// Fetches credentials from the host's backend endpoint over HTTPS.
///
/// Each fetch sends one request to ``endpoint`` with `Accept: application/json`, `Accept-Encoding: identity` and
/// `User-Agent: SessionEngine/<version>` (``defaultUserAgent``), after the host's `authenticate` closure has added
/// the account's authentication (a session cookie, a bearer token) and, if it likes, its own `User-Agent`. The response must have a 2xx status and, unless the host opts out, `Cache-Control: no-store`; its body is
/// decoded with ``IdentityCredential/init(json:)`` and so validated against every rule of the contract.
///
/// What the fetcher refuses, and why:
/// - an endpoint that is not `https`, unless it is plain `http` to a loopback host (`127.0.0.0/8`, `::1`,
///   `localhost`) or the host passed `allowsInsecureHTTP: true`: the host's authentication would cross the network
///   in clear. The refusal comes before `authenticate` runs and before any connection;
/// - a response with a `Content-Encoding` other than `identity` (a decompression bomb), a `Content-Length` over
///   ``maximumResponseSize``, or a body that grows past it: the transfer is stopped at the limit, so a hostile or
///   broken backend cannot exhaust the host's memory;
/// - a response slower than ``timeout``: the transfer is cancelled and the fetch fails at the deadline, whatever the
///   backend keeps sending;
/// - a redirect: it is never followed, so the authentication goes only to ``endpoint``.
///
/// Failures map onto the engine's classes of error through an ``HTTPFailureClassifier``. With the
/// ``HTTPFailureClassifier/standard`` one, a 401 ends the backend session (``SessionError/backendSessionEnded(_:)``,
/// terminal: the engine signs out), and so does a 403 whose JSON body is `{"error": "session_ended"}`; any other
/// status (a 403 page from a proxy or firewall included), timeouts and connection failures are transient
/// (``SessionError/Code/fetchFailed``, retried with backoff). A 429 or 503 with `Retry-After` (delay-seconds or an
/// HTTP date) carries the delay in ``SessionError/retryAfter``, and the engine waits at least that long. What waiting
/// cannot fix fails with ``SessionError/Code/backendMisconfigured`` (retried on the slower misconfiguration
/// schedule): an untrusted certificate, a redirect, a 2xx without `no-store`, a compressed body, and faults of the
/// fetcher's own setup: trusted authorities libcurl cannot load or take (see ``CertificateTrust``), a proxy setting
/// it cannot use, a proxy that asks for credentials or refuses the tunnel (see ``HTTPProxy``). A response
/// that is not a valid credential fails with ``SessionError/Code/invalidCredential``. No error, log or description
/// ever holds the response body, the credential, the URL or the host's authentication.
///
/// Each successful fetch also estimates the backend's clock offset from the response's `Date` header and the round
/// trip (``FetchedCredential/serverClockOffset``): the backend's time minus the local time at the middle of the round
/// trip, good to about a second, since `Date` has whole seconds. The local time is the engine's: the time the engine
/// started the fetch (``FetchRequest/startedAt``) plus what passed since on the fetcher's `clock` (its monotonic
/// ``SessionClock/uptime``: real time on the ``SystemClock``, virtual time on a test clock the engine shares), so the
/// offset is on the clock the engine applies it to; only a fetch that does not say when it was asked
/// (``fetchCredential(for:)`` called directly) reads the fetcher's own `clock`.
///
/// On Linux, every endpoint, `https` and plain `http` alike, uses libcurl directly (loaded at run time; Foundation's
/// networking links it, so a process on Linux has it anyway), on one thread for every fetch of the process, with
/// callbacks that check the head, keep at most the limit of body and stop the transfer the moment a limit, the
/// deadline or a cancellation is reached. On Apple platforms an ephemeral `URLSession` with no cache and no cookie
/// storage streams the body to a delegate that enforces the same limits (and serves where libcurl cannot be loaded).
/// Certificates are verified against ``trust``: the system's authorities by default, or given ones (a private CA)
/// instead of them or beside them. A ``proxy`` is tunnelled through with `CONNECT` for both schemes.
///
/// ```swift
/// let fetcher = HTTPCredentialFetcher(endpoint: URL(string: "https://api.example.com/appnorth/identity")!) {
///     account, request in
///     request.setValue("Bearer \(try await tokens.token(for: account))", forHTTPHeaderField: "Authorization")
/// }
/// let engine = SessionEngine(fetcher: fetcher)
/// ```
public struct HTTPCredentialFetcher: CredentialFetcher, CustomStringConvertible, CustomDebugStringConvertible,
    CustomReflectable
{
    /// The largest response body accepted, in bytes; a credential with the largest allowed properties is far smaller.
    public static let maximumResponseSize = ResponsePolicy.maximumBodySize

    /// The `User-Agent` of every request whose `authenticate` closure sets none: `SessionEngine/` and the package's
    /// version, such as `SessionEngine/0.1.0`. Many firewalls refuse a request without one.
    public static let defaultUserAgent = "SessionEngine/\(packageVersion)"

    /// The package's version, as released.
    package static let packageVersion = "0.1.0"

    /// The backend endpoint that issues credentials.
    public let endpoint: URL
    /// How long one fetch may take, from sending the request to receiving the whole response; at most a day.
    public let timeout: Duration
    /// The longest ``timeout``: a day, which no fetch needs, and within what every transfer's own deadline holds.
    static let longestTimeout = Duration.seconds(86_400)
    /// The latest `Retry-After` date a response is read as, from now: a year (the engine shortens it to its
    /// `maximumRetryAfter` anyway).
    static let longestOffset: TimeInterval = 365 * 86_400
    /// The largest clock offset a response is read as: far beyond any clock's error (a machine booted at 1970 is 56
    /// years off), and within what a `Duration` holds.
    static let farthestOffset: TimeInterval = 1e15
    /// Whether a response without `Cache-Control: no-store` is refused.
    public let requiresNoStore: Bool
    /// Whether plain `http` is allowed to hosts that are not loopback.
    public let allowsInsecureHTTP: Bool
    /// Decides what a response whose status is not 2xx means.
    public let classifier: HTTPFailureClassifier
    /// The certificate authorities an `https` endpoint's certificate must chain to.
    public let trust: CertificateTrust
    /// Whether requests go through a forward proxy.
    public let proxy: HTTPProxy
    private let transfer: TransferChoice
    private let clock: any SessionClock
    private let authenticate: @Sendable (AccountID, inout URLRequest) async throws -> Void

    /// Creates a fetcher for the host's credential endpoint.
    ///
    /// The request is a `GET` with `Accept: application/json` and `User-Agent` set to ``defaultUserAgent``;
    /// `authenticate` may change anything about it, including the method, the body and the `User-Agent`, except
    /// `Accept-Encoding` (always `identity`). It is called once per fetch, so
    /// it can supply a token that was refreshed since the last fetch.
    ///
    /// - Parameters:
    ///   - endpoint: The backend URL that issues a credential for the authenticated session: `https`, or plain
    ///     `http` to a loopback host.
    ///   - timeout: How long one fetch may take in total (1 ms to a day); a slower response fails transiently.
    ///   - requiresNoStore: Whether to refuse a response without `Cache-Control: no-store`, as the contract
    ///     requires; set it to `false` only for a backend you cannot change.
    ///   - allowsInsecureHTTP: Whether to allow plain `http` to a host that is not loopback. The host's
    ///     authentication and the credential then cross the network in clear; use it only on a network you
    ///     trust completely, such as a private link to a sidecar.
    ///   - trust: The certificate authorities an `https` endpoint's certificate must chain to:
    ///     ``CertificateTrust/system`` by default, or ``CertificateTrust/authorities(_:includingSystem:)`` for a
    ///     private CA.
    ///   - proxy: Whether requests go through a forward proxy: ``HTTPProxy/environment`` by default (the proxy
    ///     variables, as curl reads them; never for a loopback endpoint), ``HTTPProxy/none``, or
    ///     ``HTTPProxy/url(_:includingLoopback:)``.
    ///   - classifier: Decides what a response whose status is not 2xx means; ``HTTPFailureClassifier/standard``
    ///     by default.
    ///   - clock: The local clock the backend's `Date` is compared with when a fetch does not say when the engine
    ///     asked (``fetchCredential(for:)`` called directly); the engine's own fetches carry the engine's time in
    ///     ``FetchRequest/startedAt``, which takes its place.
    ///   - authenticate: Adds the account's authentication to the request. Throw
    ///     ``SessionError/backendSessionEnded(_:)`` when the account has no backend session any more; any other
    ///     error is treated as transient.
    public init(
        endpoint: URL,
        timeout: Duration = .seconds(10),
        requiresNoStore: Bool = true,
        allowsInsecureHTTP: Bool = false,
        trust: CertificateTrust = .system,
        proxy: HTTPProxy = .environment,
        classifier: HTTPFailureClassifier = .standard,
        clock: some SessionClock = SystemClock(),
        authenticate: @escaping @Sendable (_ account: AccountID, _ request: inout URLRequest) async throws -> Void
    ) {
        self.init(
            endpoint: endpoint,
            timeout: timeout,
            requiresNoStore: requiresNoStore,
            allowsInsecureHTTP: allowsInsecureHTTP,
            transfer: .automatic,
            trust: trust,
            proxy: proxy,
            classifier: classifier,
            clock: clock,
            authenticate: authenticate
        )
    }

    /// Which transfer sends a request.
    package enum TransferChoice: Sendable {
        /// Every request on ``CurlTransfer`` where libcurl loads, on `URLSession` otherwise.
        case automatic
        /// Every request on `URLSession`.
        case urlSession
    }

    /// Creates a fetcher with a choice of transfer, so tests can drive `URLSession` where libcurl loads too.
    package init(
        endpoint: URL,
        timeout: Duration = .seconds(10),
        requiresNoStore: Bool = true,
        allowsInsecureHTTP: Bool = false,
        transfer: TransferChoice,
        trust: CertificateTrust = .system,
        proxy: HTTPProxy = .environment,
        classifier: HTTPFailureClassifier = .standard,
        clock: any SessionClock = SystemClock(),
        authenticate: @escaping @Sendable (_ account: AccountID, _ request: inout URLRequest) async throws -> Void
    ) {
        self.endpoint = endpoint
        self.timeout = min(max(timeout, .milliseconds(1)), Self.longestTimeout)
        self.requiresNoStore = requiresNoStore
        self.allowsInsecureHTTP = allowsInsecureHTTP
        self.transfer = transfer
        self.trust = trust
        self.proxy = proxy
        self.classifier = classifier
        self.clock = clock
        self.authenticate = authenticate
    }

    /// Fetches a credential for the account from the backend.
    ///
    /// - Parameter account: The account whose backend session authenticates the request.
    /// - Returns: The validated credential from the response body.
    /// - Throws: ``SessionError``: ``SessionError/Code/fetchFailed`` (not transient) for an endpoint that is
    ///   neither `https` nor allowed plain `http`, before any connection; ``SessionError/Code/backendSessionEnded``
    ///   when the ``classifier`` says the session ended (401, or a 403 saying so); ``SessionError/Code/fetchFailed``
    ///   for other statuses (with ``SessionError/retryAfter`` on a 429 or 503 that sent one), a missing `no-store`, a
    ///   compressed or oversized body, a timeout or a connection failure; ``SessionError/Code/backendMisconfigured``
    ///   for what waiting cannot fix (an untrusted certificate, a redirect, authorities or a proxy setting libcurl
    ///   cannot use, a proxy's 407 or 403); ``SessionError/Code/invalidCredential`` for
    ///   a body that is not a valid credential; what `authenticate` throws; `CancellationError` when the calling
    ///   task is cancelled.
    public func fetchCredential(for account: AccountID) async throws -> IdentityCredential {
        try await fetch(account: account, startedAt: nil, attempt: 1).fetched.credential
    }

    /// Fetches a credential for the engine's fetch and estimates the backend's clock offset.
    ///
    /// - Parameter request: The fetch the engine starts.
    /// - Returns: The validated credential and the backend's clock offset, when the response carried a `Date`.
    /// - Throws: What ``fetchCredential(for:)`` throws.
    public func fetch(_ request: FetchRequest) async throws -> FetchedCredential {
        try await fetch(account: request.account, startedAt: request.startedAt, attempt: request.attempt).fetched
    }

    /// Fetches a credential and says which HTTP version carried it (`1.1`, `2`; empty where the transfer does not
    /// say), for tests against real servers.
    ///
    /// - Parameters:
    ///   - startedAt: The engine's wall-clock time when it asked, which the offset is measured against; the
    ///     fetcher's own clock's when `nil`.
    ///   - attempt: The attempt's number; a retry (2 and later) opens a new connection instead of reusing one.
    package func fetch(account: AccountID, startedAt: Date? = nil, attempt: Int = 1) async throws
        -> (fetched: FetchedCredential, httpVersion: String)
    {
        // Durations are measured on the fetcher's clock's monotonic time: real time on the system clock, and no time
        // at all on a manual clock the engine shares, however long the real round trip takes.
        let asked = clock.uptime
        _ = try EndpointPolicy.check(endpoint, allowsInsecureHTTP: allowsInsecureHTTP)
        var request = URLRequest(url: endpoint)
        request.httpMethod = "GET"
        request.cachePolicy = .reloadIgnoringLocalCacheData
        request.setValue("application/json", forHTTPHeaderField: "Accept")
        request.setValue(Self.defaultUserAgent, forHTTPHeaderField: "User-Agent")
        // A backstop for the transport; the deadline of the transfer is the one that counts.
        request.timeoutInterval = (timeout.timeInterval + 1).rounded(.up)
        try await authenticate(account, &request)
        // `authenticate` may have changed the URL: the final request is checked again.
        let isPlain = try EndpointPolicy.check(request.url, allowsInsecureHTTP: allowsInsecureHTTP)
        if !isPlain, trust.authorities.allSatisfy({ $0.count == 0 }), !trust.includesSystem {
            throw SessionError(
                .fetchFailed,
                reason: "the fetcher trusts no certificate authority (CertificateTrust.authorities with none and "
                    + "without the system's), so no https backend can be verified",
                isTransient: false
            )
        }
        if !isPlain, let problem = trust.problem {
            throw SessionError.backendMisconfigured("the fetcher's certificate trust cannot be used: \(problem.reason)")
        }
        // The local time of sending: the engine's time of asking plus what `authenticate` took, or the fetcher's clock.
        let sending = clock.uptime
        let sentAt = startedAt.map { $0.addingTimeInterval((sending - asked).timeInterval) } ?? clock.now
        let result = try await send(request, requiresNoStore: requiresNoStore, freshConnection: attempt > 1)
        let roundTrip = max(.zero, clock.uptime - sending)
        let serverDate = result.head.value("Date").flatMap(HTTPDate.parse)
        guard (200...299).contains(result.head.status) else {
            throw failure(result, serverDate: serverDate, sentAt: sentAt)
        }
        let credential = try Self.credential(from: result.body)
        // The backend stamped `Date` somewhere within the round trip: compare it with the local time at its middle. A
        // local time that is no number, or one no duration holds (a clock that lies), measures no offset.
        let offset = serverDate.flatMap { date -> Duration? in
            let seconds = date.timeIntervalSince(sentAt) - roundTrip.timeInterval / 2
            return seconds.isFinite && abs(seconds) < Self.farthestOffset ? .seconds(seconds) : nil
        }
        return (FetchedCredential(credential, serverClockOffset: offset), result.head.version)
    }

    /// Sends another request to the endpoint's origin the way fetches go (the same transfer, trust, limits and
    /// timeout; no `no-store` required), for a host's own calls to its backend such as the demo's admin endpoints.
    ///
    /// - Parameter request: The request, whose URL passes the same endpoint policy.
    /// - Returns: The status and the body (at most ``maximumResponseSize`` bytes).
    /// - Throws: ``SessionError`` as a fetch does, `CancellationError` when the calling task is cancelled.
    package func exchange(_ request: URLRequest) async throws -> (status: Int, body: [UInt8]) {
        var request = request
        if request.value(forHTTPHeaderField: "User-Agent") == nil {
            request.setValue(Self.defaultUserAgent, forHTTPHeaderField: "User-Agent")
        }
        _ = try EndpointPolicy.check(request.url, allowsInsecureHTTP: allowsInsecureHTTP)
        let result = try await send(request, requiresNoStore: false)
        return (result.head.status, result.body)
    }

    /// Sends the request on libcurl, or on `URLSession` where libcurl is not there.
    private func send(_ request: URLRequest, requiresNoStore: Bool, freshConnection: Bool = false) async throws
        -> HTTPTransferResult
    {
        let timeoutError = SessionError.fetchFailed("the backend did not answer within \(Self.describe(timeout))")
        let result: HTTPTransferResult
        let onCurl = CurlTransfer.isAvailable && transfer != .urlSession
        // The proxy decided for this URL, or none (then libcurl does not read the environment either).
        let proxy =
            onCurl ? try request.url.flatMap { url throws(SessionError) in try self.proxy.checkedProxy(for: url) } : nil
        // Checked on either transfer, before the request goes anywhere.
        let checked = try CheckedHTTPRequest(request)
        if onCurl {
            result = try await CurlTransfer.perform(
                checked,
                timeout: timeout,
                requiresNoStore: requiresNoStore,
                trust: trust,
                proxy: proxy ?? "",
                freshConnection: freshConnection,
                timeoutError: timeoutError
            )
        } else {
            result = try await URLSessionTransfer.shared.perform(
                request,
                timeout: timeout,
                requiresNoStore: requiresNoStore,
                trust: trust,
                timeoutError: timeoutError
            )
        }
        if Task.isCancelled { throw CancellationError() }
        return result
    }

    /// The error for a response whose status is not 2xx, as the classifier decides; the body never reaches it.
    private func failure(_ result: HTTPTransferResult, serverDate: Date?, sentAt: Date) -> SessionError {
        let status = result.head.status
        var retryAfter: Duration?
        if status == 429 || status == 503, let value = result.head.value("Retry-After") {
            retryAfter = Self.retryAfter(value, serverDate: serverDate, localDate: sentAt)
        }
        let response = HTTPFailureResponse(
            status: status,
            headers: result.head.fields,
            body: result.body,
            retryAfter: retryAfter
        )
        switch classifier.classify(response) {
        case .sessionEnded:
            return SessionError.backendSessionEnded("the backend answered \(status); the account's session has ended")
        case .transient:
            if (300...399).contains(status) {
                return SessionError.backendMisconfigured(
                    "the backend answered \(status), a redirect, which the fetcher never follows; give it the final URL"
                )
            }
            let reason =
                switch status {
                case 403: "the backend answered 403 without saying the session ended (a proxy or firewall page?)"
                case 429, 500...599: "the backend answered \(status)"
                default: "the backend answered \(status) instead of a credential"
                }
            return SessionError(.fetchFailed, reason: reason, isTransient: true, retryAfter: retryAfter)
        }
    }

    /// The delay a `Retry-After` value asks for: delay-seconds, or an HTTP date read against the backend's own `Date`
    /// (the local time when the response has none), so a skewed clock does not change the delay. `nil` when the value
    /// is neither.
    package static func retryAfter(_ value: String, serverDate: Date?, localDate: Date) -> Duration? {
        let text = value.trimmingASCIISpaces()
        if !text.isEmpty, text.utf8.count <= 10, text.utf8.allSatisfy({ $0 >= 0x30 && $0 <= 0x39 }),
            let seconds = Int64(text)
        {
            return .seconds(seconds)
        }
        guard let date = HTTPDate.parse(text) else { return nil }
        // Against a local clock that lies, the difference may be no number or beyond what a duration holds: a year
        // at most, which the engine shortens to its `maximumRetryAfter` anyway.
        let seconds = date.timeIntervalSince(serverDate ?? localDate)
        return .seconds(seconds.isFinite ? min(max(0, seconds), Self.longestOffset) : 0)
    }

    /// Decodes the credential from a response body that passed the transfer's checks.
    package static func credential(from body: [UInt8]) throws(SessionError) -> IdentityCredential {
        do {
            return try IdentityCredential(json: Data(body))
        } catch {
            throw SessionError(
                .invalidCredential,
                reason: "the backend's response is not a valid credential: \(error.reason)",
                isTransient: error.code != .unpairedSurrogate
            )
        }
    }

    /// Whether a `Cache-Control` value holds the `no-store` directive.
    package static func hasNoStore(_ value: String?) -> Bool {
        ResponsePolicy.hasNoStore(value)
    }

    /// The endpoint's scheme and host, the timeout and the policy; never the path, the query or the authentication.
    public var description: String {
        let origin = "\(endpoint.scheme ?? "?")://\(endpoint.host ?? "?")"
        return "HTTPCredentialFetcher(endpoint: \(origin), timeout: \(Self.describe(timeout)), "
            + "requiresNoStore: \(requiresNoStore), allowsInsecureHTTP: \(allowsInsecureHTTP), trust: \(trust), "
            + "proxy: \(proxy))"
    }

    /// The same as ``description``.
    public var debugDescription: String { description }

    /// A mirror with the same fields as ``description``; the authentication closure and the session are left out.
    public var customMirror: Mirror {
        Mirror(
            self,
            children: [
                "endpoint": "\(endpoint.scheme ?? "?")://\(endpoint.host ?? "?")", "timeout": timeout,
                "requiresNoStore": requiresNoStore, "allowsInsecureHTTP": allowsInsecureHTTP,
                "trust": trust.description, "proxy": proxy.description,
            ],
            displayStyle: .struct
        )
    }

    private static func describe(_ duration: Duration) -> String {
        let milliseconds = Int((duration.timeInterval * 1000).rounded())
        return milliseconds % 1000 == 0 ? "\(milliseconds / 1000) s" : "\(milliseconds) ms"
    }
}
