import Synchronization

/// Delivers the engine's events to any number of subscribers, each with its own bounded buffer.
///
/// The engine's actor is the only publisher. A subscriber registers under the same lock that publishing takes and
/// first receives the current state, so it sees every later change in order with no gap and no duplicate. When a
/// subscriber falls more than `bufferLimit` events behind, its oldest events are dropped and it receives
/// ``SessionEvent/Kind/eventsDropped(count:)`` before the rest, stamped like the last event it lost. A subscriber whose sequence is released, or whose waiting
/// task is cancelled, is removed at once; ``finish()`` ends every subscription.
final class EventBroadcaster: Sendable {
    private struct Subscriber {
        let limit: Int
        var buffer: [SessionEvent] = []
        var head = 0
        var dropped = 0
        /// The newest event dropped since the subscriber last received one.
        var lastDropped: SessionEvent?
        var waiter: CheckedContinuation<SessionEvent?, Never>?

        var isEmpty: Bool { head == buffer.count }

        /// Buffers an event; returns whether an older one was dropped to make room.
        mutating func push(_ event: SessionEvent) -> Bool {
            buffer.append(event)
            var droppedOne = false
            if buffer.count - head > limit {
                lastDropped = buffer[head]
                head += 1
                dropped += 1
                droppedOne = true
            }
            if head > 64 && head * 2 > buffer.count {
                buffer.removeFirst(head)
                head = 0
            }
            return droppedOne
        }

        mutating func pop() -> SessionEvent? {
            if dropped > 0, let last = lastDropped {
                defer {
                    dropped = 0
                    lastDropped = nil
                }
                return SessionEvent(
                    .eventsDropped(count: dropped), time: last.time, epoch: last.epoch, sequence: last.sequence)
            }
            guard !isEmpty else { return nil }
            defer { head += 1 }
            return buffer[head]
        }
    }

    private struct State {
        /// The event that produced the current state, which every new subscriber receives first.
        var current: SessionEvent
        var subscribers: [UInt64: Subscriber] = [:]
        var nextID: UInt64 = 0
        var finished = false
        /// Events dropped over all subscribers, over the broadcaster's life.
        var dropped = 0
    }

    private let state: Mutex<State>
    private let bufferLimit: Int

    init(initial: SessionEvent, bufferLimit: Int) {
        self.state = Mutex(State(current: initial))
        self.bufferLimit = bufferLimit
    }

    /// The number of live subscribers.
    var subscriberCount: Int { state.withLock { $0.subscribers.count } }

    /// The number of events dropped over all subscribers so far.
    var droppedCount: Int { state.withLock { $0.dropped } }

    /// Registers a subscriber whose first event is the current state.
    ///
    /// - Parameter limit: The subscriber's buffer limit; `nil` uses the engine's.
    /// - Returns: The subscriber's ID, or `nil` when the broadcaster has finished (the caller then delivers only the
    ///   final state).
    func subscribe(limit: Int? = nil) -> (id: UInt64?, current: SessionEvent) {
        state.withLock { state in
            guard !state.finished else { return (nil, state.current) }
            state.nextID += 1
            var subscriber = Subscriber(limit: limit ?? bufferLimit)
            _ = subscriber.push(state.current)
            state.subscribers[state.nextID] = subscriber
            return (state.nextID, state.current)
        }
    }

    /// Publishes an event to every subscriber.
    func publish(_ event: SessionEvent) {
        let ready = state.withLock { state -> [CheckedContinuation<SessionEvent?, Never>] in
            guard !state.finished else { return [] }
            if case .stateChanged = event.kind { state.current = event }
            var ready: [CheckedContinuation<SessionEvent?, Never>] = []
            for id in state.subscribers.keys {
                if let waiter = state.subscribers[id]!.waiter {
                    state.subscribers[id]!.waiter = nil
                    ready.append(waiter)
                } else if state.subscribers[id]!.push(event) {
                    state.dropped += 1
                }
            }
            return ready
        }
        for waiter in ready { waiter.resume(returning: event) }
    }

    /// Ends every subscription: buffered events are still delivered, then each sequence finishes.
    func finish() {
        let waiting = state.withLock { state -> [CheckedContinuation<SessionEvent?, Never>] in
            state.finished = true
            var waiting: [CheckedContinuation<SessionEvent?, Never>] = []
            for (id, subscriber) in state.subscribers where subscriber.isEmpty && subscriber.dropped == 0 {
                if let waiter = subscriber.waiter { waiting.append(waiter) }
                state.subscribers.removeValue(forKey: id)
            }
            return waiting
        }
        for waiter in waiting { waiter.resume(returning: nil) }
    }

    /// The subscriber's next event, suspending until one is published; `nil` once finished or cancelled.
    func next(_ id: UInt64) async -> SessionEvent? {
        await withTaskCancellationHandler {
            await withCheckedContinuation { (continuation: CheckedContinuation<SessionEvent?, Never>) in
                let immediate = state.withLock { state -> SessionEvent?? in
                    guard var subscriber = state.subscribers[id] else { return .some(nil) }
                    if let event = subscriber.pop() {
                        state.subscribers[id] = subscriber
                        return .some(event)
                    }
                    if state.finished || Task.isCancelled {
                        state.subscribers.removeValue(forKey: id)
                        return .some(nil)
                    }
                    subscriber.waiter = continuation
                    state.subscribers[id] = subscriber
                    return .none
                }
                if case .some(let event) = immediate { continuation.resume(returning: event) }
            }
        } onCancel: {
            let waiter = state.withLock { state -> CheckedContinuation<SessionEvent?, Never>? in
                guard let subscriber = state.subscribers.removeValue(forKey: id) else { return nil }
                return subscriber.waiter
            }
            waiter?.resume(returning: nil)
        }
    }

    /// Removes a subscriber whose sequence was released.
    func unsubscribe(_ id: UInt64) {
        let waiter = state.withLock { $0.subscribers.removeValue(forKey: id)?.waiter }
        waiter?.resume(returning: nil)
    }
}
