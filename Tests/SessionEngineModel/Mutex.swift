import SessionEngine

/// The package's lock, which the thread sanitizer can see, under the name the model harness uses. It shadows
/// `Synchronization.Mutex` in this module.
typealias Mutex<Value: ~Copyable> = SanitizedMutex<Value>
