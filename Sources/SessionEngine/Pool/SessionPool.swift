import Foundation
import Synchronization

/// Keeps many accounts' verified identities alive at once in one process, with one budget toward the backend.
///
/// Each account gets every promise ``SessionEngine`` keeps for its account: proactive renewal with jitter, expiry
/// that blocks identified work with `INVALID_IDENTITY`, epochs, one fetch at a time, the minimum fetch interval and
/// backoff, one renewal after a rejection, the backend's `Retry-After`, clock offsets, handed-over credentials, and
/// scoped work cancelled and drained when *that* account signs out. Inside, each account follows the rule book of a
/// ``SessionEngine``, in one of a few shards that hold the pool's accounts, so the rules exist once, in the engine's
/// state machine. What the accounts share is the backend: every fetch
/// goes through the pool's ``SessionPoolConfiguration/Budget`` (at most so many in flight, at most so many starts a
/// second, needed fetches before proactive renewals), a backend that asks for a pause pauses every account, and a
/// backend that stops answering has the pool hold every account's fetches and send one probe at a time until it
/// answers again.
///
/// Use a pool when one process acts for many people at once (a support desk posting for its agents, a bridge speaking
/// for its members); use a ``SessionEngine`` when it acts for one signed-in user at a time and switches between them.
///
/// ```swift
/// let pool = SessionPool(fetcher: backend, configuration: SessionPoolConfiguration(maximumAccounts: 10_000))
/// try await pool.signIn("agent-7")
/// let headers = try pool.identityHeaders(for: "agent-7")   // on every identified request, no actor hop
/// ```
public final class SessionPool: Sendable {
    /// What joins and removals change together, under the members' lock; the members themselves are in ``table``.
    struct Members {
        var hooks: [@Sendable (AccountChange) async -> Void] = []
        var shutDown = false
        var evictions = 0
        /// How many members the pool has made.
        var made: UInt64 = 0
        /// Whether the idle sweeper runs: its deadline is set, or its sweep is under way.
        var sweeping = false
        /// The idle sweeper's checkpoints, oldest first: a use serial and the clock's `uptime` just after it
        /// (``SessionPool/sweepDue()``).
        var checkpoints: [(use: Int64, at: Duration)] = []
        /// How many sign-ins are under way on each member, from the join that handed the member out until the call
        /// returns: neither an eviction nor the idle sweeper takes such a member, whose caller may not have reached its
        /// shard yet (a caller waiting on the account keeps it too, ``AccountShard/Slot/closeToWorkIfIdle()``).
        var signingIn: [ObjectIdentifier: Int] = [:]
        /// The members taken out of the table that are still signing out and shutting down, each with the signal
        /// its removal opens once it is over (its eviction reported): a shutdown waits for them as it waits for the
        /// members it takes out itself.
        var leaving: [ObjectIdentifier: (member: Member, removed: OneShot<Void>)] = [:]
        /// Whether ``SessionPool/shutdown()`` has begun: a second call waits for the first to finish.
        var closing = false

        /// Takes `member` out of the table and counts it as leaving, in the lock step that chose it, so that no
        /// shutdown can miss it in between; only a member still in the table is chosen, so each leaves once, and
        /// the one ``SessionPool/remove(_:because:)`` that follows ends its leaving.
        mutating func leave(_ member: Member, from table: AccountTable) {
            table.remove(member)
            assert(leaving[member.id] == nil, "a member left the pool twice")
            leaving[member.id] = (member, OneShot())
        }

        /// ``leave(_:from:)`` for an eviction, counted in the same lock step.
        mutating func evict(_ member: Member, from table: AccountTable) {
            leave(member, from: table)
            evictions += 1
        }

        /// Whether a sign-in is under way on `member`.
        func isSigningIn(_ member: Member) -> Bool {
            signingIn[member.id] != nil
        }

        /// A sign-in that ``SessionPool/join(_:)`` counted on `member` has returned.
        mutating func signInEnded(_ member: Member) {
            guard let count = signingIn[member.id] else { return }
            signingIn[member.id] = count > 1 ? count - 1 : nil
        }
    }

