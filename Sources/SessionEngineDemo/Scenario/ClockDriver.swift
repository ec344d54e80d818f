import SessionEngine
import SessionEngineTestKit

/// Moves the scenario's manual clock, only ever when the engine is idle and then only to the next sleeper's
/// deadline, so a run depends only on its seed.
///
/// *Idle* is the test kit's ``SessionEngine/waitUntilIdle()``: every task the engine counts (its own, scoped work
/// and calls inside it) is asleep on the clock or waits for something only the driver can release. The driver also
/// waits until the timeline has printed every event the engine published, so notes and checks land after the
/// events that led to them. Neither wait polls: both resume from continuations.
struct ClockDriver: Sendable {
    let clock: ManualClock
    let engine: SessionEngine
    let timeline: Timeline
    /// Called with the clock's uptime each time a move crosses into a new simulated day.
    let onNewDay: (@Sendable (Duration) -> Void)?

    /// The longest simulated time one ``perform(_:)`` may take.
    static let performLimit: Duration = .seconds(3600)

    /// Waits until the engine is idle and the timeline has printed every event published so far.
    func settle() async {
        await engine.waitUntilIdle()
        await timeline.waitUntilCaughtUp()
    }

    /// Moves the clock to `target`, sleeper by sleeper, letting the engine react at each step.
    ///
    /// - Parameter target: The uptime to reach.
    func advance(to target: Duration) async {
        await settle()
        while clock.uptime < target {
            let next = min(clock.nextDeadline ?? target, target)
            step(by: next - clock.uptime)
            await settle()
        }
    }

    /// Advances the clock deadline by deadline until `done` holds, checking it whenever the engine is idle.
    ///
    /// - Parameters:
    ///   - limit: How much simulated time may pass.
    ///   - done: The condition to reach.
    /// - Returns: Whether `done` held before `limit` passed or nothing was left asleep on the clock.
    func advance(limit: Duration, until done: () -> Bool) async -> Bool {
        let start = clock.uptime
        while true {
            await settle()
            if done() { return true }
            guard clock.uptime - start < limit, let deadline = clock.nextDeadline else { return false }
            step(by: deadline - clock.uptime)
        }
    }

    /// Makes one call into the engine and moves the clock while it waits for a fetch.
    ///
    /// The call starts once the engine is idle (``SessionEngine/startCall(_:)``) and the clock moves only while a
    /// caller waits for a fetch's outcome: a sign-in during an outage, a renewal held back by the minimum fetch
    /// interval. Otherwise the call has returned, or will without the clock.
    ///
    /// - Parameter call: One call into the engine, given the engine; it must not wait on the clock otherwise.
    /// - Returns: What the call returned or threw; ``Scenario/Abort`` when it still waited after a simulated hour.
    func perform<T: Sendable>(_ call: @escaping @Sendable (SessionEngine) async throws -> T) async -> Result<
        T, any Error
    > {
        await settle()
        let task = await engine.startCall(call)
        let engine = self.engine
        guard await advance(limit: Self.performLimit, until: { engine.metrics.waiters == 0 }) else {
            task.cancel()
            _ = await task.result
            return .failure(Scenario.Abort(reason: "an operation did not finish within a simulated hour"))
        }
        return await task.result
    }

    private func step(by duration: Duration) {
        let before = clock.uptime
        clock.advance(by: max(duration, .zero))
        if let onNewDay, Int(before.seconds / 86_400) < Int(clock.uptime.seconds / 86_400) {
            onNewDay(clock.uptime)
        }
    }
}
