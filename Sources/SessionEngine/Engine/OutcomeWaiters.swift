import Synchronization

/// Callers waiting for a fetch's outcome, keyed by epoch.
///
/// Registration happens on the engine's actor, in the same step that decided to wait, so no outcome can slip
/// between the decision and the registration. A cancelled caller is removed at once; the fetch it waited for goes on.
final class OutcomeWaiters: Sendable {
    private struct Waiter {
        var epoch: UInt64
        var kind: SessionStateMachine.WaiterKind
        var continuation: CheckedContinuation<IdentityCredential, any Error>
    }

    private struct State {
        var nextID: UInt64 = 0
        var waiters: [UInt64: Waiter] = [:]
    }

    private let state = Mutex(State())
    private let ledger: ActivityLedger?

    /// Creates an empty set of waiters.
    ///
    /// - Parameter ledger: Where waiting callers are parked.
    init(ledger: ActivityLedger?) {
        self.ledger = ledger
    }

    /// The number of waiting callers.
    var count: Int { state.withLock { $0.waiters.count } }

    /// Waits for the epoch's next outcome of the given kind.
    ///
    /// - Parameter isolation: The caller's actor; registration runs there before the caller suspends.
    func wait(
        epoch: UInt64,
        kind: SessionStateMachine.WaiterKind,
        isolation: isolated (any Actor)? = #isolation
    ) async throws -> IdentityCredential {
        let id = state.withLock { state in
            state.nextID += 1
            return state.nextID
        }
        return try await withTaskCancellationHandler {
            // The closure must capture `isolation` to run on the caller's actor: without it, it runs on the global
            // executor after a hop, and an outcome resolved on the actor during that hop would never reach this
            // caller.
            _ = isolation
            return try await withCheckedThrowingContinuation(isolation: isolation) { continuation in
                let cancelled = state.withLock { state -> Bool in
                    if Task.isCancelled { return true }
                    state.waiters[id] = Waiter(epoch: epoch, kind: kind, continuation: continuation)
                    ledger?.park()
                    return false
                }
                if cancelled { continuation.resume(throwing: CancellationError()) }
            }
        } onCancel: {
            let waiter = state.withLock { $0.waiters.removeValue(forKey: id) }
            guard let waiter else { return }
            ledger?.unpark()
            waiter.continuation.resume(throwing: CancellationError())
        }
    }

    /// Resolves the epoch's waiters of the given kinds with an outcome.
    func resolve(
        epoch: UInt64,
        kinds: Set<SessionStateMachine.WaiterKind>,
        outcome: SessionStateMachine.Outcome
    ) {
        let resolved = state.withLock { state -> [Waiter] in
            let ids = state.waiters.filter { $0.value.epoch == epoch && kinds.contains($0.value.kind) }.map(\.key)
            return ids.compactMap { state.waiters.removeValue(forKey: $0) }
        }
        for waiter in resolved {
            ledger?.unpark()
            switch outcome {
            case .installed(let credential): waiter.continuation.resume(returning: credential)
            case .failed(let error): waiter.continuation.resume(throwing: error)
            }
        }
    }

    /// Fails every waiter.
    func failAll(_ error: SessionError) {
        let all = state.withLock { state -> [Waiter] in
            defer { state.waiters.removeAll() }
            return Array(state.waiters.values)
        }
        for waiter in all {
            ledger?.unpark()
            waiter.continuation.resume(throwing: error)
        }
    }
}
