import Foundation

/// How the engine renews, retries and buffers.
///
/// The defaults suit a long-running daemon with 15-minute credentials: renew at about two thirds of the lifetime
/// with ±25 % jitter, retry transient failures from 1 s doubling up to 5 min with full jitter, and never start two
/// fetches for an account within 5 s of each other.
public struct SessionConfiguration: Sendable {
    /// When a credential is renewed.
    public var renewal: RenewalPolicy
    /// How transient failures are retried.
    public var retry: RetryPolicy
    /// How failures of class ``SessionError/FailureClass/misconfiguration`` are retried: slower than an outage,
    /// since only someone changing the backend, the network path or the host's setup can fix them, and a fleet
    /// retrying every few seconds for ever helps nobody.
    ///
    /// The wait after such a failure is drawn uniformly from the upper half of the policy's ceiling (`ceiling / 2
    /// ..< ceiling`, above what the minimum interval still requires), so it is never short. The default, from 2 min
    /// doubling up to 15 min, retries after 1 to 2 minutes first and every 7.5 to 15 minutes once the ceiling is
    /// reached, so a fixed backend is noticed within a quarter of an hour.
    public var misconfigurationRetry: RetryPolicy
    /// The least time between the starts of two fetches in one account session, whatever the fetcher does.
    ///
    /// This makes refresh storms impossible: not even a fetcher that returns already-expired credentials (clock
    /// skew) can make the engine fetch more often. The first fetch after an account change is not delayed. A
    /// negative interval becomes zero.
    public var minimumFetchInterval: Duration {
        get { minimumFetchIntervalValue }
        set { minimumFetchIntervalValue = max(.zero, newValue) }
    }
    private var minimumFetchIntervalValue: Duration = .seconds(5)
    /// How far a fetched credential's lifetime may exceed 24 hours before it is refused, to absorb small clock
    /// differences between the backend and this process.
    ///
    /// It is also the threshold for the backend's clock offset: once a fetcher reports an offset larger than this
    /// (see ``FetchedCredential/serverClockOffset``), the engine decides expiry and schedules renewals on the
    /// backend's time instead of the local wall clock. A negative tolerance becomes zero.
    public var clockSkewTolerance: Duration {
        get { clockSkewToleranceValue }
        set { clockSkewToleranceValue = max(.zero, newValue) }
    }
    private var clockSkewToleranceValue: Duration = .seconds(60)
    /// The longest delay a backend's `Retry-After` can impose before the next fetch, whatever it asks for.
    ///
    /// It is independent of ``RetryPolicy/cap``: a backend asking for 120 s gets 120 s even when the backoff cap is
    /// 30 s. A longer request is shortened to this maximum. The default is 10 minutes.
    public var maximumRetryAfter: Duration {
        get { maximumRetryAfterValue }
        set { maximumRetryAfterValue = max(.zero, newValue) }
    }
    private var maximumRetryAfterValue: Duration = .seconds(600)
    /// How many undelivered events a subscriber may hold before the oldest are dropped (see ``SessionEvents``); at
    /// least 1.
    public var eventBufferLimit: Int {
        get { eventBufferLimitValue }
        set { eventBufferLimitValue = max(1, newValue) }
    }
    private var eventBufferLimitValue = 1024
    /// The seed of the jitter's random numbers; `nil` seeds from the system's random source.
    ///
    /// Tests set it to make renewal times and backoff delays reproducible. Under a fleet's coordinator a renewal's
    /// jitter is drawn from the credential instead (``RenewalPolicy``).
    public var randomSeed: UInt64?
    /// Receives the engine's log records; `nil` logs nothing.
    ///
    /// Records never hold a secret, a signature or a property value.
    public var log: (@Sendable (SessionLogRecord) -> Void)?
    /// The task executor the engine's own tasks (fetches, timers, account changes) and its scoped work prefer;
    /// `nil`, the default, runs them on the global concurrent executor.
    ///
    /// A host that keeps its work on an executor of its own (an event loop, for example) names it here, and the
    /// engine's tasks then run there as well, hopping onto the engine's actor and back on that executor's threads.
    /// The package's schedule explorer names its own executor, so that every hop of every engine task is a step it
    /// schedules. The preference reaches only the engine's tasks: a caller's own task keeps its own.
    public var taskExecutor: (any TaskExecutor)? = nil
    /// How long the engine waits for the fetcher to answer one fetch before it abandons the fetch; 30 seconds by
    /// default.
    ///
    /// Past it the engine cancels the fetcher's task, counts a transient failure with code
    /// ``SessionError/Code/fetchTimedOut`` (an outage), logs it once at warning, frees the fetch's place in a
    /// ``SessionPool``'s budget and retries with backoff, whether or not the fetcher has returned: a fetcher that
    /// ignores cancellation can hold neither the account nor the pool. Its late answer is dropped. The deadline runs
    /// on the engine's clock from the moment the fetch leaves (after any wait for a pool's budget).
    ///
    /// Keep it well under the renewal lead (``RenewalPolicy/minimumLead`` and the share of the lifetime left at
    /// renewal) and above the fetcher's own timeout: ``HTTPCredentialFetcher``'s, 10 seconds by default, stays the
    /// tighter one and reports the more precise failure. A value that is not positive becomes one second.
    public var fetchTimeout: Duration {
        get { fetchTimeoutValue }
        set { fetchTimeoutValue = newValue > .zero ? newValue : .seconds(1) }
    }
    private var fetchTimeoutValue: Duration = .seconds(30)

