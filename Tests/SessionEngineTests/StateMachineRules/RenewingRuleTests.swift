import Foundation
import Testing

@testable import SessionEngine

/// The rows from `renewing`.
extension SessionStateMachineRuleTests {
    @Test func renewingInstallsTheRenewedCredential() throws {
        var harness = MachineHarness.renewing(as: "alice")
        let credential = harness.freshCredential(lifetime: 900)
        let actions = harness.machine.fetchSucceeded(try harness.fetchID(), credential: credential, at: harness.now)
        #expect(Self.effects(actions) == Self.installed(credential, for: "alice", epoch: 1))
        #expect(harness.machine.publicState.name == "identified")
        #expect(harness.machine.usableCredential == credential)
    }

    @Test func renewingFailureKeepsTheCredentialAndRetriesAfterBackoff() throws {
        var harness = MachineHarness.renewing(as: "alice")
        let credential = try #require(harness.machine.usableCredential)
        let actions = harness.machine.fetchFailed(
            try harness.fetchID(), error: .fetchFailed("timed out"), at: harness.now)
        #expect(
            Self.effects(actions) == [
                .fetchFailed(.fetchFailed), .resolve(epoch: 1, Self.renewCallers, .failed(.fetchFailed)),
                .scheduleTimer,
            ])
        #expect(harness.machine.publicState.name == "renewing")
        #expect(harness.machine.usableCredential == credential)
        guard case .waiting(let until, .renewal) = harness.fetch else {
            Issue.record("no retry planned: \(String(describing: harness.fetch))")
            return
        }
        #expect(until > harness.now.uptime)

