/// How a ``SessionPool`` renews its accounts, shares the backend among them and bounds how many it keeps.
public struct SessionPoolConfiguration: Sendable {
    /// The one budget toward the backend that every account's fetches share.
    ///
    /// A fetch starts only while fewer than ``maximumInFlight`` are in flight and the token bucket holds a start
    /// (``startsPerSecond`` refill it, up to ``burst``). So in any one second at most `burst + startsPerSecond`
    /// fetches start (a full bucket, then what refills during that second), and over any span of `T` seconds at most
    /// `burst + startsPerSecond × T`; the defaults allow 200 in one second and 100 a second after that. A fetch that
    /// must wait queues by urgency: a caller waiting or an identity that is not usable (a sign-in, an expired or
    /// rejected credential) before a proactive renewal, earlier deadlines first; a proactive renewal whose credential
    /// has expired meanwhile counts as needed. Each account's own minimum fetch interval and backoff still hold, and a
    /// fetch holds its place in flight at most ``SessionConfiguration/fetchTimeout``, whatever its fetcher does.
    ///
    /// A `429` or `503` with `Retry-After` pauses every account's fetches, not only the one that received it; when the
    /// pause ends, one fetch goes first as a probe, and the others follow at the budget's rate once the backend
    /// answers it.
    ///
    /// When ``outageThreshold`` fetches in a row, from at least ``outageAccounts`` different accounts, fail as an
    /// outage (``SessionError/FailureClass/outage``: the backend unreachable, timing out, or failing without a
    /// `Retry-After`), the pool stops sending its accounts' fetches to the backend and holds them in the queue,
    /// letting one through every ``outageProbeInterval`` as a probe, each probe of another account than the last
    /// failed one when another waits. The first fetch the backend answers (a credential, or a refusal that is not an
    /// outage) ends the outage, and the held fetches go in urgency order at the budget's rate: the bucket holds
    /// at most one start then, so the end of an outage is no burst. A held fetch is one the account's machine had already started
    /// after its own backoff, so holding only ever delays a fetch, never starts one sooner.
    ///
    /// Size the budget for the renewals it owes: `N` accounts with credentials of lifetime `L`, renewed at about two
    /// thirds of it (``RenewalPolicy``), need about `N / (2L/3)` fetches a second, and a backend answering in `d`
    /// seconds serves at most `maximumInFlight / d` a second. Keep ``startsPerSecond`` and `maximumInFlight / d` both
    /// at least twice that need, so the pool catches up after an outage: 10,000 accounts with 15-minute credentials
    /// need about 16.7 fetches a second, so with a backend answering in 0.5 s, `maximumInFlight` of 32 (64 a second)
    /// and the default rate leave room, while a backend answering in 5 s would need a `maximumInFlight` of at least
    /// 167.
    ///
    /// Every limit is kept within its bounds when it is set, not only when the budget is made: a value out of them
    /// is replaced as each property says, so no setting can stop the pool's fetches or crash the process.
    public struct Budget: Sendable, Hashable {
        /// At most this many fetches in flight across the pool; at least 1.
        public var maximumInFlight: Int {
            get { maximumInFlightValue }
            set { maximumInFlightValue = max(1, newValue) }
        }
        private var maximumInFlightValue = 32
        /// Fetch starts per second across the pool, on the pool's clock; a value that is not positive and finite
        /// becomes 1.
        public var startsPerSecond: Double {
            get { startsPerSecondValue }
            set { startsPerSecondValue = newValue.isFinite && newValue > 0 ? newValue : 1 }
        }
        private var startsPerSecondValue: Double = 100
        /// How many starts the bucket holds when it is full, so a quiet pool can start that many at once; at least 1.
        public var burst: Int {
            get { burstValue }
            set { burstValue = max(1, newValue) }
        }
        private var burstValue = 100
        /// How many fetches in a row, across the pool, must fail as an outage before the pool holds its fetches and
        /// probes; at least 1, or `nil` never to hold them.
        public var outageThreshold: Int? {
            get { outageThresholdValue }
            set { outageThresholdValue = newValue.map { max(1, $0) } }
        }
        private var outageThresholdValue: Int? = 8
        /// How long the pool waits, while it holds fetches for an outage, from one probe's failure to the next probe;
        /// at least 10 ms.
        public var outageProbeInterval: Duration {
            get { outageProbeIntervalValue }
            set { outageProbeIntervalValue = max(.milliseconds(10), newValue) }
        }
        private var outageProbeIntervalValue: Duration = .seconds(5)
        /// How many different accounts the ``outageThreshold`` failures in a row must come from before the pool
        /// holds its fetches; 3 by default, at most ``outageThreshold``, at least 1.
        ///
        /// One account whose backend session is broken fails every fetch, however healthy the backend: counted alone,
        /// it would put every other account on hold. A real outage fails every account's fetches, so the failures of
        /// three accounts in a row, with none answered between them, say the backend is down. A pool with fewer
        /// accounts fetching never holds; each account's own backoff bounds its load.
        public var outageAccounts: Int {
            get { outageAccountsValue }
            set { outageAccountsValue = max(1, newValue) }
        }
        private var outageAccountsValue = 3

