import SessionEngine

/// A value behind the package's lock, shared between tasks: the one lock box of the package's tests, demo and
/// benchmarks.
package final class Locked<Value: Sendable>: Sendable {
    private let mutex: SanitizedMutex<Value>

    /// Creates a box holding `value`.
    package init(_ value: Value) {
        mutex = SanitizedMutex(value)
    }

    /// The value, read under the lock.
    package var value: Value { mutex.withLock { $0 } }

    /// Runs `body` with the value, under the lock.
    package func withLock<Result: Sendable, Failure: Error>(_ body: (inout Value) throws(Failure) -> Result)
        throws(Failure)
        -> Result
    {
        try mutex.withLock { (value: inout sending Value) throws(Failure) -> Result in try body(&value) }
    }
}

extension Locked {
    /// Creates an empty list, for recording values in order.
    package convenience init<Element>() where Value == [Element] {
        self.init([])
    }

    /// Appends a value to the list.
    package func append<Element>(_ element: Element) where Value == [Element] {
        withLock { $0.append(element) }
    }

    /// The values recorded so far, in order.
    package var values: Value { value }
}
