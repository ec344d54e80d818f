import Dispatch
import Foundation
import Synchronization

#if canImport(FoundationNetworking)
    import FoundationNetworking
#endif
#if canImport(Security)
    import Security
#endif

/// The fetcher's `https` transfer on Apple platforms, and on Linux where libcurl cannot be loaded: a `URLSession`
/// data task whose body streams to a delegate that enforces the limits.
///
/// The delegate checks the head (status, `no-store`, `Content-Encoding`, `Content-Length`) as soon as it arrives,
/// counts the body as it streams and cancels the task the moment a limit is passed; a deadline cancels it as well.
/// The caller is resumed at once in every case, never after the task winds down. Nothing is buffered by the session
/// itself: a data task without a completion handler hands each piece to the delegate and keeps none.
///
/// On Apple platforms cancelling the response stops the transfer before any body is read. On Linux, `URLSession`
/// (libcurl underneath) decompresses whatever the server sends and delivers data for a short while after
/// `cancel()`; the delegate drops that data, but libcurl's own buffers still grow (hundreds of megabytes at loopback
/// speed), which is why ``CurlTransfer`` drives libcurl directly there.
///
/// A ``CertificateTrust`` other than the system's is applied on Apple platforms by the delegate's server-trust
/// challenge: the given authorities become the trust's anchors (the only ones, unless the system's are included) and
/// the trust is evaluated again, host name included. Linux's `URLSession` offers no such challenge and always
/// verifies against the first system bundle it finds, so there an `https` fetch with given authorities is refused
/// before any connection; ``CurlTransfer``, which Linux uses for `https`, applies them instead.
///
/// One transfer (one session) serves every fetcher of the process: creating and tearing down a session per fetcher
/// costs seconds on Linux, and the delegate keeps each task's state apart.
final class URLSessionTransfer: Sendable {
    /// The transfer every fetcher uses.
    static let shared = URLSessionTransfer()

    private let session: URLSession
    private let delegate: Delegate

    private init() {
        let configuration = URLSessionConfiguration.ephemeral
        configuration.urlCache = nil
        configuration.requestCachePolicy = .reloadIgnoringLocalCacheData
        configuration.httpCookieStorage = nil
        configuration.httpShouldSetCookies = false
        configuration.httpAdditionalHeaders = ["Accept-Encoding": "identity"]
        let delegate = Delegate()
        let queue = OperationQueue()
        queue.maxConcurrentOperationCount = 1
        self.delegate = delegate
        self.session = URLSession(configuration: configuration, delegate: delegate, delegateQueue: queue)
    }

    /// Sends the request and reads a response that passes ``ResponsePolicy``.
    ///
    /// - Throws: ``SessionError`` for every refusal and failure, `CancellationError` when the caller is cancelled.
    func perform(
        _ request: URLRequest,
        timeout: Duration,
        requiresNoStore: Bool,
        trust: CertificateTrust,
        timeoutError: SessionError
    ) async throws -> HTTPTransferResult {
        #if !canImport(Security)
            if !trust.isSystem, request.url?.scheme?.lowercased() == "https" {
                throw SessionError(
                    .fetchFailed,
                    reason: "URLSession on this platform cannot trust given certificate authorities, and libcurl, "
                        + "which can, could not be loaded",
                    isTransient: false
                )
            }
        #endif
        var request = request
        request.setValue("identity", forHTTPHeaderField: "Accept-Encoding")
        let control = TransferControl()
        let task = session.dataTask(with: request)
        delegate.register(task, control: control, requiresNoStore: requiresNoStore, trust: trust)
        return try await withTaskCancellationHandler {
            try await control.outcome {
                DispatchQueue.global().asyncAfter(deadline: .now() + timeout.timeInterval) {
                    if control.finish(.failure(timeoutError)) { task.cancel() }
                }
                task.resume()
            }
        } onCancel: {
            if control.finish(.failure(CancellationError())) { task.cancel() }
        }
    }

    /// Routes each task's callbacks to its fetch and stops the task the moment its fetch is decided.
    private final class Delegate: NSObject, URLSessionDataDelegate, Sendable {
        private struct Entry {
            let control: TransferControl
            let requiresNoStore: Bool
            let trust: CertificateTrust
        }

        private let entries = SanitizedMutex<[Int: Entry]>([:])

        func register(_ task: URLSessionTask, control: TransferControl, requiresNoStore: Bool, trust: CertificateTrust)
        {
            entries.withLock { entries in
                entries[task.taskIdentifier] = Entry(control: control, requiresNoStore: requiresNoStore, trust: trust)
            }
        }

        private func entry(_ task: URLSessionTask) -> Entry? {
            entries.withLock { $0[task.taskIdentifier] }
        }

