public import SessionEngine

/// A fetcher whose answers come in real time, from a real backend, to an engine on a ``ManualClock``: each fetch is
/// work the clock's ``ManualExecutor`` counts as running, so ``SessionEngine/SessionEngine/waitUntilIdle()`` waits
/// for the backend's answer instead of reading the engine idle while the request is on the wire.
///
/// Wrap an `HTTPCredentialFetcher` (or any fetcher that waits on real I/O) in it when a test drives the engine's
/// time by hand but talks to a real server.
public struct RealTimeFetcher<Base: CredentialFetcher>: CredentialFetcher {
    /// The fetcher that reaches the backend.
    public let base: Base
    private let executor: ManualExecutor

    /// Wraps `base` for engines on `clock`.
    ///
    /// - Parameters:
    ///   - base: The fetcher that reaches the backend.
    ///   - clock: The manual clock the engine runs on.
    public init(_ base: Base, clock: ManualClock) {
        self.base = base
        self.executor = clock.executor
    }

    /// Fetches through ``base``, counted as running until it returns.
    ///
    /// - Parameter account: The account to fetch for.
    /// - Returns: The credential ``base`` returned.
    /// - Throws: What ``base`` throws.
    public func fetchCredential(for account: AccountID) async throws -> IdentityCredential {
        try await executor.runOutside { try await base.fetchCredential(for: account) }
    }

    /// Fetches through ``base``, counted as running until it returns.
    ///
    /// - Parameter request: The engine's fetch.
    /// - Returns: The credential ``base`` returned.
    /// - Throws: What ``base`` throws.
    public func fetchCredential(_ request: FetchRequest) async throws -> IdentityCredential {
        try await executor.runOutside { try await base.fetchCredential(request) }
    }

    /// Fetches through ``base``, with the backend's clock reading it reports, counted as running until it returns.
    ///
    /// - Parameter request: The engine's fetch.
    /// - Returns: The credential and the backend's clock reading ``base`` returned.
    /// - Throws: What ``base`` throws.
    public func fetch(_ request: FetchRequest) async throws -> FetchedCredential {
        try await executor.runOutside { try await base.fetch(request) }
    }
}
