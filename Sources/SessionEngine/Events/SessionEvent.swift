public import Foundation

/// Something the engine did or saw, as published by ``SessionEngine/events(bufferLimit:)``, stamped with when it
/// happened.
///
/// Every event carries the engine clock's wall time and monotonic instant of the step that produced it, the epoch
/// of the account session it belongs to and a sequence number. Events of one step share their time; sequence
/// numbers grow by one per event the engine publishes, so a subscriber that lost events (see
/// ``Kind/eventsDropped(count:)``) sees the gap. Events never hold a signature, a secret or a property value.
public struct SessionEvent: Sendable, Hashable, CustomStringConvertible {
    /// What happened.
    ///
    /// The reports of fetches, rejections and clock skew are stored out of line, so an event is the size of a state
    /// change: an engine keeps its current state's event for new subscribers, and a pool keeps one per account.
    public enum Kind: Sendable, Hashable, CustomStringConvertible {
        /// The state changed. Every subscriber first receives the state current when it subscribed.
        case stateChanged(SessionState)
        /// A fetched credential was validated and installed, by the fetch described.
        indirect case renewed(SessionIdentity, FetchAttempt)
        /// A fetch failed or its credential was refused.
        indirect case fetchFailed(FetchFailure)
        /// The host reported that the service rejected a credential.
        indirect case credentialRejected(RejectionReport)
        /// An account change or shutdown cancelled the previous account's scoped work.
        case workCancelled(account: AccountID?, count: Int)
        /// A fetched credential suggests that this process's clock and the backend's disagree.
        indirect case clockSkewSuspected(ClockSkewReport)
        /// The subscriber fell behind and this many of the oldest undelivered events were dropped.
        case eventsDropped(count: Int)

        /// A one-line summary without any secret.
        public var description: String {
            switch self {
            case .stateChanged(let state): "state \(state)"
            case .renewed(let identity, let fetch): "renewed \(identity), \(fetch)"
            case .fetchFailed(let failure): "fetch failed \(failure)"
            case .credentialRejected(let report): "credential rejected \(report)"
            case .workCancelled(let account, let count):
                "work cancelled account: \(account.map(\.rawValue) ?? "none"), count: \(count)"
            case .clockSkewSuspected(let report): "clock skew suspected \(report)"
            case .eventsDropped(let count): "events dropped count: \(count)"
            }
        }
    }

    /// When the engine's step that produced the event ran, on the engine's clock.
    public let time: SessionInstant
    /// The epoch of the account session the event belongs to; it grows with every account change.
    public let epoch: UInt64
    /// The event's position among all the events the engine published, from 1; the initial state a subscriber
    /// receives carries the sequence number of the event that produced that state (0 before any).
    public let sequence: UInt64
    // Stored last, so that what follows an event where it is kept inline (a flag of the engine's slot for its
    // current event) fits in the room the kind leaves.
    /// What happened.
    public let kind: Kind

    /// Creates an event.
    ///
    /// - Parameters:
    ///   - kind: What happened.
    ///   - time: When it happened on the engine's clock.
    ///   - epoch: The epoch of the account session it belongs to.
    ///   - sequence: Its position among the engine's events.
    public init(_ kind: Kind, time: SessionInstant, epoch: UInt64, sequence: UInt64) {
        self.kind = kind
        self.time = time
        self.epoch = epoch
        self.sequence = sequence
    }

    /// The new state, when the event is a state change.
    public var state: SessionState? {
        if case .stateChanged(let state) = kind { return state }
        return nil
    }

    /// `#sequence epoch summary`, without any secret.
    public var description: String { "#\(sequence) epoch \(epoch) \(kind)" }
}

/// A moment on the engine's clock: wall time, which credentials expire by, and monotonic time, which timers and
/// backoff run on.
public struct SessionInstant: Sendable, Hashable, CustomStringConvertible {
    /// Wall-clock time.
    public var wall: Date
    /// Monotonic time since the clock's fixed origin (see ``SessionClock/uptime``).
    public var uptime: Duration

    /// Creates an instant.
    ///
    /// - Parameters:
    ///   - wall: Wall-clock time.
    ///   - uptime: Monotonic time since the clock's origin.
    public init(wall: Date, uptime: Duration) {
        self.wall = wall
        self.uptime = uptime
    }

    /// The wall time in Unix seconds and the monotonic time.
    public var description: String { "wall \(wall.timeIntervalSince1970), uptime \(uptime.readable)" }
}

