import SessionEngineModel
import Testing

/// The suites' time limits, which turn a hang into a failed test instead of a run that never ends.
///
/// Under the thread sanitizer each limit is five times longer: the sanitizer slows the engine about tenfold, and the
/// suite's heavy synchronous tests (the signer's vectors, the SHA-256 and decoding properties) hold the concurrency
/// runtime's threads for about a minute on a 2-core machine, which the quick tests spend waiting for a thread. With
/// one-minute limits, a sanitizer run beside another busy process failed 69 tests that had not hung.
enum TimeLimits {
    /// `count` minutes, five times that under the thread sanitizer.
    static func minutes(_ count: Int) -> TimeLimitTrait.Duration {
        .minutes(PropertySettings.isThreadSanitizerLoaded ? count * 5 : count)
    }
}