        /// Creates a budget.
        ///
        /// - Parameters:
        ///   - maximumInFlight: At most this many fetches in flight (at least 1).
        ///   - startsPerSecond: Fetch starts per second (positive and finite, else 1).
        ///   - burst: Starts the full bucket holds; `nil` holds one second's worth (at least 1).
        ///   - outageThreshold: Fetches in a row failing as an outage before the pool holds its fetches (at least 1),
        ///     or `nil` for never.
        ///   - outageProbeInterval: The wait between probes during an outage (at least 10 ms).
        public init(
            maximumInFlight: Int = 32, startsPerSecond: Double = 100, burst: Int? = nil, outageThreshold: Int? = 8,
            outageProbeInterval: Duration = .seconds(5)
        ) {
            self.maximumInFlight = maximumInFlight
            self.startsPerSecond = startsPerSecond
            self.burst = burst ?? Int(min(self.startsPerSecond, Double(Int32.max)).rounded(.up))
            self.outageThreshold = outageThreshold
            self.outageProbeInterval = outageProbeInterval
        }
    }

    /// Each account's renewal, retry and buffering policies, as a ``SessionEngine`` takes them.
    public var session: SessionConfiguration
    /// The budget toward the backend.
    public var budget: Budget
    /// At most this many accounts (at least 1); signing in one more signs out the least recently used account with no
    /// work running, no caller waiting and no sign-in under way. `nil` keeps every account.
    ///
    /// Every sign-in and every call that names an account orders the accounts, and a read of
    /// ``SessionPool/identityHeaders(for:)`` counts as used after all of them; reads with no such call between them
    /// count as one moment, so among accounts last used by such reads the pool signs out any one.
    public var maximumAccounts: Int? {
        get { maximumAccountsValue }
        set { maximumAccountsValue = newValue.map { max(1, $0) } }
    }
    private var maximumAccountsValue: Int?
    /// An account not used for this long (no sign-in, read, renewal or work) is signed out once it has no work running
    /// and no caller waiting, and no sign-in of it is under way; at least one second. `nil` keeps accounts however
    /// long they are idle.
    public var idleTimeout: Duration? {
        get { idleTimeoutValue }
        set { idleTimeoutValue = newValue.map { max(.seconds(1), $0) } }
    }
    private var idleTimeoutValue: Duration?

    /// Creates a pool configuration.
    ///
    /// - Parameters:
    ///   - session: Each account's policies.
    ///   - budget: The budget toward the backend.
    ///   - maximumAccounts: The cap on accounts (at least 1), or `nil` for none.
    ///   - idleTimeout: How long an unused account is kept (at least one second), or `nil` for ever.
    public init(
        session: SessionConfiguration = SessionConfiguration(),
        budget: Budget = Budget(),
        maximumAccounts: Int? = nil,
        idleTimeout: Duration? = nil
    ) {
        self.session = session
        self.budget = budget
        self.maximumAccounts = maximumAccounts
        self.idleTimeout = idleTimeout
    }
}
