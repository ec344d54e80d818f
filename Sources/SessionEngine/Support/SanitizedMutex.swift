import CSessionEngineSanitizer
import Synchronization

/// `Synchronization.Mutex` with thread-sanitizer annotations: the one lock of the package.
///
/// On Linux, `Synchronization.Mutex` locks with a futex inside the precompiled Synchronization library, which the
/// thread sanitizer does not instrument: it sees the accesses a lock protects but not the lock, and reports every
/// one of them as a race. This lock locks with a `Synchronization.Mutex` and tells the sanitizer about the
/// happens-before edge the lock provides (`__tsan_acquire` after locking, `__tsan_release` before unlocking), through
/// the inline functions of the `CSessionEngineSanitizer` C target. A build with `--sanitize=thread` gets the
/// annotations with no extra flag; in any other build they reduce to a never-taken branch, so a lock costs what
/// `Synchronization.Mutex` costs plus one call (``withLock(_:)`` says why it is never inlined).
///
/// The package's code names it `SanitizedMutex` wherever it locks, so no file has to know that a shorter name would
/// shadow `Synchronization.Mutex`, and `Mutex` in any of its files is always the standard one.
///
/// Benchmarks that measure a bare lock use `Synchronization.Mutex`.
package struct SanitizedMutex<Value: ~Copyable>: ~Copyable {
    /// The lock that does the locking.
    let base: Synchronization.Mutex<Value>

    /// Creates a lock protecting `initialValue`.
    package init(_ initialValue: consuming sending Value) {
        base = Synchronization.Mutex(initialValue)
    }

    /// Runs `body` with exclusive access to the protected value.
    ///
    /// Never inlined, on purpose. On Linux, `Synchronization.Mutex` locks with the calling thread's ID, which it caches
    /// in a thread-local variable, and the optimizer may compute that variable's address once in an `async` function
    /// and keep it across an `await`. A lock inlined after the `await` then locks with the ID of the thread the task
    /// ran on before it, and the unlock, on the current thread, fails with "Call to unlock Mutex on a thread which
    /// hasn't acquired the lock". Out of line, the lock and the unlock read the ID in a synchronous function of their
    /// own, on the thread that runs them. A release build of `SessionEngine.dropWaitersIfNone()` inlined after the wait
    /// for a sign-in's outcome crashed this way. The cost is one call per lock; the hot read takes
    /// ``withLockInlined(_:)`` instead, inside a function that is never inlined.
    ///
    /// - Parameter body: The critical section; it must not call `withLock` on the same lock.
    /// - Returns: What `body` returns.
    /// - Throws: What `body` throws.
    @inline(never)
    package borrowing func withLock<Result: ~Copyable, E: Error>(
        _ body: (inout sending Value) throws(E) -> sending Result
    ) throws(E) -> sending Result {
        try withLockInlined(body)
    }

    /// ``withLock(_:)`` inlined into its caller, for the read every identified request makes.
    ///
    /// Only in a synchronous function that is never inlined (`@inline(never)`), or inlined only into such a function,
    /// so that the lock never lands in an `async` function, where ``withLock(_:)`` says what goes wrong. In CI,
    /// `Scripts/check-thread-ids.py` scans the release binaries for a lock that did.
    ///
    /// - Parameter body: The critical section; it must not call `withLock` on the same lock.
    /// - Returns: What `body` returns.
    /// - Throws: What `body` throws.
    @inline(__always)
    package borrowing func withLockInlined<Result: ~Copyable, E: Error>(
        _ body: (inout sending Value) throws(E) -> sending Result
    ) throws(E) -> sending Result {
        // The sanitizer only uses the address as the lock's identity and never reads through it. The lock cannot move
        // while it is borrowed, and a move needs exclusive ownership, which orders it after every earlier critical
        // section.
        let identity = withUnsafePointer(to: self) { UnsafeRawPointer($0) }
        return try base.withLock { (value: inout sending Value) throws(E) -> sending Result in
            se_sanitizer_acquire(identity)
            defer { se_sanitizer_release(identity) }
            return try body(&value)
        }
    }

    /// Whether the locks tell a thread sanitizer about themselves in this process: true when the sanitizer's
    /// runtime is linked (on Linux and other ELF platforms), false otherwise.
    package static var annotatesForThreadSanitizer: Bool {
        se_sanitizer_thread_annotations_enabled() != 0
    }
}

extension SanitizedMutex: Sendable where Value: ~Copyable {}
