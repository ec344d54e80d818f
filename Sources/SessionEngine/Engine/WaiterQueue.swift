import CSessionEngineSanitizer

/// Callers parked until a value comes for them, in the order they came: the one queue of every place of the package
/// that parks callers.
///
/// The queue is a value that its owner keeps inside its own lock, beside the state the callers wait on. Checking that
/// state and parking a caller is therefore one lock step, and so is changing it and taking the callers the change
/// wakes: no window opens between the check and the registration, or between the change and its wake-ups. The owner
/// resumes what a step took after releasing its lock (``Wakeups/resume()``), so a woken caller never runs under it.
///
/// A caller may enter in two steps: ``enqueue(_:)`` in the step that decides it waits, and `park(_:_:)` with its ticket
/// when it suspends. A value that comes between the two is kept in its entry, so it cannot slip by. A caller that
/// decides and suspends in one step parks with its key alone.
///
/// Its owners: the callers waiting for an outcome (``OutcomeWaiters``, keyed by epoch and kind), the one-shot signal
/// (``OneShot``: an account change's preparation, a shutdown, a fetch's race, the test kit's gate), the store's drains
/// (keyed by epoch), the event streams' iterators (keyed by subscriber), a transfer's caller (`TransferControl`), and
/// the test kit's clock, executor and scripted fetcher. Design/engine.md, *Parked callers*, lists them.
package struct WaiterQueue<Key, Value: Sendable> {
    /// A caller's place in the queue.
    package struct Ticket: Hashable, Sendable {
        fileprivate let id: UInt64
    }

    private enum Entry {
        /// Entered; the caller has not suspended yet.
        case enqueued(Key)
        /// The caller is suspended.
        case parked(Key, UnsafeContinuation<Value, Never>)
        /// Its value came before the caller suspended.
        case resolved(Value)

        var key: Key? {
            switch self {
            case .enqueued(let key), .parked(let key, _): key
            case .resolved: nil
            }
        }
    }

    /// The continuations a step took and the values they receive, to be resumed after the owner's lock is released.
    ///
    /// Kept in batches, one value each: a resolution wakes every selected caller with one value, which is resumed
    /// into each without a copy of it per caller.
    package struct Wakeups: Sendable {
        private var batches: [(value: Value, continuations: [UnsafeContinuation<Value, Never>])] = []

        /// No wake-ups yet.
        package init() {}

        fileprivate mutating func append(_ continuation: UnsafeContinuation<Value, Never>, _ value: Value) {
            batches.append((value, [continuation]))
        }

        fileprivate mutating func append(_ continuations: [UnsafeContinuation<Value, Never>], _ value: Value) {
            guard !continuations.isEmpty else { return }
            batches.append((value, continuations))
        }

        /// Resumes every caller taken, in the order they entered; call it outside the owner's lock.
        package consuming func resume() {
            for batch in batches {
                for continuation in batch.continuations {
                    continuation.resume(returning: batch.value)
                }
            }
        }
    }

    private var nextID: UInt64 = 0
    /// The entries by ascending ID, in the order they entered; a removed entry leaves `nil` until the next compaction.
    private var entries: [(id: UInt64, entry: Entry?)] = []
    /// How many entries are not `nil`. This count and the next are 32 bits each and share a word: an owner keeps its
    /// queue inline, one per account in a pool.
    private var live: UInt32 = 0
    /// How many entries wait for a value: enqueued or parked.
    private var waitingCount: UInt32 = 0

    /// How many callers wait for a value: entered or parked, not yet given one.
    package var waiting: Int { Int(waitingCount) }

    /// Creates an empty queue.
    package init() {}

    /// Whether no caller is in the queue: none waits, and none holds a value it has not collected.
    package var isEmpty: Bool { live == 0 }

    /// Whether the queue holds storage; an empty queue gives its storage back.
    package var holdsStorage: Bool { entries.capacity > 0 }

    /// The keys of the callers that wait, in the order they entered.
    package var waitingKeys: [Key] { entries.compactMap { $0.entry?.key } }

    /// Enters a caller that will suspend later, with ``park(_:_:)``; call it in the step that decides the caller waits.
    package mutating func enqueue(_ key: Key) -> Ticket {
        nextID += 1
        entries.append((nextID, .enqueued(key)))
        live += 1
        waitingCount += 1
        return Ticket(id: nextID)
    }

    /// Suspends a caller entered with ``enqueue(_:)``.
    ///
    /// - Returns: The value that came for it before it suspended, which the caller resumes with itself; `nil` once it
    ///   is parked.
    package mutating func park(_ ticket: Ticket, _ continuation: UnsafeContinuation<Value, Never>) -> Value? {
        guard let index = index(of: ticket), let entry = entries[index].entry else {
            preconditionFailure("a ticket was parked twice or after it left the queue")
        }
        switch entry {
        case .enqueued(let key):
            entries[index].entry = .parked(key, continuation)
            return nil
        case .resolved(let value):
            remove(at: index)
            return value
        case .parked:
            preconditionFailure("a ticket was parked twice")
        }
    }

    /// Enters and suspends a caller in one step.
    @discardableResult
    package mutating func park(_ key: Key, _ continuation: UnsafeContinuation<Value, Never>) -> Ticket {
        nextID += 1
        entries.append((nextID, .parked(key, continuation)))
        live += 1
        waitingCount += 1
        return Ticket(id: nextID)
    }

    /// Gives one caller its value (a cancellation, a deadline): a parked caller is taken, one not yet parked keeps the
    /// value for ``park(_:_:)``, and one that already has a value or has left is left alone.
    ///
    /// - Returns: Whether the caller was waiting and now has `value`.
    @discardableResult
    package mutating func resolve(_ ticket: Ticket, with value: Value, into wakeups: inout Wakeups) -> Bool {
        guard let index = index(of: ticket), let entry = entries[index].entry, entry.key != nil else { return false }
        waitingCount -= 1
        defer { compact() }
        if case .parked(_, let continuation) = entry {
            wakeups.append(continuation, value)
            entries[index].entry = nil
            live -= 1
        } else {
            entries[index].entry = .resolved(value)
        }
        return true
    }

    /// Gives every waiting caller whose key is `selected` the value `value`, in the order they entered.
    ///
    /// - Returns: How many callers it gave the value.
    @discardableResult
    package mutating func resolve(
        where selected: (Key) -> Bool, with value: Value, into wakeups: inout Wakeups
    ) -> Int {
        guard waitingCount > 0 else { return 0 }
        var resolved = 0
        var parked: [UnsafeContinuation<Value, Never>] = []
        for index in entries.indices {
            guard let entry = entries[index].entry else { continue }
            switch entry {
            case .parked(let key, let continuation):
                guard selected(key) else { continue }
                parked.append(continuation)
                entries[index].entry = nil
                live -= 1
            case .enqueued(let key):
                guard selected(key) else { continue }
                entries[index].entry = .resolved(value)
            case .resolved:
                continue
            }
            waitingCount -= 1
            resolved += 1
        }
        wakeups.append(parked, value)
        compact()
        return resolved
    }

    /// Gives every waiting caller `value`, in the order they entered.
    package mutating func resolveAll(with value: Value, into wakeups: inout Wakeups) {
        resolve(where: { _ in true }, with: value, into: &wakeups)
    }

    /// Gives the caller that has waited longest `value`.
    ///
    /// - Returns: Whether a caller was waiting.
    @discardableResult
    package mutating func resolveFirst(with value: Value, into wakeups: inout Wakeups) -> Bool {
        var first = true
        return resolve(
            where: { _ in
                defer { first = false }
                return first
            }, with: value, into: &wakeups) > 0
    }

    /// The position of `ticket`'s entry: the last entry most often (a caller parks right after it enters), else a
    /// binary search of the ascending IDs.
    private func index(of ticket: Ticket) -> Int? {
        if let last = entries.indices.last, entries[last].id == ticket.id { return last }
        var low = 0
        var high = entries.count
        while low < high {
            let middle = (low + high) / 2
            if entries[middle].id < ticket.id { low = middle + 1 } else { high = middle }
        }
        return low < entries.count && entries[low].id == ticket.id ? low : nil
    }

    private mutating func remove(at index: Int) {
        entries[index].entry = nil
        live -= 1
        compact()
    }

    /// Drops removed entries once they are most of the queue, and the storage with the last live entry, so an owner
    /// that parked callers once (one per account in a pool) does not keep the storage.
    private mutating func compact() {
        if live == 0 {
            entries = []
        } else if entries.count > 2 * Int(live) + 64 {
            entries.removeAll { element in
                guard case .some = element.entry else { return true }
                return false
            }
        }
    }
}

