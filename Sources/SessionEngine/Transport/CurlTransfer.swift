import CSessionEngineCurl
import Dispatch
import Foundation

/// The fetcher's `https` transfer on Linux: libcurl's multi interface, with every header line and every piece of
/// body passing through callbacks that enforce the limits and can stop the transfer at once.
///
/// `URLSession` cannot bound a transfer on Linux: it decompresses whatever the server sends, cannot pause a
/// transfer, and after `cancel()` keeps reading for about 0.8 s, hundreds of megabytes at loopback speed. libcurl
/// (the same library under `URLSession` there, loaded by the C target `CSessionEngineCurl` at run time) does none
/// of that when driven directly: it sends no `Accept-Encoding` and decodes no body, and a callback that refuses data
/// ends the transfer before libcurl reads more. So the head (at most 16 KiB) is checked by ``ResponsePolicy`` before
/// any body is kept, at most 64 KiB of body is kept, and the transfer stops within one callback of the limit.
/// Certificates are verified against the fetcher's ``CertificateTrust`` (the system's authorities, given ones, or
/// both), a proxy is used only when the fetcher's ``HTTPProxy`` picked one for the endpoint (never one libcurl finds
/// in the environment by itself), redirects are never followed and only `http` and `https` are spoken.
///
/// One thread drives every transfer of the process, so a thousand fetches in flight cost no thread each, and
/// connections to the backend are reused, except by a retry: a fetch after a failed one opens a new connection, so a
/// connection to a worker that keeps failing (an nginx reloading) is not asked again. The process keeps up to 64 idle
/// connections, whatever hosts its fetchers speak to, so one fetcher's traffic does not close another's connection. The caller is resumed as soon as the outcome is known; a deadline or a
/// cancellation decides it at once and wakes the thread, which stops the transfer then. libcurl's own timeout, one
/// second after the fetch's, is the backstop.
enum CurlTransfer {
    /// Whether libcurl could be loaded in this process.
    static let isAvailable = se_curl_is_available() != 0

    /// Sends the request and reads a response that passes ``ResponsePolicy``.
    ///
    /// - Parameters:
    ///   - trust: The authorities the backend's certificate must chain to.
    ///   - proxy: The proxy to tunnel through, or the empty string for none (the environment is not read).
    ///   - freshConnection: Whether to open a new connection instead of reusing one.
    /// - Throws: ``SessionError`` for every refusal and failure, `CancellationError` when the caller is cancelled.
    static func perform(
        _ request: CheckedHTTPRequest,
        timeout: Duration,
        requiresNoStore: Bool,
        trust: CertificateTrust,
        proxy: String,
        freshConnection: Bool = false,
        timeoutError: SessionError
    ) async throws -> HTTPTransferResult {
        let control = TransferControl()
        let reader = ResponseReader(
            control: control, requiresNoStore: requiresNoStore, throughProxy: !proxy.isEmpty,
            timeoutError: timeoutError)
        return try await withTaskCancellationHandler {
            try await control.outcome {
                DispatchQueue.global().asyncAfter(deadline: .now() + timeout.timeInterval) {
                    if control.finish(.failure(timeoutError)) { se_curl_wake() }
                }
                let code = reader.start(
                    request, backstop: timeout + .seconds(1), trust: trust, proxy: proxy, fresh: freshConnection)
                if code != 0 { control.finish(.failure(Self.failure(Self.outcome(code)))) }
            }
        } onCancel: {
            if control.finish(.failure(CancellationError())) { se_curl_wake() }
        }
    }

