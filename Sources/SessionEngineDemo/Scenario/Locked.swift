import Synchronization

/// A value behind a lock, shared between tasks.
final class Locked<Value: Sendable>: Sendable {
    private let mutex: Mutex<Value>

    init(_ value: Value) {
        mutex = Mutex(value)
    }

    /// Runs `body` with the value, under the lock.
    func withLock<Result: Sendable, Failure: Error>(_ body: (inout Value) throws(Failure) -> Result) throws(Failure)
        -> Result
    {
        try mutex.withLock { (value: inout sending Value) throws(Failure) -> Result in try body(&value) }
    }
}
