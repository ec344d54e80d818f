import Foundation
import Synchronization

/// Where an account lives: its machine, the state its readers take without a hop, and what performs the machine's
/// decisions, on one serial executor.
///
/// The one rule book of every account: a ``SessionEngine`` is a façade over a shard of its own, and a ``SessionPool``
/// keeps each account in one (Design/engine.md, *One input, one step*). A pure state machine decides every
/// transition; the shard only performs the actions the machine returns.
actor AccountShard {
    /// The configuration, the fetcher, the clock and the deadline queue, a pool's budget and outlets, and an engine of
    /// its own's observer: one object for all the engines of a pool.
    let shared: Shared
    /// The account's life as the actor keeps it: the machine and what carries out its decisions between steps.
    var life: AccountLife
    let store: SessionStore
    /// The engine's event broadcaster, made when the first subscriber comes.
    let broadcaster: BroadcasterSlot
    /// The callers waiting for an outcome, made when the first registers and dropped by the step after the last has
    /// gone (``dropWaitersIfNone()``): an identified engine nobody waits on, one per account in a pool, keeps none.
    let waiterTable = SanitizedMutex<OutcomeWaiters?>(nil)
    let recorder: MetricsRecorder
    /// The pool's member this engine is; `nil` for an engine of its own.
    nonisolated let membership: Membership?
    /// The engine's slot in its deadline queue (``Shared/timers``), taken when the engine is made and given back when it
    /// is freed.
    nonisolated let timerToken: DeadlineQueue<TimerTarget>.Token

    /// One account's life as its actor keeps it: the machine that decides, and what carries out its decisions from
    /// one step to the next. Only the actor touches it: a step hands its machine to the decision and performs the
    /// decision with the rest (``step(announcing:_:)``).
    ///
    /// A value, and the only one of the engine's fields that changes after it is made but for the locked state readers
    /// take without a hop (the store, the broadcaster's slot, the recorder, the waiters): what an account is to the
    /// actor, in one place, the way a shard holding many accounts would keep each of them.
    struct AccountLife: Sendable {
        var machine: SessionStateMachine
        /// The fetch in flight, out of line: with its claim on a budget it is nine words, and a pool's members, one
        /// per account, mostly have no fetch.
        var fetch: OutOfLine<RunningFetch>?
        /// A graceful shutdown's two watchers, while it lasts: the grace period's deadline and the wait for running
        /// work to finish; out of line, since an engine holds them only while it shuts down.
        var gracePeriod: OutOfLine<GracePeriodWatch>?
        /// The account-change hooks, in the order they were added.
        var hooks: [@Sendable (AccountChange) async -> Void]
        /// The latest account change's preparation: the next one runs after it.
        var preparation: OneShot<Void>?
        /// Opens once the engine has shut down; made when a caller first waits for the shutdown
        /// (``waitUntilStopped(stopsOnCancellation:)``), so an engine nobody waits on, one per account in a pool, keeps
        /// none.
        var stopped: OneShot<Void>?
        /// The sequence number of the last event published.
        var sequence: UInt64 = 0
    }

    /// Which member of a pool an engine is: what it reports its events and its read under.
    struct Membership: Sendable {
        /// The account the member is for, which every event the pool publishes for it names.
        let account: AccountID
        /// Which member of the pool this is, counting from 1 in the order the pool made them: an account that leaves
        /// and signs in again has a new member, with an engine and events of its own.
        let serial: UInt64
        /// The account's hash in the pool's table (``AccountTable/Hasher``), which finds the member's row.
        let hash: UInt64
    }

    /// What an engine shares with the other engines of a pool: made once, so that each member holds one reference
    /// instead of a copy of the configuration, the machine's policies taken from it, and its own references to the
    /// fetcher, the clock, the budget and the deadline queue.
    final class Shared: Sendable {
        let session: SessionConfiguration
        /// Where a pool's engines report their events and their reads to; `nil` for an engine of its own.
        let outlets: SessionPool.Outlets?
        /// Receives every event of an engine of its own in the step that publishes it, for tests, demos and
        /// benchmarks; held here, not by the engine, so that a pool's engines, which report to the pool's outlets
        /// instead, carry no field for it.
        let observer: (@Sendable (SessionEvent) -> Void)?
        let machine: SessionStateMachine.Configuration
        let fetcher: any CredentialFetcher
        let clock: any SessionClock
        /// The check of `clock` against a credential's expiry that every engine's store makes, held here once.
        let wallClock: SharedWallClockCheck
        /// The pool's budget toward the backend that the engines' fetches share; `nil` for an engine of its own.
        let budget: FetchBudget?
        /// The deadline queue every timer of the engines waits in: a pool's, one of the engine's own, or the
        /// process's one queue on the ``SystemClock`` (``AccountShard/systemTimers``).
        let timers: DeadlineQueue<TimerTarget>
        /// The actors whose serial executors the engines run on (``AccountShard/unownedExecutor``): one for an
        /// engine of its own, a few for a pool's engines (a power of two, at most 256), each engine on one of them for
        /// its whole life.
        let executors: [ExecutorActor]
        /// The executor that runs the engines' tasks: the configuration's, else the clock's (``ExecutingClock``), else
        /// `nil` for the global concurrent executor.
        let taskExecutor: (any TaskExecutor)?
        /// The executor that runs every engine's actor in place of ``executors``: an ``ExecutingClock``'s, when the
        /// configuration names no task executor of its own.
        let actorExecutor: (any SerialExecutor)?

        /// Creates what one engine, or every member of a pool, shares.
        ///
        /// - Parameters:
        ///   - configuration: Renewal, retry and buffering policies.
        ///   - fetcher: Gets credentials from the host's backend.
        ///   - clock: The source of wall time and sleep.
        ///   - budget: A pool's budget toward the backend.
        ///   - timers: A pool's deadline queue; `nil` for an engine of its own, which waits in the process's queue on
        ///     the ``SystemClock`` with no task executor of its own, and in a queue of its own otherwise.
        ///   - executors: How many executors the engines share, rounded up to a power of two: one for an engine of its
        ///     own.
        ///   - outlets: A pool's outlets, which its engines report to.
        ///   - observer: Receives each event of an engine of its own before any subscriber does; it must return
        ///     quickly and not call the engine.
        init(
            _ configuration: SessionConfiguration, fetcher: any CredentialFetcher, clock: any SessionClock,
            budget: FetchBudget?, timers: DeadlineQueue<TimerTarget>?, executors: Int = 1,
            outlets: SessionPool.Outlets? = nil, observer: (@Sendable (SessionEvent) -> Void)? = nil
        ) {
            session = configuration
            self.outlets = outlets
            self.observer = observer
            machine = SessionStateMachine.Configuration(configuration)
            self.fetcher = fetcher
            self.clock = clock
            self.wallClock = SharedWallClockCheck(clock)
            self.budget = budget
            let count = 1 << (Int.bitWidth - (min(256, max(1, executors)) - 1).leadingZeroBitCount)
            self.executors = (0..<count).map { _ in ExecutorActor() }
            let (taskExecutor, actorExecutor) = Self.executors(configuration, clock: clock)
            (self.taskExecutor, self.actorExecutor) = (taskExecutor, actorExecutor)
            if let timers {
                self.timers = timers
            } else if clock is SystemClock && taskExecutor == nil {
                self.timers = AccountShard.systemTimers
            } else {
                self.timers = DeadlineQueue(clock: clock, taskExecutor: taskExecutor, delivery: TimerTarget.deliver)
            }
        }

        /// Where the work of an engine or a pool on `clock` runs: the configuration's task executor, else the
        /// clock's executors (``ExecutingClock``), one of which then also runs the actors.
        static func executors(_ configuration: SessionConfiguration, clock: any SessionClock) -> (
            task: (any TaskExecutor)?, actor: (any SerialExecutor)?
        ) {
            if let own = configuration.taskExecutor { return (own, nil) }
            guard let clock = clock as? any ExecutingClock else { return (nil, nil) }
            return (clock.taskExecutor, clock.actorExecutor)
        }
    }

    /// The serial executor the engine runs on: the executor of an actor that holds nothing, not a queue of the
    /// engine's own.
    ///
    /// An actor with a queue of its own carries twelve words for it, and a ``SessionPool`` holds one engine per
    /// account, so a pool's engines share a few such executors; an engine of its own has one to itself. The engine's
    /// isolation is unchanged: its state is touched only on its executor, one job at a time, and engines that share an
    /// executor take turns. Which one an engine runs on is chosen, for its whole life, by its slot in the deadline
    /// queue its timers wait in: slots are handed out in the order engines and their fetches take them, so the same
    /// program shares executors the same way every time it runs, and a pool's engines spread over all of them.
    nonisolated var unownedExecutor: UnownedSerialExecutor {
        if let actorExecutor = shared.actorExecutor { return actorExecutor.asUnownedSerialExecutor() }
        return shared.executors[timerToken & (shared.executors.count - 1)].unownedExecutor
    }

    /// Gets credentials from the host's backend.
    nonisolated var fetcher: any CredentialFetcher { shared.fetcher }
    /// The source of wall time and sleep.
    nonisolated var clock: any SessionClock { shared.clock }
    /// The pool's budget toward the backend that this engine's fetches share; `nil` for an engine of its own.
    nonisolated var budget: FetchBudget? { shared.budget }
    /// The deadline queue the engine's timer waits in.
    nonisolated var timers: DeadlineQueue<TimerTarget> { shared.timers }

    /// Renewal, retry and buffering policies.
    nonisolated var configuration: SessionConfiguration { shared.session }

    /// Creates an engine for one account of a ``SessionPool``.
    ///
    /// - Parameters:
    ///   - shared: The configuration, fetcher, clock, budget and deadline queue, which the engine shares with the
    ///     pool's other members.
    ///   - randomSeed: The seed of the engine's jitter, in place of the configuration's; `nil` for a random one.
    ///   - latencyWindow: How many recent fetches each latency summary of the engine's metrics covers.
    ///   - hooks: Account-change hooks registered from the start, in order.
    ///   - membership: The pool's member the engine is, which it reports its events and its read under to the pool's
    ///     outlets (``Shared/outlets``) and its deadline queue finds it by; `nil` for an engine of its own, which its
    ///     queue finds through a weak reference.
    init(
        shared: Shared,
        randomSeed: UInt64?,
        latencyWindow: Int,
        hooks: [@Sendable (AccountChange) async -> Void],
        membership: Membership?
    ) {
        self.recorder = MetricsRecorder(latencyWindow: latencyWindow)
        self.shared = shared
        var seed = randomSeed ?? 0
        if randomSeed == nil {
            var system = SystemRandomNumberGenerator()
            seed = system.next()
        }
        let clock = shared.clock
        self.life = AccountLife(machine: SessionStateMachine(configuration: shared.machine, seed: seed), hooks: hooks)
        self.store = SessionStore(wallClock: shared.wallClock)
        self.membership = membership
        let start = SessionInstant(wall: clock.now, uptime: clock.uptime)
        self.broadcaster = BroadcasterSlot(
            initial: SessionEvent(.stateChanged(.signedOut), time: start, epoch: 0, sequence: 0))
        self.timerToken = shared.timers.register(membership.map { .member($0.account, serial: $0.serial) })
        if membership == nil { shared.timers.attach(.engine(WeakEngine(self)), to: timerToken) }
    }

    /// An engine freed gives its slots of the deadline queue back, with their timers: the queue holds no engine, so a
    /// timer never keeps one alive, and the last timer gone stops the queue's sleeper.
    deinit {
        shared.timers.release(timerToken)
        if let watch = life.gracePeriod?.value { shared.timers.release(watch.deadline) }
    }

    /// Closes the engine to new scoped work if none runs and no caller waits, for a pool evicting the account: work
    /// that has started is never cancelled by an eviction, and work that has not gets no identity.
    ///
    /// - Returns: Whether the engine was closed; `false` leaves it as it was.
    nonisolated func closeToWorkIfIdle() -> Bool {
        guard waitingCallers == 0 else { return false }
        return store.refuseNewWorkIfNoneRuns()
    }

    // MARK: - Waiting callers

    /// The waiters, while any caller is registered with them.
    nonisolated var waitersIfAny: OutcomeWaiters? { waiterTable.withLock { $0 } }

    /// How many callers wait for an outcome.
    nonisolated var waitingCallers: Int { waitersIfAny?.count ?? 0 }

    /// Registers a caller for the epoch's next outcome of `kind`, making the waiters if none are kept; call it in the
    /// step that decided to wait (``OutcomeWaiters/register(epoch:kind:)``).
    func registerWaiter(epoch: UInt64, kind: SessionStateMachine.WaiterKind) -> OutcomeWaiters.Ticket {
        let waiters = waiterTable.withLock { table in
            if let table { return table }
            let made = OutcomeWaiters()
            table = made
            return made
        }
        return waiters.register(epoch: epoch, kind: kind)
    }

    /// Waits for the outcome `ticket` was registered for, and drops the waiters afterwards if no caller is left.
    ///
    /// The caller registers in the step that decided to wait, before it calls this: a call into an actor-isolated
    /// method is a hop the runtime may enqueue (on a custom or a task executor it does), and a step of another job
    /// may run in between; an outcome that comes then is kept for the ticket instead of slipping by.
    func waitForOutcome(_ ticket: OutcomeWaiters.Ticket) async throws -> IdentityCredential {
        defer { dropWaitersIfNone() }
        return try await ticket.waiters.wait(ticket)
    }

    /// Drops the waiters once no caller is registered with them; only the actor registers, so none can be
    /// registered meanwhile, and a ticket already handed out holds its own waiters.
    func dropWaitersIfNone() {
        waiterTable.withLock { table in
            if table?.isEmpty == true { table = nil }
        }
    }

    // MARK: - Reading without an actor hop

    /// ``SessionEngine/state``, for the shard's account: the engine's, or a pool's member's.
    nonisolated var state: SessionState { store.sessionState }

    /// ``SessionEngine/hasValidIdentity(at:)``, for the shard's account: the engine's, or a pool's member's.
    nonisolated func hasValidIdentity(at date: Date) -> Bool {
        guard let expiry = store.localExpiry() else { return false }
        return date.timeIntervalSince1970 < expiry
    }

    /// ``SessionEngine/events(bufferLimit:)``, for the shard's account: the engine's, or a pool's member's.
    nonisolated func events(bufferLimit: Int? = nil) -> SessionEvents {
        SessionEvents(
            broadcaster: broadcaster.broadcaster(bufferLimit: configuration.eventBufferLimit),
            limit: bufferLimit.map { max(1, $0) })
    }

    /// ``SessionEngine/metrics``, for the shard's account: the engine's, or a pool's member's.
    nonisolated var metrics: SessionMetrics {
        var metrics = recorder.snapshot
        metrics.eventsDropped = broadcaster.droppedCount
        metrics.subscribers = broadcaster.subscriberCount
        metrics.waiters = waitingCallers
        metrics.scopedWork = store.runningWorkCount
        // Scoped work's tasks are engine tasks as well; the store counts them.
        metrics.liveTasks += metrics.scopedWork
        if let expiry = store.localExpiry() {
            let remaining = expiry - clock.now.timeIntervalSince1970
            metrics.credentialRemainingLifetime = .seconds(max(0, remaining))
        }
        return metrics
    }
}
