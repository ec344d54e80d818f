import Synchronization

/// The engine's counters, fed by the step that publishes each event and read without an actor hop.
final class MetricsRecorder: Sendable {
    /// The counters ``SessionMetrics`` reports, and nothing it fills in when read: an engine keeps one for its whole
    /// life (a pool one per account), so the latency summaries and gauges a snapshot computes are not stored.
    fileprivate struct Counts {
        var fetchesStarted = 0
        var fetchesSucceeded = 0
        var credentialsPushed = 0
        var serverDirectedDelays = 0
        var clockOffset: Duration?
        var appliedClockOffset: Duration?
        var clockOffsetsKeptOut = 0
        var implausibleCredentials = 0
        var fetchesFailed: [SessionError.Code: Int] = [:]
        var misconfigurations = 0
        var credentialsInstalled = 0
        var renewals = 0
        var rejections = 0
        var expiries = 0
        var accountChanges = 0
        var scopedWorkCancelled = 0
        var eventsPublished = 0

        var metrics: SessionMetrics {
            SessionMetrics(
                fetchesStarted: fetchesStarted,
                fetchesSucceeded: fetchesSucceeded,
                credentialsPushed: credentialsPushed,
                serverDirectedDelays: serverDirectedDelays,
                clockOffset: clockOffset,
                appliedClockOffset: appliedClockOffset,
                clockOffsetsKeptOut: clockOffsetsKeptOut,
                implausibleCredentials: implausibleCredentials,
                fetchesFailed: fetchesFailed,
                misconfigurations: misconfigurations,
                credentialsInstalled: credentialsInstalled,
                renewals: renewals,
                rejections: rejections,
                expiries: expiries,
                accountChanges: accountChanges,
                scopedWorkCancelled: scopedWorkCancelled,
                eventsPublished: eventsPublished
            )
        }
    }

    fileprivate struct State {
        var metrics = Counts()
        /// The epoch of the last account change counted.
        var changeEpoch: UInt64 = 0
        /// Recent durations of successful fetches, and of failed ones.
        var latencies: LatencyRing
        var failedLatencies: LatencyRing
        /// The epoch whose account session last installed a credential.
        var installedEpoch: UInt64?
        /// Whether the last published state is `expired`, to count expiries once each.
        var expired = false
        var liveTasks = 0
    }

    private let state: Mutex<State>

    /// Creates a recorder whose latency summaries cover at most `latencyWindow` recent fetches each.
    init(latencyWindow: Int = LatencySummary.window) {
        state = Mutex(
            State(
                latencies: LatencyRing(capacity: latencyWindow), failedLatencies: LatencyRing(capacity: latencyWindow)))
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
                    state.metrics.expiries += 1
                }
                state.expired = new.isExpired
            case .renewed(let identity, let fetch):
                if fetch.pushed {
                    state.metrics.credentialsPushed += 1
                } else {
                    state.metrics.fetchesSucceeded += 1
                    state.latencies.record(fetch.duration)
                }
                state.metrics.credentialsInstalled += 1
                if state.installedEpoch == identity.epoch { state.metrics.renewals += 1 }
                state.installedEpoch = identity.epoch
                if let offset = fetch.serverClockOffset { state.metrics.clockOffset = offset }
            case .fetchFailed(let failure):
                state.metrics.fetchesFailed[failure.error.code, default: 0] += 1
                if failure.serverRetryAfter != nil { state.metrics.serverDirectedDelays += 1 }
                if failure.error.failureClass == .misconfiguration { state.metrics.misconfigurations += 1 }
                state.failedLatencies.record(failure.fetch.duration)
            case .clockSkewSuspected(let report):
                state.metrics.appliedClockOffset = report.serverClockOffset
                if report.finding == .dateHeaderIgnored { state.metrics.clockOffsetsKeptOut += 1 }
                if report.finding == .noClockPlausible { state.metrics.implausibleCredentials += 1 }
            case .credentialRejected:
                state.metrics.rejections += 1
            case .workCancelled(_, let count):
                state.metrics.scopedWorkCancelled += count
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
            metrics.failedFetchLatency = LatencySummary(of: state.failedLatencies.durations)
            metrics.liveTasks = state.liveTasks
            return metrics
        }
    }
}

/// The last `capacity` durations recorded (``LatencySummary/window`` for an engine of its own), each to the
/// microsecond and at most `UInt32.max` microseconds (about 71 minutes; a longer one is kept as that).
///
/// Four bytes a duration instead of sixteen: a pool's accounts keep two rings of sixteen each for as long as they are
/// signed in, and an engine of its own two of 1,024.
struct LatencyRing {
    let capacity: Int
    private var microseconds: [UInt32] = []
    private var next = 0

    init(capacity: Int) {
        self.capacity = max(1, capacity)
    }

    /// The durations kept, in no particular order.
    var durations: [Duration] { microseconds.map { .microseconds(Int64($0)) } }

    mutating func record(_ duration: Duration) {
        let value = Self.microseconds(duration)
        if microseconds.count < capacity {
            microseconds.append(value)
        } else {
            microseconds[next] = value
            next = (next + 1) % capacity
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
