public import Foundation

#if canImport(FoundationNetworking)
    public import FoundationNetworking
#endif

/// Fetches credentials from the host's backend endpoint over HTTP.
///
/// Each fetch sends one request to ``endpoint`` with `Accept: application/json`, after the host's `authenticate`
/// closure has added the account's authentication (a session cookie, a bearer token). The response must have a 2xx
/// status and, unless the host opts out, `Cache-Control: no-store`; its body is decoded with
/// ``IdentityCredential/init(json:)`` and so validated against every rule of the contract.
///
/// Failures map onto the engine's classes of error: 401 and 403 end the backend session
/// (``SessionError/backendSessionEnded(_:)``, terminal: the engine signs out), while 5xx, other non-2xx statuses,
/// timeouts and connection failures are transient (``SessionError/Code/fetchFailed``, retried with backoff). A
/// response that is not a valid credential fails with ``SessionError/Code/invalidCredential``, also transient.
/// No error, log or description ever holds the response body, the credential or the host's authentication.
///
/// The fetcher uses its own ephemeral `URLSession` with no cache and no cookie storage, and does not follow
/// redirects, so the host's authentication is only ever sent to ``endpoint``. Serve the endpoint over HTTPS.
///
/// ```swift
/// let fetcher = HTTPCredentialFetcher(endpoint: URL(string: "https://api.example.com/appnorth/identity")!) {
///     account, request in
///     request.setValue("Bearer \(try await tokens.token(for: account))", forHTTPHeaderField: "Authorization")
/// }
/// let engine = SessionEngine(fetcher: fetcher)
/// ```
public struct HTTPCredentialFetcher: CredentialFetcher {
    /// The largest response body accepted; a credential with the largest allowed properties is far smaller.
    public static let maximumResponseSize = 64 * 1024

    /// The backend endpoint that issues credentials.
    public let endpoint: URL
    /// How long one fetch may take, from sending the request to receiving the whole response.
    public let timeout: Duration
    /// Whether a response without `Cache-Control: no-store` is refused.
    public let requiresNoStore: Bool
    private let session: URLSession
    private let authenticate: @Sendable (AccountID, inout URLRequest) async throws -> Void

    /// Creates a fetcher for the host's credential endpoint.
    ///
    /// The request is a `GET` with `Accept: application/json`; `authenticate` may change anything about it,
    /// including the method and body. It is called once per fetch, so it can supply a token that was refreshed
    /// since the last fetch.
    ///
    /// - Parameters:
    ///   - endpoint: The backend URL that issues a credential for the authenticated session.
    ///   - timeout: How long one fetch may take in total; a slower response fails transiently.
    ///   - requiresNoStore: Whether to refuse a response without `Cache-Control: no-store`, as the contract
    ///     requires; set it to `false` only for a backend you cannot change.
    ///   - session: The URL session to use; `nil` creates an ephemeral one without cache, cookie storage or
    ///     redirects. A session you supply must not cache responses.
    ///   - authenticate: Adds the account's authentication to the request. Throw
    ///     ``SessionError/backendSessionEnded(_:)`` when the account has no backend session any more; any other
    ///     error is treated as transient.
    public init(
        endpoint: URL,
        timeout: Duration = .seconds(10),
        requiresNoStore: Bool = true,
        session: URLSession? = nil,
        authenticate: @escaping @Sendable (_ account: AccountID, _ request: inout URLRequest) async throws -> Void
    ) {
        self.endpoint = endpoint
        self.timeout = max(timeout, .milliseconds(1))
        self.requiresNoStore = requiresNoStore
        self.session = session ?? Self.makeSession()
        self.authenticate = authenticate
    }

    /// Fetches a credential for the account from the backend.
    ///
    /// - Parameter account: The account whose backend session authenticates the request.
    /// - Returns: The validated credential from the response body.
    /// - Throws: ``SessionError``: ``SessionError/Code/backendSessionEnded`` for 401 or 403,
    ///   ``SessionError/Code/fetchFailed`` for other statuses, a missing `no-store`, a timeout or a connection
    ///   failure, ``SessionError/Code/invalidCredential`` for a body that is not a valid credential; what
    ///   `authenticate` throws; `CancellationError` when the calling task is cancelled.
    public func fetchCredential(for account: AccountID) async throws -> IdentityCredential {
        var request = URLRequest(url: endpoint)
        request.httpMethod = "GET"
        request.cachePolicy = .reloadIgnoringLocalCacheData
        request.setValue("application/json", forHTTPHeaderField: "Accept")
        // A backstop for the transport; the deadline below is the one that counts. Some URL session
        // implementations honour only whole seconds, so it is rounded up and kept above the deadline.
        request.timeoutInterval = (timeout.timeInterval + 1).rounded(.up)
        try await authenticate(account, &request)
        let (data, response) = try await send(request)
        return try Self.credential(from: data, response: response, requiresNoStore: requiresNoStore)
    }

