import Foundation
import SessionEngine
import SessionEngineTestKit

/// Many subscribers to the engine's events: how fast state changes reach all of them, and what each costs in memory.
struct FanOutBenchmark: Benchmark {
    let name = "fan-out"
    let summary = "1,000 subscribers receiving state changes: events per second delivered and memory per subscriber"

    private static let subscribers = 1_000
    /// Idle subscribers over which memory is measured: enough that page granularity and memory the allocator
    /// reuses average out.
    private static let memorySubscribers = 10_000
    /// A renewal cycle publishes three events: `renewing`, `renewed` and `identified`.
    private static let eventsPerCycle = 3

    func run(_ options: Options) async throws -> [Figure] {
        let cycles = options.quick ? 20 : 100
        var engineRates: [Double] = []
        var streamRates: [Double] = []
        var engineMemory: [Double] = []
        var streamMemory: [Double] = []
        var dropped = 0
        for round in 0..<(options.warmupRounds + options.rounds) {
            progress("  fan-out round \(round + 1)")
            let engine = try await deliverThroughEngine(cycles: cycles, seed: UInt64(round))
            let streamRate = await deliverThroughStreams(cycles: cycles)
            let engineBytes = try await engineMemoryPerSubscriber()
            let streamBytes = await streamMemoryPerSubscriber()
            guard round >= options.warmupRounds else { continue }
            engineRates.append(engine.rate)
            streamRates.append(streamRate)
            engineMemory.append(engineBytes)
            streamMemory.append(streamBytes)
            dropped += engine.dropped
        }
        let count = grouped(Self.subscribers)
        return [
            Figure(
                name,
                Measurement("events delivered per second, \(count) subscribers", .perSecond, engineRates),
                against: Measurement("AsyncStream per subscriber", .perSecond, streamRates),
                note: "\(dropped) events dropped",
                paired: true
            ),
            Figure(
                name,
                Measurement(
                    "memory per subscriber, its task included (over \(grouped(Self.memorySubscribers)))",
                    .bytes,
                    engineMemory
                ),
                against: Measurement("AsyncStream and its task", .bytes, streamMemory),
                paired: true
            ),
        ]
    }

    /// Subscribes, then drives renewal cycles until every subscriber has received every event they published.
    ///
    /// - Returns: Events delivered per second and events dropped.
    private func deliverThroughEngine(cycles: Int, seed: UInt64) async throws -> (rate: Double, dropped: Int) {
        let clock = ManualClock()
        let fetcher = SigningFetcher(clock: clock, lifetime: 60)
        let engine = SessionEngine(
            fetcher: fetcher, configuration: SessionConfiguration(randomSeed: seed), clock: clock)
        try await engine.signIn("member")
        let driver = RenewalDriver(engine: engine, clock: clock, fetcher: fetcher)
        let expected = cycles * Self.eventsPerCycle

        let subscribers = await Self.engineSubscribers(Self.subscribers, of: engine) { iterator in
            var received = 0
            var dropped = 0
            while received + dropped < expected, let event = await iterator.next() {
                if case .eventsDropped(let count) = event.kind { dropped += count } else { received += 1 }
            }
            return (received, dropped)
        }

        let start = ContinuousClock.now
        for _ in 0..<cycles { await driver.renewOnce() }
        var delivered = 0
        var dropped = 0
        for subscriber in subscribers {
            let (received, lost) = await subscriber.value
            delivered += received
            dropped += lost
        }
        let elapsed = start.duration(to: .now)
        await engine.shutdown()
        return (Double(delivered) / elapsed.seconds, dropped)
    }

