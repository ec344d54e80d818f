package import Foundation

/// Checks the wall clock against a credential's expiry as cheaply as exactness allows.
///
/// On the ``SystemClock`` it reads `CLOCK_REALTIME_COARSE` (Linux), which the kernel updates on every tick and which
/// costs a memory read through the vDSO instead of a clock read. The coarse time lags the precise time by at most the
/// clock's resolution (`clock_getres`, one tick) while the kernel's timekeeping runs; a guard band of one more second
/// covers a timekeeping CPU that was descheduled (a virtual machine's vCPU). Only when the coarse time plus the
/// resolution and the guard band reaches the expiry does the check read the precise clock, as ``SystemClock/now``
/// does, so a credential is never handed out at or after `expiresAt`: the fast answer is only ever "certainly
/// before". Every other clock, and other platforms, read the clock's ``SessionClock/now``.
package struct WallClockCheck: Sendable {
    /// The clock checked.
    package let clock: any SessionClock
    /// How far before the expiry, in nanoseconds, the coarse time stops deciding alone; `nil` without a coarse clock.
    private let coarseMargin: Int64?

    /// The guard band above the coarse clock's resolution.
    static let guardBand: Int64 = 1_000_000_000

    /// Creates the check for `clock`.
    package init(_ clock: any SessionClock) {
        self.clock = clock
        coarseMargin = clock is SystemClock ? Self.coarseResolution().map { $0 + Self.guardBand } : nil
    }

    /// Whether the wall clock is before `deadline`, in Unix seconds; exactly as `clock.now < deadline`.
    ///
    /// The coarse clock answers only when it is more than its margin (its resolution and a second) before the
    /// deadline, so the rounding of the deadline to nanoseconds (well under a microsecond) cannot matter; at the
    /// boundary the precise clock decides.
    @inline(__always)
    package func isBefore(_ deadline: TimeInterval) -> Bool {
        #if os(Linux)
            if let coarseMargin, deadline > 0, deadline < 9e9 {
                var time = timespec()
                clock_gettime(CLOCK_REALTIME_COARSE, &time)
                let coarse = Int64(time.tv_sec) &* 1_000_000_000 &+ Int64(time.tv_nsec)
                // Truncation is the floor here, the deadline being positive: no call to `floor`, which the read
                // would otherwise make every time (x86-64's baseline has no instruction for it).
                let limit = Int64(deadline * 1e9)
                if coarse &+ coarseMargin < limit { return true }
            }
        #endif
        return clock.now.timeIntervalSince1970 < deadline
    }

    /// Whether the wall clock is at or after `instant`, in Unix seconds; exactly as `clock.now >= instant`.
    ///
    /// The coarse time never runs ahead of the precise time, so when it has already reached `instant` (rounded up to
    /// the nanosecond) the precise time has too; otherwise the precise clock decides.
    @inline(__always)
    package func isAtOrAfter(_ instant: TimeInterval) -> Bool {
        #if os(Linux)
            if coarseMargin != nil, instant > 0, instant < 9e9 {
                var time = timespec()
                clock_gettime(CLOCK_REALTIME_COARSE, &time)
                let coarse = Int64(time.tv_sec) &* 1_000_000_000 &+ Int64(time.tv_nsec)
                if coarse >= Int64((instant * 1e9).rounded(.up)) { return true }
            }
        #endif
        return clock.now.timeIntervalSince1970 >= instant
    }

    /// The resolution of `CLOCK_REALTIME_COARSE` in nanoseconds, or `nil` where there is none.
    private static func coarseResolution() -> Int64? {
        #if os(Linux)
            var resolution = timespec()
            guard clock_getres(CLOCK_REALTIME_COARSE, &resolution) == 0 else { return nil }
            let nanoseconds = Int64(resolution.tv_sec) * 1_000_000_000 + Int64(resolution.tv_nsec)
            // A resolution of a second or more is no coarse clock worth the name.
            return nanoseconds > 0 && nanoseconds < 1_000_000_000 ? nanoseconds : nil
        #else
            return nil
        #endif
    }
}

/// One ``WallClockCheck`` shared by reference: an engine's ``AccountShard/Shared`` holds it, and the engine keeps a
/// reference of its own that its read passes to its readers' copy (``SessionStore/ReadersCopy/headers(checkedBy:)``);
/// a store holds none, which would be a word of every account of a pool.
///
/// The read calls the check through this object's own methods, which read the check in place: a read of it
/// through another object's stored property cost the engine's read a third more.
final class SharedWallClockCheck: Sendable {
    let check: WallClockCheck

    init(_ clock: any SessionClock) {
        check = WallClockCheck(clock)
    }

    /// The clock the check reads.
    var clock: any SessionClock { check.clock }

    /// ``WallClockCheck/isBefore(_:)``.
    @inline(__always)
    func isBefore(_ deadline: TimeInterval) -> Bool {
        check.isBefore(deadline)
    }
}
