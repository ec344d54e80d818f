import SessionEngine

/// A one-shot signal that tasks wait at until the test opens it, optionally carrying a value to every waiter.
///
/// Code the engine runs (an account-change hook, scoped work, a fetcher) can wait at a gate, and so can the test's
/// own tasks: a gate opens once and stays open, and every waiter, earlier or later, passes. A task waiting at the gate
/// has no job on the clock's ``ManualExecutor``, like a fetch the script holds, so a test can hold an account change
/// inside its hooks, wait until everything else has settled (``SessionEngine/SessionEngine/waitUntilIdle()``), act,
/// and then open the gate. Waiting ignores cancellation: a waiter leaves only when the gate opens.
public final class Gate: Sendable {
    private let opened = OneShot<(any Sendable)?>()

    /// Creates a closed gate.
    public init() {}

    /// Creates a closed gate.
    ///
    /// - Parameter clock: The clock whose engines' work waits at the gate; kept for source compatibility, the gate
    ///   needs nothing of it.
    public init(clock: ManualClock) {}

    /// Whether anyone waits at the gate.
    public var isHolding: Bool { opened.waiting > 0 }

    /// Whether the gate has been opened.
    public var isOpen: Bool { opened.isOpen }

    /// Waits until the gate opens; returns at once if it is open.
    public func wait() async {
        _ = await opened.value()
    }

    /// Waits until the gate opens and returns the value it was opened with.
    ///
    /// - Parameter type: The type of value the gate carries.
    /// - Returns: The value ``open(with:)`` gave; `nil` when the gate was opened with ``open()`` or with a value of
    ///   another type.
    public func value<Value: Sendable>(as type: Value.Type = Value.self) async -> Value? {
        await opened.value() as? Value
    }

    /// Opens the gate for good and lets every waiter through; a gate already open stays as it is.
    public func open() {
        opened.open(with: nil)
    }

    /// Opens the gate for good with a value every waiter receives; a gate already open keeps its first value.
    ///
    /// - Parameter value: The value ``value(as:)`` returns to every waiter.
    public func open(with value: some Sendable) {
        opened.open(with: value)
    }
}