    let fetcher: any CredentialFetcher
    let configuration: SessionPoolConfiguration
    /// What every account's shard shares: the configuration, fetcher, clock, budget and deadline queue.
    let shared: AccountShard.Shared
    /// The shards the accounts live in, ``shardCount`` of them, each on an executor of its own: a join places its
    /// account in one, in turn.
    let shards: [AccountShard]
    let clock: any SessionClock
    /// The members' expiry check: their shards run on `clock`.
    let wallClock: WallClockCheck
    let budget: FetchBudget
    /// Every timer of the pool, in one deadline queue: each account's, the budget's sleeper and the idle sweeper.
    let timers: DeadlineQueue<AccountShard.TimerTarget>
    /// The idle sweeper's slot in the deadline queue, for the pool's life; `nil` without an idle timeout.
    let sweeperSlot: DeadlineQueue<AccountShard.TimerTarget>.Token?
    /// Taken by every join and removal, so that the cap, the shutdown and the accounts' table change as one; the table
    /// has locks of its own, taken under this one.
    let members: SanitizedMutex<Members>
    /// Every member, and a copy of its read: where reads and lookups go, under a lock of their own.
    let table: AccountTable
    /// The pool's event stream.
    var broadcaster: PoolEventBroadcaster { outlets.broadcaster }
    /// Opens once the pool has shut down.
    let stopped: OneShot<Void>
    /// How many shards, each on a serial executor of its own (``AccountShard/unownedExecutor``), the accounts live
    /// in: enough that accounts' steps run side by side on every core, few enough that they cost nothing an account.
    static let shardCount = 16
    /// How many accounts' lives each chunk of a shard holds (``AccountShard/Lives``): a shard wastes at most one chunk,
    /// 16 KiB, and allocates once per 64 joins.
    static let livesPerChunk = 64
    /// Where the pool's events go (its stream, and the observer that receives every event of the pool, with the
    /// ``AccountShard/Membership/serial`` of the member it is about, before any subscriber does) and where the members
    /// report to, through their shards' ``AccountShard/Shared``.
    let outlets: Outlets

    /// Creates a pool with no accounts.
    ///
    /// - Parameters:
    ///   - fetcher: Gets credentials from the host's backend, for every account; each request names its account.
    ///   - configuration: Each account's policies, the budget toward the backend and the bounds on accounts.
    ///   - clock: The source of wall time and sleep; a manual clock in tests.
    public convenience init(
        fetcher: some CredentialFetcher,
        configuration: SessionPoolConfiguration = SessionPoolConfiguration(),
        clock: some SessionClock = SystemClock()
    ) {
        self.init(fetcher: fetcher, configuration: configuration, clock: clock, observer: nil)
    }

    /// Creates a pool with no accounts whose fetches are coordinated with other replicas of the process through a
    /// fleet's coordinator: after the pool's own budget gives a fetch a slot, the pool asks the coordinator, and tells
    /// it how each fetch ended; a fetch takes its start of the pool's budget when the coordinator lets it go or
    /// reserves a start for it, so one answered at once with another replica's credential spends none. Whenever the
    /// coordinator fails or is slow, the pool decides locally (``FleetCoordinator``).
    ///
    /// - Parameters:
    ///   - fetcher: Gets credentials from the host's backend, for every account; each request names its account.
    ///   - configuration: Each account's policies, the budget toward the backend and the bounds on accounts.
    ///   - clock: The source of wall time and sleep; a manual clock in tests.
    ///   - coordination: The fleet's coordinator and the bounds the pool keeps on it.
    public convenience init(
        fetcher: some CredentialFetcher,
        configuration: SessionPoolConfiguration = SessionPoolConfiguration(),
        clock: some SessionClock = SystemClock(),
        coordination: FleetCoordination
    ) {
        self.init(
            fetcher: fetcher, configuration: configuration, clock: clock, observer: nil, coordination: coordination)
    }

