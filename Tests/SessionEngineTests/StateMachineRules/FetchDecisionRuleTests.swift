import Foundation
import Testing

@testable import SessionEngine

/// The "Fetch decisions" of `Design/state-machine.md`, one test each.
extension SessionStateMachineRuleTests {
    @Test func singleFlightCallersAndRejectionsShareOneFetch() throws {
        var harness = MachineHarness.identified(as: "alice")
        let credential = try #require(harness.machine.usableCredential)
        harness.advance(by: .seconds(10))
        var actions = harness.machine.renewRequested(at: harness.now).actions
        let id = try harness.fetchID()
        actions += harness.machine.renewRequested(at: harness.now).actions
        actions += harness.machine.renewRequested(at: harness.now).actions
        actions += harness.machine.credentialRejected(credential, at: harness.now)
        actions += harness.machine.renewRequested(at: harness.now).actions
        let starts = Self.effects(actions).filter { $0 == .startFetch("alice", epoch: 1) }
        #expect(starts.count == 1)
        #expect(harness.fetch == .inFlight(id, .rejection))
    }

    @Test func minimumIntervalHoldsBackAnEarlyFetchButNotAnAccountChange() throws {
        // Alice's fetch started at uptime zero: a rejection one second later plans the renewal for 5 s.
        var harness = MachineHarness.identified(as: "alice")
        let credential = try #require(harness.machine.usableCredential)
        harness.advance(by: .seconds(1))
        let actions = harness.machine.credentialRejected(credential, at: harness.now)
        #expect(Self.effects(actions) == [.rejected(renewing: true), .scheduleTimer])
        #expect(harness.fetch == .waiting(until: .seconds(5), .rejection))
        let timer = try #require(harness.machine.timer)
        #expect(timer.uptimeDeadline == .seconds(5))
        harness.advance(by: .seconds(4))
        #expect(Self.effects(harness.machine.timerFired(timer.id, at: harness.now)) == [.startFetch("alice", epoch: 1)])

        // The first fetch after an account change is exempt.
        var switching = MachineHarness.identified(as: "alice")
        switching.run(.advance(seconds: 1), .signIn("bob"))
        _ = switching.machine.hooksDue(epoch: 2)
        let first = switching.machine.changePrepared(epoch: 2, at: switching.now)
        #expect(Self.effects(first) == [.startFetch("bob", epoch: 2)])
    }

    @Test func backoffWaitsTheFloorPlusAFullJitterBelowTheCeiling() throws {
        // Each failure comes the instant its fetch started, so the floor is the whole minimum interval (5 s); the
        // jitter is below 1, 2 and 4 s.
        var harness = MachineHarness.signingIn(as: "alice")
        for ceiling in [1, 2, 4] {
            let started = harness.now.uptime
            harness.run(.failTransiently)
            guard case .waiting(let until, _) = harness.fetch else {
                Issue.record("no retry planned: \(String(describing: harness.fetch))")
                return
            }
            #expect(until - started >= .seconds(5) && until - started < .seconds(5 + ceiling))
            harness.run(.advanceToTimer)
        }
        // A fetch that took longer than the minimum interval leaves no floor.
        harness.run(.advance(seconds: 6), .failTransiently)
        guard case .waiting(let until, _) = harness.fetch else {
            Issue.record("no retry planned: \(String(describing: harness.fetch))")
            return
        }
        #expect(until > harness.now.uptime && until < harness.now.uptime + .seconds(8))

        // Machines that failed together retry apart.
        var retries: Set<Duration> = []
        for seed in 1...20 as ClosedRange<UInt64> {
            var machine = MachineHarness(seed: seed)
            machine.run(.signIn("alice"), .prepare, .failTransiently)
            if case .waiting(let until, _) = machine.fetch { retries.insert(until) }
        }
        #expect(retries.count == 20)

        // A misconfiguration retries on its own schedule: the floor plus the upper half of its first ceiling (10 s).
        var misconfigured = MachineHarness.renewing(as: "alice")
        let started = misconfigured.now.uptime
        misconfigured.run(.succeedOtherEmail)
        guard case .waiting(let slow, _) = misconfigured.fetch else {
            Issue.record("no retry planned: \(String(describing: misconfigured.fetch))")
            return
        }
        #expect(slow - started >= .seconds(10) && slow - started < .seconds(15))
    }

