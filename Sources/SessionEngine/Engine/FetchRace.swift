import Synchronization

/// One call out of the engine, to the fetcher or to a fleet's coordinator, raced against its deadline
/// (``SessionConfiguration/fetchTimeout``, ``FleetCoordination/callTimeout``) and against the cancellation of the
/// task that waits for it: the first of the three to happen decides, and the waiting task goes on at once, whether or
/// not the call has returned.
///
/// The call runs in a task of its own, so a fetcher that ignores cancellation holds neither the engine's fetch task
/// nor the pool's budget slot: the fetch task releases the slot as soon as the race is decided. A result that arrives
/// after the deadline or the cancellation is dropped here, as the machine drops any stale result.
enum FetchRace {
    /// How the race was decided.
    enum Outcome<Value: Sendable>: Sendable {
        /// The call returned before the deadline.
        case finished(Value)
        /// The deadline passed first; the call had not returned.
        case timedOut
        /// The waiting task was cancelled first (an account change, a sign-out, shutdown).
        case cancelled
    }

    /// Runs `request` on `fetcher` and waits for the first of its result, its deadline `timeout` on `clock`, and the
    /// calling task's cancellation.
    ///
    /// - Parameters:
    ///   - request: The fetch, as the budget admitted it.
    ///   - fetcher: The host's backend.
    ///   - timeout: How long the fetcher may take.
    ///   - clock: The engine's clock, which the deadline is on.
    ///   - timers: The engine's deadline queue, which holds the deadline: a slot for the fetch's life, not a task
    ///     sleeping until the deadline whatever comes first (a cancelled sleep keeps its timer until it was due).
    ///   - taskExecutor: The executor the fetcher's task prefers.
    ///   - calling: Runs in the job that calls the fetcher, right before the call; never for a fetch abandoned
    ///     before it.
    /// - Returns: What decided the race.
    static func run(
        _ request: FetchRequest,
        on fetcher: any CredentialFetcher,
        timeout: Duration,
        clock: any SessionClock,
        timers: DeadlineQueue<AccountShard.TimerTarget>,
        taskExecutor: (any TaskExecutor)?,
        calling: @escaping @Sendable () -> Void
    ) async -> Outcome<Result<FetchedCredential, any Error>> {
        // The race is run here rather than through `call(timeout:clock:timers:taskExecutor:late:_:)`: every fetch of
        // every account comes through this function, and one async frame more on that path changed what the thread
        // sanitizer sees of the test kit's parallel executor (the model tests under it, 2 reports in 7 runs against 0
        // in 10 before). The two must decide alike.
        let race = OneShot<Outcome<Result<FetchedCredential, any Error>>>()
        let calling = PendingCall(calling)
        let fetch = Task.start(preferring: taskExecutor) {
            // Abandoned before it first ran (the account session ended): its request never reaches the backend,
            // which by now may be serving the next account's hooks. Checked in the job that calls the fetcher.
            guard !Task.isCancelled, !race.isOpen else { return }
            calling.run()
            let result: Result<FetchedCredential, any Error>
            do {
                result = .success(try await fetcher.fetch(request))
            } catch {
                result = .failure(error)
            }
            race.open(with: .finished(result))
        }
        let deadline = AccountShard.setDeadline(in: timers, on: clock, after: timeout) {
            race.open(with: .timedOut)
        }
        let outcome = await withTaskCancellationHandler {
            await race.value()
        } onCancel: {
            race.open(with: .cancelled)
            fetch.cancel()
        }
        timers.release(deadline)
        if case .finished = outcome {} else { fetch.cancel() }
        return outcome
    }

    /// Runs `body` in a task of its own and waits for the first of its result, its deadline `timeout` on `clock`,
    /// and the calling task's cancellation.
    ///
    /// - Parameters:
    ///   - timeout: How long `body` may take.
    ///   - clock: The clock the deadline is on.
    ///   - timers: The deadline queue that holds the deadline.
    ///   - taskExecutor: The executor the call's task prefers.
    ///   - late: Receives what `body` returned after the race was decided without it (its deadline passed, or the
    ///     waiting task was cancelled), for a value that holds something to give back.
    ///   - body: The call; never started once the race is decided, or when the call's task is cancelled before it
    ///     first runs.
    /// - Returns: What decided the race.
    static func call<Value: Sendable>(
        timeout: Duration,
        clock: any SessionClock,
        timers: DeadlineQueue<AccountShard.TimerTarget>,
        taskExecutor: (any TaskExecutor)?,
        late: (@Sendable (Value) -> Void)? = nil,
        _ body: @escaping @Sendable () async -> Value
    ) async -> Outcome<Value> {
        let race = OneShot<Outcome<Value>>()
        let task = Task.start(preferring: taskExecutor) {
            // Abandoned before it first ran (the account session ended): its request never reaches the backend,
            // which by now may be serving the next account's hooks. Checked in the job that makes the call.
            guard !Task.isCancelled, !race.isOpen else { return }
            let value = await body()
            if !race.open(with: .finished(value)) { late?(value) }
        }
        let deadline = AccountShard.setDeadline(in: timers, on: clock, after: timeout) {
            race.open(with: .timedOut)
        }
        let outcome = await withTaskCancellationHandler {
            await race.value()
        } onCancel: {
            race.open(with: .cancelled)
            task.cancel()
        }
        timers.release(deadline)
        if case .finished = outcome {} else { task.cancel() }
        return outcome
    }

    /// Waits `duration` on `clock`, in the deadline queue `timers`.
    ///
    /// - Returns: `false` when the calling task was cancelled first.
    static func sleep(
        for duration: Duration, clock: any SessionClock, timers: DeadlineQueue<AccountShard.TimerTarget>
    ) async -> Bool {
        let woken = OneShot<Bool>()
        let deadline = AccountShard.setDeadline(in: timers, on: clock, after: duration) { woken.open(with: true) }
        let slept = await withTaskCancellationHandler {
            await woken.value()
        } onCancel: {
            woken.open(with: false)
        }
        timers.release(deadline)
        return slept
    }

    /// The call the fetcher's task makes right before it calls the fetcher, let go once made: a fetcher that never
    /// returns keeps its task, and so this box, for good, but not what the call captured (the engine, whose metrics
    /// it counts the fetch in).
    private final class PendingCall: Sendable {
        private let call: SanitizedMutex<(@Sendable () -> Void)?>

        init(_ call: @escaping @Sendable () -> Void) {
            self.call = SanitizedMutex(call)
        }

        /// Makes the call, once.
        func run() {
            call.withLock { $0.take() }?()
        }
    }
}
