public import Foundation
public import SessionEngine
import Synchronization

/// A `CredentialFetcher` for tests that records every fetch in full and answers it as the test scripts.
///
/// Every call becomes a ``Request`` the fetcher keeps in ``requests``: the account, epoch and attempt, when the engine
/// started the fetch and when it arrived. A ``Script`` decides each answer as the fetch arrives: a credential, with
/// the backend's clock offset if the test wants one; an error; either of them after a delay on the ``ManualClock``, so
/// the answer arrives on its own once the test advances the clock; or ``Reply/held(ignoringCancellation:)``, which
/// waits until the test answers with ``respond(to:with:)-(_,Result<IdentityCredential,Error>)``. Without a
/// script every fetch is held, so a test can hold a fetch open across a sign-out or a switch and then deliver a late
/// result. ``nextRequest()`` waits for the next unclaimed held request without waiting on real time.
///
/// A request whose fetching task is cancelled ends with `CancellationError` and is counted in ``cancelledCount``,
/// unless its reply ignores cancellation, as a backend whose answer is already on the wire does.
///
/// A fetch waiting for its answer, held or asleep on the clock, has no job on the ``ManualClock``'s executor: the
/// engine is idle (``SessionEngine/SessionEngine/waitUntilIdle()``) while the script holds the fetch.
public final class ScriptedCredentialFetcher: CredentialFetcher {
    /// Decides the answer to a fetch as it arrives; an error it throws is the fetch's answer at once.
    public typealias Script = @Sendable (Request) throws -> Reply

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
        /// When the engine started the fetch, on its clock (`FetchRequest.startedAt`); `nil` for a
        /// fetch made outside an engine.
        public let startedAt: Date?
        /// The clock's wall time when the fetch reached the fetcher; `nil` for a fetcher created without a clock.
        public let receivedAt: Date?