        // A refused credential (another user's) is a failure like any other.
        var refused = MachineHarness.renewing(as: "alice")
        let wall = Int64(refused.now.wall.timeIntervalSince1970)
        let mallory = refused.credential(email: MachineHarness.otherEmail, expiresAt: wall + 900)
        let refusal = refused.machine.fetchSucceeded(try refused.fetchID(), credential: mallory, at: refused.now)
        #expect(
            Self.effects(refusal) == [
                .fetchFailed(.identityMismatch), .resolve(epoch: 1, Self.renewCallers, .failed(.identityMismatch)),
                .scheduleTimer,
            ])
        #expect(refused.machine.publicState.name == "renewing")
        guard case .waiting(_, .renewal) = refused.fetch else {
            Issue.record("no retry planned: \(String(describing: refused.fetch))")
            return
        }
    }

    @Test func renewingTerminalFailureBeginsSignOut() throws {
        var harness = MachineHarness.renewing(as: "alice")
        let actions = harness.machine.fetchFailed(try harness.fetchID(), error: .backendSessionEnded(), at: harness.now)
        #expect(
            Self.effects(actions)
                == [
                    .fetchFailed(.backendSessionEnded),
                    .resolve(epoch: 1, Self.everyone, .failed(.backendSessionEnded)),
                ]
                + Self.changeBegun(epoch: 2, leaving: "alice", waitersFail: .backendSessionEnded))
        #expect(harness.machine.publicState == .switching(from: "alice", to: nil))
        #expect(harness.machine.usableCredential == nil)
    }

    @Test func renewingExpiresAndTheFetchGoesOn() throws {
        // The running fetch goes on.
        var harness = MachineHarness.renewing(as: "alice")
        let id = try harness.fetchID()
        let timer = try #require(harness.machine.timer)
        let expiry = try #require(timer.wallDeadline)
        harness.advance(by: .seconds(expiry.timeIntervalSince(harness.now.wall)))
        let actions = harness.machine.timerFired(timer.id, at: harness.now)
        #expect(Self.effects(actions).isEmpty)
        #expect(harness.expiredReason == .expired)
        #expect(harness.fetch == .inFlight(id, .renewal))

        // So does the planned one: the wall clock passed expiry before the retry is due.
        var planned = MachineHarness.renewing(as: "alice")
        planned.run(.failTransiently, .jumpWall(seconds: 7200))
        let waiting = planned.fetch
        let plannedTimer = try #require(planned.machine.timer)
        let fired = planned.machine.timerFired(plannedTimer.id, at: planned.now)
        #expect(Self.effects(fired) == [.scheduleTimer])
        #expect(planned.expiredReason == .expired)
        #expect(planned.fetch == waiting)
    }

    @Test func renewingStartsThePlannedFetchWhenItsTimeComes() throws {
        var harness = MachineHarness.renewing(as: "alice")
        harness.run(.failTransiently)
        guard case .waiting(let until, .renewal) = harness.fetch else {
            Issue.record("no retry planned: \(String(describing: harness.fetch))")
            return
        }
        let timer = try #require(harness.machine.timer)
        #expect(timer.uptimeDeadline == until)
        harness.advance(by: until - harness.now.uptime)
        let actions = harness.machine.timerFired(timer.id, at: harness.now)
        #expect(Self.effects(actions) == [.startFetch("alice", epoch: 1), .scheduleTimer])
        #expect(harness.machine.publicState.name == "renewing")
        guard case .inFlight(_, .renewal) = harness.fetch else {
            Issue.record("the planned fetch did not start: \(String(describing: harness.fetch))")
            return
        }
    }

    @Test func renewWhileRenewingSharesTheFetch() {
        var harness = MachineHarness.renewing(as: "alice")
        let running = harness.fetch
        let decision = harness.machine.renewRequested(at: harness.now)
        guard case .wait(epoch: 1, let actions) = decision else {
            Issue.record("expected to wait for epoch 1, got \(decision)")
            return
        }
        #expect(actions.isEmpty)
        #expect(harness.fetch == running)

        // A planned fetch is shared too: the caller does not start one sooner.
        harness.run(.failTransiently)
        let planned = harness.fetch
        let second = harness.machine.renewRequested(at: harness.now)
        guard case .wait(epoch: 1, let none) = second else {
            Issue.record("expected to wait for epoch 1, got \(second)")
            return
        }
        #expect(none.isEmpty)
        #expect(harness.fetch == planned)
    }

    @Test func renewingRejectionCountsTheRunningFetchAsTheRenewal() throws {
        var harness = MachineHarness.renewing(as: "alice")
        let credential = try #require(harness.machine.usableCredential)
        let id = try harness.fetchID()
        let actions = harness.machine.credentialRejected(credential, at: harness.now)
        #expect(Self.effects(actions) == [.rejected(renewing: true), .cancelTimer])
        #expect(harness.expiredReason == .rejected)
        #expect(harness.fetch == .inFlight(id, .rejection))

        // With the fetch only planned, the renewal starts now.
        var planned = MachineHarness.renewing(as: "alice")
        planned.run(.failTransiently, .advance(seconds: 10))
        let plannedCredential = try #require(planned.machine.usableCredential)
        let plannedActions = planned.machine.credentialRejected(plannedCredential, at: planned.now)
        #expect(
            Self.effects(plannedActions) == [.rejected(renewing: true), .startFetch("alice", epoch: 1), .cancelTimer])
        #expect(planned.expiredReason == .rejected)
        guard case .inFlight(_, .rejection) = planned.fetch else {
            Issue.record("no renewal after the rejection: \(String(describing: planned.fetch))")
            return
        }
    }

    /// A credential itself renewed after a rejection is rejected again while its renewal runs (in a pool, the fetch
    /// may still wait for the budget): the running fetch is the retry, its credential continues the streak, and the
    /// report announces no wait, since none applies.
    @Test func renewingRejectionOfACredentialRenewedAfterARejectionCountsTheRunningFetchAndAnnouncesNoWait() throws {
        var harness = MachineHarness.identified(as: "alice")
        harness.run(.advance(seconds: 10), .rejectInstalled, .succeed(lifetime: 900), .advanceToTimer)
        #expect(harness.session?.renewedAfterRejection == true)
        let renewed = try #require(harness.machine.usableCredential)
        let id = try harness.fetchID()
        let actions = harness.machine.credentialRejected(renewed, at: harness.now)
        #expect(Self.effects(actions) == [.rejected(renewing: true), .cancelTimer])
        guard case .emit(.credentialRejected(let report), _) = actions.first else {
            Issue.record("no report: \(actions)")
            return
        }
        #expect(report.retryIn == nil)
        #expect(harness.expiredReason == .rejected)
        #expect(harness.session?.rejectionStreak == 1)
        #expect(harness.fetch == .inFlight(id, .retryAfterRejection))
    }
}
