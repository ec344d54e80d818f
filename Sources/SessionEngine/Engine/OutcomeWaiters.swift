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
                    return false
                }
                if cancelled { continuation.resume(throwing: CancellationError()) }
            }
        } onCancel: {
            let waiter = state.withLock { $0.waiters.removeValue(forKey: id) }
            waiter?.continuation.resume(throwing: CancellationError())
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
        for waiter in all { waiter.continuation.resume(throwing: error) }
    }
}

/// Resumes ``SessionEngine/run()`` when its task is cancelled or the engine shuts down.
final class ShutdownSignal: Sendable {
    private struct State {
        var fired = false
        var waiters: [CheckedContinuation<Void, Never>] = []
    }

    private let state = Mutex(State())

    /// Waits until ``fire()`` is called or the calling task is cancelled.
    func wait() async {
        await withTaskCancellationHandler {
            await withCheckedContinuation { (continuation: CheckedContinuation<Void, Never>) in
                let resumeNow = state.withLock { state -> Bool in
                    if state.fired || Task.isCancelled { return true }
                    state.waiters.append(continuation)
                    return false
                }
                if resumeNow { continuation.resume() }
            }
        } onCancel: {
            fire()
        }
    }

    /// Wakes every waiter, now and later.
    func fire() {
        let waiters = state.withLock { state -> [CheckedContinuation<Void, Never>] in
            state.fired = true
            defer { state.waiters.removeAll() }
            return state.waiters
        }
        for waiter in waiters { waiter.resume() }
    }
}

/// Counts the engine's running tasks, so tests can prove that nothing outlives a shutdown, and the fetches started.
final class TaskCounter: Sendable {
    private let value = Atomic<Int>(0)
    private let fetches = Atomic<Int>(0)

    private let completions = Atomic<Int>(0)

    /// The number of fetches started.
    var fetchesStarted: Int { fetches.load(ordering: .relaxed) }

    /// The number of fetch outcomes the engine has finished handling, stale ones included.
    var fetchesCompleted: Int { completions.load(ordering: .acquiring) }

    /// The engine finished handling a fetch's outcome.
    func fetchCompleted() { completions.add(1, ordering: .releasing) }

    /// A fetch started.
    func fetchStarted() { fetches.add(1, ordering: .relaxed) }

    /// The number of running tasks.
    var count: Int { value.load(ordering: .acquiring) }

    /// A task started.
    func started() { value.add(1, ordering: .relaxed) }

    /// A task finished.
    func finished() { value.subtract(1, ordering: .releasing) }
}
