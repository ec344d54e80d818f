/// Gets a fresh credential for an account from the host's backend.
///
/// The engine calls ``fetchCredential(for:)`` at most once at a time per account session, and cancels the call when
/// the account changes. Throw ``SessionError/backendSessionEnded(_:)`` when the backend says the session is gone
/// (terminal: the engine signs out); any other error is treated as transient and retried with backoff.
/// The engine validates every credential before installing it.
public protocol CredentialFetcher: Sendable {
    /// Fetches a credential for the account.
    ///
    /// - Parameter account: The account whose backend session to use.
    /// - Returns: The credential the backend issued.
    /// - Throws: ``SessionError/backendSessionEnded(_:)`` for a terminal failure, anything else for a transient one.
    func fetchCredential(for account: AccountID) async throws -> IdentityCredential
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
