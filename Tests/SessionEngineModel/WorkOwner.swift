import SessionEngine
package import SessionEngineTestKit

/// Who runs a program's work and says when none of it can run: the manual clock's executor in the test suite, the
/// schedule explorer in SessionEngineSchedules.
///
/// Every task the drivers start prefers ``taskExecutor``, and the engines run there too, so ``waitUntilIdle()`` sees
/// all of a program's work: the engine counts nothing for it.
package struct WorkOwner: Sendable {
    /// The executor every task of the program prefers.
    package let taskExecutor: any TaskExecutor
    /// Whether engines and pools are configured with ``taskExecutor``; otherwise they run on their manual clock's
    /// executor, which is ``taskExecutor``.
    package let configuresEngines: Bool
    /// Returns once none of the program's work can run until the driver acts.
    package let waitUntilIdle: @Sendable () async -> Void

    /// An owner whose work runs on `executor`, which the engines are configured with, and is idle when
    /// `waitUntilIdle` says so: the schedule explorer's.
    ///
    /// - Parameters:
    ///   - executor: The explorer's task executor.
    ///   - waitUntilIdle: The explorer's wait for a quiescent run.
    package init(explorer executor: any TaskExecutor, waitUntilIdle: @escaping @Sendable () async -> Void) {
        self.taskExecutor = executor
        self.configuresEngines = true
        self.waitUntilIdle = waitUntilIdle
    }

    /// The owner of a program on `clock`: its executor runs the engines and the program's tasks.
    ///
    /// - Parameter clock: The program's manual clock.
    package init(clock: ManualClock) {
        let executor = clock.executor
        self.taskExecutor = executor
        self.configuresEngines = false
        self.waitUntilIdle = { await executor.waitUntilIdle() }
    }

    /// The task executor for an engine's or a pool's configuration.
    package var configuredExecutor: (any TaskExecutor)? { configuresEngines ? taskExecutor : nil }

    /// Starts `body` in a task that prefers ``taskExecutor``.
    ///
    /// - Parameter body: The task's work.
    /// - Returns: The task.
    @discardableResult
    package func start<T: Sendable>(_ body: @escaping @Sendable () async -> T) -> Task<T, Never> {
        Task(executorPreference: taskExecutor, operation: body)
    }
}
