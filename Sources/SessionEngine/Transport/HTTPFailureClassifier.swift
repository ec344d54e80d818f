/// Decides what a credential endpoint's failure response means for the account's session.
///
/// The rule of ``standard``: a 401 from the endpoint ends the backend session; a 403 ends it only when the endpoint
/// says so in a JSON body, `{"error": "session_ended"}` (see ``HTTPFailureResponse/saysSessionEnded``); anything else
/// (another status, a 403 page from a proxy or firewall in front of the backend, HTML, an empty body) is transient
/// and retried with backoff. Network errors, timeouts and the fetcher's own setup never reach a classifier: the
/// fetcher classes them itself (transient, or a misconfiguration such as an untrusted certificate or a proxy's 407;
/// see ``HTTPCredentialFetcher``).
///
/// A host whose backend says it differently supplies its own:
///
/// ```swift
/// let classifier = HTTPFailureClassifier { response in
///     response.status == 401 || response.header("X-Session-State") == "ended" ? .sessionEnded : .transient
/// }
/// let fetcher = HTTPCredentialFetcher(endpoint: endpoint, classifier: classifier) { account, request in … }
/// ```
public struct HTTPFailureClassifier: Sendable {
    /// What a failure response means.
    public enum Verdict: Sendable, Hashable {
        /// The account's backend session has ended: terminal, the engine signs the account out.
        case sessionEnded
        /// The failure may pass: the engine retries with backoff (and waits at least as long as `Retry-After`
        /// asked, on a 429 or 503).
        case transient
    }

    /// The `error` value with which the endpoint says, in a 403's JSON body, that the session has ended.
    public static let sessionEndedError = "session_ended"

    /// 401 ends the session, a 403 only with `{"error": "session_ended"}`; everything else is transient.
    public static let standard = HTTPFailureClassifier { response in
        switch response.status {
        case 401: .sessionEnded
        case 403: response.saysSessionEnded ? .sessionEnded : .transient
        default: .transient
        }
    }

    private let body: @Sendable (HTTPFailureResponse) -> Verdict

    /// Creates a classifier.
    ///
    /// - Parameter classify: Decides a failure response's verdict. It must not copy the body or a header value into
    ///   anything that is logged.
    public init(_ classify: @escaping @Sendable (HTTPFailureResponse) -> Verdict) {
        self.body = classify
    }

    /// Decides a failure response's verdict.
    ///
    /// - Parameter response: The response, whose status is not 2xx.
    /// - Returns: The verdict.
    public func classify(_ response: HTTPFailureResponse) -> Verdict {
        body(response)
    }
}
