import Foundation
import SessionEngine
import SessionEngineTestKit
import Testing

/// The check every identified read makes against the wall clock: on the ``SystemClock`` it answers from the coarse
/// clock only when that is certainly before the deadline, so it agrees with a precise read of the clock at every
/// deadline, the boundary included.
struct WallClockCheckTests {
    /// Deadlines around now, from two seconds before to two seconds after in steps of a quarter of a millisecond,
    /// each checked between two precise reads: a deadline at or before the first read is never before, a deadline
    /// after the second always is. The coarse clock lags by up to a tick and its margin is a second past that, so the
    /// steps inside the margin exercise the precise fallback and those beyond it the coarse answer.
    @Test func theSystemClocksCheckAgreesWithAPreciseReadAroundTheDeadline() {
        let check = WallClockCheck(SystemClock())
        var misses: [String] = []
        for step in -8_000...8_000 {
            let offset = Double(step) / 4_000
            let before = Date().timeIntervalSince1970
            let deadline = before + offset
            let answer = check.isBefore(deadline)
            let after = Date().timeIntervalSince1970
            if deadline <= before && answer { misses.append("before at \(offset) s") }
            if deadline > after && !answer { misses.append("not before at \(offset) s") }
        }
        #expect(misses.count == 0, "\(misses.prefix(5))")
    }

    /// Deadlines the coarse path leaves to the precise clock: far in the future, before 1970 and not finite.
    @Test func deadlinesOutsideTheCoarseRangeAreDecidedByThePreciseClock() {
        let check = WallClockCheck(SystemClock())
        #expect(check.isBefore(1e10))
        #expect(check.isBefore(.infinity))
        #expect(!check.isBefore(-1))
        #expect(!check.isBefore(0))
        #expect(!check.isBefore(-.infinity))
        #expect(!check.isBefore(.nan))
    }

    /// On another clock the check is exactly that clock's `now` against the deadline.
    @Test func onAManualClockTheCheckIsTheClocksNow() {
        let clock = ManualClock(now: Date(timeIntervalSince1970: 1_800_000_000))
        let check = WallClockCheck(clock)
        #expect(check.isBefore(1_800_000_000.5))
        #expect(!check.isBefore(1_800_000_000))
        clock.advance(by: .milliseconds(500))
        #expect(!check.isBefore(1_800_000_000.5))
    }
}