    /// The same number of events through one `AsyncStream` per subscriber, yielded by a loop.
    ///
    /// - Returns: Events delivered per second.
    private func deliverThroughStreams(cycles: Int) async -> Double {
        let expected = cycles * Self.eventsPerCycle
        let time = SessionInstant(wall: Date(), uptime: .zero)
        let events: [SessionEvent] = [
            .stateChanged(.switching(from: "member", to: "member")), .eventsDropped(count: 0),
            .stateChanged(.signedOut),
        ].enumerated().map { SessionEvent($0.element, time: time, epoch: 1, sequence: UInt64($0.offset + 1)) }
        let (continuations, subscribers) = await Self.streamSubscribers(Self.subscribers) { stream in
            var received = 0
            for await _ in stream {
                received += 1
                if received == expected { break }
            }
            return received
        }

        let start = ContinuousClock.now
        for _ in 0..<cycles {
            for event in events {
                for continuation in continuations { continuation.yield(event) }
            }
        }
        var delivered = 0
        for subscriber in subscribers { delivered += await subscriber.value }
        let elapsed = start.duration(to: .now)
        for continuation in continuations { continuation.finish() }
        return Double(delivered) / elapsed.seconds
    }

    /// Resident memory added per subscriber while many subscribers wait for the engine's next event.
    private func engineMemoryPerSubscriber() async throws -> Double {
        let clock = ManualClock()
        let engine = SessionEngine(fetcher: SigningFetcher(clock: clock), clock: clock)
        try await engine.signIn("member")
        releaseFreeMemory()
        let before = residentMemory()
        let subscribers = await Self.engineSubscribers(Self.memorySubscribers, of: engine) { iterator in
            _ = await iterator.next()  // nil at shutdown
        }
        let memory = (residentMemory() - before) / Double(Self.memorySubscribers)
        await engine.shutdown()
        for subscriber in subscribers { await subscriber.value }
        return memory
    }

    /// Resident memory added per subscriber while as many tasks wait on their own `AsyncStream`.
    private func streamMemoryPerSubscriber() async -> Double {
        releaseFreeMemory()
        let before = residentMemory()
        let (continuations, subscribers) = await Self.streamSubscribers(Self.memorySubscribers) { stream in
            for await _ in stream {}
        }
        let memory = (residentMemory() - before) / Double(Self.memorySubscribers)
        for continuation in continuations { continuation.finish() }
        for subscriber in subscribers { await subscriber.value }
        return memory
    }

    /// Starts `count` tasks, each consuming an `AsyncStream` of its own with `consume`, and returns once every one
    /// has started.
    ///
    /// - Returns: The streams' continuations and the tasks.
    private static func streamSubscribers<Result: Sendable>(
        _ count: Int,
        _ consume: @escaping @Sendable (AsyncStream<SessionEvent>) async -> Result
    ) async -> (continuations: [AsyncStream<SessionEvent>.Continuation], tasks: [Task<Result, Never>]) {
        let started = Arrivals()
        var continuations: [AsyncStream<SessionEvent>.Continuation] = []
        var tasks: [Task<Result, Never>] = []
        for _ in 0..<count {
            let (stream, continuation) = AsyncStream<SessionEvent>.makeStream()
            continuations.append(continuation)
            tasks.append(
                Task {
                    started.arrive()
                    return await consume(stream)
                }
            )
        }
        await started.wait(for: count)
        return (continuations, tasks)
    }

    /// Starts `count` tasks, each subscribing to the engine's events, receiving the current state and then
    /// consuming the rest with `consume`; returns once every one has received the current state.
    ///
    /// - Returns: The tasks.
    private static func engineSubscribers<Result: Sendable>(
        _ count: Int,
        of engine: SessionEngine,
        _ consume: @escaping @Sendable (inout SessionEvents.Iterator) async -> Result
    ) async -> [Task<Result, Never>] {
        let subscribed = Arrivals()
        let tasks = (0..<count).map { _ in
            Task {
                var iterator = engine.events().makeAsyncIterator()
                _ = await iterator.next()  // the current state
                subscribed.arrive()
                return await consume(&iterator)
            }
        }
        await subscribed.wait(for: count)
        return tasks
    }
}
