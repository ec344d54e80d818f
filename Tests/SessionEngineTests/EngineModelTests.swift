import Foundation
import SessionEngineModel
import SessionEngineTestKit
import Testing

@testable import SessionEngine

@Suite struct EngineModelTests {
    /// Random programs of operations against the real engine, a manual clock and a scripted backend, checked after
    /// every step against a reference model and the engine's invariants.
    @Test func randomProgramsKeepTheEngineContract() async {
        let settings = PropertySettings.current(defaultSeed: 12_345, defaultIterations: 2000)
        let report = await PropertyRunner.check(
            "engine model",
            settings: settings,
            program: EngineOperation.generator.array(count: 40)
        ) { program, seed in
            await EngineModelDriver(seed: seed).run(program)
        }
        #expect(report.failures == 0)
    }

    /// Programs of the same generator, 200 of another seed, with a log hook that discards every record: the harness learns what the engine did from
    /// typed values only, so the wording of the log, or its absence, cannot change a verdict.
    @Test func theModelNeverReadsTheLog() async {
        let settings = PropertySettings.current(defaultSeed: 0x106_0FF, defaultIterations: 200)
        let discarded = Recorder<Int>()
        let report = await PropertyRunner.check(
            "engine model, log discarded",
            settings: settings,
            program: EngineOperation.generator.array(count: 40)
        ) { program, seed in
            await EngineModelDriver(seed: seed, log: { _ in discarded.append(1) }).run(program)
        }
        #expect(report.failures == 0)
        #expect(!discarded.values.isEmpty, "the engine logged, and nothing read it")
    }
}
