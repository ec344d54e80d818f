import Synchronization

/// Delivers the engine's events to any number of subscribers, each with its own bounded buffer.
///
/// The engine's actor is the only publisher. A subscriber registers under the same lock that publishing takes and
/// first receives the current state, so it sees every later change in order with no gap and no duplicate. When a
/// subscriber falls more than `bufferLimit` events behind, its oldest events are dropped and it receives
/// ``SessionEvent/Kind/eventsDropped(count:)`` before the rest, stamped like the last event it lost. A subscriber
/// whose sequence is released, or whose waiting task is cancelled, is removed at once; ``finish()`` ends every
/// subscription.
///
/// Each published event is boxed once in a ``Published`` that every subscriber shares, so buffers, waiters and the
/// waiting tasks' frames hold one reference per event rather than a copy of it.
final class EventBroadcaster: Sendable {
    /// An event as buffered and handed to subscribers: one allocation per published event, shared by all of them.
    final class Published: Sendable {
        let event: SessionEvent

        init(_ event: SessionEvent) {
            self.event = event
        }
    }

    private struct Subscriber {
        let limit: Int
        var buffer: [Published] = []
        var head = 0
        var dropped = 0
        /// The newest event dropped since the subscriber last received one.
        var lastDropped: Published?
        /// The subscriber's place in ``State/waiters`` while its iterator waits for the next event.
        var waiter: Waiters.Ticket?

        var isEmpty: Bool { head == buffer.count }

        /// Buffers an event; returns whether an older one was dropped to make room.
        mutating func push(_ event: Published) -> Bool {
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

        mutating func pop() -> Published? {
            if dropped > 0, let last = lastDropped?.event {
                defer {
                    dropped = 0
                    lastDropped = nil
                }
                return Published(
                    SessionEvent(
                        .eventsDropped(count: dropped), time: last.time, epoch: last.epoch, sequence: last.sequence))
            }
            guard !isEmpty else { return nil }
            defer { head += 1 }
            return buffer[head]
        }
    }

    /// The subscribers' iterators waiting for the next event, keyed by subscriber; `nil` ends the subscription.
    private typealias Waiters = WaiterQueue<UInt64, Published?>

    private struct State {
        /// The event that produced the current state, which every new subscriber receives first.
        var current: Published
        var subscribers: [UInt64: Subscriber] = [:]
        var waiters = Waiters()
        var nextID: UInt64 = 0
        var finished = false
        /// Events dropped over all subscribers, over the broadcaster's life.
        var dropped = 0
    }

    private let state: SanitizedMutex<State>
    private let bufferLimit: Int

