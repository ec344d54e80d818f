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
        /// The backend, the network path to it or the fetcher's setup is misconfigured: the answer can never be a
        /// usable credential until someone changes something (an endpoint the fetcher refuses, an untrusted
        /// certificate, a redirect, a response without `no-store`, an encoding the fetcher does not accept). The
        /// engine logs it at error, counts it in ``SessionMetrics/misconfigurations`` and retries it on the slower
        /// ``SessionConfiguration/misconfigurationRetry`` schedule. Its ``SessionError/failureClass`` is
        /// ``SessionError/FailureClass/misconfiguration``.
        public static let backendMisconfigured = Code("BACKEND_MISCONFIGURED")
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
        /// ``SessionEngine/signIn(_:timeout:)`` or ``SessionEngine/switchAccount(to:timeout:)`` reached its deadline
        /// before the account's first credential was installed. The account stays signed in and the engine keeps
        /// fetching in the background; the state becomes ``SessionState/identified(_:)`` once the backend answers.
        public static let signInTimedOut = Code("SIGN_IN_TIMED_OUT")
        /// The fetcher had not answered when the fetch's deadline (``SessionConfiguration/fetchTimeout``) passed: the
        /// engine abandoned the fetch, cancelled the fetcher's task, freed the fetch's place in a pool's budget and
        /// retries with backoff, as after any outage. A late answer from that fetcher is dropped.
        public static let fetchTimedOut = Code("FETCH_TIMED_OUT")
        /// An account ID that cannot name an account (``AccountID/validate()``): empty, longer than
        /// ``AccountID/maximumLength`` bytes, or with a control character. Nothing was signed in or changed.
        public static let invalidAccount = Code("INVALID_ACCOUNT")

        /// The raw value.
        public var description: String { rawValue }
    }

    /// What a failure asks of the host, for a program to switch on: wait out an ``outage``, page someone about a
    /// ``misconfiguration``, or sign the user in again after ``sessionEnded``.
    ///
    /// Classes are open-ended like codes: new ones are added as static members, so a `switch` over them needs a
    /// `default`. Each fetch failure has one; errors that are not about the backend (``Code/signedOut``,
    /// ``Code/switching``, ``Code/accountChanged``, ``Code/shutDown``, …) have none.
    public struct FailureClass: Hashable, Sendable, CustomStringConvertible {
        /// The stable identifier, such as `misconfiguration`.
        public let rawValue: String

        private init(_ rawValue: String) {
            self.rawValue = rawValue
        }

        /// The backend could not be reached or answered with an error that passes (a timeout, a refused
        /// connection, a 5xx, a 429): the engine retries with ``SessionConfiguration/retry``; nobody needs to act
        /// unless it lasts.
        public static let outage = FailureClass("outage")
        /// The answer cannot become a usable credential until someone changes the backend, the network path or
        /// the host's setup (``Code/backendMisconfigured``, ``Code/identityMismatch``, ``Code/invalidCredential``,
        /// a credential no clock makes plausible, a fetcher's refusal): logged at error, counted in ``SessionMetrics/misconfigurations``, and retried on
        /// the slower ``SessionConfiguration/misconfigurationRetry``.
        public static let misconfiguration = FailureClass("misconfiguration")
        /// The account's backend session is gone (``Code/backendSessionEnded``): the engine signs the account out;
        /// the user must sign in again.
        public static let sessionEnded = FailureClass("sessionEnded")

        /// The raw value.
        public var description: String { rawValue }

        /// The class of an error with this code and transience when nobody said otherwise.
        static func of(_ code: Code, isTransient: Bool) -> FailureClass? {
            switch code {
            case .backendSessionEnded: .sessionEnded
            case .backendMisconfigured, .identityMismatch, .invalidCredential: .misconfiguration
            case .credentialExpiredOnArrival, .lifetimeTooLong: .misconfiguration
            case .fetchFailed: isTransient ? .outage : .misconfiguration
            case .fetchTimedOut: .outage
            default: nil
            }
        }
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
    /// What the failure asks of the host; `nil` for errors that are not about the backend. See ``FailureClass``.
    ///
    /// It follows from the code unless the error was created with a class: ``Code/backendSessionEnded`` is
    /// ``FailureClass/sessionEnded``; ``Code/backendMisconfigured``, ``Code/identityMismatch``,
    /// ``Code/invalidCredential``, ``Code/credentialExpiredOnArrival``, ``Code/lifetimeTooLong`` (no clock made the
    /// credential plausible) and a ``Code/fetchFailed`` that is not transient are
    /// ``FailureClass/misconfiguration``; other fetch failures are ``FailureClass/outage``. A
    /// ``Code/signInTimedOut`` carries the class of the last failed fetch.
    public let failureClass: FailureClass?

    /// Creates an error.
    ///
    /// - Parameters:
    ///   - code: The stable error code.
    ///   - reason: A sentence without secrets.
    ///   - isTransient: Whether retrying later may succeed.
    ///   - retryAfter: How long the backend asked to wait before the next fetch, if it said.
    ///   - failureClass: What the failure asks of the host; `nil` derives it from the code (see ``failureClass``).
    public init(
        _ code: Code,
        reason: String,
        isTransient: Bool = false,
        retryAfter: Duration? = nil,
        failureClass: FailureClass? = nil
    ) {
        self.code = code
        self.reason = reason
        self.isTransient = isTransient
        self.retryAfter = retryAfter.map { max(.zero, $0) }
        self.failureClass = failureClass ?? FailureClass.of(code, isTransient: isTransient)
    }

    /// A failure that only a change to the backend, the network path or the host's setup can fix: the engine
    /// retries it on the slower ``SessionConfiguration/misconfigurationRetry`` schedule and logs it at error.
    ///
    /// Fetchers throw it for answers that can never become a credential by waiting: an untrusted certificate, a
    /// redirect, a response without `no-store`, an encoding the fetcher does not accept.
    ///
    /// - Parameter reason: What is misconfigured, without secrets.
    /// - Returns: An error with code ``Code/backendMisconfigured``.
    public static func backendMisconfigured(_ reason: String) -> SessionError {
        SessionError(.backendMisconfigured, reason: reason, isTransient: true)
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
    ///
    /// Outside scoped work, a host reports the same fact with ``SessionEngine/credentialRejected(_:)``.
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
