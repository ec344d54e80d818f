public import SessionEngine

extension SessionPool {
    /// Suspends until every account of the pool is idle, as ``SessionEngine/SessionEngine/waitUntilIdle()`` does for
    /// one engine: nothing changes until the test advances the clock, answers a fetch or calls the pool. A fetch
    /// waiting for the pool's budget is parked until time passes or another fetch ends.
    ///
    /// - Precondition: The pool runs on a ``ManualClock``.
    public func waitUntilIdle() async {
        await requireExecutor().waitUntilIdle()
    }

    /// Starts `call` in a new task and returns once it has entered an account's engine and the pool is idle again,
    /// as ``SessionEngine/SessionEngine/startCall(_:)`` does.
    ///
    /// - Precondition: The pool runs on a ``ManualClock``.
    /// - Parameter call: The call, given the pool; it must begin with one of the pool's asynchronous methods that
    ///   reaches an account (a sign-in, a renewal, work).
    /// - Returns: The task running the call.
    @discardableResult
    public func startCall<T: Sendable>(
        _ call: @escaping @Sendable (SessionPool) async throws -> T
    ) async -> Task<T, any Error> {
        await requireExecutor().startCalls(1) { executor, _ in
            Task(executorPreference: executor.taskExecutor) { try await call(self) }
        }[0]
    }

    /// Starts `count` calls at once, each in a task of its own, and returns once all have entered and the pool is
    /// idle again; they race.
    ///
    /// - Precondition: The pool runs on a ``ManualClock``.
    /// - Parameters:
    ///   - count: How many calls to start.
    ///   - call: The call, given the pool and the call's index.
    /// - Returns: The tasks, in the order they were started.
    public func startCalls<T: Sendable>(
        _ count: Int,
        _ call: @escaping @Sendable (SessionPool, Int) async throws -> T
    ) async -> [Task<T, any Error>] {
        await requireExecutor().startCalls(count) { executor, index in
            Task(executorPreference: executor.taskExecutor) { try await call(self, index) }
        }
    }

    private func requireExecutor() -> ManualExecutor {
        guard let executor = clockExecutor as? ManualExecutor else {
            preconditionFailure("waiting for an idle pool needs a pool on a ManualClock")
        }
        return executor
    }
}
