import SessionEngineModel
import Testing

extension PropertyRunner {
    /// Runs `property` on `settings.iterations` programs drawn from `program` and records the first failure, shrunk,
    /// with its seed and replay command, as an issue of the calling test.
    ///
    /// - Parameters:
    ///   - name: The property's name, for the summary line and the failure.
    ///   - settings: The seed and the number of programs.
    ///   - program: Generates a program from its seed.
    ///   - testName: The test that runs the property, for the replay command.
    ///   - sourceLocation: Where the failure is recorded.
    ///   - property: Runs a program with its seed; returns why it failed, or `nil`.
    /// - Returns: The run's report.
    @discardableResult
    static func check<Operation: Shrinkable & CustomStringConvertible>(
        _ name: String,
        settings: PropertySettings,
        program: Gen<[Operation]>,
        testName: String = #function,
        sourceLocation: SourceLocation = #_sourceLocation,
        property: ([Operation], UInt64) async -> Violation?
    ) async -> PropertyReport {
        let report = await run(
            name,
            settings: settings,
            program: program,
            testName: testName,
            property: property
        )
        if let failure = report.failureReport {
            Issue.record(Comment(rawValue: failure), sourceLocation: sourceLocation)
        }
        return report
    }
}