    /// Creates a broadcaster whose first subscriber receives `initial` first.
    ///
    /// - Parameters:
    ///   - initial: The event that produced the current state.
    ///   - bufferLimit: A subscriber's buffer limit when it names none.
    ///   - finished: Whether the engine has already shut down: every subscription then delivers `initial` and ends.
    init(initial: SessionEvent, bufferLimit: Int, finished: Bool = false) {
        self.state = SanitizedMutex(State(current: Published(initial), finished: finished))
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
    func subscribe(limit: Int? = nil) -> (id: UInt64?, current: Published) {
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
        let published = Published(event)
        state.withLock { state -> Waiters.Wakeups in
            var ready = Waiters.Wakeups()
            guard !state.finished else { return ready }
            if case .stateChanged = event.kind { state.current = published }
            // A waiting subscriber receives the event at once; the others buffer it.
            state.waiters.resolveAll(with: published, into: &ready)
            // Walks the entries by index and mutates them in place: iterating a view of the dictionary while
            // mutating it would copy its storage.
            var index = state.subscribers.startIndex
            while index != state.subscribers.endIndex {
                if state.subscribers.values[index].waiter != nil {
                    state.subscribers.values[index].waiter = nil
                } else if state.subscribers.values[index].push(published) {
                    state.dropped += 1
                }
                state.subscribers.formIndex(after: &index)
            }
            return ready
        }.resume()
    }

    /// Ends every subscription: buffered events are still delivered, then each sequence finishes.
    func finish() {
        state.withLock { state -> Waiters.Wakeups in
            state.finished = true
            var waiting = Waiters.Wakeups()
            for (id, subscriber) in state.subscribers where subscriber.isEmpty && subscriber.dropped == 0 {
                if let waiter = subscriber.waiter { state.waiters.resolve(waiter, with: nil, into: &waiting) }
                state.subscribers.removeValue(forKey: id)
            }
            return waiting
        }.resume()
    }

    /// The subscriber's next event, suspending until one is published; `nil` once finished or cancelled.
    func next(_ id: UInt64) async -> Published? {
        await withTaskCancellationHandler {
            await withParkedContinuation { (continuation: UnsafeContinuation<Published?, Never>) in
                let immediate = state.withLock { state -> Published?? in
                    guard let index = state.subscribers.index(forKey: id) else { return .some(nil) }
                    if let event = state.subscribers.values[index].pop() { return .some(event) }
                    if state.finished || Task.isCancelled {
                        state.subscribers.remove(at: index)
                        return .some(nil)
                    }
                    state.subscribers.values[index].waiter = state.waiters.park(id, continuation)
                    return .none
                }
                if case .some(let event) = immediate { continuation.resume(returning: event) }
            }
        } onCancel: {
            unsubscribe(id)
        }
    }

    /// Removes a subscriber whose sequence was released or whose waiting task was cancelled, and ends its wait.
    func unsubscribe(_ id: UInt64) {
        state.withLock { state -> Waiters.Wakeups in
            var ended = Waiters.Wakeups()
            if let waiter = state.subscribers.removeValue(forKey: id)?.waiter {
                state.waiters.resolve(waiter, with: nil, into: &ended)
            }
            return ended
        }.resume()
    }
}

/// An engine's ``EventBroadcaster``, made when the first subscriber comes.
///
/// Until then the slot keeps only the event that produced the current state, inline, which the broadcaster starts
/// from: an engine nobody subscribes to, as each account of a ``SessionPool`` (whose events reach the pool's stream
/// through the pool's outlets), holds no broadcaster and no boxed event. Made, the broadcaster stays for the
/// engine's life.
///
/// Publishing and subscribing each take the slot's lock once and the broadcaster's lock after it, never inside it.
/// The engine's actor is the only publisher, so a subscriber that makes the broadcaster either starts from an event
/// whose publishing found no broadcaster, or receives that event from the broadcaster it made: no event is lost or
/// delivered twice.
struct BroadcasterSlot: ~Copyable, Sendable {
    /// What the slot holds. Not private: the engine stores the slot inline, and a private type in its layout breaks
    /// the compiler's build of another file (Swift 6.3.1).
    enum Content {
        /// No subscriber yet: the event that produced the current state, and whether the engine has shut down.
        case waiting(current: SessionEvent, finished: Bool)
        case made(EventBroadcaster)
    }

    private let slot: SanitizedMutex<Content>

    /// Creates a slot whose broadcaster, once made, starts from `initial`.
    init(initial: SessionEvent) {
        slot = SanitizedMutex(.waiting(current: initial, finished: false))
    }

    /// The broadcaster, if a subscriber has made it.
    private var made: EventBroadcaster? {
        slot.withLock { slot in
            if case .made(let broadcaster) = slot { return broadcaster }
            return nil
        }
    }

    /// The broadcaster, made now if no subscriber made it before.
    ///
    /// - Parameter bufferLimit: A subscriber's buffer limit when it names none.
    func broadcaster(bufferLimit: Int) -> EventBroadcaster {
        slot.withLock { slot in
            switch slot {
            case .made(let broadcaster):
                return broadcaster
            case .waiting(let current, let finished):
                let broadcaster = EventBroadcaster(initial: current, bufferLimit: bufferLimit, finished: finished)
                slot = .made(broadcaster)
                return broadcaster
            }
        }
    }

    /// Publishes an event to the subscribers, or keeps it as the current state's when none has subscribed.
    func publish(_ event: SessionEvent) {
        let broadcaster = slot.withLock { slot -> EventBroadcaster? in
            switch slot {
            case .made(let broadcaster):
                return broadcaster
            case .waiting(_, let finished):
                if case .stateChanged = event.kind, !finished { slot = .waiting(current: event, finished: false) }
                return nil
            }
        }
        broadcaster?.publish(event)
    }

    /// Ends every subscription, and every later one after its first event (``EventBroadcaster/finish()``).
    func finish() {
        let broadcaster = slot.withLock { slot -> EventBroadcaster? in
            switch slot {
            case .made(let broadcaster):
                return broadcaster
            case .waiting(let current, _):
                slot = .waiting(current: current, finished: true)
                return nil
            }
        }
        broadcaster?.finish()
    }

    /// The number of live subscribers.
    var subscriberCount: Int { made?.subscriberCount ?? 0 }

    /// The number of events dropped over all subscribers so far.
    var droppedCount: Int { made?.droppedCount ?? 0 }
}
