import SessionEngine
import Synchronization

/// A gate that code the engine runs (an account-change hook, scoped work) waits at until the test opens it.
///
/// A task waiting at the gate has no job on the clock's ``ManualExecutor``, like a fetch the script holds, so a test
/// can hold an account change inside its hooks, wait until everything else has settled
/// (``SessionEngine/SessionEngine/waitUntilIdle()``), act, and then open the gate.
public final class Gate: Sendable {
    private struct State {
        var isOpen = false
        var waiters: [CheckedContinuation<Void, Never>] = []
    }

    private let state = Mutex(State())

    /// Creates a closed gate.
    ///
    /// - Parameter clock: The clock whose engines' work waits at the gate; kept for source compatibility, the gate
    ///   needs nothing of it.
    public init(clock: ManualClock) {}

    /// Whether anyone waits at the gate.
    public var isHolding: Bool { state.withLock { !$0.waiters.isEmpty } }

    /// Whether the gate has been opened.
    public var isOpen: Bool { state.withLock { $0.isOpen } }

    /// Waits until the gate opens; returns at once if it is open.
    public func wait() async {
        await withCheckedContinuation { (continuation: CheckedContinuation<Void, Never>) in
            let open = state.withLock { state -> Bool in
                if state.isOpen { return true }
                state.waiters.append(continuation)
                return false
            }
            if open { continuation.resume() }
        }
    }

    /// Opens the gate for good and lets every waiter through.
    public func open() {
        let waiters = state.withLock { state -> [CheckedContinuation<Void, Never>] in
            state.isOpen = true
            defer { state.waiters.removeAll() }
            return state.waiters
        }
        for waiter in waiters { waiter.resume() }
    }
}
