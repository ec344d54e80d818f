/// An error of the session engine, with a stable ``code`` and a human ``reason``.
///
/// Codes are open-ended: new ones are added as static members without breaking callers. An identified request
/// made while the identity has expired or been rejected fails with ``Code/invalidIdentity``, whose raw value is
/// `INVALID_IDENTITY`; the engine never downgrades such a request to anonymous. Errors never contain a secret or a
/// signature.
public struct SessionError: Error, Sendable, Hashable, CustomStringConvertible {
    /// A stable error code.
    public struct Code: Hashable, Sendable, CustomStringConvertible {
        /// The stable identifier, such as `INVALID_IDENTITY`.
        public let rawValue: String

        private init(_ rawValue: String) {
            self.rawValue = rawValue
        }

        /// The identity has expired or been rejected: identified work is blocked locally.
        public static let invalidIdentity = Code("INVALID_IDENTITY")
        /// No account is signed in.
        public static let signedOut = Code("SIGNED_OUT")
        /// An account change is under way; no identity may be used until it completes.
        public static let switching = Code("SWITCHING")
        /// The account changed while the call waited, or the call's work belonged to the previous account.
        public static let accountChanged = Code("ACCOUNT_CHANGED")
        /// The backend says the account's session is gone; terminal, the engine signs out.
        public static let backendSessionEnded = Code("BACKEND_SESSION_ENDED")
        /// Fetching a credential failed transiently; the engine retries with backoff.
        public static let fetchFailed = Code("FETCH_FAILED")
        /// A fetched credential names a different user than the account's first credential; it was refused.
        public static let identityMismatch = Code("IDENTITY_MISMATCH")
        /// A fetched credential had already expired by the local clock; the clocks may disagree.
        public static let credentialExpiredOnArrival = Code("CREDENTIAL_EXPIRED_ON_ARRIVAL")
        /// A fetched credential lives longer than the 24-hour maximum; it was refused.
        public static let lifetimeTooLong = Code("LIFETIME_TOO_LONG")
        /// A fetched credential breaks a rule of the contract.
        public static let invalidCredential = Code("INVALID_CREDENTIAL")
        /// The service rejected the credential; thrown by work run through `withIdentity` to request one renewal.
        public static let credentialRejected = Code("CREDENTIAL_REJECTED")
        /// The engine has shut down.
        public static let shutDown = Code("SHUT_DOWN")
        /// ``SessionEngine/signIn(_:timeout:)`` reached its deadline before the account's first credential was
        /// installed. The account stays signed in and the engine keeps fetching in the background; the state becomes
        /// ``SessionState/identified(_:)`` once the backend answers.
        public static let signInTimedOut = Code("SIGN_IN_TIMED_OUT")

        /// The raw value.
        public var description: String { rawValue }
    }

    /// The stable error code.
    public let code: Code
    /// A sentence that explains the error. Never contains a secret or a signature.
    public let reason: String
    /// Whether retrying later may succeed. Terminal errors (``Code/backendSessionEnded``) are not transient.
    public let isTransient: Bool
    /// How long the backend asked the engine to wait before the next fetch (an HTTP `Retry-After` on a 429 or 503),
    /// if it said.
    ///
    /// The engine waits at least this long, bounded by ``SessionConfiguration/maximumRetryAfter``, and never less
    /// than its own backoff and minimum interval require.
    public var retryAfter: Duration?

    /// Creates an error.
    ///
    /// - Parameters:
    ///   - code: The stable error code.
    ///   - reason: A sentence without secrets.
    ///   - isTransient: Whether retrying later may succeed.
    ///   - retryAfter: How long the backend asked to wait before the next fetch, if it said.
    public init(_ code: Code, reason: String, isTransient: Bool = false, retryAfter: Duration? = nil) {
        self.code = code
        self.reason = reason
        self.isTransient = isTransient
        self.retryAfter = retryAfter.map { max(.zero, $0) }
    }

    /// A transient fetch failure: the engine retries it with backoff.
    ///
    /// - Parameter reason: What failed, without secrets.
    /// - Returns: An error with code ``Code/fetchFailed``.
    public static func fetchFailed(_ reason: String) -> SessionError {
        SessionError(.fetchFailed, reason: reason, isTransient: true)
    }

    /// The terminal failure a fetcher throws when the backend says the account's session is gone (an HTTP 401, or a
    /// 403 whose JSON body says so).
    ///
    /// - Parameter reason: What the backend said, without secrets.
    /// - Returns: An error with code ``Code/backendSessionEnded``.
    public static func backendSessionEnded(_ reason: String = "the backend session has ended") -> SessionError {
        SessionError(.backendSessionEnded, reason: reason)
    }

    /// The error that work run through ``SessionEngine/withIdentity(_:)`` throws when the service answered
    /// `INVALID_IDENTITY`, so the engine renews once and retries the work.
    public static let credentialRejected = SessionError(
        .credentialRejected,
        reason: "the service rejected the identity credential"
    )

    /// `CODE: reason`, and the backend's requested delay when it gave one.
    public var description: String {
        guard let retryAfter else { return "\(code): \(reason)" }
        return "\(code): \(reason) (retry after \(retryAfter.readable))"
    }
}
