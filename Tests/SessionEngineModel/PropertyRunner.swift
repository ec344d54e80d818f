import Foundation

#if canImport(Glibc)
    import Glibc
#elseif canImport(Darwin)
    import Darwin
#endif

/// How many programs a property runs and from which seed, read from the environment.
///
/// - `SESSIONENGINE_PROPERTY_SEED`: the run's seed, decimal or `0x` hexadecimal, or `random` for a fresh one. The
///   first program of a run uses the run's seed itself, so the seed printed with a failure replays that program.
/// - `SESSIONENGINE_PROPERTY_ITERATIONS`: how many programs each property runs.
///
/// Without the variables every property uses its own fixed seed, so the suite is reproducible, and its default
/// count, divided by ``sanitizerSlowdown`` when the thread sanitizer is loaded.
package struct PropertySettings: Sendable {
    package static let seedVariable = "SESSIONENGINE_PROPERTY_SEED"
    package static let iterationsVariable = "SESSIONENGINE_PROPERTY_ITERATIONS"
    /// How much fewer programs run by default under the thread sanitizer, which slows the engine down about tenfold.
    package static let sanitizerSlowdown = 8

    package var iterations: Int
    package var seed: UInt64

    package static func current(defaultSeed: UInt64, defaultIterations: Int) -> PropertySettings {
        let environment = ProcessInfo.processInfo.environment
        var iterations = scaledForSanitizer(defaultIterations)
        if let text = environment[iterationsVariable], let value = Int(text), value > 0 { iterations = value }
        var seed = defaultSeed
        if let text = environment[seedVariable]?.lowercased() {
            if text == "random" {
                var system = SystemRandomNumberGenerator()
                seed = system.next()
            } else if text.hasPrefix("0x"), let value = UInt64(text.dropFirst(2), radix: 16) {
                seed = value
            } else if let value = UInt64(text) {
                seed = value
            }
        }
        return PropertySettings(iterations: iterations, seed: seed)
    }

    /// `count`, divided by ``sanitizerSlowdown`` when the thread sanitizer is loaded: the size of a loop that
    /// compares pure computations (a decoder, a hash), which the sanitizer slows down and has no thread to watch in.
    package static func scaledForSanitizer(_ count: Int) -> Int {
        isThreadSanitizerLoaded ? max(1, count / sanitizerSlowdown) : count
    }

    /// Whether this process runs under the thread sanitizer (`swift test --sanitize=thread`).
    package static let isThreadSanitizerLoaded: Bool = {
        #if canImport(Glibc)
            return dlsym(nil, "__tsan_init") != nil
        #elseif canImport(Darwin)
            return dlsym(UnsafeMutableRawPointer(bitPattern: -2), "__tsan_init") != nil
        #else
            return false
        #endif
    }()
}

/// What one property run did.
package struct PropertyReport: CustomStringConvertible {
    package let name: String
    package let programs: Int
    package let operations: Int
    package let failures: Int
    package let seed: UInt64
    /// The failing program, shrunk, with its failure and the replay command; `nil` when every program passed.
    package let failureReport: String?

    /// The summary line printed for every run.
    package var description: String {
        "\(name): \(programs) programs, \(operations) operations, \(failures) failures, seed \(seed)"
    }
}

/// Runs a property over many generated programs, shrinks the first failing one and reports it with its seed.
///
/// It reports failures as values (``PropertyReport/failureReport``), so it runs in a test, which records them as
/// issues, and in an executable alike.
package enum PropertyRunner {
    /// How many candidate programs shrinking a failure may run.
    static let shrinkBudget = 300

    /// Runs `property` on `settings.iterations` programs drawn from `program`.
    ///
    /// Program `i` is generated from its own seed, which is also handed to `property` (for the engine's jitter), so
    /// a program and everything it does are a function of that seed. On the first failure the program is shrunk
    /// with the same seed, the shrunk program is described with the seed and the replay command in the report's
    /// ``PropertyReport/failureReport``, and the run stops. A summary line is printed either way.
    ///
    /// - Parameters:
    ///   - name: The property's name, for the summary line and the failure.
    ///   - settings: The seed and the number of programs.
    ///   - program: Generates a program from its seed.
    ///   - testName: The test that runs the property, for the replay command.
    ///   - property: Runs a program with its seed; returns why it failed, or `nil`.
    /// - Returns: The run's report.
    @discardableResult
    package static func run<Operation: Shrinkable & CustomStringConvertible>(
        _ name: String,
        settings: PropertySettings,
        program: Gen<[Operation]>,
        testName: String,
        property: ([Operation], UInt64) async -> Violation?
    ) async -> PropertyReport {
        var programs = 0
        var operations = 0
        var failures = 0
        var failureReport: String?
        for index in 0..<settings.iterations {
            let seed = PropertyRandom.programSeed(run: settings.seed, index: index)
            let operationList = program.sample(seed: seed)
            programs += 1
            operations += operationList.count
            guard let failure = await property(operationList, seed) else { continue }
            failures += 1
            let shrunk = await Shrinker.shrink(operationList, budget: Self.shrinkBudget) { candidate in
                await property(candidate, seed) != nil
            }
            // A failure that depends on scheduling may not recur on every run: rerun the shrunk program a few times
            // for its own message, and say so when it does not fail again.
            var shrunkFailure: Violation?
            var reruns = 0
            while shrunkFailure == nil && reruns < 5 {
                reruns += 1
                shrunkFailure = await property(shrunk.operations, seed)
            }
            failureReport = report(
                name: name,
                filter: testName.replacingOccurrences(of: "()", with: ""),
                seed: seed,
                original: operationList,
                failure: failure,
                shrunk: shrunk,
                shrunkFailure: shrunkFailure
                    ?? Violation(
                        "(the shrunk program did not fail again in \(reruns) runs: it depends on scheduling)")
            )
            break
        }
        let summary = PropertyReport(
            name: name,
            programs: programs,
            operations: operations,
            failures: failures,
            seed: settings.seed,
            failureReport: failureReport
        )
        print(summary)
        return summary
    }

    private static func report<Operation: CustomStringConvertible>(
        name: String,
        filter: String,
        seed: UInt64,
        original: [Operation],
        failure: Violation,
        shrunk: Shrinker.Result<Operation>,
        shrunkFailure: Violation
    ) -> String {
        let listing = shrunk.operations.map { "    \($0)," }.joined(separator: "\n")
        return """
            \(name) failed with seed \(seed)
              \(shrunkFailure.message)
            shrunk program (\(shrunk.operations.count) of \(original.count) operations, \
            \(shrunk.reductions) reductions in \(shrunk.attempts) attempts):
              [
            \(listing)
              ]
            original failure:
              \(failure.message)
            replay: \(PropertySettings.seedVariable)=\(seed) \(PropertySettings.iterationsVariable)=1 \
            swift test --filter \(filter)
            """
    }
}
