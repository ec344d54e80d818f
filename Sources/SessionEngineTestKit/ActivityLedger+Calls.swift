import SessionEngine

extension ActivityLedger {
    /// Starts `count` tasks with `make` and returns once all of them have entered an engine and the ledger is idle
    /// again: what `startCall(_:)` and `startCalls(_:_:)` do for an engine and for a pool.
    ///
    /// - Parameters:
    ///   - count: How many tasks to start.
    ///   - make: Starts the task of the call with this index; the call must begin with an engine's asynchronous
    ///     method.
    /// - Returns: The tasks, in the order they were started.
    func startCalls<T: Sendable>(_ count: Int, _ make: (Int) -> Task<T, any Error>) async -> [Task<T, any Error>] {
        let entered = callsEntered + UInt64(max(0, count))
        let tasks = (0..<max(0, count)).map(make)
        await waitUntilIdle(callsEntered: entered)
        return tasks
    }
}