    /// Creates a pool whose every event also goes to `observer`, synchronously, in the step that publishes it, with
    /// the serial number of the member it is about (members count from 1 in the order the pool makes them; an account
    /// that signs in again after it left has a new member), or 0 for the pool's own events (an outage's beginning and
    /// end).
    ///
    /// - Parameters:
    ///   - fetcher: Gets credentials from the host's backend, for every account.
    ///   - configuration: Each account's policies, the budget toward the backend and the bounds on accounts.
    ///   - clock: The source of wall time and sleep.
    ///   - observer: Receives each event before any subscriber does; it must return quickly and not call the pool.
    ///   - coordination: The fleet's coordinator, if any.
    package init(
        fetcher: some CredentialFetcher,
        configuration: SessionPoolConfiguration = SessionPoolConfiguration(),
        clock: some SessionClock = SystemClock(),
        observer: (@Sendable (_ member: UInt64, _ event: SessionPoolEvent) -> Void)?,
        coordination: FleetCoordination? = nil
    ) {
        self.fetcher = fetcher
        self.configuration = configuration
        self.clock = clock
        self.wallClock = WallClockCheck(clock)
        let table = AccountTable(hasher: AccountTable.Hasher(seed: UInt64.random(in: .min ... .max)))
        self.table = table
        self.members = SanitizedMutex(Members())
        let taskExecutor = AccountShard.Shared.executors(configuration.session, clock: clock).task
        let outlets = Outlets(
            broadcaster: PoolEventBroadcaster(bufferLimit: configuration.session.eventBufferLimit), observer: observer,
            table: table)
        self.outlets = outlets
        let timers = DeadlineQueue<AccountShard.TimerTarget>(clock: clock, taskExecutor: taskExecutor)
        self.timers = timers
        self.budget = FetchBudget(
            limits: configuration.budget, clock: clock, timers: timers, startsWhenLeaving: coordination != nil,
            onChange: { [log = configuration.session.log] change in
                let event: SessionPoolEvent
                switch change {
                case .began(let account): event = SessionPoolEvent(account: account, kind: .outageBegan)
                case .ended(let account): event = SessionPoolEvent(account: account, kind: .outageEnded)
                case .behind(let account):
                    event = SessionPoolEvent(account: account, kind: .budgetBehind)
                    log?(
                        SessionLogRecord(
                            level: .warning, message: "the pool's budget cannot keep up with the renewals it owes",
                            metadata: ["account": account.rawValue]))
                }
                outlets.publish(event, member: 0)
            })
        let shared = AccountShard.Shared(
            configuration.session, fetcher: fetcher, clock: clock, budget: budget, timers: timers,
            executors: Self.shardCount, outlets: outlets, coordination: coordination)
        self.shared = shared
        self.shards = (0..<Self.shardCount).map {
            AccountShard(shared: shared, executorIndex: $0, livesPerChunk: Self.livesPerChunk)
        }
        self.stopped = OneShot<Void>()
        self.sweeperSlot = configuration.idleTimeout.map { _ in timers.register(nil) }
        // The queue names each member by its account and serial, and the pool finds it: the queue holds no account,
        // and only the pool, not each account, is referenced weakly. A deadline needs no pool: a fetch whose fetcher
        // hangs still times out after a pool dropped without shutting down, and its task lets its account's slot go.
        timers.deliver { [weak self] target, timer in
            guard case .member(let account, let serial) = target else {
                return AccountShard.TimerTarget.deliver(target, timer)
            }
            self?.timerFired(timer, account: account, serial: serial)
        }
        if let sweeperSlot {
            // Held weakly, as the members are named: a pool dropped with its sweeper's deadline set is not kept.
            timers.attach(.deadline { [weak self] in self?.sweepDue() }, to: sweeperSlot)
        }
    }