    /// The error for a transfer that ended as `outcome` says; the reason says whether the proxy or the backend failed
    /// and names the class of failure and libcurl's code, never the URL, the proxy's or anything either sent.
    ///
    /// What waiting cannot fix is a misconfiguration (``SessionError/backendMisconfigured(_:)``): authorities
    /// libcurl cannot load (error 77), an option it refuses, a certificate it does not trust, a proxy that asks for
    /// credentials or refuses the tunnel. A proxy's failure before the tunnel opened (it closed the connection, its
    /// certificate was not trusted, its TLS failed) is reported as the proxy's, never the backend's.
    static func failure(_ outcome: se_curl_outcome, throughProxy: Bool = false) -> SessionError {
        let code = outcome.code
        if throughProxy, let failure = proxyFailure(outcome) { return failure }
        switch code {
        case SE_CURL_UNAVAILABLE:
            return SessionError(
                .fetchFailed,
                reason: "https is unavailable: libcurl (libcurl.so.4) could not be loaded",
                isTransient: false
            )
        case SE_CURL_STOPPED:
            return SessionError.fetchFailed("the transfer was stopped")
        case SE_CURL_SETUP_FAILED:
            return SessionError.backendMisconfigured(
                "the transfer could not be set up: libcurl refused an option (the trusted authorities, the proxy "
                    + "setting or the request)")
        case 0: return SessionError.fetchFailed("the backend's answer is not an HTTP response")
        case 1: return SessionError(.fetchFailed, reason: "the endpoint's scheme is not spoken", isTransient: false)
        case 6, 5: return SessionError.fetchFailed("the backend's host name could not be resolved")
        case 7: return SessionError.fetchFailed("the backend could not be reached (connection failed)")
        case 18: return SessionError.fetchFailed("the backend closed the connection before the body ended")
        case 52: return SessionError.fetchFailed("the backend closed the connection without answering")
        case 60:
            return SessionError.backendMisconfigured(
                "the backend's certificate was not trusted: \(untrusted(outcome.ssl_verify_result, of: "endpoint")) "
                    + "(libcurl error 60, verification result \(outcome.ssl_verify_result))"
            )
        case 77:
            return SessionError.backendMisconfigured(
                "the trusted certificate authorities could not be loaded: the TLS library refused them "
                    + "(libcurl error 77); see CertificateTrust"
            )
        case 35, 53, 54, 58, 59, 64, 66, 80, 82, 83, 90, 91, 98:
            return SessionError.fetchFailed(
                "the secure connection to the backend failed: its certificate was not trusted or TLS failed "
                    + "(libcurl error \(code))"
            )
        default: return SessionError.fetchFailed("the connection to the backend failed (libcurl error \(code))")
        }
    }

    /// The outcome of a transfer that could not start.
    private static func outcome(_ code: Int32) -> se_curl_outcome {
        se_curl_outcome(code: code, ssl_verify_result: 0, connect_code: 0, proxy_error: 0, proxy_ssl_verify_result: 0)
    }

    /// Why certificate verification failed, from OpenSSL's verification result; `host` names whose host the
    /// certificate must name (`endpoint` or `proxy`); the endpoint's is checked against ``CertificateTrust``, the
    /// proxy's against the system's authorities.
    private static func untrusted(_ result: Int, of host: String) -> String {
        switch result {
        case 2, 18, 19, 20, 21:
            host == "proxy"
                ? "it is not signed by an authority the system trusts"
                : "it is not signed by an authority the fetcher trusts (see CertificateTrust)"
        case 9, 10:
            "it is not valid at this time (expired or not yet valid)"
        case 62, 64:
            "it does not name the \(host)'s host"
        case 0, 1:
            // libcurl checks the name itself once the chain has verified, and reports 0 or 1 when it does not match.
            "its chain verified, but it does not name the \(host)'s host"
        default:
            "its chain did not verify"
        }
    }

