/// A snapshot of what an engine has done and holds, read with ``SessionEngine/metrics`` without an actor hop.
///
/// Counters grow over the engine's life and never reset; a host exports them as monotonic counters and the rest as
/// gauges. The counters an identified engine moves in the normal course (fetches started and succeeded, credentials
/// installed, renewals, account changes, events published) stop at 4,294,967,295 (`UInt32.max`), an event a second
/// for more than a century, so that each account of a pool keeps them in four bytes. Every counter is fed by the same step that publishes the matching event, so the metrics and the events
/// always agree. Nothing here holds a secret or a signature.
public struct SessionMetrics: Sendable, Hashable, CustomStringConvertible {
    /// Fetches the engine started.
    public var fetchesStarted: Int
    /// Fetches whose credential was validated and installed.
    public var fetchesSucceeded: Int
    /// Credentials the host handed over (``SessionEngine/setIdentityCredential(_:for:)``,
    /// ``SessionEngine/signIn(_:with:)``) that were validated and installed.
    public var credentialsPushed: Int
    /// Failed fetches after which the engine waited as long as the backend asked (`Retry-After`, see
    /// ``FetchFailure/serverRetryAfter``).
    public var serverDirectedDelays: Int
    /// The backend's clock minus this process's, as the fetcher last measured it; `nil` until one reports it.
    public var clockOffset: Duration?
    /// The backend clock offset the engine applies to expiry and renewal: `nil` while it runs on the local clock
    /// (no offset beyond ``SessionConfiguration/clockSkewTolerance`` was reported, or the last one was kept out).
    public var appliedClockOffset: Duration?
    /// Fetched credentials installed on this host's clock because the backend's `Date` clock would have made them
    /// implausible (``ClockSkewReport/Finding/dateHeaderIgnored``): the `Date` header and the signer disagree.
    public var clockOffsetsKeptOut: Int
    /// Fetched credentials no clock made plausible (``ClockSkewReport/Finding/noClockPlausible``), refused and
    /// retried on the slow schedule: the signer's clock disagrees with this host's and the backend's `Date`.
    public var implausibleCredentials: Int
    /// Fetches that failed or whose credential was refused, by error code.
    public var fetchesFailed: [SessionError.Code: Int]
    /// Failed fetches of class ``SessionError/FailureClass/misconfiguration``: the failures someone must fix
    /// (``SessionError/Code/backendMisconfigured``, ``SessionError/Code/identityMismatch``,
    /// ``SessionError/Code/invalidCredential``, …), counted apart from outages so a host can page on this counter
    /// alone.
    public var misconfigurations: Int
    /// Credentials installed, the first of each account session included.
    public var credentialsInstalled: Int
    /// Credentials installed that replaced an earlier credential of the same account session.
    public var renewals: Int
    /// Reports of a rejected credential that the engine acted on (reports of older credentials are ignored).
    public var rejections: Int
    /// Times an installed credential expired before a renewal replaced it.
    public var expiries: Int
    /// Account changes begun: sign-ins, switches and sign-outs, including those after a backend ended a session.
    public var accountChanges: Int
    /// Pieces of scoped work the engine cancelled because their account was left.
    public var scopedWorkCancelled: Int
    /// Events published.
    public var eventsPublished: Int
    /// Events dropped because a subscriber fell behind, over all subscribers.
    public var eventsDropped: Int
    /// How long recent successful fetches took, from start to the engine's handling of the result: the last
    /// ``LatencySummary/window`` fetches whose credential was installed.
    ///
    /// Failures are kept apart in ``failedFetchLatency``, so a backend that refuses at once does not make the
    /// successful fetches look fast, nor a timeout make them look slow.
    public var fetchLatency: LatencySummary
    /// How long recent failed fetches took (failures and refused credentials alike), over the last
    /// ``LatencySummary/window`` of them.
    public var failedFetchLatency: LatencySummary
    /// How long the usable credential has left by the engine's clock; `nil` when none is usable.
    public var credentialRemainingLifetime: Duration?
    /// Engine tasks running: fetches, account-change preparations, sign-in deadlines, timers firing and scoped work. A
    /// timer waiting for its deadline is no task: it waits in a deadline queue shared with other engines.
    public var liveTasks: Int
    /// Live event subscribers.
    public var subscribers: Int
    /// Callers waiting for a fetch outcome.
    public var waiters: Int
    /// Scoped work running.
    public var scopedWork: Int
    /// What the engine's coordination with other replicas has done; `nil` for an engine without a coordinator, and
    /// for an account of a pool (the pool's ``SessionPoolMetrics/fleet`` counts for all of them).
    public var fleet: FleetMetrics?

