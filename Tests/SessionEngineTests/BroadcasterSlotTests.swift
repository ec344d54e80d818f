import Foundation
import Synchronization
import Testing

@testable import SessionEngine

/// The slot that makes an engine's event broadcaster when the first subscriber comes (``BroadcasterSlot``), raced
/// against the engine's publishing on real threads.
@Suite struct BroadcasterSlotTests {
    /// Events of one round: the initial state, then state changes and other events in turn, as an engine publishes.
    private static let events: [SessionEvent] = (0...8).map { sequence in
        let time = SessionInstant(wall: Date(timeIntervalSince1970: 1_800_000_000), uptime: .seconds(sequence))
        let kind: SessionEvent.Kind =
            sequence % 2 == 0
            ? .stateChanged(.switching(from: nil, to: AccountID("account-\(sequence)")))
            : .workCancelled(account: nil, count: sequence)
        return SessionEvent(kind, time: time, epoch: 1, sequence: UInt64(sequence))
    }

    /// A first subscriber makes the broadcaster while another thread publishes and then finishes, round after round:
    /// it starts from the latest state change published before it and receives every later event once, in order, to
    /// the end. A slot that checked for the broadcaster and kept the state in two lock steps would let a subscriber
    /// start from an older state and miss the newer one.
    @Test func realThreadsRacingTheFirstSubscriberLoseNoEventAndRepeatNone() async {
        let all = Self.events
        let mismatches = Atomic<Int>(0)
        let stuck = await RealThreadRounds.run(RealThreadRounds.scaled(4_000)) { _ in
            let slot = Box(BroadcasterSlot(initial: all[0]))
            async let published: Void = Task.detached(executorPreference: RealThreadRounds.threads) {
                for event in all.dropFirst() { slot.value.publish(event) }
                slot.value.finish()
            }.value
            async let received: [SessionEvent] = Task.detached(executorPreference: RealThreadRounds.threads) {
                var received: [SessionEvent] = []
                let events = SessionEvents(broadcaster: slot.value.broadcaster(bufferLimit: 100), limit: .max)
                for await event in events { received.append(event) }
                return received
            }.value
            let (_, events) = await (published, received)
            if subscriberMissedOrRepeated(events, of: all) != nil { mismatches.add(1, ordering: .relaxed) }
        }
        #expect(stuck == nil, "a subscriber never saw its stream end in round \(stuck ?? -1)")
        #expect(mismatches.load(ordering: .relaxed) == 0, "rounds whose subscriber lost or repeated an event")
    }

    /// Subscribers come, wait for events, and some are cancelled, while another thread publishes and then finishes,
    /// round after round: every subscriber that is not cancelled receives, from the state it started from, every later
    /// event once and in order, to the end; a cancelled one's stream ends. No wake-up is lost between a subscriber's
    /// check for an event and its parking, nor between a publish or the finish and the subscriber it must wake.
    @Test func realThreadsRacingSubscribersPublishingAndTheFinishLoseNoEventAndNoSubscriber() async {
        let all = Self.events
        let mismatches = Atomic<Int>(0)
        let stuck = await RealThreadRounds.run(RealThreadRounds.scaled(3_000)) { round in
            let broadcaster = EventBroadcaster(initial: all[0], bufferLimit: 100)
            let subscribers = (0..<3).map { index in
                Task.detached(executorPreference: RealThreadRounds.threads) { () -> [SessionEvent] in
                    var received: [SessionEvent] = []
                    for await event in SessionEvents(broadcaster: broadcaster, limit: .max) {
                        received.append(event)
                    }
                    return received
                }
            }
            async let published: Void = Task.detached(executorPreference: RealThreadRounds.threads) {
                for event in all.dropFirst() { broadcaster.publish(event) }
                broadcaster.finish()
            }.value
            // One subscriber in turn is cancelled, at some point of its stream.
            let cancelled = round % subscribers.count
            async let cancelling: Void = Task.detached(executorPreference: RealThreadRounds.threads) {
                subscribers[cancelled].cancel()
            }.value
            _ = await (published, cancelling)
            for (index, subscriber) in subscribers.enumerated() {
                let received = await subscriber.value
                if index != cancelled, subscriberMissedOrRepeated(received, of: all) != nil {
                    mismatches.add(1, ordering: .relaxed)
                }
            }
        }
        #expect(stuck == nil, "a subscriber never saw its stream end in round \(stuck ?? -1)")
        #expect(mismatches.load(ordering: .relaxed) == 0, "subscribers that lost or repeated an event")
    }

    /// Holds the slot, which cannot be copied, for the round's two threads.
    private final class Box: Sendable {
        let value: BroadcasterSlot

        init(_ value: consuming BroadcasterSlot) {
            self.value = value
        }
    }
}
