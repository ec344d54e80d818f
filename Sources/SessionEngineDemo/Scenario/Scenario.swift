import Foundation
import SessionEngine
import SessionEngineTestKit

/// The daemon scenario: a backend, the session engine and a stand-in for the service, driven on a manual clock.
///
/// The phases are in `Scenario+Phases.swift`, the steps they share in `Scenario+Steps.swift` and the verdicts in
/// `Scenario+Verdicts.swift`; ``ClockDriver`` moves the clock only when the engine is idle, so a run is the same
/// for the same seed and a simulated day takes seconds.
final class Scenario: Sendable {
    /// A phase could not go on; the checks not yet reached fail.
    struct Abort: Error {
        let reason: String
    }

    /// What an account-change hook saw.
    struct HookRecord: Sendable {
        let change: AccountChange
        let scopedWorkAtHook: Int
        let clearedCacheItems: Int
    }

    let options: ScenarioOptions
    let clock: ManualClock
    let backend: any ScenarioBackend
    let service: ServiceStandIn
    let engine: SessionEngine
    let timeline: Timeline
    let driver: ClockDriver
    let plan: ScenarioPlan
    let accounts: [AccountID]
    let verdicts = Verdicts()
    /// What the host displays: the current account's reports and chat, by owner. Cleared on every account change.
    let cache = Locked<[(owner: AccountID, item: String)]>([])
    let hooks = Locked<[HookRecord]>([])
    let projectID: String
    let baseSecret: String

    init(options: ScenarioOptions, projectID: String, secret: String) throws {
        self.options = options
        self.projectID = projectID
        self.baseSecret = secret
        let clock = ManualClock()
        self.clock = clock
        if let url = options.backend {
            backend = RemoteBackend(endpoint: url, clock: clock)
        } else {
            backend = try EmbeddedBackend(projectID: projectID, secret: secret, clock: clock)
        }
        service = try ServiceStandIn(projectID: projectID, secret: secret, clock: clock)
        let timeline = Timeline(json: options.json, clock: clock)
        self.timeline = timeline
        // The observer tells the timeline, in the step that publishes each event, how far it has to catch up.
        let engine = SessionEngine(
            fetcher: backend,
            configuration: SessionConfiguration(randomSeed: options.seed),
            clock: clock,
            observer: { timeline.published($0) }
        )
        self.engine = engine
        let plan = ScenarioPlan(hours: options.hours, accounts: options.accounts)
        self.plan = plan
        accounts = (0..<options.accounts).map(DemoAccounts.account(at:))
        // Runs of three simulated days or more report each simulated day on standard error.
        var progress: (@Sendable (Duration) -> Void)?
        if options.hours >= 72 {
            progress = { @Sendable uptime in Self.reportProgress(at: uptime, of: plan, engine: engine) }
        }
        driver = ClockDriver(clock: clock, engine: engine, timeline: timeline, onNewDay: progress)
    }

    // MARK: - The run

    /// Runs the scenario and prints its timeline and verdicts.
    ///
    /// - Returns: Whether every Verify check passed.
    func run() async -> Bool {
        let started = ContinuousClock.now
        printHeader()
        let events = engine.events(bufferLimit: .max)
        let printer = Task { await timeline.consume(events) }
        await installHook()
        do {
            try await followBackendSecret()
            var poll = try await openingPhase(accounts[0])
            await driver.advance(to: plan.outage)
            try await outagePhase(poll)
            for (index, time) in plan.switches.enumerated() {
                await driver.advance(to: time)
                poll = try await switchPhase(from: accounts[index], to: accounts[index + 1], poll: poll)
            }
            await driver.advance(to: plan.rotation)
            try await rotationPhase(accounts[accounts.count - 1])
            await driver.advance(to: plan.end)
            try await closingPhase(poll)
        } catch {
            let reason = (error as? Abort)?.reason ?? "\(error)"
            await note("the scenario stopped early: \(reason)")
            await engine.shutdown()
        }
        await driver.settle()
        await printer.value
        timeline.flush()
        return printVerdicts(elapsed: started.duration(to: .now), metrics: engine.metrics)
    }

    private func printHeader() {
        let what =
            "\(options.accounts) accounts, \(options.hours) simulated hours, seed \(options.seed), "
            + "\(backend.label), 15-minute credentials"
        if options.json {
            var object = JSONObject()
            object.add("kind", "start")
            object.add("accounts", options.accounts)
            object.add("hours", options.hours)
            object.add("seed", String(options.seed))
            object.add("backend", backend.label)
            object.add("projectId", projectID)
            timeline.object(object)
        } else {
            timeline.plain("SessionEngine daemon scenario: \(what)")
            timeline.plain(
                "Times are simulated (+HH:MM:SS since the start); the state is the engine's after each line.")
            timeline.plain("")
            timeline.plain("     time  state       what happened")
        }
    }

    /// Starts the service stand-in on the backend's current secret: a backend that outlives a run is left rotated by
    /// it, and the next run must verify with the secret that backend signs with now.
    private func followBackendSecret() async throws {
        let generation = try await backend.secretGeneration()
        guard generation > 0 else { return }
        try service.rotateSecret(to: DemoSecrets.rotated(baseSecret, generation: generation))
        await note(
            "the backend signs with secret generation \(generation), left by earlier runs; the service follows it")
    }

    private func installHook() async {
        let cache = self.cache
        let hooks = self.hooks
        let engine = self.engine
        await engine.addAccountChangeHook { change in
            // The host discards the previous account's view models and read cache here.
            let work = engine.metrics.scopedWork
            let cleared = cache.withLock { items -> Int in
                defer { items.removeAll() }
                return items.count
            }
            hooks.withLock { $0.append(HookRecord(change: change, scopedWorkAtHook: work, clearedCacheItems: cleared)) }
        }
    }
}
