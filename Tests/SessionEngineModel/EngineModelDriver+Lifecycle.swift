import Foundation
import SessionEngine
import SessionEngineTestKit

/// The end of a program: liveness once the backend recovers, the shutdown and its leak check, and the teardown of a
/// program that failed.
extension EngineModelDriver {
    /// Invariant 7: once the backend succeeds, the engine is identified within the backoff cap (plus the minimum
    /// interval and one 30-second timer slice) of virtual time.
    package func checkLiveness() async throws {
        guard model.account != nil else { return }
        recovering = true
        fetcher.recover()
        // The backend's signer runs on this host's time again (a clock of its own that no `Date` explains would keep
        // every credential implausible for ever: a misconfiguration, not an outage).
        backend.clock = .noDate
        let retry = Self.configuration.retry
        // A backend's Retry-After holds the account session back for as long as it asked (within the maximum).
        var floor = Duration.zero
        for case .floor(_, let until) in probe.fetchRules(of: model.epoch) { floor = max(floor, until - clock.uptime) }
        let bound = retry.cap + Self.configuration.minimumFetchInterval + .seconds(31) + floor
        let start = clock.uptime
        let engine = self.engine
        let identified = try await advance(by: bound) {
            engine.state.isIdentified && (try? engine.identityHeaders()) != nil
        }
        if !identified {
            throw Violation(
                "invariant 7: not identified \(clock.uptime - start) after the backend began to succeed: "
                    + "\(engine.state)"
            )
        }
    }

    /// Invariant 8: after shutdown no task, timer, waiter, scoped work or subscriber remains.
    package func shutDownAndCheckLeaks() async throws {
        // The shutdown supersedes every change still held by work, except a sign-out under way, which becomes the
        // shutdown and still runs its hooks.
        var superseded = probe.heldEpochs
        if model.account == nil { superseded.remove(model.epoch) }
        for index in model.hookPlan.indices where superseded.contains(model.hookPlan[index].epoch) {
            model.hookPlan[index].status = .mustNotRun
        }
        probe.shuttingDown = true
        let done = await startShutdown()
        var steps = 0
        while true {
            await owner.waitUntilIdle()
            // Answers still on the wire arrive after shutdown and are discarded; work that ignores cancellation
            // ends when its sleep does. Anything else left parked is a shutdown that hangs.
            let onTheWire = fetcher.pendingRequests.filter(\.behaviour.ignoresCancellation)
            for request in onTheWire { answer(request) }
            if !onTheWire.isEmpty {
                // The answers are on their way to the engine.
            } else if probe.stubbornWork > 0 {
                clock.advanceToNextDeadline()
            } else if done.isOpen {
                break
            } else {
                // Nothing is left to release, and the engine is idle: the shutdown waits for something that never
                // comes.
                throw Violation("invariant 8: shutdown never returned: \(activity)")
            }
            steps += 1
            if steps > Self.teardownSteps { throw Violation("invariant 8: shutdown never returned: \(activity)") }
        }
        await owner.waitUntilIdle()
        if probe.calls.outstanding > 0 { throw Violation("invariant 8: calls wait after shutdown: \(activity)") }
        if let running, !running.returned.isOpen { throw Violation("run() has not returned after shutdown") }
        await probe.calls.waitUntilNone()
        for subscriber in subscribers { await subscriber.log.waitUntilFinished() }
        if let violation = probe.firstViolation ?? fetcher.violation { throw Violation(violation) }
        let metrics = engine.metrics
        guard metrics.liveTasks == 0, metrics.subscribers == 0, metrics.waiters == 0, metrics.scopedWork == 0,
            probe.calls.outstanding == 0
        else {
            throw Violation("invariant 8: after shutdown: \(activity)")
        }
        for subscriber in subscribers where subscriber.active && subscriber.log.states.last != .signedOut {
            throw Violation("a subscriber's last state was \(String(describing: subscriber.log.states.last))")
        }
        if let violation = probe.checkResumes() { throw Violation(violation) }
        try checkFetchStarts()
        try checkHooks(final: true)
    }

    /// Calls `shutdown()`, or cancels `run()` when the program stopped it, and returns once the call has done all it
    /// can, with a gate that opens when it returns.
    private func startShutdown() async -> Gate {
        let engine = self.engine
        let probe = self.probe
        let done = Gate()
        if stoppedRunning, let running {
            running.task.cancel()
            owner.start {
                await running.task.value
                if probe.runningWork > 0 || engine.metrics.scopedWork > 0 {
                    probe.violation("invariant 8: run() returned, once cancelled, while scoped work ran")
                }
                done.open()
            }
            await owner.waitUntilIdle()
            return done
        }
        owner.start {
            await engine.shutdown()
            if probe.runningWork > 0 || engine.metrics.scopedWork > 0 {
                probe.violation("invariant 8: shutdown returned while scoped work ran")
            }
            done.open()
        }
        await owner.waitUntilIdle()
        return done
    }

    /// Ends a failed program without leaving tasks behind, as far as a broken engine allows.
    package func tearDown() async {
        probe.shuttingDown = true
        probe.releaseHooks()
        let done = await startShutdown()
        for _ in 0..<Self.teardownSteps {
            await owner.waitUntilIdle()
            if done.isOpen && engine.metrics.liveTasks == 0 { break }
            probe.releaseHooks()
            fetcher.failAll()
            clock.advanceToNextDeadline()
        }
        for subscriber in subscribers { subscriber.task.cancel() }
    }
}
