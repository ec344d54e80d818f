import Foundation
import SessionEngineBackend
import SessionEngineModel
import SessionEngineTestKit
import Synchronization
import Testing

@testable import SessionEngine

/// Three clocks meet in every fetch: this host's, the backend's `Date` header and the signer's. Whatever they say,
/// the engine never refuses credentials silently for ever: where one clock makes a credential plausible it is
/// installed on that clock, where both do on the one under which it expires soonest, so no lying clock hands out a
/// credential after another plausible clock says it has expired; and where none does every refusal is reported with
/// the clocks that disagree and retried on the slow schedule.
@Suite(.timeLimit(TimeLimits.minutes(1)))
struct ClockSkewPropertyTests {
    static let host = Date(timeIntervalSince1970: 1_800_000_000)
    static let offsets: [Int64] = [
        0, 30, -30, 90, -90, 3600, -3600, 23 * 3600, -23 * 3600, 25 * 3600, -25 * 3600, 365 * 86_400, -365 * 86_400,
    ]
    static let lifetimes: [Int64] = [60, 900, 86_400]

    /// Whether a credential expiring at `expiresAt` is plausible on a clock reading `clock`.
    static func plausible(_ expiresAt: Int64, on clock: Int64, tolerance: Int64 = 60) -> Bool {
        clock < expiresAt && expiresAt - clock <= 86_400 + tolerance
    }

    /// Every combination of Date-header offset, signer offset and lifetime, three fetches each, on the pure machine.
    @Test func noCombinationOfClocksRefusesCredentialsSilently() throws {
        let configuration = SessionConfiguration(randomSeed: 1)
        var outcomes: [String: Int] = [:]
        for dateOffset in Self.offsets {
            for signerOffset in Self.offsets {
                for lifetime in Self.lifetimes {
                    let outcome = try Self.check(
                        dateOffset: dateOffset, signerOffset: signerOffset, lifetime: lifetime,
                        configuration: configuration)
                    outcomes[outcome, default: 0] += 1
                }
            }
        }
        #expect(outcomes.values.reduce(0, +) == Self.offsets.count * Self.offsets.count * Self.lifetimes.count)
        // Every branch is taken: the Date header's clock, the host's with the offset kept out, and no clock.
        #expect(outcomes["date", default: 0] > 0 && outcomes["host", default: 0] > 0, "\(outcomes)")
        #expect(outcomes["refused", default: 0] > 0, "\(outcomes)")
    }