    /// A pool dropped without shutting down empties its accounts' table, which lets its members' slots go: each slot's
    /// shard holds the pool's outlets through its `Shared`, and so the table, whose rows hold the slots. An account
    /// whose fetch is still in flight outlives the pool, with its shard, and installs its result, which then finds no
    /// row to write into.
    deinit {
        _ = table.removeAll()
        if let sweeperSlot { timers.release(sweeperSlot) }
    }

    /// Fires a member's timer that the pool's deadline queue found due, on the member it names; a member that has left
    /// the pool has no timer to fire, since it is signed out and shut down.
    private func timerFired(_ timer: TimerID, account: AccountID, serial: UInt64) {
        guard let member = member(account), member.serial == serial else { return }
        member.shard.fireTimer(timer, for: member.slot)
    }

    // MARK: - Reading without an actor hop

    /// The clock's executor, which runs the actors and tasks of the pool's accounts (``ExecutingClock``); `nil` on
    /// other clocks or when the configuration names a task executor.
    package var clockExecutor: (any SerialExecutor)? { shared.actorExecutor }

    /// The accounts the pool holds, signed in or signing in.
    public var accounts: [AccountID] {
        // Under the members' lock, which every join and removal holds, so an eviction is seen whole or not at all.
        members.withLock { _ in table.members.map(\.account) }
    }

    /// An account's state, read without an actor hop; ``SessionState/signedOut`` for an account the pool does not
    /// hold.
    ///
    /// - Parameter account: The account.
    public func state(of account: AccountID) -> SessionState {
        member(account)?.slot.state ?? .signedOut
    }

    /// The identity headers for an identified request of `account`, read without an actor hop.
    ///
    /// Costs what ``SessionEngine/identityHeaders()`` costs and a hash and a comparison of the account: the accounts'
    /// table keeps a copy of each member's read, which the read takes under the lock of the account's shard
    /// (`AccountTable`), touching neither the member nor its engine, and marks the account used with a count, not a
    /// clock read.
    ///
    /// - Parameter account: The account the request acts for.
    /// - Returns: The `X-AppNorth-Identity-*` headers of the account's installed credential.
    /// - Throws: ``SessionError`` as ``SessionEngine/identityHeaders()`` does; ``SessionError/Code/signedOut`` for an
    ///   account the pool does not hold. Never another account's headers, never anonymous.
    @inline(never)
    public func identityHeaders(for account: AccountID) throws(SessionError) -> IdentityHeaders {
        // Never inlined: the read inlines the table's lock here (`SanitizedMutex.withLockInlined`).
        try headers(for: account, stampingUse: true)
    }

    /// The read of ``identityHeaders(for:)`` and of ``headersWithoutUse(for:)``; `stampingUse` marks the account used.
    ///
    /// Inlined into those two alone, functions that are never inlined, so the shard's lock is inlined
    /// (``AccountTable/reading(_:hash:stampingUse:)``) and never lands in an `async` function.
    @inline(__always)
    private func headers(for account: AccountID, stampingUse: Bool) throws(SessionError) -> IdentityHeaders {
        // The table's copy of the member's read, under its shard's lock alone, handed on as it came out of the lock:
        // the headers are retained once, and no copy is made to be destroyed.
        let hash = table.hasher.hash(account)
        guard
            let (headers, unbuilt, expiresAt, unavailable) = table.reading(
                account, hash: hash, stampingUse: stampingUse)
        else { throw Self.notHeld(account) }
        if let headers {
            guard wallClock.isBefore(expiresAt) else { throw SessionStore.expiredError }
            return headers
        }
        // The first read of the credential builds its headers, kept in the account's row for the reads after it.
        return try SessionStore.Headers.first(unbuilt, expiresAt, unavailable, isBefore: wallClock.isBefore) {
            table.keep($0, of: $1, account: account, hash: hash)
        }
    }

