public import Foundation

/// The engine's source of time: wall time for credential expiry and a monotonic sleep for timers.
///
/// Credentials expire by wall time (`expiresAt` is Unix seconds), but timers must not be fooled by wall-clock
/// jumps. The engine therefore sleeps on the monotonic clock in slices of at most 30 seconds and re-reads ``now``
/// after each slice, so a wall-clock jump or a suspended machine is noticed within one slice.
///
/// ``SystemClock`` is the default; `ManualClock` (in the SessionEngineTestKit product) drives the engine in tests.
public protocol SessionClock: Sendable {
    /// The current wall-clock time.
    var now: Date { get }

    /// Monotonic time since an arbitrary fixed origin; it never jumps and never goes back.
    var uptime: Duration { get }

    /// Suspends the calling task for `duration` on a monotonic clock.
    ///
    /// - Parameter duration: How long to sleep; zero or negative returns at once.
    /// - Throws: `CancellationError` when the calling task is cancelled while sleeping.
    func sleep(for duration: Duration) async throws
}

/// A clock that also runs the work it times.
///
/// An engine or a pool on such a clock runs its actor on the clock's ``actorExecutor`` and its tasks on its
/// ``taskExecutor``, unless its configuration names a ``SessionConfiguration/taskExecutor`` of its own: everything the
/// clock can wake then runs where its owner can see it. A test's manual clock is one, so that a test knows when no
/// work of the engine can run.
package protocol ExecutingClock: SessionClock {
    /// The serial executor that runs the actor of every engine on this clock.
    var actorExecutor: any SerialExecutor { get }
    /// The executor that the tasks of every engine and pool on this clock prefer.
    var taskExecutor: any TaskExecutor { get }
}

/// The system's clocks: `Date()` for wall time and `ContinuousClock` for sleeping.
public struct SystemClock: SessionClock {
    /// Creates the system clock.
    public init() {}

    private static let origin = ContinuousClock.now

    /// The current wall-clock time.
    public var now: Date { Date() }

    /// Time elapsed on `ContinuousClock` since the first use of any system clock in the process.
    public var uptime: Duration { Self.origin.duration(to: .now) }

    /// Sleeps on `ContinuousClock`.
    ///
    /// - Parameter duration: How long to sleep.
    /// - Throws: `CancellationError` when the calling task is cancelled.
    public func sleep(for duration: Duration) async throws {
        guard duration > .zero else {
            try Task.checkCancellation()
            return
        }
        try await ContinuousClock().sleep(for: duration)
    }
}
