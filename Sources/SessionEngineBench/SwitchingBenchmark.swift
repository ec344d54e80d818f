import SessionEngine
import SessionEngineTestKit
import Synchronization

/// An account change while the previous account has many requests in flight: every one must be cancelled and have
/// ended before the next account's credential is installed.
struct SwitchingBenchmark: Benchmark {
    let name = "switching"
    let summary = "an account change with 10,000 in-flight withIdentity bodies: cancel, drain, install"

    private static let bodies = 10_000

    func run(_ options: Options) async throws -> [Figure] {
        var switches: [Double] = []
        var drains: [Double] = []
        var overrun: [Double] = []
        var cancelled: [Double] = []
        var pairs: [Double] = []
        for round in 0..<(options.warmupRounds + options.rounds) {
            progress("  switching round \(round + 1)")
            let result = try await switchWithWorkInFlight(seed: UInt64(round))
            let baseline = await cancelBareTasks()
            let pair = await cancelAwaitedTasks()
            guard round >= options.warmupRounds else { continue }
            switches.append(result.switchTime.seconds)
            drains.append(result.drainTime.seconds)
            overrun.append(Double(result.stillRunning))
            cancelled.append(baseline.seconds)
            pairs.append(pair.seconds)
        }
        let baseline = Measurement("cancelling and awaiting \(grouped(Self.bodies)) bare tasks", .seconds, cancelled)
        return [
            Figure(
                name,
                Measurement(
                    "switch with \(grouped(Self.bodies)) bodies in flight: cancel, drain, install", .seconds, switches),
                against: baseline,
                paired: true
            ).goal("≤ 1.5×") { $0 <= 1.5 },
            Figure(
                name,
                Measurement(
                    "switch with \(grouped(Self.bodies)) bodies in flight: cancel, drain, install", .seconds, switches),
                against: Measurement(
                    "cancelling \(grouped(Self.bodies)) bare tasks, each awaited by a caller task",
                    .seconds,
                    pairs
                ),
                note: "the engine's shape: each body runs in its own task, which its caller awaits",
                paired: true
            ),
            Figure(
                name,
                Measurement("of which cancel and drain, until the hooks ran", .seconds, drains),
                against: baseline,
                paired: true
            ),
            Figure(
                name,
                Measurement("old bodies still running when the next fetch began", .count, overrun),
                goal: Goal(text: "= 0 in every round", met: overrun.allSatisfy { $0 == 0 })
            ),
        ]
    }

    /// Signs in, starts the bodies, waits until all of them are running and switches account.
    ///
    /// - Returns: The time `switchAccount(to:)` took, the time until the account-change hooks ran (the work had
    ///   drained), and how many old bodies had not ended when the next account's fetch began.
    private func switchWithWorkInFlight(
        seed: UInt64
    ) async throws -> (switchTime: Duration, drainTime: Duration, stillRunning: Int) {
        let clock = ManualClock()
        let progress = WorkProgress()
        let fetcher = SigningFetcher(clock: clock) { account, _, _ in
            if account == "bob" { progress.markFetchStarted() }
        }
        // The runtime's own executors, as in a host: the bare tasks it is compared with run there too.
        let engine = SessionEngine(
            fetcher: fetcher, configuration: SessionConfiguration(randomSeed: seed), clock: VirtualClock(manual: clock))
        try await engine.signIn("alice")
        await engine.addAccountChangeHook { _ in progress.markHooksRan() }
        let callers = (0..<Self.bodies).map { _ in
            Task {
                try? await engine.withIdentity { _ in
                    progress.started.arrive()
                    defer { progress.ended.arrive() }
                    // A request waiting on the network until it is cancelled.
                    try await suspendUntilCancelled()
                }
            }
        }
        await progress.started.wait(for: Self.bodies)

        let start = ContinuousClock.now
        try await engine.switchAccount(to: "bob")
        let switchTime = start.duration(to: .now)
        for caller in callers { await caller.value }
        await engine.shutdown()
        return (switchTime, start.duration(to: progress.hooksRan!), Self.bodies - progress.endedAtFetch!)
    }

    /// Cancels 10,000 sleeping tasks, each awaited by a caller task as `withIdentity` awaits its body, and waits
    /// for the callers. Each task counts its start and its end as the engine's bodies do, so both sides run the same
    /// bodies.
    private func cancelAwaitedTasks() async -> Duration {
        let started = Arrivals()
        let ended = Arrivals()
        let inner = (0..<Self.bodies).map { _ in
            Task {
                started.arrive()
                defer { ended.arrive() }
                try await suspendUntilCancelled()
            }
        }
        let callers = inner.map { task in
            Task {
                try? await withTaskCancellationHandler {
                    try await task.value
                } onCancel: {
                    task.cancel()
                }
            }
        }
        await started.wait(for: Self.bodies)
        let start = ContinuousClock.now
        for task in inner { task.cancel() }
        for caller in callers { await caller.value }
        return start.duration(to: .now)
    }

    /// The runtime's floor: as many plain tasks, each waiting until cancelled, cancelled and awaited. Each counts its
    /// start and its end as the engine's bodies do.
    private func cancelBareTasks() async -> Duration {
        let started = Arrivals()
        let ended = Arrivals()
        let tasks = (0..<Self.bodies).map { _ in
            Task {
                started.arrive()
                defer { ended.arrive() }
                try? await suspendUntilCancelled()
            }
        }
        await started.wait(for: Self.bodies)
        let start = ContinuousClock.now
        for task in tasks { task.cancel() }
        for task in tasks { await task.value }
        return start.duration(to: .now)
    }
}

/// What the bodies and the engine's callbacks observed during a switch.
private final class WorkProgress: Sendable {
    let started = Arrivals()
    let ended = Arrivals()
    private let marks = SanitizedMutex<(hooksRan: ContinuousClock.Instant?, endedAtFetch: Int?)>((nil, nil))

    /// When the account-change hooks ran.
    var hooksRan: ContinuousClock.Instant? { marks.withLock { $0.hooksRan } }
    /// How many bodies had ended when the next account's fetch began.
    var endedAtFetch: Int? { marks.withLock { $0.endedAtFetch } }

    func markHooksRan() {
        marks.withLock { $0.hooksRan = .now }
    }

    func markFetchStarted() {
        let ended = ended.count
        marks.withLock { $0.endedAtFetch = ended }
    }
}