/// One fetch as the engine saw it: which attempt it was and how long the fetcher took.
///
/// A credential the host handed over with ``SessionEngine/setIdentityCredential(_:for:)`` or
/// ``SessionEngine/signIn(_:with:)`` is reported as an attempt too, with ``pushed`` set and a zero duration.
public struct FetchAttempt: Sendable, Hashable, CustomStringConvertible {
    /// The attempt's number among consecutive fetches of the account session: 1 after a success, 2 after one
    /// failure, and so on.
    public let number: Int
    /// The monotonic time from the fetch's start to the engine's handling of its result.
    public let duration: Duration
    /// The backend's clock minus this process's, as the fetcher measured it; `nil` when it did not say.
    public let serverClockOffset: Duration?
    /// Whether the host handed the credential over instead of the engine fetching it.
    public let pushed: Bool

    /// Creates a fetch attempt.
    ///
    /// - Parameters:
    ///   - number: The attempt's number among consecutive fetches.
    ///   - duration: How long the fetch took.
    ///   - serverClockOffset: The backend's clock offset the fetcher measured, if any.
    ///   - pushed: Whether the host handed the credential over.
    public init(number: Int, duration: Duration, serverClockOffset: Duration? = nil, pushed: Bool = false) {
        self.number = number
        self.duration = duration
        self.serverClockOffset = serverClockOffset
        self.pushed = pushed
    }

    /// `attempt N in D`, `pushed` for a credential the host handed over, and the clock offset when measured.
    public var description: String {
        let base = pushed ? "pushed by the host" : "attempt \(number) in \(duration.readable)"
        return base + (serverClockOffset.map { ", server clock offset \($0.readable)" } ?? "")
    }
}

/// A failed fetch, and when the engine tries again.
public struct FetchFailure: Sendable, Hashable, CustomStringConvertible {
    /// The account the fetch was for.
    public let account: AccountID
    /// What went wrong.
    public let error: SessionError
    /// The failed fetch: its attempt number (how many fetches in a row have now failed) and duration.
    public let fetch: FetchAttempt
    /// The delay before the next attempt, or `nil` when the failure was terminal.
    public let retryIn: Duration?
    /// The delay the backend asked for (`Retry-After`), bounded by ``SessionConfiguration/maximumRetryAfter``;
    /// ``retryIn`` is at least this long. `nil` when the backend asked for none.
    public let serverRetryAfter: Duration?

    /// How many fetches in a row have now failed.
    public var consecutiveFailures: Int { fetch.number }

    /// Creates a failure report.
    ///
    /// - Parameters:
    ///   - account: The account the fetch was for.
    ///   - error: What went wrong.
    ///   - fetch: The failed attempt's number and duration.
    ///   - retryIn: The delay before the next attempt, `nil` when terminal.
    ///   - serverRetryAfter: The bounded delay the backend asked for, if any.
    public init(
        account: AccountID,
        error: SessionError,
        fetch: FetchAttempt,
        retryIn: Duration?,
        serverRetryAfter: Duration? = nil
    ) {
        self.account = account
        self.error = error
        self.fetch = fetch
        self.retryIn = retryIn
        self.serverRetryAfter = serverRetryAfter
    }

    /// `account, error, attempt, retry`, and the backend's requested delay when it gave one.
    public var description: String {
        "\(account), \(error.code), \(fetch), retryIn: \(retryIn?.readable ?? "never")"
            + (serverRetryAfter.map { ", server asked for \($0.readable)" } ?? "")
    }
}

/// A credential the service rejected, and what the engine does about it.
public struct RejectionReport: Sendable, Hashable, CustomStringConvertible {
    /// The account whose credential was rejected.
    public let account: AccountID
    /// The rejected credential's expiry, which identifies it without its signature.
    public let expiresAt: Int64
    /// `true` when the engine renews at once, or a fetch already under way renews the credential; `false` when this
    /// was the renewed credential rejected again with no fetch under way, so the engine only retries after backoff.
    public let renewing: Bool
    /// The delay before the next attempt when not renewing at once; `nil` when renewing.
    public let retryIn: Duration?

    /// Creates a rejection report.
    ///
    /// - Parameters:
    ///   - account: The account whose credential was rejected.
    ///   - expiresAt: The rejected credential's expiry.
    ///   - renewing: Whether the engine renews at once.
    ///   - retryIn: The delay before the next attempt, when not renewing at once.
    public init(account: AccountID, expiresAt: Int64, renewing: Bool, retryIn: Duration?) {
        self.account = account
        self.expiresAt = expiresAt
        self.renewing = renewing
        self.retryIn = retryIn
    }

    /// `account, expiresAt, renewing`.
    public var description: String {
        "\(account), expiresAt: \(expiresAt), renewing: \(renewing)"
            + (retryIn.map { ", retryIn: \($0.readable)" } ?? "")
    }
}

