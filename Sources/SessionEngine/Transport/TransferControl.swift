import Synchronization

/// A response whose head passed ``ResponsePolicy`` and whose body was read within the size limit.
struct HTTPTransferResult: Sendable {
    var head: HTTPResponseHead
    var body: [UInt8]
}

/// One fetch's meeting point between the transfer, its deadline and the caller's cancellation.
///
/// Whichever finishes first decides the outcome and resumes the caller at once; the others find the control
/// finished and stop. The transfer polls ``isFinished`` between reads, so a fetch that timed out or was cancelled
/// stops reading within one poll interval instead of running on in the background.
///
/// The caller waits in a ``WaiterQueue`` under the control's one lock, with the body received so far, so that deciding,
/// dropping the body and taking the caller are one lock step, and so are checking for a decision and appending bytes.
final class TransferControl: Sendable {
    typealias Outcome = Result<HTTPTransferResult, any Error>

    private struct State: ~Copyable {
        var caller = WaiterQueue<Void, Outcome>()
        /// The outcome, once decided.
        var outcome: Outcome?
        var finished = false
        var head: HTTPResponseHead?
        var body: [UInt8] = []
    }

    private let state = SanitizedMutex(State())

    init() {}

    /// Whether the outcome has been decided.
    var isFinished: Bool { state.withLock { $0.finished } }

    /// Waits for the outcome: starts the transfer with `start` (given nothing to resume: the control resumes the caller),
    /// then parks the caller until the transfer, its deadline or the caller's cancellation decides.
    ///
    /// - Parameter start: Starts the transfer and its deadline; it runs once the caller is parked.
    /// - Returns: The transfer's result.
    /// - Throws: The error that decided the outcome.
    func outcome(startingWith start: () -> Void) async throws -> HTTPTransferResult {
        try await withParkedContinuation { (continuation: UnsafeContinuation<Outcome, Never>) in
            let early = state.withLock { state -> Outcome? in
                if let outcome = state.outcome { return outcome }
                state.caller.park((), continuation)
                return nil
            }
            if let early {
                continuation.resume(returning: early)
            } else {
                start()
            }
        }.get()
    }

    /// Decides the outcome, unless it is already decided.
    ///
    /// - Returns: Whether this call decided it.
    @discardableResult
    func finish(_ outcome: Result<HTTPTransferResult, any Error>) -> Bool {
        let (decided, caller) = state.withLock { state -> (Bool, WaiterQueue<Void, Outcome>.Wakeups) in
            var caller = WaiterQueue<Void, Outcome>.Wakeups()
            guard !state.finished else { return (false, caller) }
            state.finished = true
            state.body = []
            state.outcome = outcome
            state.caller.resolveAll(with: outcome, into: &caller)
            return (true, caller)
        }
        caller.resume()
        return decided
    }

    /// Records the head of a streamed response.
    func receive(head: HTTPResponseHead) {
        state.withLock { $0.head = head }
    }

    /// Appends streamed body bytes, unless the outcome is decided.
    ///
    /// - Returns: `false` when the body would pass `limit` (nothing is appended then).
    func receive(_ bytes: some Collection<UInt8>, limit: Int) -> Bool {
        state.withLock { state in
            guard !state.finished else { return true }
            guard state.body.count + bytes.count <= limit else { return false }
            state.body.append(contentsOf: bytes)
            return true
        }
    }

    /// The streamed head and body received so far.
    func received() -> HTTPTransferResult? {
        state.withLock { state in state.head.map { HTTPTransferResult(head: $0, body: state.body) } }
    }
}
