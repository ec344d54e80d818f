import SessionEngineModel
import Testing

/// Random programs over several accounts of one pool (`PoolModelDriver`), checked after every step against the pool's
/// rules (never more than the budget's fetches in flight, never more starts in any second than the bucket allows, no
/// account's credential handed out for another, no fetch for an account that left, no hook from one account to
/// another, no eviction cancelling running work) and, whenever the pool is idle, against the engine model's
/// invariants for every account. After the program the backend answers every fetch: every account the pool holds
/// must become identified, and after the shutdown nothing may be left running. The schedule explorer runs the same
/// programs under its own schedules.
@Suite struct PoolPropertyTests {
    @Test func randomProgramsKeepThePoolsRules() async {
        // Under the thread sanitizer a pool program costs about four of the engine model's (four accounts, and the
        // recovery after the program), and the suite's other tests wait for the pool's two threads: a quarter of
        // the sanitizer's usual share keeps them within their time limits on a busy machine.
        let defaultIterations = PropertySettings.isThreadSanitizerLoaded ? 500 / 4 : 500
        let settings = PropertySettings.current(defaultSeed: 0x9001, defaultIterations: defaultIterations)
        var operations = 0
        var programsWithOutages = 0
        var failures: [String] = []
        for index in 0..<settings.iterations where failures.isEmpty {
            let seed = index == 0 ? settings.seed : PropertyRandom.programSeed(run: settings.seed, index: index)
            let program = PoolOperation.program(seed: seed, length: 40)
            operations += program.count
            let driver = PoolModelDriver(seed: seed, idleTimeout: PoolModelDriver.idleTimeout(seed: seed))
            if let failure = await driver.run(program) {
                failures.append("program \(seed): \(failure)\n  \(program.map(\.description).joined(separator: ", "))")
            }
            if driver.outagesHeld > 0 { programsWithOutages += 1 }
        }
        print(
            "pool model: \(settings.iterations) programs, \(operations) operations, \(failures.count) failures, "
                + "\(programsWithOutages) holding fetches for an outage, seed \(settings.seed)")
        #expect(
            failures.count > 0 || settings.iterations < 100 || programsWithOutages > 0,
            "programs reach the outage holding they check")
        for failure in failures { Issue.record("\(failure)") }
    }
}
