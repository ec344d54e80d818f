import Foundation

/// Identifies one fetch; unique over the engine's life, so a late result can be recognised as stale.
typealias FetchID = UInt64

/// Identifies one timer; unique over the engine's life, so a late firing can be recognised as stale.
typealias TimerID = UInt64

/// When a timer fires: at a wall-clock time, after a monotonic deadline, or whichever comes first.
struct TimerSpec: Sendable, Hashable {
    /// The timer's identity.
    var id: TimerID
    /// Fire once the wall clock reaches this time.
    @PackedDate var wallDeadline: Date?
    /// Fire once the monotonic clock reaches this time.
    @PackedDuration var uptimeDeadline: Duration?

    /// Creates a timer that fires at `wallDeadline` or `uptimeDeadline`, whichever comes first.
    init(id: TimerID, wallDeadline: Date? = nil, uptimeDeadline: Duration? = nil) {
        self.id = id
        self.wallDeadline = wallDeadline
        self.uptimeDeadline = uptimeDeadline
    }

    /// Whether the timer is due at `now`.
    func isDue(at now: SessionInstant) -> Bool {
        if let wallDeadline, now.wall >= wallDeadline { return true }
        if let uptimeDeadline, now.uptime >= uptimeDeadline { return true }
        return false
    }
}
