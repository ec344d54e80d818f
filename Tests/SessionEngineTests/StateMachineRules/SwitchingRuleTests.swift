import Foundation
import Testing

@testable import SessionEngine

/// The rows from `switching`: an account change under way.
extension SessionStateMachineRuleTests {
    @Test func switchingToSameAccountJoins() {
        var harness = MachineHarness.switching(to: "alice")
        let before = harness.machine.state
        let decision = harness.machine.changeAccount(to: "alice", at: harness.now)
        guard case .alreadyCurrent(epoch: 1) = decision else {
            Issue.record("expected to join the change of epoch 1, got \(decision)")
            return
        }
        #expect(harness.machine.state == before)
        #expect(harness.machine.epoch == 1)
    }

    @Test func switchingToSameAccountExpectingAUserChecksThePinAndPinsOneNotPinned() {
        // No user expected by the first sign-in: a second one that expects one pins it before the first credential.
        var harness = MachineHarness.switching(to: "alice")
        let joined = harness.machine.changeAccount(to: "alice", expecting: "alice@example.com", at: harness.now)
        guard case .alreadyCurrent(epoch: 1) = joined else {
            Issue.record("expected to join the change of epoch 1, got \(joined)")
            return
        }
        guard case .switching(let change) = harness.machine.state else {
            Issue.record("expected the change to go on, got \(harness.machine.state)")
            return
        }
        #expect(change.target?.pinnedEmail == "alice@example.com")

        // A third that expects another user is refused, and changes nothing.
        let before = harness.machine.state
        let refused = harness.machine.changeAccount(to: "alice", expecting: "bob@example.com", at: harness.now)
        guard case .refused(let error, let actions) = refused else {
            Issue.record("expected a refusal, got \(refused)")
            return
        }
        #expect(error.code == .identityMismatch)
        #expect(actions.isEmpty)
        #expect(harness.machine.state == before)
        #expect(harness.machine.epoch == 1)

        // A credential handed over with the first sign-in is the session's first: a sign-in that expects another user
        // is refused rather than let the credential be dropped when the change is prepared.
        var pushed = MachineHarness.signedOut()
        let wall = Int64(pushed.now.wall.timeIntervalSince1970)
        let bobs = pushed.credential(email: "bob@example.com", expiresAt: wall + 900)
        guard case .began(epoch: 1, _) = pushed.machine.changeAccount(to: "alice", pushing: bobs, at: pushed.now) else {
            Issue.record("expected the sign-in with a handed-over credential to begin")
            return
        }
        let mismatch = pushed.machine.changeAccount(to: "alice", expecting: "alice@example.com", at: pushed.now)
        guard case .refused(let pushedError, _) = mismatch else {
            Issue.record("expected a refusal, got \(mismatch)")
            return
        }
        #expect(pushedError.code == .identityMismatch)
        let matching = pushed.machine.changeAccount(to: "alice", expecting: "bob@example.com", at: pushed.now)
        guard case .alreadyCurrent(epoch: 1) = matching else {
            Issue.record("expected to join the change of epoch 1, got \(matching)")
            return
        }
    }

    @Test func switchingToAnotherAccountSupersedesTheChange() {
        // Prepared, with the first fetch running: the fetch is cancelled with the rest.
        var harness = MachineHarness.signingIn(as: "alice")
        let decision = harness.machine.changeAccount(to: "bob", at: harness.now)
        guard case .began(epoch: 2, _) = decision else {
            Issue.record("expected a change of epoch 2, got \(decision)")
            return
        }
        #expect(Self.effects(decision) == Self.changeBegun(epoch: 2, leaving: "alice", cancellingFetch: true))
        #expect(harness.machine.publicState == .switching(from: "alice", to: "bob"))

        // Unprepared, no fetch yet: nothing to cancel but the timer and the work.
        var unprepared = MachineHarness.switching(to: "alice")
        let second = unprepared.machine.changeAccount(to: "bob", at: unprepared.now)
        #expect(Self.effects(second) == Self.changeBegun(epoch: 2, leaving: "alice"))
        #expect(unprepared.machine.publicState == .switching(from: "alice", to: "bob"))
    }

