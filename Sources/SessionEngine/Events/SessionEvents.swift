/// The engine's events as an `AsyncSequence` that never throws.
///
/// The first element is the state current when ``SessionEngine/events(bufferLimit:)`` was called; every later state
/// change, renewal, failure, rejection and cancellation follows in the order the engine performed them. The sequence
/// ends when the engine shuts down, or when the iterating task is cancelled.
///
/// Each sequence has its own buffer of ``SessionConfiguration/eventBufferLimit`` events. A subscriber that falls
/// further behind loses its oldest undelivered events and receives ``SessionEvent/Kind/eventsDropped(count:)`` in their
/// place, so a slow subscriber never holds back the engine or other subscribers. Releasing the sequence and its
/// iterator, or cancelling the task that iterates it, unsubscribes at once, so a daemon may subscribe and
/// unsubscribe for weeks without growing.
///
/// Iterate each sequence once, from one task.
public struct SessionEvents: AsyncSequence, Sendable {
    /// The events.
    public typealias Element = SessionEvent
    /// The sequence never throws.
    public typealias Failure = Never

    final class Subscription: Sendable {
        let broadcaster: EventBroadcaster
        let id: UInt64?
        let final: EventBroadcaster.Published

        init(broadcaster: EventBroadcaster, limit: Int?) {
            self.broadcaster = broadcaster
            let (id, current) = broadcaster.subscribe(limit: limit)
            self.id = id
            self.final = current
        }

        deinit {
            if let id { broadcaster.unsubscribe(id) }
        }
    }

    private let subscription: Subscription

    init(broadcaster: EventBroadcaster, limit: Int? = nil) {
        subscription = Subscription(broadcaster: broadcaster, limit: limit)
    }

    /// Creates the iterator.
    public func makeAsyncIterator() -> Iterator {
        Iterator(subscription: subscription)
    }

    /// Iterates over the events.
    public struct Iterator: AsyncIteratorProtocol {
        /// The events.
        public typealias Element = SessionEvent
        /// The iterator never throws.
        public typealias Failure = Never

        private let subscription: Subscription
        private var deliveredFinalState = false

        init(subscription: Subscription) {
            self.subscription = subscription
        }

        /// The next event, or `nil` once the engine has shut down or the task was cancelled.
        public mutating func next() async -> SessionEvent? {
            guard let id = subscription.id else {
                // Subscribed after shutdown: deliver the final state once.
                defer { deliveredFinalState = true }
                return Self.event(of: deliveredFinalState ? nil : subscription.final)
            }
            return Self.event(of: await subscription.broadcaster.next(id))
        }

        /// The event a delivery carries, copied out of line so that the waiting task's frame holds only the
        /// reference while it waits.
        @inline(never)
        private static func event(of published: EventBroadcaster.Published?) -> SessionEvent? {
            published?.event
        }
    }
}

@available(*, unavailable)
extension SessionEvents.Iterator: Sendable {}
