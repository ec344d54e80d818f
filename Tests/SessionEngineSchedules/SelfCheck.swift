import SessionEngine
import SessionEngineExplorer

/// The check run before any exploration: the explorer's self-test, with one of the engine's own locks as its lock
/// probe, so that a lock taken by the engine is proved to reach the partial-order reduction.
enum SelfCheck {
    /// The lock the probe takes: the engine's `SanitizedMutex`, which the explorer's target cannot import.
    private static let probeLock = SanitizedMutex(0)

    /// Runs the self-test; returns its report, or throws why it failed.
    static func run() throws(ExplorerError) -> SelfTestReport {
        try Explorer.selfTest(lockProbe: { probeLock.withLock { $0 += 1 } })
    }
}
