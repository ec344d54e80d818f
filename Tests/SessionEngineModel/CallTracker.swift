import SessionEngine

/// The calls of a program that have begun and not finished, by name, and the tasks that wait until none is left, parked
/// in the package's `WaiterQueue` as the test kit's executor parks its idle waiters.
///
/// A call that has left the engine is still outstanding until the program's code after it (its checks) has run, so a
/// driver that waits here before it moves the clock on, or before it checks what a shutdown left, lets those checks
/// run first: they are on their way, so the wait ends.
package final class CallTracker: Sendable {
    private struct State {
        var calls: [Int: String] = [:]
        var nextTicket = 0
        var waiters = WaiterQueue<Void, Void>()
    }

    private let state = SanitizedMutex(State())

    package init() {}

    /// A call named `name` began; returns its ticket for ``finished(_:)``.
    package func started(_ name: String) -> Int {
        state.withLock { state in
            state.nextTicket += 1
            state.calls[state.nextTicket] = name
            return state.nextTicket
        }
    }

    /// The call of `ticket` has returned and run its checks.
    package func finished(_ ticket: Int) {
        state.withLock { state in
            var ready = WaiterQueue<Void, Void>.Wakeups()
            state.calls.removeValue(forKey: ticket)
            if state.calls.isEmpty { state.waiters.resolveAll(with: (), into: &ready) }
            return ready
        }.resume()
    }

    /// How many calls have begun and not finished.
    package var outstanding: Int { state.withLock { $0.calls.count } }

    /// The names of the calls that have not finished, oldest first.
    package var inProgress: [String] { state.withLock { $0.calls.sorted { $0.key < $1.key }.map(\.value) } }

    /// Returns once no call is outstanding.
    package func waitUntilNone() async {
        await withParkedContinuation { (continuation: UnsafeContinuation<Void, Never>) in
            let now = state.withLock { state -> Bool in
                if state.calls.isEmpty { return true }
                state.waiters.park((), continuation)
                return false
            }
            if now { continuation.resume() }
        }
    }
}
