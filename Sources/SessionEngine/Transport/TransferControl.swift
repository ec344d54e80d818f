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
final class TransferControl: Sendable {
    typealias Continuation = CheckedContinuation<HTTPTransferResult, any Error>

    private struct State: ~Copyable {
        var continuation: Continuation?
        var early: Result<HTTPTransferResult, any Error>?
        var finished = false
        var head: HTTPResponseHead?
        var body: [UInt8] = []
    }

    private let state = SanitizedMutex(State())

    init() {}

    /// Whether the outcome has been decided.
    var isFinished: Bool { state.withLock { $0.finished } }

    /// Hands over the caller's continuation; resumes it at once when the outcome is already decided.
    func install(_ continuation: Continuation) {
        let early: Result<HTTPTransferResult, any Error>? = state.withLock { state in
            if let early = state.early {
                state.early = nil
                return early
            }
            state.continuation = continuation
            return nil
        }
        if let early { continuation.resume(with: early) }
    }

    /// Decides the outcome, unless it is already decided.
    ///
    /// - Returns: Whether this call decided it.
    @discardableResult
    func finish(_ outcome: Result<HTTPTransferResult, any Error>) -> Bool {
        let (decided, continuation): (Bool, Continuation?) = state.withLock { state in
            guard !state.finished else { return (false, nil) }
            state.finished = true
            state.body = []
            guard let continuation = state.continuation else {
                state.early = outcome
                return (true, nil)
            }
            state.continuation = nil
            return (true, continuation)
        }
        continuation?.resume(with: outcome)
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
