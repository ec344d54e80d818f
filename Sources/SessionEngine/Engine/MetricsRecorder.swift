import Synchronization

/// The engine's counters, fed by the step that publishes each event and read without an actor hop.
///
/// A value the engine holds inline, not an object of its own, as its store is (``SessionStore``); its nested types
/// are not private for the same reason.
struct MetricsRecorder: ~Copyable, Sendable {
    /// The counters ``SessionMetrics`` reports, and nothing it fills in when read: an engine keeps one for its whole
    /// life (a pool one per account), so the latency summaries and gauges a snapshot computes are not stored.
    ///
    /// The counters every identified engine moves are kept inline, in four bytes each (``PackedCount``: they stop at
    /// `UInt32.max`, an event a second for a century); those that move only after a failure, a push, a rejection or
    /// a clock report are kept out of line (``Rare``), with the failed fetches' durations, so an engine that saw none
    /// of those, as most of a pool's accounts, holds a pointer for them instead of seventeen words.
    struct Counts {
        @PackedCount var fetchesStarted = 0
        @PackedCount var fetchesSucceeded = 0
        @PackedCount var credentialsInstalled = 0
        @PackedCount var renewals = 0
        @PackedCount var accountChanges = 0
        @PackedCount var eventsPublished = 0
        private var rareBox: OutOfLine<Rare>?

        /// The counters that move only after a failure, a push, a rejection or a clock report.
        struct Rare {
            var credentialsPushed = 0
            var serverDirectedDelays = 0
            var clockOffset: Duration?
            var appliedClockOffset: Duration?
            var clockOffsetsKeptOut = 0
            var implausibleCredentials = 0
            var fetchesFailed: [SessionError.Code: Int] = [:]
            var misconfigurations = 0
            var rejections = 0
            var expiries = 0
            var scopedWorkCancelled = 0
            /// Recent durations of failed fetches, made at the first.
            var failedLatencies: LatencyRing?
        }

        /// The out-of-line counters, all zero until one moves.
        var rare: Rare { rareBox?.value ?? Rare() }

        /// Changes the out-of-line counters, the one way they change: in one copy, taken out of their box first so
        /// that the failed fetches' ring and the failures' table are changed in place, not copied, and boxed again.
        mutating func updateRare(_ change: (inout Rare) -> Void) {
            var rare = self.rare
            rareBox = nil
            change(&rare)
            rareBox = OutOfLine(rare)
        }

        var metrics: SessionMetrics {
            let rare = self.rare
            return SessionMetrics(
                fetchesStarted: fetchesStarted,
                fetchesSucceeded: fetchesSucceeded,
                credentialsPushed: rare.credentialsPushed,
                serverDirectedDelays: rare.serverDirectedDelays,
                clockOffset: rare.clockOffset,
                appliedClockOffset: rare.appliedClockOffset,
                clockOffsetsKeptOut: rare.clockOffsetsKeptOut,
                implausibleCredentials: rare.implausibleCredentials,
                fetchesFailed: rare.fetchesFailed,
                misconfigurations: rare.misconfigurations,
                credentialsInstalled: credentialsInstalled,
                renewals: renewals,
                rejections: rare.rejections,
                expiries: rare.expiries,
                accountChanges: accountChanges,
                scopedWorkCancelled: rare.scopedWorkCancelled,
                eventsPublished: eventsPublished
            )
        }
    }

    struct State {
        var metrics = Counts()
        /// The epoch of the last account change counted.
        var changeEpoch: UInt64 = 0
        /// Recent durations of successful fetches (of failed ones: ``Counts/Rare/failedLatencies``, as many).
        var latencies: LatencyRing
        /// The epoch whose account session last installed a credential.
        var installedEpoch: UInt64?
        /// Whether the last published state is `expired`, to count expiries once each.
        var expired = false
        @PackedCount var liveTasks = 0
    }

    private let state: SanitizedMutex<State>

    /// Creates a recorder whose latency summaries cover at most `latencyWindow` recent fetches each.
    init(latencyWindow: Int = LatencySummary.window) {
        state = SanitizedMutex(State(latencies: LatencyRing(capacity: latencyWindow)))
    }

    /// A fetch started.
    func fetchStarted() {
        state.withLock { $0.metrics.fetchesStarted += 1 }
    }

    /// An engine task started or ended.
    func tasks(_ delta: Int) {
        state.withLock { $0.liveTasks += delta }
    }

