import Foundation

/// A `Date?` in the eight bytes of a `Date`: `Date?` takes nine, sixteen in a struct, and the state machine of every
/// account of a pool keeps its optional times.
///
/// An absent date is one signalling NaN's bit pattern. Arithmetic yields only quiet NaNs, and a date given with
/// exactly that pattern (a clock may return anything) is kept as the quiet NaN, which it already was in value: no
/// date reads back as absent. Equality and hashing are those of `Date?`.
@propertyWrapper
struct PackedDate: Sendable, Hashable {
    private var bits: UInt64
    /// The bit pattern of an absent date.
    static let absent: UInt64 = 0x7FF4_5E55_1000_0001

    init(wrappedValue: Date?) {
        guard let date = wrappedValue else {
            bits = Self.absent
            return
        }
        let given = date.timeIntervalSinceReferenceDate.bitPattern
        bits = given == Self.absent ? Double.nan.bitPattern : given
    }

    var wrappedValue: Date? {
        get { bits == Self.absent ? nil : Date(timeIntervalSinceReferenceDate: Double(bitPattern: bits)) }
        set { self = Self(wrappedValue: newValue) }
    }

    static func == (lhs: Self, rhs: Self) -> Bool { lhs.wrappedValue == rhs.wrappedValue }

    func hash(into hasher: inout Hasher) { hasher.combine(wrappedValue) }
}

/// A `Duration?` in the sixteen bytes of a `Duration`: `Duration?` takes seventeen, twenty-four in a struct.
///
/// An absent duration is the one 2⁶³ seconds before zero. A clock may read anything, so a duration given as exactly
/// that one is kept one attosecond later: no duration reads back as absent, and none moves by more than that.
@propertyWrapper
struct PackedDuration: Sendable, Hashable {
    private var raw: Duration
    /// What an absent duration is kept as.
    static let absent = Duration(secondsComponent: .min, attosecondsComponent: 0)

    init(wrappedValue: Duration?) {
        guard let duration = wrappedValue else {
            raw = Self.absent
            return
        }
        raw = duration == Self.absent ? duration + .init(secondsComponent: 0, attosecondsComponent: 1) : duration
    }

    var wrappedValue: Duration? {
        get { raw == Self.absent ? nil : raw }
        set { self = Self(wrappedValue: newValue) }
    }
}

/// A count in four bytes, for the counters the state machine of every account of a pool keeps: it stops at
/// `UInt32.max` (more consecutive failures than a fetch a second for a century) instead of taking eight bytes.
@propertyWrapper
struct PackedCount: Sendable, Hashable {
    private var raw: UInt32

    init(wrappedValue: Int) {
        raw = UInt32(clamping: wrappedValue)
    }

    var wrappedValue: Int {
        get { Int(raw) }
        set { raw = UInt32(clamping: newValue) }
    }
}