/// Evidence that this process's clock, the backend's `Date` clock and the signer's clock disagree, and what the
/// engine did about it (``finding``).
///
/// Three clocks meet in a fetch: this host's wall clock (``localTime``), the backend's clock as its `Date` header
/// says (``dateHeaderOffset`` from this host's), and the signer's, seen through the credential's ``expiresAt``. How
/// far each disagrees with the credential is in ``lifetimeOnHostClock`` and ``lifetimeOnDateHeaderClock``.
public struct ClockSkewReport: Sendable, Hashable, CustomStringConvertible {
    /// What the engine found and did; open-ended, so a `switch` over it needs a `default`.
    public struct Finding: Hashable, Sendable, CustomStringConvertible {
        /// The stable identifier, such as `dateHeaderIgnored`.
        public let rawValue: String

        private init(_ rawValue: String) {
            self.rawValue = rawValue
        }

        /// The offset the engine applies changed: it runs on the backend's `Date` clock from now on
        /// (``serverClockOffset`` set), or on this host's clock again (`nil`).
        public static let offsetApplied = Finding("offsetApplied")
        /// The backend's `Date` clock would make the credential implausible (expired on arrival, or living past
        /// 24 hours) while this host's clock finds it plausible: the credential was installed on this host's clock
        /// and the offset is kept out until a response agrees again. Counted in
        /// ``SessionMetrics/clockOffsetsKeptOut``.
        public static let dateHeaderIgnored = Finding("dateHeaderIgnored")
        /// No clock makes the credential plausible: it was refused as a misconfiguration and the engine retries on
        /// the slow schedule. Counted in ``SessionMetrics/implausibleCredentials`` and logged at error.
        public static let noClockPlausible = Finding("noClockPlausible")
        /// A credential the host handed over was refused for its expiry or lifetime on the applied clock.
        public static let credentialRefused = Finding("credentialRefused")

        /// The raw value.
        public var description: String { rawValue }
    }

    /// The account the credential was for.
    public let account: AccountID
    /// The local wall-clock time, in Unix seconds, when the credential arrived.
    public let localTime: Int64
    /// The credential's expiry, in Unix seconds; 0 when the report is about an offset change before any credential.
    public let expiresAt: Int64
    /// The backend's clock minus this process's that the engine applies, when it runs on the backend's time (the
    /// measured offset exceeded ``SessionConfiguration/clockSkewTolerance``); `nil` when it runs on the local clock.
    public let serverClockOffset: Duration?
    /// The backend's `Date` clock minus this host's, as measured with the response (or applied since an earlier
    /// one); `nil` when none is known.
    public let dateHeaderOffset: Duration?
    /// What the engine found and did; `nil` only in reports made without one.
    public let finding: Finding?

    /// How long the credential lives on this host's clock: negative when it had already expired on arrival.
    public var lifetimeOnHostClock: Duration { .seconds(expiresAt - localTime) }

    /// How long the credential lives on the backend's `Date` clock; `nil` when no `Date` offset is known.
    public var lifetimeOnDateHeaderClock: Duration? {
        dateHeaderOffset.map { .seconds(expiresAt - localTime) - $0 }
    }

    /// Creates a clock-skew report.
    ///
    /// - Parameters:
    ///   - account: The account the credential was for.
    ///   - localTime: The local time in Unix seconds.
    ///   - expiresAt: The credential's expiry in Unix seconds.
    ///   - serverClockOffset: The backend clock offset the engine applies, if any.
    ///   - dateHeaderOffset: The backend's `Date` clock minus this host's, if known.
    ///   - finding: What the engine found and did.
    public init(
        account: AccountID,
        localTime: Int64,
        expiresAt: Int64,
        serverClockOffset: Duration? = nil,
        dateHeaderOffset: Duration? = nil,
        finding: Finding? = nil
    ) {
        self.account = account
        self.localTime = localTime
        self.expiresAt = expiresAt
        self.serverClockOffset = serverClockOffset
        self.dateHeaderOffset = dateHeaderOffset
        self.finding = finding
    }

    /// `account, finding, localTime, expiresAt`, the lifetimes on each clock and the applied offset.
    public var description: String {
        var text = "\(account), \(finding.map { "\($0), " } ?? "")localTime: \(localTime), expiresAt: \(expiresAt)"
        if expiresAt != 0 { text += ", lifetime on this host's clock: \(lifetimeOnHostClock.readable)" }
        if let offset = dateHeaderOffset {
            text += ", Date header offset: \(offset.readable)"
            if expiresAt != 0, let lifetime = lifetimeOnDateHeaderClock {
                text += ", lifetime on the Date header's clock: \(lifetime.readable)"
            }
        }
        return text + (serverClockOffset.map { ", server clock offset: \($0.readable)" } ?? "")
    }
}