    @Test func renewalTimeIsAJitteredShareOfTheLifetimeWithinItsBounds() throws {
        // Fifteen minutes: ⅔ ± ¼ of the lifetime, 375 to 825 s, spread over that range.
        var delays: [TimeInterval] = []
        for seed in 1...50 as ClosedRange<UInt64> {
            var harness = MachineHarness(seed: seed)
            harness.run(.signIn("alice"), .prepare, .succeed(lifetime: 900))
            let renewAt = try #require(harness.session?.renewAt)
            delays.append(renewAt.timeIntervalSince(harness.now.wall))
        }
        #expect(delays.allSatisfy { $0 >= 375 && $0 <= 825 })
        #expect(delays.max()! - delays.min()! > 225)

        // Thirty seconds: at most the lifetime less the minimum lead (10 s).
        var short = MachineHarness.signingIn(as: "alice")
        short.run(.succeed(lifetime: 30))
        let shortDelay = try #require(short.session?.renewAt).timeIntervalSince(short.now.wall)
        #expect(shortDelay >= 12.5 && shortDelay <= 20)

        // Twelve seconds: the minimum interval (5 s) wins over the lead.
        var tiny = MachineHarness.signingIn(as: "alice")
        tiny.run(.succeed(lifetime: 12))
        #expect(try #require(tiny.session?.renewAt).timeIntervalSince(tiny.now.wall) == 5)
    }

