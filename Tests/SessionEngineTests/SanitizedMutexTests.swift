import CSessionEngineSanitizer
import Foundation
import Testing

@testable import SessionEngine

@Suite struct SanitizedMutexTests {
    /// The annotations are live exactly in a `--sanitize=thread` build, with no other flag: the C target's own
    /// sources (compiled with the sanitizer's compiler flags) and the inline functions as Swift calls them agree.
    @Test func annotationsAreLiveExactlyUnderTheThreadSanitizer() {
        let sanitizerBuild = se_sanitizer_thread_sanitizer_compiled() != 0
        #if os(Linux)
            let runtimeLoaded = dlsym(nil, "__tsan_init") != nil
            #expect(sanitizerBuild == runtimeLoaded)
            #expect(SanitizedMutex<Int>.annotatesForThreadSanitizer == runtimeLoaded)
        #else
            #expect(!SanitizedMutex<Int>.annotatesForThreadSanitizer)
        #endif
    }

    /// Many tasks update one value under the lock; none of the updates is lost. Under the thread sanitizer this is
    /// also the race the annotations must keep quiet.
    @Test func serializesConcurrentUpdates() async {
        let counter = Counter()
        await withTaskGroup(of: Void.self) { group in
            for _ in 0..<8 {
                group.addTask {
                    for _ in 0..<1000 { counter.increment() }
                }
            }
        }
        #expect(counter.value == 8000)
    }
}

/// A counter behind the package's lock.
private final class Counter: Sendable {
    private let count = SanitizedMutex(0)

    var value: Int { count.withLock { $0 } }

    func increment() { count.withLock { $0 += 1 } }
}
