import SessionEngine

/// A one-shot value that many tasks can wait for, ignoring cancellation.
package final class AsyncGate<Value: Sendable>: Sendable {
    private struct State {
        var value: Value?
        var waiters: [CheckedContinuation<Value, Never>] = []
    }

    private let state = Mutex(State())

    package init() {}

    /// Waits until the gate opens and returns its value.
    package func value() async -> Value {
        await withCheckedContinuation { continuation in
            let ready = state.withLock { state -> Value? in
                if let value = state.value { return value }
                state.waiters.append(continuation)
                return nil
            }
            if let ready { continuation.resume(returning: ready) }
        }
    }

    /// Whether the gate has opened.
    package var isOpen: Bool { state.withLock { $0.value != nil } }

    /// Opens the gate with `value` and resumes every waiter; later opens change nothing.
    package func open(_ value: Value) {
        let waiters = state.withLock { state -> [CheckedContinuation<Value, Never>] in
            guard state.value == nil else { return [] }
            state.value = value
            defer { state.waiters.removeAll() }
            return state.waiters
        }
        for waiter in waiters { waiter.resume(returning: value) }
    }
}