/// Whether ``withParkedContinuation(isolation:_:)`` tells a thread sanitizer about hand-overs: only in a
/// `--sanitize=thread` build. The weak hooks alone may also resolve to another observer of the package's locks (the
/// schedule explorer's), which expects lock addresses and nothing else.
private let annotatesHandOvers =
    se_sanitizer_thread_sanitizer_compiled() != 0 && se_sanitizer_thread_annotations_enabled() != 0

/// Suspends the calling task with a continuation that `park` hands to a waiter queue (or resumes at once), and
/// returns the value it is resumed with: the one way a caller of the package suspends on a ``WaiterQueue``.
///
/// It adds one thing to `withUnsafeContinuation`: the thread sanitizer's view of the hand-over. A caller parks inside
/// `park`, before the task has suspended, so another thread may resume it first. The runtime then marks the
/// continuation resumed, and the task, reaching its suspension, sees the mark and goes on at once, without suspending.
/// The runtime tells the sanitizer about the resume (`_swift_tsan_release` on the task, in
/// `resumeTaskAfterContinuation`) but not about that early path of the await, which orders itself with atomics the
/// sanitizer cannot see (`swift_continuation_await`, 6.3): the sanitizer reports the resumer's last read of the
/// continuation's context and the task's next write to the same memory as a race. Called after the await, the
/// acquire on the task's address is the one the early path leaves out. Without the sanitizer it is one branch.
///
/// A program of two threads and one `Synchronization.Mutex` shows it, in three runs of 20,000 hand-overs each: with
/// `withUnsafeContinuation` alone the sanitizer reported the race in every run, with this acquire after it in none.
///
/// - Parameters:
///   - isolation: The caller's isolation, kept across the suspension.
///   - park: Parks the continuation in its owner's queue under the owner's lock, or resumes it.
/// - Returns: The value the continuation was resumed with.
@inline(__always)
package func withParkedContinuation<Value>(
    isolation: isolated (any Actor)? = #isolation,
    _ park: (UnsafeContinuation<Value, Never>) -> Void
) async -> sending Value {
    let value = await withUnsafeContinuation(isolation: isolation, park)
    if annotatesHandOvers {
        withUnsafeCurrentTask { task in
            // `UnsafeCurrentTask` is the task's reference and nothing else; the runtime releases on that address.
            if let task { se_sanitizer_acquire(unsafeBitCast(task, to: UnsafeRawPointer.self)) }
        }
    }
    return value
}
