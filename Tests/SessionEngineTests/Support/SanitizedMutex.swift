#if SESSIONENGINE_TSAN
    import Synchronization

    // Built only with `-Xswiftc -DSESSIONENGINE_TSAN`, together with `--sanitize=thread` (see `.ci/run`). It is the
    // twin of the library's `Support/SanitizedMutex.swift`, for the test module's own locks.
    //
    // On Linux, `Synchronization.Mutex` locks with a futex inside the precompiled Synchronization library, which the
    // thread sanitizer does not instrument: it sees the protected accesses but not the lock, and reports every one of
    // them as a race. Under the sanitizer this type shadows `Mutex` in the test module: it locks with the real `Mutex` and
    // tells the sanitizer about the happens-before edge that lock provides, so only real races are reported.

    @_silgen_name("__tsan_acquire")
    private func sanitizerAcquire(_ address: UnsafeRawPointer)

    @_silgen_name("__tsan_release")
    private func sanitizerRelease(_ address: UnsafeRawPointer)

    /// The identity the sanitizer tracks for one lock.
    private final class SanitizerLockIdentity: Sendable {}

    /// `Synchronization.Mutex` with thread-sanitizer annotations.
    struct Mutex<Value: ~Copyable>: ~Copyable {
        private let base: Synchronization.Mutex<Value>
        private let identity = SanitizerLockIdentity()

        /// Creates a lock protecting `initialValue`.
        init(_ initialValue: consuming sending Value) {
            base = Synchronization.Mutex(initialValue)
        }

        /// Runs `body` with exclusive access to the value.
        borrowing func withLock<Result: ~Copyable, E: Error>(
            _ body: (inout sending Value) throws(E) -> sending Result
        ) throws(E) -> sending Result {
            let address = UnsafeRawPointer(Unmanaged.passUnretained(identity).toOpaque())
            return try base.withLock { (value: inout sending Value) throws(E) -> sending Result in
                sanitizerAcquire(address)
                defer { sanitizerRelease(address) }
                return try body(&value)
            }
        }
    }

    extension Mutex: Sendable where Value: ~Copyable {}
#endif
