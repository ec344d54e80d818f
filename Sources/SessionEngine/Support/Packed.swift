import Foundation

/// A `Date?` in the eight bytes of a `Date`: `Date?` takes nine, sixteen in a struct, and the state machine of every
/// account of a pool keeps its optional times.
///
/// An absent date is one NaN bit pattern that no arithmetic produces (a NaN from arithmetic carries no payload), so a
/// clock that returned NaN would still read back as a date, as it does in a `Date?`. Equality and hashing are those of
/// `Date?`.
@propertyWrapper
struct PackedDate: Sendable, Hashable {
    private var bits: UInt64
    private static let absent: UInt64 = 0x7FF4_5E55_1000_0001

    init(wrappedValue: Date?) {
        bits = wrappedValue?.timeIntervalSinceReferenceDate.bitPattern ?? Self.absent
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
/// An absent duration is the one 2⁶³ seconds before zero, which no monotonic clock reads and no timeout or backoff
/// reaches; a clock that read it anyway would make one fetch's start or one deadline read as absent.
@propertyWrapper
struct PackedDuration: Sendable, Hashable {
    private var raw: Duration
    private static let absent = Duration(secondsComponent: .min, attosecondsComponent: 0)

    init(wrappedValue: Duration?) {
        raw = wrappedValue ?? Self.absent
    }

    var wrappedValue: Duration? {
        get { raw == Self.absent ? nil : raw }
        set { raw = newValue ?? Self.absent }
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
