import Foundation
import SessionEngineBackend
import SessionEngineModel
import SessionEngineTestKit
import Testing

@testable import SessionEngine

/// An engine's first subscriber raced against its events on real threads. A suite of its own for its time limit, a
/// guard against a hang and not a measure: its 300 rounds take under a second alone, also beside another process
/// busy on both cores, but beside the suite's CPU-bound property and model tests in the same process they took 62 to
/// 83 s, past the engine suite's minute (and 150 s under the thread sanitizer). A stuck round fails it sooner
/// (`RealThreadRounds.stall`).
@Suite(.timeLimit(TimeLimits.minutes(5))) struct SubscriberRaceTests {
    /// The first subscriber makes the broadcaster while the engine publishes, on real threads: whenever it comes, it
    /// starts from the latest state change published before it and then receives every later event once, in order,
    /// to the end. Each round also subscribes a second engine at a chosen moment of the same program (before it,
    /// after the sign-in, after the switch, after the shutdown), so every moment is checked whatever the threads do.
    /// The rounds, the subscribers and the engines' own tasks run on threads of their own (`RealThreadRounds`), not on
    /// the concurrency pool's two, which the suite's CPU-bound tests may hold for a minute.
    @Test func aFirstSubscriberRacingTheEnginesEventsLosesNoneAndRepeatsNone() async throws {
        let clock = SystemClock()
        let signer = try IdentitySigner(projectID: EngineHarness.projectID, secret: EngineHarness.secret, clock: clock)
        let fetcher = ScriptedCredentialFetcher(responder: { try signer.sign(email: exampleEmail(for: $0)) })
        @Sendable func engine(seed: Int) -> (SessionEngine, Recorder<SessionEvent>) {
            let published = Recorder<SessionEvent>()
            var configuration = SessionConfiguration(randomSeed: UInt64(seed))
            configuration.taskExecutor = RealThreadRounds.threads
            let engine = SessionEngine(
                fetcher: fetcher, configuration: configuration, clock: clock, observer: { published.append($0) })
            return (engine, published)
        }
        @Sendable func receive(_ events: SessionEvents) async -> [SessionEvent] {
            var received: [SessionEvent] = []
            for await event in events { received.append(event) }
            return received
        }
        @Sendable func consume(_ value: Int) {
            // Keeps the pause's loop from being optimized away.
            if value == -1 { Issue.record("unreachable") }
        }
        let failures = Locked<[String]>([])
        let stuck = await RealThreadRounds.run(300) { round in
            do {
                let (racing, racingEvents) = engine(seed: round)
                // On another thread, after a pause that differs from round to round, so that over the rounds it
                // subscribes at every point of the engine's program, and now and then inside one of its steps.
                let pause = round * 7_919 % 20_000
                let subscriber = Task.detached(executorPreference: RealThreadRounds.threads) {
                    var spin = 0
                    for step in 0..<pause { spin &+= step }
                    consume(spin)
                    return await receive(racing.events(bufferLimit: .max))
                }
                try await racing.signIn("alice")
                try await racing.switchAccount(to: "bob")
                await racing.shutdown()
                if let gap = subscriberMissedOrRepeated(await subscriber.value, of: racingEvents.values) {
                    failures.append("round \(round), racing: \(gap)")
                }

                let (chosen, chosenEvents) = engine(seed: round)
                var atMoment: Task<[SessionEvent], Never>?
                func subscribe(at moment: Int) {
                    guard round % 4 == moment else { return }
                    let events = chosen.events(bufferLimit: .max)
                    atMoment = Task(executorPreference: RealThreadRounds.threads) { await receive(events) }
                }
                subscribe(at: 0)
                try await chosen.signIn("alice")
                subscribe(at: 1)
                try await chosen.switchAccount(to: "bob")
                subscribe(at: 2)
                await chosen.shutdown()
                subscribe(at: 3)
                let received = await atMoment?.value ?? []
                if let gap = subscriberMissedOrRepeated(received, of: chosenEvents.values) {
                    failures.append("round \(round), at moment \(round % 4): \(gap)")
                }
            } catch {
                failures.append("round \(round): \(error)")
            }
        }
        #expect(stuck == nil, "a round never ended")
        #expect(failures.value.isEmpty, "\(failures.value.prefix(5))")
    }
}
