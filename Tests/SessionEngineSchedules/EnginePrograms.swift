import SessionEngine
import SessionEngineExplorer
import SessionEngineModel

/// The model test's programs as explorer programs: a program seed generates the operations (and seeds the engine's
/// jitter), and the model's driver runs them against the real engine, checking its invariants after every step.
enum EnginePrograms {
    /// Operations per generated program: shorter than the model test's 40, so one run costs less and more
    /// interleavings of each are tried.
    static let length = 20

    static let generator = EngineOperation.generator.array(count: length)

    /// The operations of the program with this seed.
    static func operations(seed: UInt64) -> [EngineOperation] {
        generator.sample(seed: seed)
    }

    /// A run of `operations` under the model's driver; it throws the first broken invariant.
    static func program(_ operations: [EngineOperation], seed: UInt64) -> @Sendable () async throws -> Void {
        {
            let driver = EngineModelDriver(seed: seed, explorer: .explorer)
            Diagnostics.current = { driver.activity }
            if let failure = await driver.run(operations) { throw failure }
        }
    }

    /// The seed of the `index`th program of a run with seed `seed`.
    static func programSeed(run seed: UInt64, index: Int) -> UInt64 {
        PropertyRandom.programSeed(run: seed, index: index)
    }
}

/// The pool model test's programs as explorer programs: a program seed generates the operations over four accounts
/// of a pool capped at three (and seeds the accounts' jitter), and the pool model's driver runs them against a real
/// pool, checking the pool's rules after every step and the engine model's invariants per account whenever the pool
/// is idle.
enum PoolPrograms {
    /// Operations per generated program: shorter than the pool model test's 40, as for the engine's programs.
    static let length = 20

    /// The operations of the program with this seed.
    static func operations(seed: UInt64) -> [PoolOperation] {
        PoolOperation.program(seed: seed, length: length)
    }

    /// A run of `operations` under the pool model's driver; it throws the first broken rule.
    static func program(_ operations: [PoolOperation], seed: UInt64) -> @Sendable () async throws -> Void {
        {
            let driver = PoolModelDriver(
                seed: seed, idleTimeout: PoolModelDriver.idleTimeout(seed: seed), explorer: .explorer)
            Diagnostics.current = { driver.activity }
            if let failure = await driver.run(operations) { throw failure }
        }
    }
}

/// The programs the property tests shrank from failures (Tests/SessionEngineTests/EngineRegressionTests.swift),
/// each with the engine seed its test uses.
enum RegressionPrograms {
    struct Entry {
        let name: String
        let seed: UInt64
        let operations: [EngineOperation]
    }

    static let all: [Entry] = [
        Entry(
            name: "renew-during-sign-out",
            seed: 7_032_895_956_023_125_755,
            operations: [.signIn("alice"), .stalledChange(to: nil, partner: .renew)]
        ),
        Entry(
            name: "reject-expired",
            seed: 13_656_482_833_001_878_997,
            operations: [
                .signIn("alice"), .nextFetch(.hang), .advancePastExpiry(seconds: 0), .reportRejection(older: false),
            ]
        ),
        Entry(
            name: "shutdown-during-sign-out",
            seed: 13_895_145_839_433_587_286,
            operations: [.signIn("alice"), .work(.stubborn(seconds: 30)), .signOut]
        ),
        Entry(
            name: "second-sign-out",
            seed: 12_469_379_308_444_268_810,
            operations: [.signIn("alice"), .work(.stubborn(seconds: 30)), .signOut, .signOut]
        ),
        Entry(
            name: "superseded-change",
            seed: 0,
            operations: [.signIn("bob"), .work(.stubborn(seconds: 30)), .concurrentChanges("alice", nil)]
        ),
        Entry(
            name: "terminal-failure-during-work",
            seed: 3_350_907_280_134_108_691,
            operations: [
                .signIn("bob"), .nextFetch(.failTerminally), .work(.long(seconds: 600)), .signIn("bob"),
                .advancePastExpiry(seconds: 0),
            ]
        ),
        Entry(
            name: "retry-after-outlives-handover",
            seed: 15_782_653_143_404_668_264,
            operations: [
                .nextFetch(.retryAfter(seconds: 120, status: 429)), .signIn("bob"), .signInWith("bob"),
                .advance(seconds: 7), .renew,
            ]
        ),
    ]
}

extension WorkOwner {
    /// The explorer as the owner of a program's work: every task prefers its executor, and it knows when none can run.
    static let explorer = WorkOwner(explorer: Explorer.taskExecutor, waitUntilIdle: { await Explorer.waitUntilIdle() })
}