    /// The number of engine tasks running.
    var liveTasks: Int { state.withLock { $0.liveTasks } }

    /// Counts what a published event reports.
    func record(_ event: SessionEvent) {
        state.withLock { state in
            state.metrics.eventsPublished += 1
            switch event.kind {
            case .stateChanged(let new):
                if case .switching = new, event.epoch != state.changeEpoch {
                    state.metrics.accountChanges += 1
                    state.changeEpoch = event.epoch
                }
                if case .expired(let expired) = new, expired.reason == .expired, !state.expired {
                    state.metrics.updateRare { $0.expiries += 1 }
                }
                state.expired = new.isExpired
            case .renewed(let identity, let fetch):
                if fetch.pushed {
                    state.metrics.updateRare { $0.credentialsPushed += 1 }
                } else {
                    state.metrics.fetchesSucceeded += 1
                    state.latencies.record(fetch.duration)
                }
                state.metrics.credentialsInstalled += 1
                if state.installedEpoch == identity.epoch { state.metrics.renewals += 1 }
                state.installedEpoch = identity.epoch
                if let offset = fetch.serverClockOffset { state.metrics.updateRare { $0.clockOffset = offset } }
            case .fetchFailed(let failure):
                let capacity = state.latencies.capacity
                state.metrics.updateRare { rare in
                    rare.fetchesFailed[failure.error.code, default: 0] += 1
                    if failure.serverRetryAfter != nil { rare.serverDirectedDelays += 1 }
                    if failure.error.failureClass == .misconfiguration { rare.misconfigurations += 1 }
                    rare.failedLatencies = rare.failedLatencies ?? LatencyRing(capacity: capacity)
                    rare.failedLatencies?.record(failure.fetch.duration)
                }
            case .clockSkewSuspected(let report):
                state.metrics.updateRare { rare in
                    rare.appliedClockOffset = report.serverClockOffset
                    if report.finding == .dateHeaderIgnored { rare.clockOffsetsKeptOut += 1 }
                    if report.finding == .noClockPlausible { rare.implausibleCredentials += 1 }
                }
            case .credentialRejected:
                state.metrics.updateRare { $0.rejections += 1 }
            case .workCancelled(_, let count):
                if count > 0 { state.metrics.updateRare { $0.scopedWorkCancelled += count } }
            case .eventsDropped:
                break
            }
        }
    }

    /// The counters, with the latency summary.
    var snapshot: SessionMetrics {
        state.withLock { state in
            var metrics = state.metrics.metrics
            metrics.fetchLatency = LatencySummary(of: state.latencies.durations)
            metrics.failedFetchLatency = LatencySummary(of: state.metrics.rare.failedLatencies?.durations ?? [])
            metrics.liveTasks = state.liveTasks
            return metrics
        }
    }
}

/// The last `capacity` durations recorded (``LatencySummary/window`` for an engine of its own), each to the
/// microsecond and at most `UInt32.max` microseconds (about 71 minutes; a longer one is kept as that).
///
/// Four bytes a duration instead of sixteen: a pool's accounts keep a ring of sixteen each for as long as they are
/// signed in, and a second one once a fetch has failed; an engine of its own two of 1,024.
struct LatencyRing {
    private var microseconds: [UInt32] = []
    /// Four bytes each, so that a ring is two words.
    private let limit: UInt32
    private var next: UInt32 = 0

    /// How many durations the ring keeps.
    var capacity: Int { Int(limit) }

    init(capacity: Int) {
        self.limit = UInt32(clamping: max(1, capacity))
    }

    /// The durations kept, in no particular order.
    var durations: [Duration] { microseconds.map { .microseconds(Int64($0)) } }

    mutating func record(_ duration: Duration) {
        let value = Self.microseconds(duration)
        if microseconds.count < capacity {
            microseconds.append(value)
        } else {
            microseconds[Int(next)] = value
            next = (next + 1) % limit
        }
    }

    /// `duration` in whole microseconds, rounded down and clamped to `0...UInt32.max`.
    static func microseconds(_ duration: Duration) -> UInt32 {
        let (seconds, attoseconds) = duration.components
        guard seconds >= 0 else { return 0 }
        guard seconds < Int64(UInt32.max) / 1_000_000 + 1 else { return .max }
        let total = seconds * 1_000_000 + attoseconds / 1_000_000_000_000
        return UInt32(clamping: total)
    }
}