    /// The error for a failure of the proxy rather than the backend, or `nil` when the backend failed: anything
    /// before the proxy answered `CONNECT` with 2xx is the proxy's.
    private static func proxyFailure(_ outcome: se_curl_outcome) -> SessionError? {
        let code = outcome.code
        let connect = outcome.connect_code
        switch connect {
        case 200...299:
            // The tunnel was open: what failed after it is the backend's, unless libcurl says the proxy failed.
            if code == 97 || outcome.proxy_error != 0 {
                return SessionError.fetchFailed(
                    "the proxy failed (libcurl error \(code), proxy error \(outcome.proxy_error))")
            }
            return nil
        case 0:
            break
        case 401, 407:
            // 407 is the proxy's status for it; some proxies (tinyproxy among them) answer CONNECT with 401.
            return SessionError.backendMisconfigured(
                "the proxy requires authentication: it answered CONNECT with \(connect) (give the proxy's "
                    + "credentials in its URL, or check them)")
        case 500...599:
            return SessionError.fetchFailed(
                "the proxy could not reach the backend: it answered CONNECT with \(connect)")
        default:
            return SessionError.backendMisconfigured(
                "the proxy refused the tunnel to the backend: it answered CONNECT with \(connect)")
        }
        // No answer to CONNECT: the proxy failed before the tunnel opened, whatever the code says.
        switch code {
        case 3:
            return SessionError.backendMisconfigured(
                "the proxy setting is not a URL libcurl can use (libcurl error 3)")
        case 5:
            return SessionError.fetchFailed("the proxy's host name could not be resolved (libcurl error 5)")
        case 7:
            return SessionError.fetchFailed("the proxy could not be reached (connection failed, libcurl error 7)")
        case 18, 52, 55, 56:
            return SessionError.fetchFailed(
                "the proxy closed the connection before the tunnel to the backend opened (libcurl error \(code))")
        case 60:
            let result = outcome.proxy_ssl_verify_result
            return SessionError.backendMisconfigured(
                "the proxy's certificate was not trusted: \(untrusted(result, of: "proxy")) (libcurl error 60, the "
                    + "proxy's verification result \(result)); an https proxy is checked against the system's "
                    + "authorities")
        case 35, 53, 54, 58, 59, 64, 66, 80, 82, 83, 90, 91, 98:
            return SessionError.fetchFailed(
                "the secure connection to the proxy failed (libcurl error \(code), the proxy's verification result "
                    + "\(outcome.proxy_ssl_verify_result))")
        case 97:
            return SessionError.fetchFailed(
                "the proxy failed (libcurl error \(code), proxy error \(outcome.proxy_error))")
        default:
            if outcome.proxy_error != 0 {
                return SessionError.fetchFailed(
                    "the proxy failed (libcurl error \(code), proxy error \(outcome.proxy_error))")
            }
            return nil
        }
    }

    /// Reads one response on the transfers' thread: collects the head line by line, checks it, and keeps the body
    /// within the limit. Once started it is used on that thread only, which holds a reference until the transfer is
    /// done; what it decides goes through the ``TransferControl``.
    private final class ResponseReader {
        let control: TransferControl
        let requiresNoStore: Bool
        let throughProxy: Bool
        let timeoutError: SessionError
        private var status: Int?
        private var version = ""
        private var fields: [(name: String, value: String)] = []
        private var headBytes = 0
        private var informational = 0
        private var headDone = false

        init(control: TransferControl, requiresNoStore: Bool, throughProxy: Bool, timeoutError: SessionError) {
            self.control = control
            self.requiresNoStore = requiresNoStore
            self.throughProxy = throughProxy
            self.timeoutError = timeoutError
        }