    /// The failed fetches over all error codes.
    public var fetchesFailedTotal: Int { fetchesFailed.values.reduce(0, +) }

    /// The fetches the engine abandoned at their deadline (``SessionConfiguration/fetchTimeout``) because the fetcher
    /// had not answered: each a fetcher that outlived its deadline, logged once at warning.
    public var fetchesTimedOut: Int { fetchesFailed[.fetchTimedOut] ?? 0 }

    /// Creates a snapshot; engines make them, tests compare them.
    ///
    /// - Parameters:
    ///   - fetchesStarted: Fetches started.
    ///   - fetchesSucceeded: Fetches whose credential was installed.
    ///   - credentialsPushed: Credentials the host handed over that were installed.
    ///   - serverDirectedDelays: Failures after which the engine waited as the backend asked.
    ///   - clockOffset: The backend clock offset last measured.
    ///   - appliedClockOffset: The backend clock offset the engine applies.
    ///   - clockOffsetsKeptOut: Credentials installed on this host's clock against the `Date` header's.
    ///   - implausibleCredentials: Credentials no clock made plausible.
    ///   - fetchesFailed: Failed fetches by code.
    ///   - misconfigurations: Failed fetches of class misconfiguration.
    ///   - credentialsInstalled: Credentials installed.
    ///   - renewals: Credentials that replaced one of the same account session.
    ///   - rejections: Rejection reports acted on.
    ///   - expiries: Credentials that expired before renewal.
    ///   - accountChanges: Account changes begun.
    ///   - scopedWorkCancelled: Scoped work cancelled.
    ///   - eventsPublished: Events published.
    ///   - eventsDropped: Events dropped.
    ///   - fetchLatency: Recent durations of successful fetches.
    ///   - failedFetchLatency: Recent durations of failed fetches.
    ///   - credentialRemainingLifetime: The usable credential's remaining lifetime.
    ///   - liveTasks: Engine tasks running.
    ///   - subscribers: Live subscribers.
    ///   - waiters: Waiting callers.
    ///   - scopedWork: Scoped work running.
    public init(
        fetchesStarted: Int = 0,
        fetchesSucceeded: Int = 0,
        credentialsPushed: Int = 0,
        serverDirectedDelays: Int = 0,
        clockOffset: Duration? = nil,
        appliedClockOffset: Duration? = nil,
        clockOffsetsKeptOut: Int = 0,
        implausibleCredentials: Int = 0,
        fetchesFailed: [SessionError.Code: Int] = [:],
        misconfigurations: Int = 0,
        credentialsInstalled: Int = 0,
        renewals: Int = 0,
        rejections: Int = 0,
        expiries: Int = 0,
        accountChanges: Int = 0,
        scopedWorkCancelled: Int = 0,
        eventsPublished: Int = 0,
        eventsDropped: Int = 0,
        fetchLatency: LatencySummary = LatencySummary(),
        failedFetchLatency: LatencySummary = LatencySummary(),
        credentialRemainingLifetime: Duration? = nil,
        liveTasks: Int = 0,
        subscribers: Int = 0,
        waiters: Int = 0,
        scopedWork: Int = 0
    ) {
        self.fetchesStarted = fetchesStarted
        self.fetchesSucceeded = fetchesSucceeded
        self.credentialsPushed = credentialsPushed
        self.serverDirectedDelays = serverDirectedDelays
        self.clockOffset = clockOffset
        self.appliedClockOffset = appliedClockOffset
        self.clockOffsetsKeptOut = clockOffsetsKeptOut
        self.implausibleCredentials = implausibleCredentials
        self.fetchesFailed = fetchesFailed
        self.misconfigurations = misconfigurations
        self.credentialsInstalled = credentialsInstalled
        self.renewals = renewals
        self.rejections = rejections
        self.expiries = expiries
        self.accountChanges = accountChanges
        self.scopedWorkCancelled = scopedWorkCancelled
        self.eventsPublished = eventsPublished
        self.eventsDropped = eventsDropped
        self.fetchLatency = fetchLatency
        self.failedFetchLatency = failedFetchLatency
        self.credentialRemainingLifetime = credentialRemainingLifetime
        self.liveTasks = liveTasks
        self.subscribers = subscribers
        self.waiters = waiters
        self.scopedWork = scopedWork
    }

