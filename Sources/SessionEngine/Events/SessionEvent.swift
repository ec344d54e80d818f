/// Something the engine did or saw, as published by ``SessionEngine/events()``.
///
/// Events never hold a signature, a secret or a property value.
public enum SessionEvent: Sendable, Hashable, CustomStringConvertible {
    /// The state changed. Every subscriber first receives the state current when it subscribed.
    case stateChanged(SessionState)
    /// A fetched credential was validated and installed.
    case renewed(SessionIdentity)
    /// A fetch failed or its credential was refused.
    case fetchFailed(FetchFailure)
    /// The host reported that the service rejected a credential.
    case credentialRejected(RejectionReport)
    /// An account change or shutdown cancelled the previous account's scoped work.
    case workCancelled(account: AccountID?, count: Int)
    /// A fetched credential suggests that this process's clock and the backend's disagree.
    case clockSkewSuspected(ClockSkewReport)
    /// The subscriber fell behind and this many of the oldest undelivered events were dropped.
    case eventsDropped(count: Int)

    /// A one-line summary without any secret.
    public var description: String {
        switch self {
        case .stateChanged(let state): "state \(state)"
        case .renewed(let identity): "renewed \(identity)"
        case .fetchFailed(let failure): "fetch failed \(failure)"
        case .credentialRejected(let report): "credential rejected \(report)"
        case .workCancelled(let account, let count):
            "work cancelled account: \(account.map(\.rawValue) ?? "nil"), count: \(count)"
        case .clockSkewSuspected(let report): "clock skew suspected \(report)"
        case .eventsDropped(let count): "events dropped count: \(count)"
        }
    }
}

/// A failed fetch, and when the engine tries again.
public struct FetchFailure: Sendable, Hashable, CustomStringConvertible {
    /// The account the fetch was for.
    public let account: AccountID
    /// What went wrong.
    public let error: SessionError
    /// How many fetches in a row have now failed.
    public let consecutiveFailures: Int
    /// The delay before the next attempt, or `nil` when the failure was terminal.
    public let retryIn: Duration?

    /// Creates a failure report.
    ///
    /// - Parameters:
    ///   - account: The account the fetch was for.
    ///   - error: What went wrong.
    ///   - consecutiveFailures: How many fetches in a row have failed.
    ///   - retryIn: The delay before the next attempt, `nil` when terminal.
    public init(account: AccountID, error: SessionError, consecutiveFailures: Int, retryIn: Duration?) {
        self.account = account
        self.error = error
        self.consecutiveFailures = consecutiveFailures
        self.retryIn = retryIn
    }

    /// `account, error, retry`.
    public var description: String {
        "\(account), \(error.code), failures: \(consecutiveFailures), retryIn: \(retryIn.map { "\($0)" } ?? "never")"
    }
}

/// A credential the service rejected, and what the engine does about it.
public struct RejectionReport: Sendable, Hashable, CustomStringConvertible {
    /// The account whose credential was rejected.
    public let account: AccountID
    /// The rejected credential's expiry, which identifies it without its signature.
    public let expiresAt: Int64
    /// `true` when the engine renews at once; `false` when this was the renewed credential rejected again, so the
    /// engine only retries after backoff.
    public let renewing: Bool
    /// The delay before the next attempt when not renewing at once.
    public let retryIn: Duration?

    /// Creates a rejection report.
    ///
    /// - Parameters:
    ///   - account: The account whose credential was rejected.
    ///   - expiresAt: The rejected credential's expiry.
    ///   - renewing: Whether the engine renews at once.
    ///   - retryIn: The delay before the next attempt, when not renewing at once.
    public init(account: AccountID, expiresAt: Int64, renewing: Bool, retryIn: Duration?) {
        self.account = account
        self.expiresAt = expiresAt
        self.renewing = renewing
        self.retryIn = retryIn
    }

    /// `account, expiresAt, renewing`.
    public var description: String {
        "\(account), expiresAt: \(expiresAt), renewing: \(renewing)"
            + (retryIn.map { ", retryIn: \($0)" } ?? "")
    }
}

/// Evidence that this process's clock and the backend's disagree.
public struct ClockSkewReport: Sendable, Hashable, CustomStringConvertible {
    /// The account the credential was for.
    public let account: AccountID
    /// The local wall-clock time, in Unix seconds, when the credential arrived.
    public let localTime: Int64
    /// The credential's expiry, in Unix seconds.
    public let expiresAt: Int64

    /// Creates a clock-skew report.
    ///
    /// - Parameters:
    ///   - account: The account the credential was for.
    ///   - localTime: The local time in Unix seconds.
    ///   - expiresAt: The credential's expiry in Unix seconds.
    public init(account: AccountID, localTime: Int64, expiresAt: Int64) {
        self.account = account
        self.localTime = localTime
        self.expiresAt = expiresAt
    }

    /// `account, localTime, expiresAt`.
    public var description: String { "\(account), localTime: \(localTime), expiresAt: \(expiresAt)" }
}
