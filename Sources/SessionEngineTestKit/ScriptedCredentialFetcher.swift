public import SessionEngine
import Synchronization

/// A `CredentialFetcher` for tests that answers each fetch when the test says so.
///
/// Every call to ``fetchCredential(for:)`` becomes a ``Request`` that waits until the test answers it with
/// ``respond(to:with:)``, so a test can hold a fetch open across a sign-out or a switch and then deliver a late
/// result. ``nextRequest()`` waits for the next unclaimed request without waiting on real time. Alternatively an
/// automatic responder answers at once.
///
/// A request whose fetching task is cancelled ends with `CancellationError` and is counted in ``cancelledCount``.
///
/// A fetch waiting for its answer has no job on the ``ManualClock``'s executor: the engine is idle
/// (``SessionEngine/SessionEngine/waitUntilIdle()``) while the script holds the fetch.
public final class ScriptedCredentialFetcher: CredentialFetcher {
    /// One fetch the engine made.
    public struct Request: Sendable, Hashable, CustomStringConvertible {
        /// The request's sequence number, from 1.
        public let id: Int
        /// The account the engine fetched for.
        public let account: AccountID
        /// The epoch of the account session the engine fetched for.
        public let epoch: UInt64
        /// The attempt's number among consecutive fetches of the account session.
        public let attempt: Int

        /// `#id account`.
        public var description: String { "#\(id) \(account)" }
    }

    private struct Pending {
        var request: Request
        var continuation: CheckedContinuation<IdentityCredential, any Error>

        func resume(with result: Result<IdentityCredential, any Error>) {
            continuation.resume(with: result)
        }
    }

    private struct State {
        var total = 0
        var cancelled = 0
        var pending: [Int: Pending] = [:]
        var unclaimed: [Request] = []
        var requestWaiters: [CheckedContinuation<Request, Never>] = []
        var responder: (@Sendable (AccountID) throws -> IdentityCredential)?
        var accounts: [AccountID] = []
    }

    private let state = Mutex(State())

    /// Creates a fetcher.
    ///
    /// - Parameter responder: Answers every fetch at once when set; `nil` makes every fetch wait for
    ///   ``respond(to:with:)``.
    public init(responder: (@Sendable (AccountID) throws -> IdentityCredential)? = nil) {
        state.withLock { $0.responder = responder }
    }

    /// Replaces the automatic responder; `nil` makes later fetches wait for ``respond(to:with:)``.
    ///
    /// - Parameter responder: Answers every later fetch at once.
    public func setResponder(_ responder: (@Sendable (AccountID) throws -> IdentityCredential)?) {
        state.withLock { $0.responder = responder }
    }

    /// How many fetches the engine has started.
    public var totalRequests: Int { state.withLock { $0.total } }

    /// How many fetches are waiting for an answer.
    public var pendingCount: Int { state.withLock { $0.pending.count } }

    /// How many fetches ended because the engine cancelled them.
    public var cancelledCount: Int { state.withLock { $0.cancelled } }

    /// The accounts of every fetch, in order.
    public var requestedAccounts: [AccountID] { state.withLock { $0.accounts } }

    /// Records a fetch made outside an engine, then answers it like one of the engine's.
    ///
    /// - Parameter account: The account to fetch for.
    /// - Returns: The credential the test supplied.
    /// - Throws: The error the test supplied, or `CancellationError` when the fetch was cancelled.
    public func fetchCredential(for account: AccountID) async throws -> IdentityCredential {
        try await fetch(account: account, epoch: 0, attempt: 1)
    }

    /// Records the engine's fetch, then answers it with the responder or waits for ``respond(to:with:)``.
    ///
    /// - Parameter request: The fetch the engine started.
    /// - Returns: The credential the test supplied.
    /// - Throws: The error the test supplied, or `CancellationError` when the fetch was cancelled.
    public func fetchCredential(_ request: FetchRequest) async throws -> IdentityCredential {
        try await fetch(account: request.account, epoch: request.epoch, attempt: request.attempt)
    }

    private func fetch(account: AccountID, epoch: UInt64, attempt: Int) async throws
        -> IdentityCredential
    {
        let (request, responder) = state.withLock { state in
            state.total += 1
            state.accounts.append(account)
            let request = Request(id: state.total, account: account, epoch: epoch, attempt: attempt)
            return (request, state.responder)
        }
        if let responder { return try responder(account) }
        return try await withTaskCancellationHandler {
            try await withCheckedThrowingContinuation { continuation in
                let (cancelled, waiter) = state.withLock { state -> (Bool, CheckedContinuation<Request, Never>?) in
                    if Task.isCancelled {
                        state.cancelled += 1
                        return (true, nil)
                    }
                    state.pending[request.id] = Pending(request: request, continuation: continuation)
                    if state.requestWaiters.isEmpty {
                        state.unclaimed.append(request)
                        return (false, nil)
                    }
                    return (false, state.requestWaiters.removeFirst())
                }
                if cancelled { continuation.resume(throwing: CancellationError()) }
                waiter?.resume(returning: request)
            }
        } onCancel: {
            let pending = state.withLock { state -> Pending? in
                guard let pending = state.pending.removeValue(forKey: request.id) else { return nil }
                state.cancelled += 1
                state.unclaimed.removeAll { $0.id == request.id }
                return pending
            }
            pending?.resume(with: .failure(CancellationError()))
        }
    }

    /// Waits for the next request that no earlier call has returned.
    ///
    /// - Returns: The request, still waiting for its answer (unless it was cancelled meanwhile).
    public func nextRequest() async -> Request {
        await withCheckedContinuation { (continuation: CheckedContinuation<Request, Never>) in
            let ready = state.withLock { state -> Request? in
                if !state.unclaimed.isEmpty { return state.unclaimed.removeFirst() }
                state.requestWaiters.append(continuation)
                return nil
            }
            if let ready { continuation.resume(returning: ready) }
        }
    }

    /// Answers a request.
    ///
    /// - Parameters:
    ///   - request: The request to answer.
    ///   - result: The credential to return or the error to throw.
    /// - Returns: `false` when the request was already answered or cancelled.
    @discardableResult
    public func respond(to request: Request, with result: Result<IdentityCredential, any Error>) -> Bool {
        let pending = state.withLock { state -> Pending? in
            state.unclaimed.removeAll { $0.id == request.id }
            return state.pending.removeValue(forKey: request.id)
        }
        guard let pending else { return false }
        pending.resume(with: result)
        return true
    }
}
