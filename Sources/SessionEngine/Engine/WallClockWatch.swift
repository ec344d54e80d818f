import Foundation
import Synchronization

/// One watch of the system's wall clock for every engine in the process.
///
/// An engine's timer waits for a wall-clock deadline (renewal, expiry). Sleeping on the monotonic clock alone would
/// miss a wall-clock jump or a suspended machine, so a timer used to wake every 30 s to re-read the wall clock: one
/// wake-up per engine per 30 s, which grows with the number of engines a daemon holds. Instead, the timers of all
/// engines on the ``SystemClock`` wait here, and one task sleeps until the earliest deadline, at most 30 s, re-reads
/// the wall clock and wakes the timers that are due: the process wakes once per 30 s whatever the number of engines,
/// plus once per deadline. A wall-clock jump is noticed within one slice, as before.
package final class WallClockWatch: Sendable {
    /// The watch of ``SystemClock``.
    package static let system = WallClockWatch()

    private struct Waiter {
        var deadline: Date
        var continuation: CheckedContinuation<Void, any Error>
    }

    private struct State {
        var nextID: UInt64 = 0
        var waiters: [UInt64: Waiter] = [:]
        /// The watching task and the moment it will next look, if it runs.
        var watcher: (task: Task<Void, Never>, wakesAt: ContinuousClock.Instant, id: UInt64)?
        /// Times the watching task woke up, for benchmarks.
        var wakeUps = 0
    }

    private let state = Mutex(State())
    private static let slice = Duration.seconds(30)

    /// Creates a watch; engines share ``system``, tests make their own.
    init() {}

    /// How many times the watch has woken up.
    package var wakeUps: Int { state.withLock { $0.wakeUps } }

    /// Waits until the wall clock reaches `deadline`.
    ///
    /// - Throws: `CancellationError` when the calling task is cancelled first.
    func wait(until deadline: Date) async throws {
        let id = state.withLock { state in
            state.nextID += 1
            return state.nextID
        }
        try await withTaskCancellationHandler {
            try await withCheckedThrowingContinuation { (continuation: CheckedContinuation<Void, any Error>) in
                let outcome = state.withLock { state -> Result<Void, any Error>? in
                    if Task.isCancelled { return .failure(CancellationError()) }
                    if Date() >= deadline { return .success(()) }
                    state.waiters[id] = Waiter(deadline: deadline, continuation: continuation)
                    Self.reschedule(&state, earliest: deadline, watch: self)
                    return nil
                }
                if let outcome { continuation.resume(with: outcome) }
            }
        } onCancel: {
            let waiter = state.withLock { $0.waiters.removeValue(forKey: id) }
            waiter?.continuation.resume(throwing: CancellationError())
        }
    }

    /// Starts the watching task, or restarts it to look earlier, when `earliest` needs it sooner than it looks.
    private static func reschedule(_ state: inout State, earliest: Date, watch: WallClockWatch) {
        // At least a millisecond, so a monotonic clock that runs a little ahead of the wall clock cannot spin.
        let wait = min(slice, .seconds(max(0.001, earliest.timeIntervalSinceNow)))
        let wakesAt = ContinuousClock.now + wait
        if let watcher = state.watcher, watcher.wakesAt <= wakesAt { return }
        state.watcher?.task.cancel()
        state.nextID += 1
        let id = state.nextID
        state.watcher = (Task.detached { await watch.watch(until: wakesAt, id: id) }, wakesAt, id)
    }

    private func reschedule(_ state: inout State, earliest: Date) {
        Self.reschedule(&state, earliest: earliest, watch: self)
    }

    /// Sleeps until `wakesAt`, then wakes the due waiters and plans the next look.
    private func watch(until wakesAt: ContinuousClock.Instant, id: UInt64) async {
        do {
            try await ContinuousClock().sleep(until: wakesAt)
        } catch {
            return  // Replaced by a watcher that looks earlier.
        }
        let due = state.withLock { state -> [CheckedContinuation<Void, any Error>] in
            // A watcher replaced just as its sleep ended leaves the looking to its replacement.
            guard state.watcher?.id == id else { return [] }
            state.wakeUps += 1
            state.watcher = nil
            let now = Date()
            let dueIDs = state.waiters.filter { $0.value.deadline <= now }.map(\.key)
            let due = dueIDs.compactMap { state.waiters.removeValue(forKey: $0)?.continuation }
            if let earliest = state.waiters.values.lazy.map(\.deadline).min() {
                reschedule(&state, earliest: earliest)
            }
            return due
        }
        for continuation in due { continuation.resume() }
    }
}