    /// Creates a configuration.
    ///
    /// - Parameters:
    ///   - renewal: When a credential is renewed.
    ///   - retry: How transient failures are retried.
    ///   - misconfigurationRetry: How misconfigurations are retried.
    ///   - minimumFetchInterval: The least time between two fetch starts in one account session.
    ///   - clockSkewTolerance: How far past 24 hours a lifetime may reach, and the backend clock offset beyond
    ///     which the engine runs on the backend's time.
    ///   - maximumRetryAfter: The longest delay a backend's `Retry-After` can impose.
    ///   - eventBufferLimit: How many undelivered events a subscriber may hold; at least 1.
    ///   - randomSeed: The jitter's seed; `nil` for a random one.
    ///   - log: Receives log records.
    public init(
        renewal: RenewalPolicy = RenewalPolicy(),
        retry: RetryPolicy = RetryPolicy(),
        misconfigurationRetry: RetryPolicy = RetryPolicy(initial: .seconds(120), multiplier: 2, cap: .seconds(900)),
        minimumFetchInterval: Duration = .seconds(5),
        clockSkewTolerance: Duration = .seconds(60),
        maximumRetryAfter: Duration = .seconds(600),
        eventBufferLimit: Int = 1024,
        randomSeed: UInt64? = nil,
        log: (@Sendable (SessionLogRecord) -> Void)? = nil
    ) {
        self.renewal = renewal
        self.retry = retry
        self.misconfigurationRetry = misconfigurationRetry
        self.minimumFetchInterval = minimumFetchInterval
        self.clockSkewTolerance = clockSkewTolerance
        self.maximumRetryAfter = maximumRetryAfter
        self.eventBufferLimit = eventBufferLimit
        self.randomSeed = randomSeed
        self.log = log
    }
}

