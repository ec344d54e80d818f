import SessionEngine
import Synchronization

/// A gate that code the engine runs (an account-change hook, scoped work) waits at until the test opens it.
///
/// Waiting at the gate counts as parked for ``SessionEngine/SessionEngine/waitUntilIdle()``, like a fetch the script
/// holds, so a test can hold an account change inside its hooks, wait until everything else has settled, act, and
/// then open the gate. Only tasks the engine counts may wait at a gate: its hooks and scoped work.
public final class Gate: Sendable {
    private struct State {
        var isOpen = false
        var waiters: [CheckedContinuation<Void, Never>] = []
    }

    private let state = Mutex(State())
    private let ledger: ActivityLedger

    /// Creates a closed gate.
    ///
    /// - Parameter clock: The clock whose engines' work waits at the gate.
    public init(clock: ManualClock) {
        ledger = clock.activityLedger
    }

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
                ledger.park()
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
        for waiter in waiters {
            ledger.unpark()
            waiter.resume()
        }
    }
}