    /// What the pool has done and holds: accounts, the budget's counters and evictions. Read without an actor hop.
    public var metrics: SessionPoolMetrics {
        let (accounts, evictions) = members.withLock { (table.count, $0.evictions) }
        let budget = budget.snapshot
        var metrics = SessionPoolMetrics(
            accounts: accounts, fetchesInFlight: budget.inFlight, queuedNeeded: budget.queuedNeeded,
            queuedProactive: budget.queuedProactive, budgetWaits: budget.waits, fetchesAdmitted: budget.admitted,
            evictions: evictions, timers: timers.count, holdsForOutage: budget.holdsForOutage,
            outages: budget.outages)
        metrics.budgetWait = LatencySummary(of: budget.waited)
        metrics.renewalsPastDeadline = budget.lateRenewals
        metrics.eventsDropped = broadcaster.droppedCount
        metrics.fleet = shared.fleet?.metrics
        return metrics
    }

    /// The serial number of the account's member (see ``init(fetcher:configuration:clock:observer:)``); `nil` for an
    /// account the pool does not hold.
    package func memberSerial(of account: AccountID) -> UInt64? {
        member(account)?.serial
    }

    /// The account's headers as ``identityHeaders(for:)`` reads them, without marking the account used, for checks
    /// that must not change which account the pool evicts.
    @inline(never)
    package func headersWithoutUse(for account: AccountID) throws(SessionError) -> IdentityHeaders {
        try headers(for: account, stampingUse: false)
    }

    /// How many times the pool's deadline queue has woken, for benchmarks.
    package var timerWakeUps: Int { timers.wakeUps }

    /// One account's metrics, as its ``SessionEngine/metrics``; `nil` for an account the pool does not hold.
    ///
    /// Its latency summaries cover the account's last 16 fetches, not ``LatencySummary/window``: kept for every
    /// account of a large pool, a full window would cost 32 KiB an account once it has renewed a thousand times.
    ///
    /// - Parameter account: The account.
    public func metrics(for account: AccountID) -> SessionMetrics? {
        member(account)?.slot.metrics
    }

    /// The pool's events, each naming its account, starting with the events published after this call.
    ///
    /// - Parameter bufferLimit: How many undelivered events this subscriber may hold before the oldest are dropped;
    ///   `nil` uses ``SessionConfiguration/eventBufferLimit`` of ``SessionPoolConfiguration/session``. The stream does
    ///   not say when it drops; ``SessionPoolMetrics/eventsDropped`` counts what every subscriber lost.
    /// - Returns: A sequence that ends when the pool shuts down.
    public func events(bufferLimit: Int? = nil) -> SessionPoolEvents {
        broadcaster.subscribe(bufferLimit: bufferLimit)
    }

    /// One account's events, as its ``SessionEngine/events(bufferLimit:)``: starting with its current state and ending
    /// when the account leaves the pool. `nil` for an account the pool does not hold.
    ///
    /// - Parameters:
    ///   - account: The account.
    ///   - bufferLimit: As ``SessionEngine/events(bufferLimit:)``.
    public func events(for account: AccountID, bufferLimit: Int? = nil) -> SessionEvents? {
        member(account)?.slot.events(bufferLimit: bufferLimit)
    }

    // MARK: - Members

    /// The member for `account`, marking it used when `using`.
    func member(_ account: AccountID, using: Bool = false) -> Member? {
        table.member(account, stamping: using ? table.nextUse() : .min)
    }

    /// Whether `member` has left a pool that has not shut down: no longer the pool's member for its account, read in
    /// one step of the members' lock, which every removal holds from the step that chose a member to the one that
    /// takes it out of the table, and which the shutdown holds as it begins.
    func hasLeftRunningPool(_ member: Member) -> Bool {
        members.withLock { members in !members.shutDown && table.member(member.account)?.is(member) != true }
    }

    /// Whether the pool has shut down.
    var isShutDown: Bool { members.withLock { $0.shutDown } }

    static func notHeld(_ account: AccountID) -> SessionError {
        SessionError(.signedOut, reason: "\(account) is not signed in to the pool")
    }

    /// How many recent fetches each latency summary of an account's metrics covers.
    static let accountLatencyWindow = 16

    static let shutDownError = SessionError(.shutDown, reason: "the session pool has shut down")
}
