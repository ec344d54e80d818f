public import Foundation

/// Gets a fresh credential for an account from the host's backend.
///
/// The engine calls ``fetchCredential(for:)`` at most once at a time per account session, and cancels the call when
/// the account changes. Throw ``SessionError/backendSessionEnded(_:)`` when the backend says the session is gone
/// (terminal: the engine signs out), or a ``SessionError`` with ``SessionError/Code/invalidCredential`` that is not
/// transient when the backend issues a credential that can never verify (terminal too); any other error is treated
/// as transient and retried with backoff.
/// The engine validates every credential before installing it.
///
/// A fetcher that knows more about the backend than the credential implements ``fetch(_:)`` as well: the backend's
/// clock offset (``FetchedCredential/serverClockOffset``), which the engine uses when the clocks disagree. A delay
/// the backend asked for travels with the error, in ``SessionError/retryAfter``.
public protocol CredentialFetcher: Sendable {
    /// Fetches a credential for the account.
    ///
    /// - Parameter account: The account whose backend session to use.
    /// - Returns: The credential the backend issued.
    /// - Throws: ``SessionError/backendSessionEnded(_:)`` for a terminal failure, anything else for a transient one.
    func fetchCredential(for account: AccountID) async throws -> IdentityCredential

    /// Fetches a credential for the fetch the engine describes.
    ///
    /// The engine calls this method; the default implementation calls ``fetchCredential(for:)``. Implement it to
    /// learn which account session and attempt a fetch belongs to, for example to log the attempt or to tell the
    /// fetches of one account session from another's.
    ///
    /// - Parameter request: The fetch: its account, epoch and attempt.
    /// - Returns: The credential the backend issued.
    /// - Throws: ``SessionError/backendSessionEnded(_:)`` for a terminal failure, anything else for a transient one.
    func fetchCredential(_ request: FetchRequest) async throws -> IdentityCredential

    /// Fetches a credential and reports what the fetcher learned about the backend.
    ///
    /// The engine calls this method; the default implementation calls ``fetchCredential(_:)`` and
    /// reports no clock offset. ``HTTPCredentialFetcher`` implements it to report the offset it estimates from the
    /// response's `Date` header and the round trip.
    ///
    /// - Parameter request: The fetch: its account, epoch and attempt.
    /// - Returns: The credential, and the backend's clock offset when the fetcher measured it.
    /// - Throws: ``SessionError/backendSessionEnded(_:)`` for a terminal failure, anything else for a transient one;
    ///   a ``SessionError`` with ``SessionError/retryAfter`` set when the backend asked for a delay.
    func fetch(_ request: FetchRequest) async throws -> FetchedCredential
}

extension CredentialFetcher {
    /// Calls ``fetchCredential(for:)`` with the request's account.
    ///
    /// - Parameter request: The fetch the engine starts.
    /// - Returns: The credential the backend issued.
    /// - Throws: What ``fetchCredential(for:)`` throws.
    public func fetchCredential(_ request: FetchRequest) async throws -> IdentityCredential {
        try await fetchCredential(for: request.account)
    }
}

extension CredentialFetcher {
    /// Calls ``fetchCredential(_:)`` and reports no clock offset.
    ///
    /// - Parameter request: The fetch the engine starts.
    /// - Returns: The credential, without a clock offset.
    /// - Throws: What ``fetchCredential(_:)`` throws.
    public func fetch(_ request: FetchRequest) async throws -> FetchedCredential {
        FetchedCredential(try await fetchCredential(request))
    }
}

/// A fetched credential and what the fetcher learned about the backend with it.
public struct FetchedCredential: Sendable, Hashable {
    /// The credential the backend issued; the engine validates it before installing it.
    public var credential: IdentityCredential
    /// The backend's clock minus this process's wall clock, when the fetcher measured it (for example from the
    /// HTTP `Date` header and the round trip); `nil` when it did not.
    ///
    /// Once its magnitude exceeds ``SessionConfiguration/clockSkewTolerance`` the engine decides expiry and
    /// schedules renewals on the backend's time. A fetcher that does not measure it leaves the engine on the local
    /// clock (or on the last offset another fetch reported).
    public var serverClockOffset: Duration?

