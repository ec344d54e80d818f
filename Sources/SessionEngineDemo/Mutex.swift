import SessionEngine

/// The package's lock, which the thread sanitizer can see, under the name the demo uses. It shadows
/// `Synchronization.Mutex` in this module, so the demo runs under `--sanitize=thread` without false reports.
typealias Mutex<Value: ~Copyable> = SanitizedMutex<Value>