    @Test func hooksDueReportsTheChangeFromTheAccountTheLastHooksEntered() {
        // The last hooks entered alice; the switch to bob reports alice → bob and records bob.
        var harness = MachineHarness.identified(as: "alice")
        harness.run(.signIn("bob"))
        #expect(harness.machine.hooksDue(epoch: 2) == AccountChange(from: "alice", to: "bob"))
        #expect(harness.machine.hookedAccount == "bob")

        // A change superseded before its hooks ran reports nothing; the one that superseded it reports the whole
        // change, from the account the last hooks entered.
        var superseded = MachineHarness.identified(as: "alice")
        superseded.run(.signIn("bob"), .signIn("carol"))
        #expect(superseded.machine.hooksDue(epoch: 2) == nil)
        #expect(superseded.machine.hooksDue(epoch: 3) == AccountChange(from: "alice", to: "carol"))

        // A shutdown that began a change of its own runs no hooks.
        var shuttingDown = MachineHarness.identified(as: "alice")
        shuttingDown.run(.shutdown)
        #expect(shuttingDown.machine.hooksDue(epoch: 2) == nil)
        #expect(shuttingDown.machine.hookedAccount == "alice")
    }

    @Test func signOutCompletesWhenPreparedAndFailsItsRenewCallers() {
        var harness = MachineHarness.identified(as: "alice")
        harness.run(.signOut, .renew)
        _ = harness.machine.hooksDue(epoch: 2)
        let actions = harness.machine.changePrepared(epoch: 2, at: harness.now)
        #expect(Self.effects(actions) == [.resolve(epoch: 2, Self.everyone, .failed(.signedOut))])
        #expect(harness.machine.state == .signedOut)
    }

    @Test func shutdownCompletesWhenPrepared() {
        var harness = MachineHarness.identified(as: "alice")
        harness.run(.shutdown)
        let actions = harness.machine.changePrepared(epoch: 2, at: harness.now)
        #expect(Self.effects(actions) == [.failAllWaiters(.shutDown), .finishShutdown])
        #expect(harness.machine.state == .shutDown)
        #expect(harness.machine.publicState == .signedOut)
    }

    @Test func preparedSignInStartsTheFirstFetchAtOnce() {
        // Alice's fetch started at uptime zero; bob's first fetch, at the same instant, is not held back by it.
        var harness = MachineHarness.identified(as: "alice")
        harness.run(.signIn("bob"))
        _ = harness.machine.hooksDue(epoch: 2)
        let actions = harness.machine.changePrepared(epoch: 2, at: harness.now)
        #expect(Self.effects(actions) == [.startFetch("bob", epoch: 2)])
        guard case .switching(let change) = harness.machine.state else {
            Issue.record("not switching: \(harness.machine.state)")
            return
        }
        #expect(change.prepared)
        guard case .inFlight(_, .firstCredential) = change.target?.fetch else {
            Issue.record("the first fetch does not run: \(String(describing: change.target?.fetch))")
            return
        }
    }

    @Test func stalePreparationIsIgnored() {
        var harness = MachineHarness.switching(to: "alice")
        harness.run(.signIn("bob"))
        let before = harness.machine.state
        #expect(harness.machine.changePrepared(epoch: 1, at: harness.now).isEmpty)
        #expect(harness.machine.state == before)
    }

    @Test func firstCredentialIdentifiesOnTheClockUnderWhichItExpiresSoonest() throws {
        // No Date header: installed on this host's clock.
        var harness = MachineHarness.signingIn(as: "alice")
        let credential = harness.freshCredential(lifetime: 900)
        let actions = harness.machine.fetchSucceeded(try harness.fetchID(), credential: credential, at: harness.now)
        #expect(Self.effects(actions) == Self.installed(credential, for: "alice", epoch: 1))
        #expect(harness.machine.usableCredential == credential)
        #expect(harness.machine.publicState.name == "identified")

        // A Date header an hour ahead whose clock makes the credential plausible: the offset is applied.
        var ahead = MachineHarness.signingIn(as: "alice")
        let aheadWall = Int64(ahead.now.wall.timeIntervalSince1970)
        let aheadCredential = ahead.credential(email: "alice@example.com", expiresAt: aheadWall + 3600 + 900)
        let applied = ahead.machine.fetchSucceeded(
            try ahead.fetchID(), credential: aheadCredential, serverClockOffset: .seconds(3600), at: ahead.now)
        #expect(
            Self.effects(applied)
                == [.clockSkew(.offsetApplied)] + Self.installed(aheadCredential, for: "alice", epoch: 1))
        #expect(ahead.machine.serverClockOffset == .seconds(3600))