        /// Hands the transfer to the transfers' thread; returns 0, or the negative code of why it could not start.
        func start(
            _ request: CheckedHTTPRequest, backstop: Duration, trust: CertificateTrust, proxy: String,
            fresh: Bool
        )
            -> Int32
        {
            let lines = request.headerLines.map { strdup($0)! }
            defer { lines.forEach { free($0) } }
            let context = Unmanaged.passRetained(self)
            var callbacks = se_curl_callbacks(
                context: context.toOpaque(),
                header: { context, line, length in
                    ResponseReader.reader(context).header(UnsafeRawBufferPointer(start: line, count: length)) ? 1 : 0
                },
                body: { context, bytes, length in
                    ResponseReader.reader(context).body(UnsafeRawBufferPointer(start: bytes, count: length)) ? 1 : 0
                },
                proceed: { context in
                    ResponseReader.reader(context).control.isFinished ? 0 : 1
                },
                done: { context, outcome in
                    Unmanaged<ResponseReader>.fromOpaque(context!).takeRetainedValue().complete(outcome.pointee)
                }
            )
            let authorities = trust.bundle
            let code = request.url.withCString { url in
                request.method.withCString { method in
                    lines.map { UnsafePointer($0) }.withUnsafeBufferPointer { headers in
                        request.body.withUnsafeBufferPointer { body in
                            authorities.withBytesOrNone { pem in
                                proxy.withCString { proxy in
                                    var transfer = se_curl_request(
                                        url: url,
                                        method: method,
                                        headers: headers.baseAddress,
                                        header_count: headers.count,
                                        body: body.isEmpty ? nil : body.baseAddress,
                                        body_length: body.count,
                                        timeout_ms: Int(backstop.timeInterval * 1000),
                                        ca_pem: pem.baseAddress,
                                        ca_pem_length: pem.count,
                                        ca_include_system: trust.includesSystem ? 1 : 0,
                                        proxy: proxy,
                                        fresh_connection: fresh ? 1 : 0
                                    )
                                    return se_curl_start(&transfer, &callbacks)
                                }
                            }
                        }
                    }
                }
            }
            if code != 0 { context.release() }
            return code
        }

        /// The transfer ended with `code`: decides the outcome, unless a limit, the deadline or a cancellation
        /// already did.
        private func complete(_ outcome: se_curl_outcome) {
            if outcome.code == 0, let result = control.received() {
                control.finish(.success(result))
            } else if outcome.code == 28 {
                control.finish(.failure(timeoutError))
            } else {
                control.finish(.failure(CurlTransfer.failure(outcome, throughProxy: throughProxy)))
            }
        }

        private static func reader(_ context: UnsafeMutableRawPointer?) -> ResponseReader {
            Unmanaged<ResponseReader>.fromOpaque(context!).takeUnretainedValue()
        }

        /// One header line, CRLF included. After the final head, libcurl may pass trailers; they count towards the
        /// head's limit and are otherwise ignored.
        func header(_ bytes: UnsafeRawBufferPointer) -> Bool {
            guard !control.isFinished else { return false }
            headBytes += bytes.count
            guard headBytes <= ResponsePolicy.maximumHeadSize else {
                return fail("sent a response head larger than 16 KiB")
            }
            guard !headDone else { return true }
            var end = bytes.count
            while end > 0, bytes[end - 1] == 0x0A || bytes[end - 1] == 0x0D { end -= 1 }
            let line = String(decoding: bytes[..<end], as: UTF8.self)
            guard let status else {
                guard let (version, status) = HTTPResponseHead.statusLine(line) else {
                    return fail("sent a malformed status line")
                }
                self.status = status
                self.version = String(version)
                return true
            }
            guard !line.isEmpty else { return endOfHead(status) }
            guard let field = HTTPResponseHead.field(line) else { return fail("sent a malformed header line") }
            fields.append(field)
            return true
        }

        private func endOfHead(_ status: Int) -> Bool {
            if (100..<200).contains(status) {
                informational += 1
                guard informational <= ResponsePolicy.maximumInformationalResponses else {
                    return fail("sent too many informational responses")
                }
                self.status = nil
                fields = []
                return true
            }
            let head = HTTPResponseHead(status: status, fields: fields, version: version)
            do {
                _ = try ResponsePolicy.check(head, requiresNoStore: requiresNoStore)
            } catch {
                control.finish(.failure(error))
                return false
            }
            headDone = true
            control.receive(head: head)
            return true
        }

        /// The next piece of body; refusing it ends the transfer.
        func body(_ bytes: UnsafeRawBufferPointer) -> Bool {
            guard headDone, !control.isFinished else { return false }
            guard control.receive(bytes, limit: ResponsePolicy.maximumBodySize) else {
                control.finish(.failure(ResponsePolicy.tooLarge(declared: false)))
                return false
            }
            return true
        }

        private func fail(_ problem: String) -> Bool {
            control.finish(.failure(ResponsePolicy.protocolError(problem)))
            return false
        }
    }
}