    @Test func underAFleetsCoordinatorTheSameCredentialRenewsAtTheSameShareInEveryProcess() throws {
        // Two coordinated processes with different seeds install one credential: one renewal time, so the replicas
        // of a fleet renew it together and one fetch serves them.
        func signingIn(seed: UInt64, coordinated: Bool = true) -> MachineHarness {
            var harness = MachineHarness(seed: seed, coordinated: coordinated)
            harness.run(.signIn("alice"), .prepare)
            return harness
        }
        var first = signingIn(seed: 1)
        var second = signingIn(seed: 99)
        let wall = Int64(first.now.wall.timeIntervalSince1970.rounded(.down))
        let credential = first.credential(email: "alice@example.com", expiresAt: wall + 900)
        _ = first.machine.fetchSucceeded(try first.fetchID(), credential: credential, at: first.now)
        _ = second.machine.fetchSucceeded(try second.fetchID(), credential: credential, at: second.now)
        let renewAt = try #require(first.session?.renewAt)
        #expect(try #require(second.session?.renewAt) == renewAt)

        // The same user's credentials with other expiries draw again, each within ⅔ ± ¼ of its lifetime.
        var shares: Set<Double> = []
        for expiresAt in wall + 900..<wall + 920 {
            var harness = signingIn(seed: 1)
            let next = harness.credential(email: "alice@example.com", expiresAt: expiresAt)
            _ = harness.machine.fetchSucceeded(try harness.fetchID(), credential: next, at: harness.now)
            let lifetime = Double(expiresAt) - harness.now.wall.timeIntervalSince1970
            shares.insert(try #require(harness.session?.renewAt).timeIntervalSince(harness.now.wall) / lifetime)
        }
        #expect(shares.count == 20, "twenty expiries drew only \(shares.count) different shares")
        #expect(shares.allSatisfy { $0 >= 2.0 / 3 - 0.25 - 1e-9 && $0 <= 2.0 / 3 + 0.25 + 1e-9 })

        // Without a coordinator each process draws its own: replicas of one user renew apart.
        var alone = signingIn(seed: 1, coordinated: false)
        var other = signingIn(seed: 99, coordinated: false)
        _ = alone.machine.fetchSucceeded(try alone.fetchID(), credential: credential, at: alone.now)
        _ = other.machine.fetchSucceeded(try other.fetchID(), credential: credential, at: other.now)
        #expect(try #require(alone.session?.renewAt) != #require(other.session?.renewAt))
    }

    @Test func validationRefusesAnotherUserAnExpiredAndAnOverLongCredentialAsTransientFailures() throws {
        let wall = Int64(MachineHarness.signedOut().now.wall.timeIntervalSince1970)
        let cases: [(email: String, expiresAt: Int64, code: SessionError.Code, skew: Bool)] = [
            // Identity first: another user's credential that has also expired is a mismatch.
            (MachineHarness.otherEmail, wall - 60, .identityMismatch, false),
            ("alice@example.com", wall - 60, .credentialExpiredOnArrival, true),
            ("alice@example.com", wall + 86_400 + 3600, .lifetimeTooLong, true),
        ]
        for refusal in cases {
            var harness = MachineHarness.renewing(as: "alice")
            let installed = harness.machine.usableCredential
            let credential = harness.credential(email: refusal.email, expiresAt: refusal.expiresAt)
            let actions = harness.machine.fetchSucceeded(try harness.fetchID(), credential: credential, at: harness.now)
            let expected: [Effect] =
                (refusal.skew ? [.clockSkew(.noClockPlausible)] : []) + [
                    .fetchFailed(refusal.code), .resolve(epoch: 1, Self.renewCallers, .failed(refusal.code)),
                    .scheduleTimer,
                ]
            #expect(Self.effects(actions) == expected)
            #expect(harness.machine.usableCredential == installed)
            guard case .waiting(let until, .renewal) = harness.fetch else {
                Issue.record("no retry planned after \(refusal.code): \(String(describing: harness.fetch))")
                continue
            }
            // Never sooner than the minimum interval after the refused fetch started.
            #expect(until >= harness.now.uptime + .seconds(5))
        }
    }

    @Test func rejectionRenewsOneCredentialOnceAndBacksOffLongerEachRound() throws {
        var harness = MachineHarness.identified(as: "alice")
        harness.run(.advance(seconds: 10), .rejectInstalled, .succeed(lifetime: 900))
        var rounds: [RejectionReport] = []
        for round in 1...3 {
            harness.run(.advance(seconds: 10))
            let credential = try #require(harness.machine.usableCredential)
            let actions = harness.machine.credentialRejected(credential, at: harness.now)
            guard case .emit(.credentialRejected(let report), _) = actions.first else {
                Issue.record("round \(round) was not reported: \(actions)")
                return
            }
            rounds.append(report)
            #expect(harness.session?.rejectionStreak == round)
            // The same credential reported again changes nothing.
            #expect(harness.machine.credentialRejected(credential, at: harness.now).isEmpty)
            harness.syncOwner()
            harness.run(.advanceToTimer, .succeed(lifetime: 900))
        }
        #expect(rounds.allSatisfy { !$0.renewing })
        // The ceilings are 1, 2 and 4 s above no floor.
        for (round, report) in rounds.enumerated() {
            let retryIn = try #require(report.retryIn)
            #expect(retryIn > .zero && retryIn < .seconds(1 << round))
        }
    }

    @Test func serverDelayHoldsBackEveryFetchOfTheSession() throws {
        var harness = MachineHarness.renewing(as: "alice")
        let failedAt = harness.now.uptime
        let error = SessionError(.fetchFailed, reason: "429", isTransient: true, retryAfter: .seconds(120))
        let actions = harness.machine.fetchFailed(try harness.fetchID(), error: error, at: harness.now)
        guard case .emit(.fetchFailed(let failure), _) = actions.first,
            case .resolveWaiters(_, _, .failed(let resolved)) = actions.dropFirst().first
        else {
            Issue.record("the failure was not reported: \(actions)")
            return
        }
        #expect(failure.serverRetryAfter == .seconds(120))
        #expect(failure.error.retryAfter == .seconds(120) && resolved.retryAfter == .seconds(120))
        #expect(harness.session?.retryNotBefore == failedAt + .seconds(120))
        guard case .waiting(let until, .renewal) = harness.fetch else {
            Issue.record("no retry planned: \(String(describing: harness.fetch))")
            return
        }
        #expect(until >= failedAt + .seconds(120))

        // A credential the host hands over meanwhile does not lift the delay: a renewal asked for is planned for it.
        harness.advance(by: .seconds(10))
        let pushed = harness.freshCredential(lifetime: 900)
        _ = harness.machine.credentialPushed(pushed, for: "alice", at: harness.now)
        #expect(harness.session?.retryNotBefore == failedAt + .seconds(120))
        harness.advance(by: .seconds(10))
        let renew = harness.machine.renewRequested(at: harness.now)
        #expect(Self.effects(renew) == [.scheduleTimer])
        #expect(harness.fetch == .waiting(until: failedAt + .seconds(120), .renewal))

        // A delay longer than the maximum is capped.
        var capped = MachineHarness.renewing(as: "alice")
        let long = SessionError(.fetchFailed, reason: "503", isTransient: true, retryAfter: .seconds(86_400))
        let cappedActions = capped.machine.fetchFailed(try capped.fetchID(), error: long, at: capped.now)
        guard case .emit(.fetchFailed(let cappedFailure), _) = cappedActions.first else {
            Issue.record("the failure was not reported: \(cappedActions)")
            return
        }
        #expect(cappedFailure.serverRetryAfter == MachineHarness.configuration.maximumRetryAfter)
        #expect(cappedFailure.error.retryAfter == MachineHarness.configuration.maximumRetryAfter)
    }

    @Test func backendTimeDecidesExpiryAndTheLocalTimeOfEveryTimer() throws {
        // The Date header an hour ahead makes the credential plausible and expires it sooner: applied, and every
        // timer is armed for the local time at which the backend's clock reaches the credential's expiry.
        var harness = MachineHarness.signingIn(as: "alice")
        let wall = harness.now.wall
        let credential = harness.credential(
            email: "alice@example.com", expiresAt: Int64(wall.timeIntervalSince1970) + 3600 + 900)
        _ = harness.machine.fetchSucceeded(
            try harness.fetchID(), credential: credential, serverClockOffset: .seconds(3600), at: harness.now)
        #expect(harness.machine.serverClockOffset == .seconds(3600))
        let renewAt = try #require(harness.session?.renewAt)
        #expect(renewAt > wall && renewAt < wall + 900)
        harness.syncOwner()
        harness.run(.advanceToTimer)
        #expect(harness.machine.publicState.name == "renewing")
        #expect(harness.machine.timer?.wallDeadline == wall + 900)
        harness.advance(by: .seconds((wall + 900).timeIntervalSince(harness.now.wall)))
        #expect(!harness.machine.isValid(credential, at: harness.now))

        // Only the Date header's clock makes it plausible: that clock decides.
        var onlyDate = MachineHarness.signingIn(as: "alice")
        let lagging = onlyDate.credential(
            email: "alice@example.com", expiresAt: Int64(onlyDate.now.wall.timeIntervalSince1970) - 7200 + 900)
        let actions = onlyDate.machine.fetchSucceeded(
            try onlyDate.fetchID(), credential: lagging, serverClockOffset: .seconds(-7200), at: onlyDate.now)
        #expect(Self.effects(actions) == [.clockSkew(.offsetApplied)] + Self.installed(lagging, for: "alice", epoch: 1))
        #expect(onlyDate.machine.serverClockOffset == .seconds(-7200))
    }

    @Test func handedOverCredentialsMeetTheAccountCheckAndThePin() throws {
        // Switching from alice to bob: only bob, the target, may receive one.
        var harness = MachineHarness.identified(as: "alice")
        harness.run(.signIn("bob"))
        let wall = Int64(harness.now.wall.timeIntervalSince1970)
        let alices = harness.credential(email: "alice@example.com", expiresAt: wall + 900)
        guard case .refused(let leaving, _) = harness.machine.credentialPushed(alices, for: "alice", at: harness.now)
        else {
            Issue.record("the account being left received a credential")
            return
        }
        #expect(leaving.code == .accountChanged)
        let bobs = harness.credential(email: "bob@example.com", expiresAt: wall + 900)
        guard case .deferred = harness.machine.credentialPushed(bobs, for: "bob", at: harness.now) else {
            Issue.record("the target did not keep its credential")
            return
        }

        // The user the host names pins the account before its first credential.
        var pinned = MachineHarness.signedOut()
        let carols = pinned.credential(email: "carol@example.com", expiresAt: wall + 900)
        _ = pinned.machine.changeAccount(to: "carol", expecting: "carol@example.com", at: pinned.now)
        pinned.syncOwner()
        pinned.run(.prepare)
        let mallory = pinned.credential(email: MachineHarness.otherEmail, expiresAt: wall + 900)
        guard case .refused(let mismatch, _) = pinned.machine.credentialPushed(mallory, for: "carol", at: pinned.now)
        else {
            Issue.record("another user's credential was installed")
            return
        }
        #expect(mismatch.code == .identityMismatch)
        guard case .installed = pinned.machine.credentialPushed(carols, for: "carol", at: pinned.now) else {
            Issue.record("the named user's credential was refused")
            return
        }
    }

    @Test func gracefulShutdownIsSetOnceAndItsEndIsReportedOnce() {
        var harness = MachineHarness.identified(as: "alice")
        #expect(harness.machine.gracePeriodEnded(at: harness.now).isEmpty)
        harness.run(.gracefulShutdown)
        #expect(harness.machine.gracefulShutdownRequested(grace: .seconds(5), at: harness.now).isEmpty)
        guard case .shutDown = harness.machine.changeAccount(to: nil, at: harness.now) else {
            Issue.record("a sign-out began during the grace period")
            return
        }
        #expect(!harness.machine.gracePeriodEnded(at: harness.now).isEmpty)
        let ended = harness.machine.state
        #expect(harness.machine.gracePeriodEnded(at: harness.now).isEmpty)
        #expect(harness.machine.state == ended)
    }

    @Test func terminalFailureNeverHandsTheEndedSessionsCredentialOutAgain() throws {
        var harness = MachineHarness.renewing(as: "alice")
        let id = try harness.fetchID()
        let late = harness.freshCredential(lifetime: 900)
        _ = harness.machine.fetchFailed(id, error: .backendSessionEnded(), at: harness.now)
        #expect(harness.machine.usableCredential == nil)
        #expect(harness.machine.snapshot.credential == nil)
        #expect(harness.machine.epoch == 2)
        // A late answer of the ended session's fetch is stale.
        #expect(harness.machine.fetchSucceeded(id, credential: late, at: harness.now).isEmpty)
        #expect(harness.machine.usableCredential == nil)
    }

    @Test func preparationRunsOneChangeAfterAnotherAndTheMachineRemembersTheHooks() {
        var harness = MachineHarness.signedOut()
        let signIn = harness.machine.changeAccount(to: "alice", at: harness.now)
        let switchToBob = harness.machine.changeAccount(to: "bob", at: harness.now)
        #expect(Self.effects(signIn).last == .prepareChange(epoch: 1))
        #expect(Self.effects(switchToBob).last == .prepareChange(epoch: 2))
        // The superseded change runs no hooks and is not prepared; the later one reports the whole change.
        #expect(harness.machine.hooksDue(epoch: 1) == nil)
        #expect(harness.machine.changePrepared(epoch: 1, at: harness.now).isEmpty)
        #expect(harness.machine.hooksDue(epoch: 2) == AccountChange(from: nil, to: "bob"))
        #expect(
            Self.effects(harness.machine.changePrepared(epoch: 2, at: harness.now)) == [.startFetch("bob", epoch: 2)])
        // A change is prepared once.
        #expect(harness.machine.changePrepared(epoch: 2, at: harness.now).isEmpty)
        let signOut = harness.machine.changeAccount(to: nil, at: harness.now)
        #expect(Self.effects(signOut).last == .prepareChange(epoch: 3))
        #expect(harness.machine.hooksDue(epoch: 3) == AccountChange(from: "bob", to: nil))
    }
}
