import Synchronization

/// A one-shot signal that any number of callers wait for: an account change's preparation finishing, or the
/// engine's shutdown.
final class Latch: Sendable {
    private struct State {
        var isOpen = false
        var nextID: UInt64 = 0
        var waiters: [UInt64: CheckedContinuation<Void, Never>] = [:]
    }

    private let state = SanitizedMutex(State())

    /// Creates a closed latch.
    init() {}

    /// Whether the latch has opened.
    var isOpen: Bool { state.withLock { $0.isOpen } }

    /// Waits until the latch opens.
    ///
    /// - Parameter stopsOnCancellation: Whether cancelling the calling task ends the wait early.
    func wait(stopsOnCancellation: Bool = false) async {
        let id = state.withLock { state in
            state.nextID += 1
            return state.nextID
        }
        await withTaskCancellationHandler {
            await withCheckedContinuation { (continuation: CheckedContinuation<Void, Never>) in
                let now = state.withLock { state -> Bool in
                    if state.isOpen || (stopsOnCancellation && Task.isCancelled) { return true }
                    state.waiters[id] = continuation
                    return false
                }
                if now { continuation.resume() }
            }
        } onCancel: {
            guard stopsOnCancellation else { return }
            let waiter = state.withLock { $0.waiters.removeValue(forKey: id) }
            guard let waiter else { return }
            waiter.resume()
        }
    }

    /// Opens the latch and wakes every waiter, now and later.
    func open() {
        let waiters = state.withLock { state -> [CheckedContinuation<Void, Never>] in
            state.isOpen = true
            defer { state.waiters.removeAll() }
            return Array(state.waiters.values)
        }
        for waiter in waiters {
            waiter.resume()
        }
    }
}
