public import SessionEngine

extension SessionEngine {
    /// Suspends until the engine is idle: none of its work can run until the test acts.
    ///
    /// The engine is idle when each of its tasks and each call inside it is parked: asleep on the ``ManualClock``,
    /// held by a ``ScriptedCredentialFetcher`` or a ``Gate``, waiting for a fetch outcome, or waiting for scoped work
    /// that is itself parked. From then on nothing changes until the test advances the clock, answers a fetch, opens
    /// a gate or calls the engine. Every engine on the same clock shares one ledger, so this waits for all of them.
    ///
    /// The wait is built on counters the engine keeps as it parks and wakes its work, and a continuation resumed
    /// when they reach zero; it never polls and never waits on real time.
    ///
    /// A call started in another task counts only once it has entered the engine: start such calls with
    /// ``startCall(_:)``, which waits for that.
    ///
    /// - Precondition: The engine runs on a ``ManualClock``.
    public nonisolated func waitUntilIdle() async {
        await requireLedger().waitUntilIdle()
    }

    /// Starts `call` in a new task and returns once the call has entered the engine and the engine is idle again.
    ///
    /// `call` must begin with one of the engine's asynchronous methods: each of them counts as a call from the
    /// moment it runs inside the engine. A call that waits, for a fetch or for scoped work, is parked, so the engine
    /// can be idle while it waits.
    /// Start calls one after another from one task: the engine receives them in that order.
    ///
    /// - Precondition: The engine runs on a ``ManualClock``.
    /// - Parameter call: The call, given the engine.
    /// - Returns: The task running the call, to await its result.
    @discardableResult
    public nonisolated func startCall<T: Sendable>(
        _ call: @escaping @Sendable (SessionEngine) async throws -> T
    ) async -> Task<T, any Error> {
        await requireLedger().startCalls(1) { _ in Task { try await call(self) } }[0]
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
        await requireLedger().startCalls(count) { index in Task { try await call(self, index) } }
    }

    private nonisolated func requireLedger() -> ActivityLedger {
        guard let ledger else { preconditionFailure("waiting for an idle engine needs an engine on a ManualClock") }
        return ledger
    }
}
