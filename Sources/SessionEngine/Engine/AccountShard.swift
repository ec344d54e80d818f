import Foundation
import Synchronization

/// Where accounts live: their machines, and what performs the machines' decisions, on one serial executor.
///
/// The one rule book of every account: a ``SessionEngine`` is a façade over a shard of its own, which holds its one
/// account, and a ``SessionPool`` keeps its accounts in a few shards, many accounts each (Design/engine.md, *One input,
/// one step*). A pure state machine decides every transition; the shard only performs the actions the machine
/// returns.
///
/// Each account has a ``Slot``: the state its readers take without a hop (its store, its event broadcaster, its
/// waiters, its metrics) and the number of its life in ``lives``, the value the shard's steps change. Every method of
/// the rule book names the account by its slot; a task it starts (a fetch, a preparation, a firing, a grace period's
/// drain) holds the slot and comes back with it, and finds the account gone once its life has ended and the number
/// holds another account's (``lifeIndex(of:)``).
actor AccountShard {
    /// The configuration, the fetcher, the clock and the deadline queue, a pool's budget and outlets, and an engine of
    /// its own's observer: one object for all the shards of a pool.
    let shared: Shared
    /// Which of ``Shared/executors`` the shard runs on.
    nonisolated let executorIndex: Int
    /// The copy of its store's read that an engine's readers take, which the step writes after each install; `nil` for
    /// a pool's shard, whose accounts' readers read their rows of the pool's table. An engine's shard holds it, not
    /// its slot, so that no pool's account pays a word for it.
    nonisolated let readers: SessionStore.ReadersCopy?
    /// The lives of the shard's accounts, by their slots' numbers (``Slot/index``); `nil` for a number no account
    /// holds, or whose account has not been stepped yet (``lifeIndex(of:)`` makes its life then).
    var lives: Lives
    /// Which numbers of ``lives`` are held, and by whose slot: a join reserves one synchronously, under this lock, and
    /// the step that ends a pool's account gives it back.
    nonisolated let numbers = SanitizedMutex(Numbers())

    /// One account's life as its shard keeps it: the machine that decides, and what carries out its decisions from
    /// one step to the next. Only the shard's actor touches it: a step hands its machine to the decision and performs
    /// the decision with the rest (``step(_:announcing:_:)``).
    ///
    /// A value in the shard's ``lives``: what an account is to the actor, in one place. What readers take without a
    /// hop (the store, the broadcaster's slot, the recorder, the waiters) is the account's ``Slot``'s.
    struct AccountLife: Sendable {
        /// The serial of the slot whose life this is (``Slot/serial``): a task of an account that has left finds
        /// another serial at its number, or none.
        let serial: UInt64
        var machine: SessionStateMachine
        /// The fetch in flight, out of line: with its claim on a budget it is nine words, and a pool's members, one
        /// per account, mostly have no fetch.
        var fetch: OutOfLine<RunningFetch>?
        /// A graceful shutdown's two watchers, while it lasts: the grace period's deadline and the wait for running
        /// work to finish; out of line, since an account holds them only while it shuts down.
        var gracePeriod: OutOfLine<GracePeriodWatch>?
        /// The account-change hooks, in the order they were added.
        var hooks: [@Sendable (AccountChange) async -> Void]
        /// The latest account change's preparation: the next one runs after it.
        var preparation: OneShot<Void>?
        /// Opens once the account has shut down; made when a caller first waits for the shutdown
        /// (``waitUntilStopped(_:stopsOnCancellation:)``), so an account nobody waits on keeps none.
        var stopped: OneShot<Void>?
        /// The sequence number of the last event published.
        var sequence: UInt64 = 0
    }

    /// Which member of a pool an account is: what it reports its events and its read under.
    struct Membership: Sendable {
        /// The account the member is for, which every event the pool publishes for it names.
        let account: AccountID
        /// Which member of the pool this is, counting from 1 in the order the pool made them: an account that leaves
        /// and signs in again has a new member, with a slot, a life and events of its own.
        let serial: UInt64
    }

    /// The lives of a shard's accounts by number, in chunks of a fixed count, each allocated once: a growing array
    /// would carry up to as much spare room as it uses (about 40 % more on average over the sizes a pool passes
    /// through) and copy every life each time it grows; chunks waste at most one chunk, and the chunks at the end
    /// that hold no life are freed.
    struct Lives: Sendable {
        private var chunks: [[AccountLife?]] = []
        /// The base-2 logarithm of a chunk's count.
        private let shift: Int

        /// Lives in chunks of `chunk` (rounded up to a power of two): one for an engine's shard, more for a pool's.
        init(chunk: Int) {
            shift = Int.bitWidth - (max(1, chunk) - 1).leadingZeroBitCount
        }

        /// The life at `number`, which ``makeRoom(through:)`` has made room for.
        subscript(number: Int) -> AccountLife? {
            // Borrowed, not copied: a step reads its life's serial on every input.
            _read { yield chunks[number &>> shift][number & ((1 &<< shift) - 1)] }
            _modify { yield &chunks[number &>> shift][number & ((1 &<< shift) - 1)] }
        }

        /// Whether the lives hold room for `number`.
        func hasRoom(for number: Int) -> Bool {
            number &>> shift < chunks.count
        }

        /// Adds the chunks up to the one `number` belongs to.
        mutating func makeRoom(through number: Int) {
            while !hasRoom(for: number) { chunks.append(Array(repeating: nil, count: 1 &<< shift)) }
        }

        /// Frees the chunks at the end that hold no life.
        mutating func trim() {
            while let last = chunks.last, last.allSatisfy({ $0 == nil }) { chunks.removeLast() }
        }

        /// Every life the shard holds.
        var all: [AccountLife] { chunks.flatMap { $0.compactMap { $0 } } }
    }

    /// Which numbers of a shard's ``lives`` are held: the lowest free number is handed out first, so a shard that
    /// shrinks keeps its lives at the front.
    struct Numbers: Sendable {
        /// The numbers given back, lowest first.
        var free = Heap<Int>()
        /// The serial of the slot holding each number, ``UInt64/max`` for a free one.
        var holders: [UInt64] = []

        /// Hands out the lowest free number to the slot of `serial`.
        mutating func reserve(for serial: UInt64) -> Int {
            guard let lowest = free.removeMin() else {
                holders.append(serial)
                return holders.count - 1
            }
            holders[lowest] = serial
            return lowest
        }

        /// The serial of the slot holding `number`, if a slot does.
        func holder(of number: Int) -> UInt64? {
            number < holders.count && holders[number] != .max ? holders[number] : nil
        }

        /// Takes back `number`, whose account's life has ended.
        mutating func release(_ number: Int) {
            guard holder(of: number) != nil else { return }
            holders[number] = .max
            free.insert(number)
        }
    }

    /// One account of a shard: the number of its life in the shard's ``lives``, which member of a pool it is, and the
    /// state its readers take without a hop. A ``SessionEngine`` holds its one slot; a ``SessionPool``'s member is
    /// a slot.
    ///
    /// Every task the rule book starts for the account holds its slot, as the pool's rows and the engine do, so the
    /// slot (with its store and its slot in the deadline queue) lives as long as anything may still report on the
    /// account; its life, in the shard, ends with the account's shutdown in a pool, and with its shard for an engine.
    final class Slot: Sendable {
        /// The shard the account lives in.
        let shard: AccountShard
        /// The pool's member this account is; `nil` for an engine's.
        let membership: Membership?
        /// The account-change hooks the account's life starts with: a pool's, as they were when the account joined.
        let hooks: [@Sendable (AccountChange) async -> Void]
        let store: SessionStore
        /// The account's event broadcaster, made when the first subscriber comes.
        let broadcaster: BroadcasterSlot
        /// ``index``, in four bytes: stored after the broadcaster's slot, in the room its last field leaves.
        private let number: Int32
        let recorder: MetricsRecorder
        /// The account's timer's slot in the deadline queue (``Shared/timers``), taken when the slot is made and given
        /// back when it is freed.
        let timerToken: DeadlineQueue<TimerTarget>.Token

        /// The number of the account's life in the shard's ``AccountShard/lives``.
        var index: Int { Int(number) }

        /// What tells the slot's life from a later account's at the same number: the member's serial, 0 for an engine.
        var serial: UInt64 { membership?.serial ?? 0 }

        /// Makes the slot of an account that holds number `index` of `shard`.
        ///
        /// - Parameters:
        ///   - shard: The shard the account lives in.
        ///   - index: The number ``AccountShard/Numbers/reserve(for:)`` handed out for it.
        ///   - latencyWindow: How many recent fetches each latency summary of the account's metrics covers.
        ///   - hooks: Account-change hooks registered from the start, in order.
        ///   - membership: The pool's member the account is, which it reports its events and its read under to the
        ///     pool's outlets (``Shared/outlets``) and its deadline queue finds it by; `nil` for an engine's, which its
        ///     queue finds through a weak reference.
        init(
            shard: AccountShard, index: Int, latencyWindow: Int, hooks: [@Sendable (AccountChange) async -> Void],
            membership: Membership?
        ) {
            self.shard = shard
            // A shard hands out its lowest free number, so its numbers stay below its accounts at once, far below 2^31.
            number = Int32(index)
            self.membership = membership
            self.hooks = hooks
            let shared = shard.shared
            recorder = MetricsRecorder(latencyWindow: latencyWindow)
            store = SessionStore()
            let start = SessionInstant(wall: shared.clock.now, uptime: shared.clock.uptime)
            broadcaster = BroadcasterSlot(
                initial: SessionEvent(.stateChanged(.signedOut), time: start, epoch: 0, sequence: 0))
            timerToken = shared.timers.register(membership.map { .member($0.account, serial: $0.serial) })
            if membership == nil { shared.timers.attach(.engine(WeakSlot(self)), to: timerToken) }
        }

        /// A slot freed gives its slot of the deadline queue back, with its timer: the queue holds no account, so a
        /// timer never keeps one alive, and the last timer gone stops the queue's sleeper.
        deinit {
            shard.shared.timers.release(timerToken)
        }

        /// Closes the account to new scoped work if none runs and no caller waits, for a pool evicting it: work that
        /// has started is never cancelled by an eviction, and work that has not gets no identity.
        ///
        /// - Returns: Whether the account was closed; `false` leaves it as it was.
        func closeToWorkIfIdle() -> Bool {
            guard waitingCallers == 0 else { return false }
            return store.refuseNewWorkIfNoneRuns()
        }

        /// The waiters, while any caller is registered with them.
        var waitersIfAny: OutcomeWaiters? { store.waiters }

        /// How many callers wait for an outcome.
        var waitingCallers: Int { waitersIfAny?.count ?? 0 }

        // MARK: Reading without an actor hop

        /// ``SessionEngine/state``, for the slot's account: the engine's, or a pool's member's.
        var state: SessionState { store.sessionState }

        /// ``SessionEngine/hasValidIdentity(at:)``, for the slot's account: the engine's, or a pool's member's.
        func hasValidIdentity(at date: Date) -> Bool {
            guard let expiry = store.localExpiry(at: shard.clock.now.timeIntervalSince1970) else { return false }
            return date.timeIntervalSince1970 < expiry
        }

        /// ``SessionEngine/events(bufferLimit:)``, for the slot's account: the engine's, or a pool's member's.
        func events(bufferLimit: Int? = nil) -> SessionEvents {
            SessionEvents(
                broadcaster: broadcaster.broadcaster(bufferLimit: shard.configuration.eventBufferLimit),
                limit: bufferLimit.map { max(1, $0) })
        }

        /// ``SessionEngine/metrics``, for the slot's account: the engine's, or a pool's member's.
        var metrics: SessionMetrics {
            var metrics = recorder.snapshot
            metrics.eventsDropped = broadcaster.droppedCount
            metrics.subscribers = broadcaster.subscriberCount
            metrics.waiters = waitingCallers
            metrics.scopedWork = store.runningWorkCount
            // Scoped work's tasks are the account's tasks as well; the store counts them.
            metrics.liveTasks += metrics.scopedWork
            let now = shard.clock.now.timeIntervalSince1970
            if let expiry = store.localExpiry(at: now) {
                let remaining = expiry - now
                metrics.credentialRemainingLifetime = .seconds(max(0, remaining))
            }
            return metrics
        }
    }

    /// What an engine's shard, or every shard of a pool, shares: made once, so that each shard holds one reference
    /// instead of a copy of the configuration, the machine's policies taken from it, and its own references to the
    /// fetcher, the clock, the budget and the deadline queue.
    final class Shared: Sendable {
        let session: SessionConfiguration
        /// Where a pool's accounts report their events and their reads to; `nil` for an engine's.
        let outlets: SessionPool.Outlets?
        /// Receives every event of an engine of its own in the step that publishes it, for tests, demos and
        /// benchmarks; held here, not by the engine, so that a pool's accounts, which report to the pool's outlets
        /// instead, carry no field for it.
        let observer: (@Sendable (SessionEvent) -> Void)?
        let machine: SessionStateMachine.Configuration
        /// A machine that has shut down: what a slot whose account's life has ended decides with
        /// (``AccountShard/lifeIndex(of:)``).
        let ended: SessionStateMachine
        let fetcher: any CredentialFetcher
        let clock: any SessionClock
        /// The check of `clock` against a credential's expiry that every account's store makes, held here once.
        let wallClock: SharedWallClockCheck
        /// The pool's budget toward the backend that the accounts' fetches share; `nil` for an engine of its own.
        let budget: FetchBudget?
        /// The fleet's coordination that every fetch asks after the budget let it go; `nil` without a coordinator.
        let fleet: FleetGate?
        /// The deadline queue every timer of the accounts waits in: a pool's, one of the engine's own, or the
        /// process's one queue on the ``SystemClock`` (``AccountShard/systemTimers``).
        let timers: DeadlineQueue<TimerTarget>
        /// The actors whose serial executors the shards run on (``AccountShard/unownedExecutor``): one for an
        /// engine's shard, one for each of a pool's shards (a power of two, at most 256), each shard on one of them for
        /// its whole life.
        let executors: [ExecutorActor]
        /// The executor that runs the accounts' tasks: the configuration's, else the clock's (``ExecutingClock``), else
        /// `nil` for the global concurrent executor.
        let taskExecutor: (any TaskExecutor)?
        /// The executor that runs every shard's actor in place of ``executors``: an ``ExecutingClock``'s, when the
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
        ///   - executors: How many executors the shards run on, rounded up to a power of two: one for an engine of its
        ///     own.
        ///   - outlets: A pool's outlets, which its accounts report to.
        ///   - observer: Receives each event of an engine of its own before any subscriber does; it must return
        ///     quickly and not call the engine.
        ///   - coordination: The fleet's coordinator, if the engine or pool has one.
        init(
            _ configuration: SessionConfiguration, fetcher: any CredentialFetcher, clock: any SessionClock,
            budget: FetchBudget?, timers: DeadlineQueue<TimerTarget>?, executors: Int = 1,
            outlets: SessionPool.Outlets? = nil, observer: (@Sendable (SessionEvent) -> Void)? = nil,
            coordination: FleetCoordination? = nil
        ) {
            session = configuration
            self.outlets = outlets
            self.observer = observer
            machine = SessionStateMachine.Configuration(configuration, coordinated: coordination != nil)
            var ended = SessionStateMachine(configuration: machine, seed: 0)
            let origin = SessionInstant(wall: Date(timeIntervalSince1970: 0), uptime: .zero)
            // A shutdown with no account to leave is prepared at once, as a step would prepare it.
            _ = ended.shutdownRequested(at: origin)
            _ = ended.changePrepared(epoch: ended.epoch, at: origin)
            self.ended = ended
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
            let queue = self.timers
            fleet = coordination.map { coordination in
                FleetGate(
                    coordination, configuration: configuration, clock: clock, timers: queue,
                    taskExecutor: taskExecutor
                ) { [log = configuration.log] change in
                    switch change {
                    case .unavailable(let account, let reason):
                        log?(
                            SessionLogRecord(
                                level: .warning,
                                message: "the fleet's coordinator is unavailable; fetches decide locally",
                                metadata: ["account": account.rawValue, "reason": reason]))
                        outlets?.publish(
                            SessionPoolEvent(account: account, kind: .coordinatorUnavailable(reason: reason)), member: 0
                        )
                    case .available(let account):
                        log?(
                            SessionLogRecord(
                                level: .info, message: "the fleet's coordinator answers again",
                                metadata: ["account": account.rawValue]))
                        outlets?.publish(SessionPoolEvent(account: account, kind: .coordinatorAvailable), member: 0)
                    }
                }
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

    /// The serial executor the shard runs on: the executor of an actor that holds nothing, not a queue of the
    /// shard's own, so that an engine's façade can run on it too.
    ///
    /// An engine's shard has one to itself; a pool's shards each have one of the pool's (``Shared/executors``), so
    /// that accounts' steps run side by side on every core. An ``ExecutingClock``'s executor runs every shard in
    /// place of them.
    nonisolated var unownedExecutor: UnownedSerialExecutor {
        if let actorExecutor = shared.actorExecutor { return actorExecutor.asUnownedSerialExecutor() }
        return shared.executors[executorIndex].unownedExecutor
    }

    /// Gets credentials from the host's backend.
    nonisolated var fetcher: any CredentialFetcher { shared.fetcher }
    /// The source of wall time and sleep.
    nonisolated var clock: any SessionClock { shared.clock }
    /// The pool's budget toward the backend that the shard's fetches share; `nil` for an engine's.
    nonisolated var budget: FetchBudget? { shared.budget }
    /// The deadline queue the shard's timers wait in.
    nonisolated var timers: DeadlineQueue<TimerTarget> { shared.timers }

    /// Renewal, retry and buffering policies.
    nonisolated var configuration: SessionConfiguration { shared.session }

    /// Creates a shard with no account.
    ///
    /// - Parameters:
    ///   - shared: The configuration, fetcher, clock, budget and deadline queue, which the shard shares with the
    ///     pool's other shards.
    ///   - executorIndex: Which of the shared executors the shard runs on.
    ///   - livesPerChunk: How many lives each chunk of ``lives`` holds: one for an engine's shard, more for a pool's.
    ///   - readers: An engine's readers' copy of its one account's read; `nil` for a pool's shard.
    init(
        shared: Shared, executorIndex: Int = 0, livesPerChunk: Int = 1, readers: SessionStore.ReadersCopy? = nil
    ) {
        self.shared = shared
        self.readers = readers
        lives = Lives(chunk: livesPerChunk)
        self.executorIndex = executorIndex & (shared.executors.count - 1)
    }

    /// A shard freed gives back the deadlines of its accounts' grace periods; each account's timer goes with its slot.
    deinit {
        for life in lives.all {
            if let watch = life.gracePeriod?.value { shared.timers.release(watch.deadline) }
        }
    }

    /// Makes the slot of a new account, holding the lowest free number of the shard: synchronous, so that a pool
    /// makes its member in the lock step that checks its cap. The account's life is made by the first step that
    /// names the slot (``lifeIndex(of:)``).
    ///
    /// - Parameters:
    ///   - latencyWindow: How many recent fetches each latency summary of the account's metrics covers.
    ///   - hooks: Account-change hooks registered from the start, in order.
    ///   - membership: The pool's member the account is; `nil` for an engine's.
    nonisolated func reserve(
        latencyWindow: Int, hooks: [@Sendable (AccountChange) async -> Void] = [], membership: Membership?
    ) -> Slot {
        let index = numbers.withLock { $0.reserve(for: membership?.serial ?? 0) }
        return Slot(shard: self, index: index, latencyWindow: latencyWindow, hooks: hooks, membership: membership)
    }

    /// Where the life of `slot`'s account is in ``lives``, made now if no step has named the slot before; `nil` once
    /// the account's life has ended (a pool's account that has shut down), whose slot then decides as a shut-down
    /// account would and performs nothing.
    func lifeIndex(of slot: Slot) -> Int? {
        assert(slot.shard === self, "an account's slot names it in its own shard only")
        let index = slot.index
        if lives.hasRoom(for: index), let serial = lives[index]?.serial { return serial == slot.serial ? index : nil }
        // Not made yet, or ended: only the slot that holds the number makes a life at it.
        guard numbers.withLock({ $0.holder(of: index) }) == slot.serial else { return nil }
        lives.makeRoom(through: index)
        lives[index] = AccountLife(
            serial: slot.serial, machine: SessionStateMachine(configuration: shared.machine, seed: seed(for: slot)),
            hooks: slot.hooks)
        return index
    }

    /// Ends the life of a pool's account once it has shut down, giving its number back for the next account.
    func endLife(at index: Int) {
        lives[index] = nil
        lives.trim()
        numbers.withLock { $0.release(index) }
    }

    /// The seed of an account's jitter: the configuration's, mixed with a pool's account's name, else a random one.
    /// Each account of a pool draws its own jitter: with one seed for all, accounts signed in together would renew
    /// together for ever, and a configured seed stays reproducible.
    private nonisolated func seed(for slot: Slot) -> UInt64 {
        guard let seed = configuration.randomSeed else {
            var system = SystemRandomNumberGenerator()
            return system.next()
        }
        guard let account = slot.membership?.account else { return seed }
        return SplitMix64.seed(from: account.rawValue, mixedWith: seed)
    }

    // MARK: - Waiting callers

    /// Registers a caller for the epoch's next outcome of `kind`, making the account's waiters if none are kept; call
    /// it in the step that decided to wait (``OutcomeWaiters/register(epoch:kind:)``).
    func registerWaiter(_ slot: Slot, epoch: UInt64, kind: SessionStateMachine.WaiterKind) -> OutcomeWaiters.Ticket {
        slot.store.openWaiters().register(epoch: epoch, kind: kind)
    }

    /// Waits for the outcome `ticket` was registered for, and drops the account's waiters afterwards if no caller is
    /// left.
    ///
    /// The caller registers in the step that decided to wait, before it calls this: a call into an actor-isolated
    /// method is a hop the runtime may enqueue (on a custom or a task executor it does), and a step of another job
    /// may run in between; an outcome that comes then is kept for the ticket instead of slipping by.
    func waitForOutcome(_ slot: Slot, _ ticket: OutcomeWaiters.Ticket) async throws -> IdentityCredential {
        defer { dropWaitersIfNone(slot) }
        return try await ticket.waiters.wait(ticket)
    }

    /// Drops the account's waiters once no caller is registered with them; only the actor registers, so none can be
    /// registered meanwhile, and a ticket already handed out holds its own waiters.
    func dropWaitersIfNone(_ slot: Slot) {
        slot.store.dropWaitersIfNone()
    }
}
