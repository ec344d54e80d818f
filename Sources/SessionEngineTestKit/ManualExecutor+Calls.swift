extension ManualExecutor {
    /// Starts `count` tasks with `make` on this executor and returns once none of the executor's work can run: each
    /// call has entered the engine and parked or returned. What `startCall(_:)` and `startCalls(_:_:)` do for an
    /// engine and for a pool.
    ///
    /// - Parameters:
    ///   - count: How many tasks to start.
    ///   - make: Starts the task of the call with this index, preferring the given executor's ``taskExecutor``.
    /// - Returns: The tasks, in the order they were started.
    func startCalls<T: Sendable>(
        _ count: Int, _ make: (ManualExecutor, Int) -> Task<T, any Error>
    ) async -> [Task<T, any Error>] {
        let tasks = (0..<max(0, count)).map { make(self, $0) }
        await waitUntilIdle()
        return tasks
    }
}