    /// One combination: the clocks keep their offsets while time passes between three fetches. Returns which
    /// clock judged the credential: `date`, `host`, or `refused` when none made it plausible.
    static func check(dateOffset: Int64, signerOffset: Int64, lifetime: Int64, configuration: SessionConfiguration)
        throws -> String
    {
        let label = "Date \(dateOffset) s, signer \(signerOffset) s, lifetime \(lifetime) s"
        var machine = SessionStateMachine(configuration: configuration, seed: 7)
        var now = SessionInstant(wall: host, uptime: .seconds(1000))
        guard case .began(let epoch, _) = machine.changeAccount(to: "alice", at: now) else {
            throw Violation("\(label): the sign-in did not begin")
        }
        _ = machine.hooksDue(epoch: epoch)
        var actions = machine.changePrepared(epoch: epoch, at: now)
        for round in 1...3 {
            guard let request = actions.lazy.compactMap(Self.fetchStarted).first else {
                throw Violation("\(label), round \(round): no fetch started")
            }
            let signerClock = ManualClock(now: now.wall.addingTimeInterval(TimeInterval(signerOffset)))
            let signer = try IdentitySigner(projectID: "proj_clocks", secret: "clock-secret", clock: signerClock)
            let signerNow = Int64(signerClock.now.timeIntervalSince1970.rounded(.down))
            let credential = try signer.sign(
                email: "alice@example.com", properties: nil, expiresAt: signerNow + lifetime)
            let hostNow = Int64(now.wall.timeIntervalSince1970.rounded(.down))
            actions = machine.fetchSucceeded(
                request.id, credential: credential, serverClockOffset: .seconds(dateOffset), at: now)
            let effectiveDate = abs(dateOffset) > 60 ? dateOffset : 0
            let onDate = plausible(credential.expiresAt, on: hostNow + effectiveDate)
            let onHost = plausible(credential.expiresAt, on: hostNow)
            let reports = actions.compactMap(Self.skewReport)
            if onDate || onHost {
                // Installed, on a clock that makes it plausible.
                guard machine.usableCredential == credential else {
                    throw Violation("\(label), round \(round): a plausible credential was refused")
                }
                let applied = machine.serverClockOffset
                // Of the plausible clocks, the one whose time is latest says the credential expires soonest.
                let onDateDecides = onDate && (effectiveDate >= 0 || !onHost)
                if onDateDecides {
                    guard applied == .seconds(effectiveDate) else {
                        throw Violation("\(label): applied \(applied) instead of the Date header's offset")
                    }
                } else {
                    guard applied == .zero, reports.contains(where: { $0.finding == .dateHeaderIgnored }) else {
                        throw Violation("\(label): the Date offset was not kept out and reported")
                    }
                }
                // Handed out only while every plausible clock says the credential has not expired: from the first
                // second at which one of them says it has, the machine refuses it, whatever the others say.
                let plausibleOffsets = (onHost ? [Int64(0)] : []) + (onDate ? [effectiveDate] : [])
                let soonest = credential.expiresAt - plausibleOffsets.max()!
                let expiredSomewhere = SessionInstant(
                    wall: Date(timeIntervalSince1970: TimeInterval(soonest)),
                    uptime: now.uptime + .seconds(max(0, soonest - hostNow)))
                guard !machine.isValid(credential, at: expiredSomewhere) else {
                    throw Violation(
                        "\(label): handed out at \(soonest), after a plausible clock says it expired")
                }
                if onDate && onHost && effectiveDate != 0 {
                    // The clocks disagree beyond the tolerance: reported, whichever decided.
                    guard !reports.isEmpty || round > 1 else {
                        throw Violation("\(label): two plausible clocks disagree and nothing says so")
                    }
                }
                return onDateDecides ? "date" : "host"
            }
            // Refused: reported with the clocks that disagree, as a misconfiguration retried on the slow schedule.
            guard machine.usableCredential == nil else {
                throw Violation("\(label): an implausible credential was installed")
            }
            guard let report = reports.first(where: { $0.finding == .noClockPlausible }) else {
                throw Violation("\(label), round \(round): refused without saying which clocks disagree")
            }
            guard report.lifetimeOnHostClock == .seconds(credential.expiresAt - hostNow),
                report.dateHeaderOffset == .seconds(dateOffset)
            else {
                throw Violation("\(label): the report's clocks are wrong: \(report)")
            }
            guard let failure = actions.lazy.compactMap(Self.fetchFailure).first,
                failure.error.failureClass == .misconfiguration, let retryIn = failure.retryIn,
                retryIn >= configuration.misconfigurationRetry.initial / 2,
                failure.error.reason.contains("no clock makes the credential plausible")
            else {
                throw Violation("\(label), round \(round): the refusal is not a slow-retried misconfiguration")
            }
            guard let timer = machine.timer, let deadline = timer.uptimeDeadline else {
                throw Violation("\(label), round \(round): no retry planned")
            }
            // The retry comes: the clocks move on together.
            now = SessionInstant(
                wall: now.wall.addingTimeInterval((deadline - now.uptime).timeInterval), uptime: deadline)
            actions = machine.timerFired(timer.id, at: now)
        }
        return "refused"
    }

    static func fetchStarted(_ action: SessionStateMachine.Action) -> FetchRequest? {
        if case .startFetch(let request) = action { return request }
        return nil
    }

    static func skewReport(_ action: SessionStateMachine.Action) -> ClockSkewReport? {
        if case .emit(.clockSkewSuspected(let report), _) = action { return report }
        return nil
    }

    static func fetchFailure(_ action: SessionStateMachine.Action) -> FetchFailure? {
        if case .emit(.fetchFailed(let failure), _) = action { return failure }
        return nil
    }

    // MARK: - Through the engine