/// When the engine renews a credential ahead of its expiry.
///
/// A credential installed with lifetime `L` (its `expiresAt` minus the local time at install) is renewed after
/// `L × fraction ± L × jitter`, drawn uniformly, so a fleet of processes that signed in together spreads its renewals
/// out instead of renewing in lockstep. The time is clamped to leave at least ``minimumLead`` before expiry.
///
/// Under a fleet's coordinator (`FleetCoordination`) the draw comes from the credential itself (its user and expiry,
/// never its signature): different credentials draw as independently as random numbers would, and the replicas that
/// hold the same credential renew it at the same moment, which lets the coordinator serve them all with one fetch.
/// Without one, each process draws its own, so replicas of one user renew apart.
///
/// The default, `2/3 ± 1/4` of the lifetime, spreads even the first renewal wave of a fleet that signed in within a
/// minute over half a lifetime, so the backend's peak stays under twice its mean from that wave on (the uniform
/// draw's peak density is `fraction / (2 × jitter)` = 1.33 times the mean), while the latest renewal still leaves a
/// twelfth of the lifetime (75 s of 15 minutes) for retries. The mean renewal point, and so the mean load, does not
/// depend on the jitter. See BENCHMARKS.md, "fleet".
///
/// Each value is kept within its bounds however it is set, as when the policy is made, and in any order: a bound that
/// depends on another value (the jitter's on the share) applies when the value is read, and two policies are equal
/// when they read alike.
public struct RenewalPolicy: Sendable, Hashable {
    /// The share of the lifetime after which renewal starts, in `0...1` (a value that is not finite becomes 2/3).
    public var fraction: Double {
        get { fractionValue }
        set { fractionValue = newValue.isFinite ? min(max(newValue, 0), 1) : 2.0 / 3.0 }
    }
    private var fractionValue = 2.0 / 3.0
    /// The half-width of the uniform jitter, as a share of the lifetime, in `0...fraction`: a wider one set reads as
    /// ``fraction`` (a value that is not finite becomes 0).
    public var jitter: Double {
        get { min(jitterValue, fraction) }
        set { jitterValue = newValue.isFinite ? min(max(newValue, 0), 1) : 0 }
    }
    private var jitterValue = 0.25
    /// The least time renewal leaves before expiry, so a slow fetch still lands in time; not negative.
    public var minimumLead: Duration {
        get { minimumLeadValue }
        set { minimumLeadValue = max(.zero, newValue) }
    }
    private var minimumLeadValue: Duration = .seconds(10)

    /// Creates a renewal policy.
    ///
    /// - Parameters:
    ///   - fraction: The share of the lifetime after which to renew; clamped to `0...1`.
    ///   - jitter: The jitter's half-width as a share of the lifetime; clamped to `0...fraction`.
    ///   - minimumLead: The least time to leave before expiry.
    public init(fraction: Double = 2.0 / 3.0, jitter: Double = 0.25, minimumLead: Duration = .seconds(10)) {
        self.fraction = fraction
        self.jitter = jitter
        self.minimumLead = minimumLead
    }

    /// Whether the two policies renew alike: the same share, jitter and lead as they read.
    public static func == (a: RenewalPolicy, b: RenewalPolicy) -> Bool {
        (a.fraction, a.jitter, a.minimumLead) == (b.fraction, b.jitter, b.minimumLead)
    }

    /// Hashes the share, the jitter and the lead as they read.
    public func hash(into hasher: inout Hasher) {
        hasher.combine(fraction)
        hasher.combine(jitter)
        hasher.combine(minimumLead)
    }
}

/// How the engine retries a transient fetch failure: exponential backoff with full jitter and a cap.
///
/// After the `n`th consecutive failure the engine waits what ``SessionConfiguration/minimumFetchInterval`` still
/// requires since the failed fetch started, plus a uniformly random time in `0 ..< min(cap, initial × multiplier^(n-1))`.
/// The jitter is added above that floor rather than swallowed by it, so processes that failed together (a shared
/// outage) do not retry together even while the floor is longer than the ceiling.
///
/// Each value is kept within its bounds however it is set, as when the policy is made, and in any order: a bound that
/// depends on another value (the cap's on the first ceiling) applies when the value is read, and two policies are equal
/// when they read alike.
public struct RetryPolicy: Sendable, Hashable {
    /// The backoff ceiling after the first failure; at least 1 ms.
    public var initial: Duration {
        get { initialValue }
        set { initialValue = max(newValue, .milliseconds(1)) }
    }
    private var initialValue: Duration = .seconds(1)
    /// The growth factor per consecutive failure; at least 1 (a value that is not finite becomes 2).
    public var multiplier: Double {
        get { multiplierValue }
        set { multiplierValue = newValue.isFinite ? max(newValue, 1) : 2 }
    }
    private var multiplierValue: Double = 2
    /// The largest backoff ceiling; a smaller one than ``initial`` reads as ``initial``.
    public var cap: Duration {
        get { max(capValue, initialValue) }
        set { capValue = newValue }
    }
    private var capValue: Duration = .seconds(300)