    /// Sends the request and waits for the whole response, or fails when ``timeout`` passes first.
    private func send(_ request: URLRequest) async throws -> (Data, URLResponse) {
        let session = self.session
        let timeout = self.timeout
        do {
            return try await withThrowingTaskGroup(of: (Data, URLResponse)?.self) { group in
                group.addTask { try await session.data(for: request) }
                group.addTask {
                    try await Task.sleep(for: timeout, clock: .continuous)
                    return nil
                }
                defer { group.cancelAll() }
                guard let first = try await group.next(), let result = first else {
                    throw SessionError.fetchFailed("the backend did not answer within \(Self.describe(timeout))")
                }
                return result
            }
        } catch let error as SessionError {
            throw error
        } catch let error as URLError {
            if error.code == .cancelled || Task.isCancelled { throw CancellationError() }
            throw SessionError.fetchFailed(Self.describe(error, timeout: timeout))
        } catch is CancellationError {
            throw CancellationError()
        } catch {
            if Task.isCancelled { throw CancellationError() }
            throw SessionError.fetchFailed("the request failed with \(type(of: error))")
        }
    }

    /// Checks the response and decodes the credential from its body.
    static func credential(
        from data: Data,
        response: URLResponse,
        requiresNoStore: Bool
    ) throws(SessionError) -> IdentityCredential {
        guard let response = response as? HTTPURLResponse else {
            throw SessionError.fetchFailed("the backend's answer is not an HTTP response")
        }
        let status = response.statusCode
        switch status {
        case 200...299:
            break
        case 401, 403:
            throw SessionError.backendSessionEnded("the backend answered \(status); the account's session has ended")
        case 500...599:
            throw SessionError.fetchFailed("the backend answered \(status)")
        default:
            throw SessionError.fetchFailed("the backend answered \(status) instead of a credential")
        }
        if requiresNoStore, !hasNoStore(response.value(forHTTPHeaderField: "Cache-Control")) {
            throw SessionError.fetchFailed(
                "the backend's response lacks Cache-Control: no-store, so the credential could be cached"
            )
        }
        guard data.count <= maximumResponseSize else {
            throw SessionError.fetchFailed("the backend's response is larger than \(maximumResponseSize) bytes")
        }
        do {
            return try IdentityCredential(json: data)
        } catch {
            throw SessionError(
                .invalidCredential,
                reason: "the backend's response is not a valid credential: \(error.reason)",
                isTransient: true
            )
        }
    }

    /// Whether a `Cache-Control` value holds the `no-store` directive.
    package static func hasNoStore(_ value: String?) -> Bool {
        guard let value else { return false }
        return value.split(separator: ",").contains { directive in
            directive.trimmingCharacters(in: .whitespaces).lowercased() == "no-store"
        }
    }

    private static func describe(_ error: URLError, timeout: Duration) -> String {
        switch error.code {
        case .timedOut:
            return "the backend did not answer within \(describe(timeout)) (URLError \(error.code.rawValue))"
        case .cannotConnectToHost, .cannotFindHost, .networkConnectionLost, .notConnectedToInternet,
            .dnsLookupFailed, .secureConnectionFailed:
            return "the backend could not be reached (URLError \(error.code.rawValue))"
        default:
            return "the request failed (URLError \(error.code.rawValue))"
        }
    }

    private static func describe(_ duration: Duration) -> String {
        let milliseconds = Int((duration.timeInterval * 1000).rounded())
        return milliseconds % 1000 == 0 ? "\(milliseconds / 1000) s" : "\(milliseconds) ms"
    }

    private static func makeSession() -> URLSession {
        let configuration = URLSessionConfiguration.ephemeral
        configuration.urlCache = nil
        configuration.requestCachePolicy = .reloadIgnoringLocalCacheData
        configuration.httpCookieStorage = nil
        configuration.httpShouldSetCookies = false
        return URLSession(configuration: configuration, delegate: RefuseRedirects(), delegateQueue: nil)
    }
}

/// Stops the fetcher's session from following redirects, so the host's authentication goes only to the endpoint.
private final class RefuseRedirects: NSObject, URLSessionTaskDelegate, Sendable {
    func urlSession(
        _ session: URLSession,
        task: URLSessionTask,
        willPerformHTTPRedirection response: HTTPURLResponse,
        newRequest request: URLRequest,
        completionHandler: @escaping @Sendable (URLRequest?) -> Void
    ) {
        completionHandler(nil)
    }
}