        func urlSession(
            _ session: URLSession,
            dataTask: URLSessionDataTask,
            didReceive response: URLResponse,
            completionHandler: @escaping @Sendable (URLSession.ResponseDisposition) -> Void
        ) {
            guard let entry = entry(dataTask), !entry.control.isFinished else {
                completionHandler(.cancel)
                return
            }
            guard let response = response as? HTTPURLResponse else {
                entry.control.finish(.failure(SessionError.fetchFailed("the backend's answer is not an HTTP response")))
                completionHandler(.cancel)
                dataTask.cancel()
                return
            }
            let head = HTTPResponseHead(
                status: response.statusCode,
                fields: response.allHeaderFields.compactMap { name, value in
                    guard let name = name as? String, let value = value as? String else { return nil }
                    return (name, value)
                }
            )
            do {
                _ = try ResponsePolicy.check(head, requiresNoStore: entry.requiresNoStore)
                entry.control.receive(head: head)
                completionHandler(.allow)
            } catch {
                entry.control.finish(.failure(error))
                completionHandler(.cancel)
                dataTask.cancel()
            }
        }

        func urlSession(_ session: URLSession, dataTask: URLSessionDataTask, didReceive data: Data) {
            guard let entry = entry(dataTask), !entry.control.isFinished else { return }
            if !entry.control.receive(data, limit: ResponsePolicy.maximumBodySize) {
                entry.control.finish(.failure(ResponsePolicy.tooLarge(declared: false)))
                dataTask.cancel()
            }
        }

        func urlSession(_ session: URLSession, task: URLSessionTask, didCompleteWithError error: (any Error)?) {
            guard let entry = entries.withLock({ $0.removeValue(forKey: task.taskIdentifier) }) else { return }
            guard !entry.control.isFinished else { return }
            if let error {
                entry.control.finish(.failure(Self.describe(error)))
            } else if let result = entry.control.received() {
                entry.control.finish(.success(result))
            } else if let response = task.response as? HTTPURLResponse {
                // A redirect that was not followed completes without a response callback on some platforms.
                let head = HTTPResponseHead(status: response.statusCode, fields: [])
                if (200...299).contains(head.status) {
                    entry.control.finish(.failure(SessionError.fetchFailed("the backend's answer has no body")))
                } else {
                    entry.control.finish(.success(HTTPTransferResult(head: head, body: [])))
                }
            } else {
                entry.control.finish(.failure(SessionError.fetchFailed("the backend's answer is not an HTTP response")))
            }
        }

        #if canImport(Security)
            /// Evaluates the server's certificate against the fetch's given authorities; the system's own evaluation
            /// handles the system's trust.
            func urlSession(
                _ session: URLSession,
                task: URLSessionTask,
                didReceive challenge: URLAuthenticationChallenge,
                completionHandler: @escaping @Sendable (URLSession.AuthChallengeDisposition, URLCredential?) -> Void
            ) {
                guard challenge.protectionSpace.authenticationMethod == NSURLAuthenticationMethodServerTrust,
                    let serverTrust = challenge.protectionSpace.serverTrust, let entry = entry(task),
                    !entry.trust.isSystem
                else {
                    completionHandler(.performDefaultHandling, nil)
                    return
                }
                let anchors = entry.trust.certificates.compactMap { der in
                    SecCertificateCreateWithData(nil, Data(der) as CFData)
                }
                SecTrustSetAnchorCertificates(serverTrust, anchors as CFArray)
                SecTrustSetAnchorCertificatesOnly(serverTrust, !entry.trust.includesSystem)
                if SecTrustEvaluateWithError(serverTrust, nil) {
                    completionHandler(.useCredential, URLCredential(trust: serverTrust))
                } else {
                    entry.control.finish(
                        .failure(
                            SessionError.backendMisconfigured(
                                "the backend's certificate was not trusted: it does not verify against the "
                                    + "fetcher's certificate authorities (see CertificateTrust)")))
                    completionHandler(.cancelAuthenticationChallenge, nil)
                }
            }
        #endif

        func urlSession(
            _ session: URLSession,
            task: URLSessionTask,
            willPerformHTTPRedirection response: HTTPURLResponse,
            newRequest request: URLRequest,
            completionHandler: @escaping @Sendable (URLRequest?) -> Void
        ) {
            // Redirects are never followed, so the host's authentication goes only to the endpoint.
            completionHandler(nil)
        }

        private static func describe(_ error: any Error) -> SessionError {
            guard let error = error as? URLError else {
                return SessionError.fetchFailed("the request failed with \(type(of: error))")
            }
            switch error.code {
            case .cannotConnectToHost, .cannotFindHost, .networkConnectionLost, .notConnectedToInternet,
                .dnsLookupFailed, .secureConnectionFailed:
                return SessionError.fetchFailed("the backend could not be reached (URLError \(error.code.rawValue))")
            default:
                return SessionError.fetchFailed("the request failed (URLError \(error.code.rawValue))")
            }
        }
    }
}