    /// Creates a retry policy.
    ///
    /// - Parameters:
    ///   - initial: The backoff ceiling after the first failure.
    ///   - multiplier: The growth factor per failure; at least 1.
    ///   - cap: The largest backoff ceiling.
    public init(initial: Duration = .seconds(1), multiplier: Double = 2, cap: Duration = .seconds(300)) {
        self.initial = initial
        self.multiplier = multiplier
        self.cap = cap
    }

    /// Whether the two policies back off alike: the same first ceiling, multiplier and cap as they read.
    public static func == (a: RetryPolicy, b: RetryPolicy) -> Bool {
        (a.initial, a.multiplier, a.cap) == (b.initial, b.multiplier, b.cap)
    }

    /// Hashes the first ceiling, the multiplier and the cap as they read.
    public func hash(into hasher: inout Hasher) {
        hasher.combine(initial)
        hasher.combine(multiplier)
        hasher.combine(cap)
    }

    /// The backoff ceiling after `failures` consecutive failures.
    ///
    /// - Parameter failures: The number of consecutive failures, from 1.
    /// - Returns: `min(cap, initial × multiplier^(failures-1))`.
    public func ceiling(afterFailures failures: Int) -> Duration {
        let exponent = Double(max(0, failures - 1))
        let seconds = initial.timeInterval * Foundation.pow(multiplier, min(exponent, 64))
        return seconds >= cap.timeInterval ? cap : .seconds(seconds)
    }
}

/// One log record of the engine. It never holds a secret, a signature or a property value.
///
/// The engine logs as a library should, leaving the choice of what to keep to the host:
///
/// | Level | Records |
/// |---|---|
/// | `debug` | a fetch started, a credential installed, a state change |
/// | `info` | an account change began, a shutdown (graceful or at once), a failed fetch the engine retries, a backend session that ended, a rejected credential, a clock offset back to none, a sign-in or switch past its deadline |
/// | `warning` | a fetcher that outlived its deadline (`fetchTimeout`; once per fetch), clocks that disagree beyond `clockSkewTolerance` (an offset applied or a `Date` offset kept out), a pool's budget that cannot keep up with the renewals it owes |
/// | `error` | where the host must act: every failure of class misconfiguration (another user's credential, a refused endpoint, an untrusted certificate, a redirect, a missing `no-store`, a compressed body, a credential no clock makes plausible), or a session ended because its credentials can never be used |
///
/// Messages are for people and may change in any release; programs watch ``SessionEvent`` and ``SessionMetrics``.
public struct SessionLogRecord: Sendable, Hashable, CustomStringConvertible {
    /// How much a record matters.
    public enum Level: String, Sendable, Hashable, Comparable {
        /// Routine detail: fetches, renewals, state changes.
        case debug
        /// Something a long-running process expects now and then, such as a failed fetch that will be retried.
        case info
        /// Something that may need a look but that the engine works around: a fetcher past its deadline, clocks
        /// that disagree, a pool's budget behind its renewals.
        case warning
        /// Something the engine cannot fix by itself: the host or its backend must act.
        case error

        private var rank: Int {
            switch self {
            case .debug: 0
            case .info: 1
            case .warning: 2
            case .error: 3
            }
        }

        /// Orders levels from ``debug`` to ``error``.
        public static func < (lhs: Level, rhs: Level) -> Bool { lhs.rank < rhs.rank }
    }

    /// The record's level.
    public let level: Level
    /// What happened.
    public let message: String
    /// Structured facts, such as the account and the epoch.
    public let metadata: [String: String]

    /// Creates a record.
    ///
    /// - Parameters:
    ///   - level: The record's level.
    ///   - message: What happened, without secrets.
    ///   - metadata: Structured facts, without secrets.
    public init(level: Level, message: String, metadata: [String: String] = [:]) {
        self.level = level
        self.message = message
        self.metadata = metadata
    }

    /// `level: message key=value …`.
    public var description: String {
        let facts = metadata.sorted { $0.key < $1.key }.map { "\($0.key)=\($0.value)" }.joined(separator: " ")
        return facts.isEmpty ? "\(level.rawValue): \(message)" : "\(level.rawValue): \(message) \(facts)"
    }
}