    /// The demo behind nginx: the backend's `Date` is real time while the signer runs on the host's (simulated)
    /// clock. Every credential is installed on the host's clock, each disagreement is reported and counted, and an
    /// offset that agrees again is applied again.
    @Test func aDateHeaderThatDisagreesWithTheSignerIsKeptOutAndReported() async throws {
        let clock = ManualClock()
        let signer = try IdentitySigner(projectID: EngineHarness.projectID, secret: EngineHarness.secret, clock: clock)
        let offset = Locked<Duration>(.seconds(-365 * 86_400))
        let signerAhead = Locked<Int64>(0)
        // A backend behind a front whose `Date` comes from another clock.
        let fetcher = ScriptedCredentialFetcher(clock: clock) { _ in
            let now = Int64(clock.now.timeIntervalSince1970.rounded(.down)) + signerAhead.value
            let credential = try signer.sign(email: "alice@example.com", properties: nil, expiresAt: now + 900)
            return .credential(credential, serverClockOffset: offset.value)
        }
        let records = Recorder<SessionLogRecord>()
        let engine = SessionEngine(
            fetcher: fetcher,
            configuration: SessionConfiguration(randomSeed: 41, log: { records.append($0) }),
            clock: clock
        )
        var events = engine.events(bufferLimit: .max).makeAsyncIterator()
        try await engine.signIn("alice", timeout: .seconds(30))
        let report = try #require(
            await events.next { if case .clockSkewSuspected = $0.kind { true } else { false } })
        guard case .clockSkewSuspected(let skew) = report.kind else { return }
        #expect(skew.finding == .dateHeaderIgnored)
        #expect(skew.dateHeaderOffset == .seconds(-365 * 86_400))
        #expect(skew.lifetimeOnHostClock == .seconds(900))
        #expect(skew.serverClockOffset == nil)
        var metrics = engine.metrics
        #expect(metrics.clockOffsetsKeptOut == 1 && metrics.appliedClockOffset == nil)
        #expect(metrics.fetchesFailedTotal == 0)
        #expect(records.values.allSatisfy { $0.level < .error })

        // Renewals keep working on the host's clock for a day.
        let lost = await clock.advance(upTo: .seconds(86_400)) { (try? engine.identityHeaders()) == nil }
        #expect(!lost, "no identity at \(clock.uptime)")
        metrics = engine.metrics
        #expect(metrics.renewals > 90 && metrics.fetchesFailedTotal == 0)
        #expect(metrics.clockOffsetsKeptOut == metrics.credentialsInstalled)

        // The backend's Date agrees with its signer again, both an hour ahead of the host: the offset is applied.
        offset.withLock { $0 = .seconds(3600) }
        signerAhead.withLock { $0 = 3600 }
        let installed = metrics.credentialsInstalled
        await clock.advance(upTo: .seconds(3600)) { engine.metrics.credentialsInstalled > installed }
        #expect(engine.metrics.credentialsInstalled > installed)
        #expect(engine.metrics.appliedClockOffset == .seconds(3600))
        #expect(engine.metrics.clockOffsetsKeptOut == installed, "no disagreement once the clocks agree")
        await engine.shutdown()
    }
}

extension ClockSkewPropertyTests {
    /// Every fetch says when the engine asked, on the engine's clock, so a fetcher measures the backend's offset
    /// against the clock the engine applies it to.
    @Test func everyFetchCarriesTheEnginesTimeOfAsking() async throws {
        let clock = ManualClock()
        let signer = try IdentitySigner(projectID: EngineHarness.projectID, secret: EngineHarness.secret, clock: clock)
        let fetcher = ScriptedCredentialFetcher(clock: clock) { _ in
            let now = Int64(clock.now.timeIntervalSince1970.rounded(.down))
            let credential = try signer.sign(email: "alice@example.com", properties: nil, expiresAt: now + 900)
            return .credential(credential, serverClockOffset: .zero)
        }
        let engine = SessionEngine(fetcher: fetcher, configuration: SessionConfiguration(randomSeed: 3), clock: clock)
        try await engine.signIn("alice")
        #expect(fetcher.requests.map(\.startedAt) == [clock.now])
        await engine.shutdown()
    }
}
