import Synchronization

/// A value that comes once and that any number of callers wait for: an account change's preparation finishing, an
/// engine's or a pool's shutdown, the first outcome of a fetch's race, the test kit's gate.
///
/// The first ``open(with:)`` decides and every later one is dropped; a caller that waits after it opened passes at
/// once with its value. Its waiters sit in a ``WaiterQueue`` inside the one-shot's lock, so the check of whether it has
/// opened and the parking of a caller are one lock step, and so are the opening and taking every parked caller.
package final class OneShot<Value: Sendable>: Sendable {
    /// What a parked caller is woken with.
    private enum Wake: Sendable {
        case opened(Value)
        /// The caller's task was cancelled and it asked to stop waiting then.
        case cancelled
    }

    /// How a cancellable wait begins: in the queue, or done at once.
    private enum Entered {
        case waiting(WaiterQueue<Void, Wake>.Ticket)
        case woken(Wake)
    }

    private struct State {
        /// The value, once opened; `nil` before. For an optional `Value`, opened with `nil` is `.some(nil)`.
        var value: Value?
        var waiters = WaiterQueue<Void, Wake>()

        var isOpen: Bool {
            guard case .some = value else { return false }
            return true
        }
    }

    private let state = SanitizedMutex(State())

    /// Creates a one-shot that has not opened.
    package init() {}

    /// Whether it has opened.
    package var isOpen: Bool { state.withLock { $0.isOpen } }

    /// How many callers wait for it to open.
    package var waiting: Int { state.withLock { $0.waiters.waiting } }

    /// Opens with `value` and wakes every waiter, now and later; a one-shot already open keeps its first value.
    ///
    /// - Returns: Whether this call opened it.
    @discardableResult
    package func open(with value: Value) -> Bool {
        let (opened, wakeups) = state.withLock { state -> (Bool, WaiterQueue<Void, Wake>.Wakeups) in
            var wakeups = WaiterQueue<Void, Wake>.Wakeups()
            guard !state.isOpen else { return (false, wakeups) }
            state.value = value
            state.waiters.resolveAll(with: .opened(value), into: &wakeups)
            return (true, wakeups)
        }
        wakeups.resume()
        return opened
    }

    /// Waits until it opens, whatever happens to the calling task, and returns its value.
    package func value() async -> Value {
        let wake = await withParkedContinuation { (continuation: UnsafeContinuation<Wake, Never>) in
            let now = state.withLock { state -> Value? in
                if let value = state.value { return value }
                state.waiters.park((), continuation)
                return nil
            }
            if let now { continuation.resume(returning: .opened(now)) }
        }
        guard case .opened(let value) = wake else {
            preconditionFailure("a wait that ignores cancellation ended by it")
        }
        return value
    }

    /// Waits until it opens or the calling task is cancelled, whichever comes first.
    ///
    /// - Returns: Its value; `nil` when the task was cancelled before it opened.
    package func valueUnlessCancelled() async -> Value? {
        let entered = state.withLock { state -> Entered in
            if let value = state.value { return .woken(.opened(value)) }
            if Task.isCancelled { return .woken(.cancelled) }
            return .waiting(state.waiters.enqueue(()))
        }
        let ticket: WaiterQueue<Void, Wake>.Ticket
        switch entered {
        case .waiting(let entered): ticket = entered
        case .woken(.opened(let value)): return value
        case .woken(.cancelled): return nil
        }
        let wake = await withTaskCancellationHandler {
            await withParkedContinuation { (continuation: UnsafeContinuation<Wake, Never>) in
                let ready = state.withLock { $0.waiters.park(ticket, continuation) }
                if let ready { continuation.resume(returning: ready) }
            }
        } onCancel: {
            let wakeups = state.withLock { state in
                var wakeups = WaiterQueue<Void, Wake>.Wakeups()
                state.waiters.resolve(ticket, with: .cancelled, into: &wakeups)
                return wakeups
            }
            wakeups.resume()
        }
        guard case .opened(let value) = wake else { return nil }
        return value
    }
}

extension OneShot where Value == Void {
    /// Opens it and wakes every waiter, now and later.
    package func open() {
        open(with: ())
    }
}
