import Foundation

/// The clock of the pool's use stamps: monotonic nanoseconds, cheap enough to read on every identified request.
///
/// A use stamp decides only which account is least recently used and when one has been idle for the idle timeout,
/// so a few milliseconds of lag cost nothing. On the ``SystemClock`` (Linux) it reads `CLOCK_MONOTONIC_COARSE`, which
/// the kernel updates on every tick and which costs a memory read through the vDSO instead of a clock read, as
/// ``WallClockCheck`` does for expiry. Every other clock, and other platforms, read the clock's
/// ``SessionClock/uptime``, so that a manual clock in tests decides idleness exactly.
struct UseClock: Sendable {
    private let clock: any SessionClock
    private let coarse: Bool

    /// Creates the use clock of `clock`.
    init(_ clock: any SessionClock) {
        self.clock = clock
        #if os(Linux)
            var resolution = timespec()
            coarse = clock is SystemClock && clock_getres(CLOCK_MONOTONIC_COARSE, &resolution) == 0
        #else
            coarse = false
        #endif
    }

    /// Now, in nanoseconds since an arbitrary fixed origin.
    var now: Int64 {
        #if os(Linux)
            if coarse {
                var time = timespec()
                clock_gettime(CLOCK_MONOTONIC_COARSE, &time)
                return Int64(time.tv_sec) &* 1_000_000_000 &+ Int64(time.tv_nsec)
            }
        #endif
        return Self.nanoseconds(clock.uptime)
    }

    /// `duration` in whole nanoseconds.
    static func nanoseconds(_ duration: Duration) -> Int64 {
        let (seconds, attoseconds) = duration.components
        return seconds &* 1_000_000_000 &+ attoseconds / 1_000_000_000
    }
}