    /// Creates a result.
    ///
    /// - Parameters:
    ///   - credential: The credential the backend issued.
    ///   - serverClockOffset: The backend's clock minus this process's, if measured.
    public init(_ credential: IdentityCredential, serverClockOffset: Duration? = nil) {
        self.credential = credential
        self.serverClockOffset = serverClockOffset
    }
}

/// One fetch the engine starts: which account, which account session (its epoch), which attempt, and when on the
/// engine's clock.
public struct FetchRequest: Sendable, Hashable, CustomStringConvertible {
    /// The fetch's identity, unique over the engine's life.
    public let id: UInt64
    /// The account whose backend session to use.
    public let account: AccountID
    /// The epoch of the account session the fetch belongs to; a result that arrives after the epoch ended is
    /// discarded.
    public let epoch: UInt64
    /// The attempt's number among consecutive fetches of the account session: 1 unless the previous ones failed.
    public let attempt: Int
    /// The engine's wall-clock time when the fetch left for the fetcher, read on the engine's own clock; `nil` when
    /// whoever made the request did not say.
    ///
    /// For an account of a ``SessionPool`` it is when the pool's budget let the fetch go, not when the account asked:
    /// time spent waiting for the budget (a full queue, an outage's hold, a `Retry-After` pause) is neither the
    /// backend's clock offset nor its latency.
    ///
    /// A fetcher that estimates the backend's clock offset measures it against this time, so the offset is on the
    /// clock the engine applies it to, whatever clock the fetcher was given: ``HTTPCredentialFetcher`` compares the
    /// response's `Date` with it, plus the time that passed since on a monotonic clock.
    public let startedAt: Date?

    /// Creates a request.
    ///
    /// - Parameters:
    ///   - id: The fetch's identity.
    ///   - account: The account to fetch for.
    ///   - epoch: The account session's epoch.
    ///   - attempt: The attempt's number.
    public init(id: UInt64, account: AccountID, epoch: UInt64, attempt: Int) {
        self.init(id: id, account: account, epoch: epoch, attempt: attempt, startedAt: nil)
    }

    /// Creates a request that says when the engine started it.
    ///
    /// - Parameters:
    ///   - id: The fetch's identity.
    ///   - account: The account to fetch for.
    ///   - epoch: The account session's epoch.
    ///   - attempt: The attempt's number.
    ///   - startedAt: The engine's wall-clock time when it started the fetch, on the engine's clock.
    public init(id: UInt64, account: AccountID, epoch: UInt64, attempt: Int, startedAt: Date?) {
        self.id = id
        self.account = account
        self.epoch = epoch
        self.attempt = attempt
        self.startedAt = startedAt
    }

    /// The same request, leaving for the fetcher at `date` on the engine's clock.
    func leaving(at date: Date) -> FetchRequest {
        FetchRequest(id: id, account: account, epoch: epoch, attempt: attempt, startedAt: date)
    }

    /// `fetch #id for account, epoch E, attempt N`.
    public var description: String { "fetch #\(id) for \(account), epoch \(epoch), attempt \(attempt)" }
}

/// A ``CredentialFetcher`` made from a closure.
public struct ClosureCredentialFetcher: CredentialFetcher {
    private let body: @Sendable (AccountID) async throws -> IdentityCredential

    /// Creates a fetcher that calls `body`.
    ///
    /// - Parameter body: Fetches a credential for an account.
    public init(_ body: @escaping @Sendable (AccountID) async throws -> IdentityCredential) {
        self.body = body
    }

    /// Calls the closure.
    ///
    /// - Parameter account: The account whose backend session to use.
    /// - Returns: The closure's credential.
    /// - Throws: What the closure throws.
    public func fetchCredential(for account: AccountID) async throws -> IdentityCredential {
        try await body(account)
    }
}
