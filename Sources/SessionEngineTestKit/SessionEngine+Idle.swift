public import SessionEngine

extension SessionEngine {
    /// Suspends until the engine is idle: none of its work can run until the test acts.
    ///
    /// The engine runs its actor and its tasks on the ``ManualClock``'s ``ManualExecutor``, and is idle when that
    /// executor has no job left: each of its tasks and each call inside it is asleep on the clock, held by a
    /// ``ScriptedCredentialFetcher`` or a ``Gate``, waiting for a fetch outcome, or waiting for scoped work that is
    /// itself held. From then on nothing changes until the test advances the clock, answers a fetch, opens a gate or
    /// calls the engine. Every engine and pool on the same clock shares its executor, so this waits for all of them.
    ///
    /// The engine counts nothing for this wait; the executor sees every job. It never polls and never waits on real
    /// time.
    ///
    /// A call started in a task of the test's own runs partly off the executor: start such calls with
    /// ``startCall(_:)``, whose task prefers the executor.
    ///
    /// - Precondition: The engine runs on a ``ManualClock``.
    public nonisolated func waitUntilIdle() async {
        await requireExecutor().waitUntilIdle()
    }

    /// Starts `call` in a new task and returns once the call has entered the engine and the engine is idle again.
    ///
    /// The call's task prefers the clock's executor, so the whole call, inside the engine and out, is work the
    /// executor sees. A call that waits, for a fetch or for scoped work, has no job meanwhile, so the engine can be
    /// idle while it waits.
    /// Start calls one after another from one task: the engine receives them in that order.
    ///
    /// - Precondition: The engine runs on a ``ManualClock``.
    /// - Parameter call: The call, given the engine.
    /// - Returns: The task running the call, to await its result.
    @discardableResult
    public nonisolated func startCall<T: Sendable>(
        _ call: @escaping @Sendable (SessionEngine) async throws -> T
    ) async -> Task<T, any Error> {
        await requireExecutor().startCalls(1) { executor, _ in
            Task(executorPreference: executor.taskExecutor) { try await call(self) }
        }[0]
    }

    /// Starts `count` calls at once, each in a task of its own, and returns once all of them have entered the engine
    /// and the engine is idle again.
    ///
    /// Unlike calls started one by one with ``startCall(_:)``, these race: the engine may receive them in any order.
    /// Each call must begin with one of the engine's asynchronous methods, as with ``startCall(_:)``.
    ///
    /// - Precondition: The engine runs on a ``ManualClock``.
    /// - Parameters:
    ///   - count: How many calls to start.
    ///   - call: The call, given the engine and the call's index.
    /// - Returns: The tasks running the calls, in the order they were started.
    public nonisolated func startCalls<T: Sendable>(
        _ count: Int,
        _ call: @escaping @Sendable (SessionEngine, Int) async throws -> T
    ) async -> [Task<T, any Error>] {
        await requireExecutor().startCalls(count) { executor, index in
            Task(executorPreference: executor.taskExecutor) { try await call(self, index) }
        }
    }

    private nonisolated func requireExecutor() -> ManualExecutor {
        guard let executor = clockExecutor as? ManualExecutor else {
            preconditionFailure("waiting for an idle engine needs an engine on a ManualClock")
        }
        return executor
    }
}