        /// `#id account`.
        public var description: String { "#\(id) \(account)" }
    }

    private struct State {
        var cancelled = 0
        var requests: [Request] = []
        /// The held fetches, each waiting for its reply, keyed by request ID.
        var held = WaiterQueue<Int, Reply>()
        var unclaimed: [Request] = []
        /// Callers of ``nextRequest()``, each waiting for a held request no earlier call has returned.
        var requestWaiters = WaiterQueue<Void, Request>()
        var script: Script?
    }

    private let state = SanitizedMutex(State())
    private let clock: ManualClock?

    /// Creates a fetcher.
    ///
    /// - Parameter responder: Answers every fetch at once when set; `nil` makes every fetch wait for
    ///   ``respond(to:with:)-(_,Result<IdentityCredential,Error>)``.
    public init(responder: (@Sendable (AccountID) throws -> IdentityCredential)? = nil) {
        clock = nil
        state.withLock { $0.script = responder.map(Self.script(answeringWith:)) }
    }

    /// Creates a fetcher whose delayed replies run on `clock` and whose requests record its wall time.
    ///
    /// - Parameters:
    ///   - clock: The clock a delayed reply waits on and ``Request/receivedAt`` is read from.
    ///   - script: Decides each fetch's answer as it arrives; `nil` holds every fetch for the test to answer.
    public init(clock: ManualClock, script: Script? = nil) {
        self.clock = clock
        state.withLock { $0.script = script }
    }

    /// Replaces the automatic responder; `nil` makes later fetches wait for
    /// ``respond(to:with:)-(_,Result<IdentityCredential,Error>)``.
    ///
    /// - Parameter responder: Answers every later fetch at once.
    public func setResponder(_ responder: (@Sendable (AccountID) throws -> IdentityCredential)?) {
        setScript(responder.map(Self.script(answeringWith:)))
    }

    /// Replaces the script that answers later fetches; `nil` holds them for the test to answer.
    ///
    /// - Parameter script: Decides each later fetch's answer as it arrives.
    public func setScript(_ script: Script?) {
        state.withLock { $0.script = script }
    }

    private static func script(answeringWith responder: @escaping @Sendable (AccountID) throws -> IdentityCredential)
        -> Script
    {
        { request in .credential(try responder(request.account)) }
    }

    /// How many fetches the engine has started.
    public var totalRequests: Int { state.withLock { $0.requests.count } }

    /// How many fetches are held, waiting for the test's answer.
    public var pendingCount: Int { state.withLock { $0.held.waiting } }

    /// How many fetches ended because the engine cancelled them.
    public var cancelledCount: Int { state.withLock { $0.cancelled } }

    /// Every fetch, in the order it arrived.
    public var requests: [Request] { state.withLock { $0.requests } }

    /// The accounts of every fetch, in order.
    public var requestedAccounts: [AccountID] { state.withLock { $0.requests.map(\.account) } }

    /// Records a fetch made outside an engine, then answers it like one of the engine's.
    ///
    /// - Parameter account: The account to fetch for.
    /// - Returns: The credential the test supplied.
    /// - Throws: The error the test supplied, or `CancellationError` when the fetch was cancelled.
    public func fetchCredential(for account: AccountID) async throws -> IdentityCredential {
        try await fetch(account: account, epoch: 0, attempt: 1, startedAt: nil).credential
    }

    /// Records the engine's fetch, then answers it as the script says.
    ///
    /// - Parameter request: The fetch the engine started.
    /// - Returns: The credential the test supplied.
    /// - Throws: The error the test supplied, or `CancellationError` when the fetch was cancelled.
    public func fetchCredential(_ request: FetchRequest) async throws -> IdentityCredential {
        try await fetch(request).credential
    }

    /// Records the engine's fetch, then answers it as the script says, with the backend's clock offset when the
    /// reply carries one.
    ///
    /// - Parameter request: The fetch the engine started.
    /// - Returns: The credential the test supplied and the clock offset it reported.
    /// - Throws: The error the test supplied, or `CancellationError` when the fetch was cancelled.
    public func fetch(_ request: FetchRequest) async throws -> FetchedCredential {
        try await fetch(
            account: request.account, epoch: request.epoch, attempt: request.attempt, startedAt: request.startedAt)
    }

    private func fetch(account: AccountID, epoch: UInt64, attempt: Int, startedAt: Date?) async throws
        -> FetchedCredential
    {
        let receivedAt = clock?.now
        let (request, script) = state.withLock { state in
            let request = Request(
                id: state.requests.count + 1, account: account, epoch: epoch, attempt: attempt, startedAt: startedAt,
                receivedAt: receivedAt)
            state.requests.append(request)
            return (request, state.script)
        }
        var reply = try script?(request) ?? .held()
        if case .held = reply.answer { reply = await hold(request, ignoringCancellation: reply.ignoresCancellation) }
        return try await perform(reply)
    }

    private func hold(_ request: Request, ignoringCancellation: Bool) async -> Reply {
        // Held in one lock step with the check of cancellation, so the cancellation handler finds the ticket.
        let entered = state.withLock { state -> (WaiterQueue<Int, Reply>.Ticket, WaiterQueue<Void, Request>.Wakeups)? in
            if Task.isCancelled && !ignoringCancellation {
                state.cancelled += 1
                return nil
            }
            let ticket = state.held.enqueue(request.id)
            var claimed = WaiterQueue<Void, Request>.Wakeups()
            if !state.requestWaiters.resolveFirst(with: request, into: &claimed) { state.unclaimed.append(request) }
            return (ticket, claimed)
        }
        guard let (ticket, claimed) = entered else { return .error(CancellationError()) }
        claimed.resume()
        return await withTaskCancellationHandler {
            await withParkedContinuation { (continuation: UnsafeContinuation<Reply, Never>) in
                let now = state.withLock { $0.held.park(ticket, continuation) }
                if let now { continuation.resume(returning: now) }
            }
        } onCancel: {
            guard !ignoringCancellation else { return }
            state.withLock { state in
                var wakeups = WaiterQueue<Int, Reply>.Wakeups()
                guard state.held.resolve(ticket, with: .error(CancellationError()), into: &wakeups) else {
                    return wakeups
                }
                state.cancelled += 1
                state.unclaimed.removeAll { $0.id == request.id }
                return wakeups
            }.resume()
        }
    }

    private func perform(_ reply: Reply) async throws -> FetchedCredential {
        if reply.delay > .zero {
            guard let clock else {
                preconditionFailure("a delayed reply needs a fetcher created with init(clock:script:)")
            }
            if reply.ignoresCancellation {
                await clock.sleepIgnoringCancellation(for: reply.delay)
            } else {
                do {
                    try await clock.sleep(for: reply.delay)
                } catch {
                    state.withLock { $0.cancelled += 1 }
                    throw error
                }
            }
        }
        switch reply.answer {
        case .result(let result):
            return try result.get()
        case .held:
            preconditionFailure("a held fetch is answered before it returns")
        }
    }

    /// Waits for the next held request that no earlier call has returned.
    ///
    /// - Returns: The request, still waiting for its answer (unless it was cancelled meanwhile).
    public func nextRequest() async -> Request {
        await withParkedContinuation { (continuation: UnsafeContinuation<Request, Never>) in
            let ready = state.withLock { state -> Request? in
                if !state.unclaimed.isEmpty { return state.unclaimed.removeFirst() }
                state.requestWaiters.park((), continuation)
                return nil
            }
            if let ready { continuation.resume(returning: ready) }
        }
    }

    /// Answers a held request.
    ///
    /// - Parameters:
    ///   - request: The request to answer.
    ///   - result: The credential to return or the error to throw.
    /// - Returns: `false` when the request was already answered or cancelled.
    @discardableResult
    public func respond(to request: Request, with result: Result<IdentityCredential, any Error>) -> Bool {
        switch result {
        case .success(let credential): respond(to: request, with: .credential(credential))
        case .failure(let error): respond(to: request, with: .error(error))
        }
    }

    /// Answers a held request with a reply: a credential with the backend's clock offset, or an answer that arrives
    /// only after a delay on the clock.
    ///
    /// - Parameters:
    ///   - request: The request to answer.
    ///   - reply: The answer; ``Reply/held(ignoringCancellation:)`` answers nothing.
    /// - Returns: `false` when the request was already answered or cancelled, or `reply` holds it.
    @discardableResult
    public func respond(to request: Request, with reply: Reply) -> Bool {
        if case .held = reply.answer { return false }
        let (answered, wakeups) = state.withLock { state -> (Bool, WaiterQueue<Int, Reply>.Wakeups) in
            var wakeups = WaiterQueue<Int, Reply>.Wakeups()
            state.unclaimed.removeAll { $0.id == request.id }
            let answered = state.held.resolve(where: { $0 == request.id }, with: reply, into: &wakeups) > 0
            return (answered, wakeups)
        }
        wakeups.resume()
        return answered
    }
}