        // A Date header an hour behind: the credential would live longer on it, so it is kept out.
        var behind = MachineHarness.signingIn(as: "alice")
        let behindWall = Int64(behind.now.wall.timeIntervalSince1970)
        let behindCredential = behind.credential(email: "alice@example.com", expiresAt: behindWall + 900)
        let ignored = behind.machine.fetchSucceeded(
            try behind.fetchID(), credential: behindCredential, serverClockOffset: .seconds(-3600), at: behind.now)
        #expect(
            Self.effects(ignored)
                == [.clockSkew(.dateHeaderIgnored)] + Self.installed(behindCredential, for: "alice", epoch: 1))
        #expect(behind.machine.serverClockOffset == .zero)
    }

    @Test func failedFirstFetchExpiresAsUnavailableAndRetriesAfterBackoff() throws {
        // A transient failure: the renew() callers learn of it, the sign-in keeps waiting, a retry is planned.
        var harness = MachineHarness.signingIn(as: "alice")
        let actions = harness.machine.fetchFailed(
            try harness.fetchID(), error: .fetchFailed("timed out"), at: harness.now)
        #expect(
            Self.effects(actions) == [
                .fetchFailed(.fetchFailed), .resolve(epoch: 1, Self.renewCallers, .failed(.fetchFailed)),
                .scheduleTimer,
            ])
        #expect(harness.expiredReason == .unavailable)
        // The floor is what the minimum interval still requires (5 s), the jitter below the first ceiling (1 s).
        guard case .waiting(let until, .firstCredential) = harness.fetch else {
            Issue.record("no retry planned: \(String(describing: harness.fetch))")
            return
        }
        #expect(until >= .seconds(5) && until < .seconds(6))
        #expect(harness.machine.timer?.uptimeDeadline == until)

        // A credential no clock makes plausible is refused, reported as clock skew and retried on the slow schedule.
        var refused = MachineHarness.signingIn(as: "alice")
        let wall = Int64(refused.now.wall.timeIntervalSince1970)
        let stale = refused.credential(email: "alice@example.com", expiresAt: wall - 60)
        let refusal = refused.machine.fetchSucceeded(try refused.fetchID(), credential: stale, at: refused.now)
        #expect(
            Self.effects(refusal) == [
                .clockSkew(.noClockPlausible), .fetchFailed(.credentialExpiredOnArrival),
                .resolve(epoch: 1, Self.renewCallers, .failed(.credentialExpiredOnArrival)), .scheduleTimer,
            ])
        #expect(refused.expiredReason == .unavailable)
        // The misconfiguration schedule: the floor plus the upper half of its first ceiling (10 s).
        guard case .waiting(let slowUntil, .firstCredential) = refused.fetch else {
            Issue.record("no retry planned: \(String(describing: refused.fetch))")
            return
        }
        #expect(slowUntil >= .seconds(10) && slowUntil < .seconds(15))
    }

    @Test func terminalFirstFetchFailureBeginsSignOut() throws {
        var harness = MachineHarness.signingIn(as: "alice")
        let actions = harness.machine.fetchFailed(try harness.fetchID(), error: .backendSessionEnded(), at: harness.now)
        #expect(
            Self.effects(actions)
                == [
                    .fetchFailed(.backendSessionEnded),
                    .resolve(epoch: 1, Self.everyone, .failed(.backendSessionEnded)),
                ]
                + Self.changeBegun(epoch: 2, leaving: "alice", waitersFail: .backendSessionEnded))
        #expect(harness.machine.publicState == .switching(from: "alice", to: nil))
        // The sign-out runs the hooks like any other.
        #expect(harness.machine.hooksDue(epoch: 2) == AccountChange(from: "alice", to: nil))
    }

    @Test func switchingIgnoresTimersAndRejections() throws {
        var harness = MachineHarness.identified(as: "alice")
        let credential = try #require(harness.machine.usableCredential)
        let timer = try #require(harness.machine.timer)
        harness.run(.signIn("bob"))
        let before = harness.machine.state
        #expect(harness.machine.timerFired(timer.id, at: harness.now).isEmpty)
        #expect(harness.machine.credentialRejected(credential, at: harness.now).isEmpty)
        #expect(harness.machine.state == before)

        // Prepared, with bob's first fetch running, still no credential to reject and no timer.
        harness.run(.prepare)
        let prepared = harness.machine.state
        #expect(harness.machine.timerFired(timer.id, at: harness.now).isEmpty)
        #expect(harness.machine.credentialRejected(credential, at: harness.now).isEmpty)
        #expect(harness.machine.state == prepared)
    }

    @Test func renewWhileSwitchingWaitsForTheFirstFetch() {
        var harness = MachineHarness.switching(to: "alice")
        let decision = harness.machine.renewRequested(at: harness.now)
        guard case .wait(epoch: 1, let actions) = decision else {
            Issue.record("expected to wait for epoch 1, got \(decision)")
            return
        }
        #expect(actions.isEmpty)
    }
}
