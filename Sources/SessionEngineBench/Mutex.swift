import SessionEngine

/// The package's lock under the name the benchmarks use; it shadows `Synchronization.Mutex` in this module.
///
/// The hot path's baseline spells `Synchronization.Mutex` out: it measures the bare standard lock.
typealias Mutex<Value: ~Copyable> = SanitizedMutex<Value>
