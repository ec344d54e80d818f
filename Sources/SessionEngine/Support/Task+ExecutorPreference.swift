/// Starting a task on a preferred executor only when there is one.
///
/// `Task(executorPreference: nil)` is documented as a task with no preference, but in Swift 6.3 it is not a plain
/// `Task {}`: the runtime marks it as having a preference, and every time the task is enqueued (its start, and each
/// resumption after a suspension) it looks the preference up under the task's status lock. An account change with
/// 10,000 scoped bodies in flight took about a fifth longer for it (Design/engine.md, *Tasks and their executor*). The
/// engine's and the pool's tasks have a preference only when the configuration or the clock names a task executor,
/// so every task starts through these two functions. They take an `@isolated(any)` closure, as `Task.init` does, and
/// are always inlined: a plain closure type cost each task a conversion thunk.
extension Task where Failure == Never {
    /// Starts `operation` in a new task that prefers `executor`, or in a plain task when there is none.
    @discardableResult
    @inline(__always)
    static func start(
        preferring executor: (any TaskExecutor)?, _ operation: sending @escaping @isolated(any) () async -> Success
    ) -> Task {
        guard let executor else { return Task(operation: operation) }
        return Task(executorPreference: executor, operation: operation)
    }
}

extension Task where Failure == any Error {
    /// Starts the throwing `operation` in a new task that prefers `executor`, or in a plain task when there is none.
    @discardableResult
    @inline(__always)
    static func start(
        preferring executor: (any TaskExecutor)?,
        _ operation: sending @escaping @isolated(any) () async throws -> Success
    ) -> Task {
        guard let executor else { return Task(operation: operation) }
        return Task(executorPreference: executor, operation: operation)
    }
}