    /// The counters and gauges on one line, failures sorted by code.
    public var description: String {
        let failed = fetchesFailed.sorted { $0.key.rawValue < $1.key.rawValue }
            .map { "\($0.key)=\($0.value)" }.joined(separator: ",")
        return "fetches started=\(fetchesStarted) succeeded=\(fetchesSucceeded) failed=[\(failed)] "
            + "misconfigurations=\(misconfigurations) pushed=\(credentialsPushed) serverDelays=\(serverDirectedDelays) "
            + "clockOffset=\(clockOffset?.readable ?? "none") "
            + "appliedClockOffset=\(appliedClockOffset?.readable ?? "none") "
            + "offsetsKeptOut=\(clockOffsetsKeptOut) implausible=\(implausibleCredentials) "
            + "installed=\(credentialsInstalled) renewals=\(renewals) rejections=\(rejections) expiries=\(expiries) "
            + "changes=\(accountChanges) workCancelled=\(scopedWorkCancelled) events=\(eventsPublished) "
            + "dropped=\(eventsDropped) latency=[\(fetchLatency)] failedLatency=[\(failedFetchLatency)] "
            + "remaining=\(credentialRemainingLifetime?.readable ?? "none") tasks=\(liveTasks) "
            + "subscribers=\(subscribers) waiters=\(waiters) work=\(scopedWork)" + (fleet.map { " \($0)" } ?? "")
    }
}

/// Percentiles of recent durations.
///
/// The engine keeps the durations of its last ``window`` fetches; percentiles use the nearest-rank method.
public struct LatencySummary: Sendable, Hashable, CustomStringConvertible {
    /// How many recent durations the summary covers at most.
    public static let window = 1024

    /// How many durations the summary covers.
    public var count: Int
    /// The median.
    public var p50: Duration
    /// The 90th percentile.
    public var p90: Duration
    /// The 99th percentile.
    public var p99: Duration
    /// The longest.
    public var max: Duration

    /// Creates a summary.
    ///
    /// - Parameters:
    ///   - count: How many durations it covers.
    ///   - p50: The median.
    ///   - p90: The 90th percentile.
    ///   - p99: The 99th percentile.
    ///   - max: The longest.
    public init(
        count: Int = 0, p50: Duration = .zero, p90: Duration = .zero, p99: Duration = .zero, max: Duration = .zero
    ) {
        self.count = count
        self.p50 = p50
        self.p90 = p90
        self.p99 = p99
        self.max = max
    }

    /// Summarises durations with the nearest-rank method.
    ///
    /// - Parameter durations: The durations, in any order.
    public init(of durations: [Duration]) {
        let sorted = durations.sorted()
        func rank(_ percent: Int) -> Duration {
            guard !sorted.isEmpty else { return .zero }
            let index = (percent * sorted.count + 99) / 100 - 1
            return sorted[Swift.max(0, Swift.min(sorted.count - 1, index))]
        }
        self.init(count: sorted.count, p50: rank(50), p90: rank(90), p99: rank(99), max: sorted.last ?? .zero)
    }

    /// `n=count p50 p90 p99 max`.
    public var description: String {
        "n=\(count) p50=\(p50.readable) p90=\(p90.readable) p99=\(p99.readable) max=\(max.readable)"
    }
}
