import Foundation
import Testing

@testable import SessionEngine

/// The rows from `expired`.
extension SessionStateMachineRuleTests {
    @Test func expiredInstallsTheRenewedCredential() throws {
        var harness = MachineHarness.expired(as: "alice")
        let credential = harness.freshCredential(lifetime: 900)
        let actions = harness.machine.fetchSucceeded(try harness.fetchID(), credential: credential, at: harness.now)
        #expect(Self.effects(actions) == Self.installed(credential, for: "alice", epoch: 1))
        #expect(harness.machine.publicState.name == "identified")
        #expect(harness.machine.usableCredential == credential)
    }

    @Test func expiredFailureStaysExpiredAndRetriesAfterBackoff() throws {
        var harness = MachineHarness.expired(as: "alice")
        let actions = harness.machine.fetchFailed(
            try harness.fetchID(), error: .fetchFailed("timed out"), at: harness.now)
        #expect(
            Self.effects(actions) == [
                .fetchFailed(.fetchFailed), .resolve(epoch: 1, Self.renewCallers, .failed(.fetchFailed)),
                .scheduleTimer,
            ])
        #expect(harness.expiredReason == .expired)
        guard case .waiting(let until, .renewal) = harness.fetch else {
            Issue.record("no retry planned: \(String(describing: harness.fetch))")
            return
        }
        #expect(until > harness.now.uptime)

        // A credential that lives too long on every clock is refused as a misconfiguration.
        var refused = MachineHarness.expired(as: "alice")
        let wall = Int64(refused.now.wall.timeIntervalSince1970)
        let overLong = refused.credential(email: "alice@example.com", expiresAt: wall + 86_400 + 3600)
        let refusal = refused.machine.fetchSucceeded(try refused.fetchID(), credential: overLong, at: refused.now)
        #expect(
            Self.effects(refusal) == [
                .clockSkew(.noClockPlausible), .fetchFailed(.lifetimeTooLong),
                .resolve(epoch: 1, Self.renewCallers, .failed(.lifetimeTooLong)), .scheduleTimer,
            ])
        #expect(refused.expiredReason == .expired)
    }

    @Test func expiredTerminalFailureBeginsSignOut() throws {
        var harness = MachineHarness.expired(as: "alice")
        let actions = harness.machine.fetchFailed(try harness.fetchID(), error: .backendSessionEnded(), at: harness.now)
        #expect(
            Self.effects(actions)
                == [
                    .fetchFailed(.backendSessionEnded),
                    .resolve(epoch: 1, Self.everyone, .failed(.backendSessionEnded)),
                ]
                + Self.changeBegun(epoch: 2, leaving: "alice", waitersFail: .backendSessionEnded))
        #expect(harness.machine.publicState == .switching(from: "alice", to: nil))
    }

    @Test func expiredStartsThePlannedFetchWhenItsTimeComes() throws {
        var harness = MachineHarness.expired(as: "alice")
        harness.run(.failTransiently)
        guard case .waiting(let until, .renewal) = harness.fetch else {
            Issue.record("no retry planned: \(String(describing: harness.fetch))")
            return
        }
        let timer = try #require(harness.machine.timer)
        harness.advance(by: until - harness.now.uptime)
        let actions = harness.machine.timerFired(timer.id, at: harness.now)
        #expect(Self.effects(actions) == [.startFetch("alice", epoch: 1)])
        #expect(harness.expiredReason == .expired)
        guard case .inFlight(_, .renewal) = harness.fetch else {
            Issue.record("the planned fetch did not start: \(String(describing: harness.fetch))")
            return
        }
    }

    @Test func renewWhileExpiredSharesTheRunningOrPlannedFetch() {
        var harness = MachineHarness.expired(as: "alice")
        let running = harness.fetch
        let decision = harness.machine.renewRequested(at: harness.now)
        guard case .wait(epoch: 1, let actions) = decision else {
            Issue.record("expected to wait for epoch 1, got \(decision)")
            return
        }
        #expect(actions.isEmpty)
        #expect(harness.fetch == running)

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

    @Test func expiredRejectionRenewsOnceAndKeepsTheReason() throws {
        // The running fetch counts as the renewal; the published reason stays `expired`.
        var harness = MachineHarness.expired(as: "alice")
        let credential = try #require(harness.session?.credential)
        let id = try harness.fetchID()
        let before = harness.machine.publicState
        let actions = harness.machine.credentialRejected(credential, at: harness.now)
        #expect(Self.effects(actions) == [.rejected(renewing: true)])
        #expect(harness.machine.publicState == before)
        #expect(harness.fetch == .inFlight(id, .rejection))

        // With the fetch only planned, one starts now.
        var planned = MachineHarness.expired(as: "alice")
        planned.run(.failTransiently, .advance(seconds: 10))
        let plannedCredential = try #require(planned.session?.credential)
        let plannedActions = planned.machine.credentialRejected(plannedCredential, at: planned.now)
        #expect(
            Self.effects(plannedActions) == [.rejected(renewing: true), .startFetch("alice", epoch: 1), .cancelTimer])
        #expect(planned.expiredReason == .expired)
        guard case .inFlight(_, .rejection) = planned.fetch else {
            Issue.record("no renewal after the rejection: \(String(describing: planned.fetch))")
            return
        }
    }

    @Test func expiredIgnoresRepeatedOrOlderRejections() throws {
        var harness = MachineHarness.identified(as: "alice")
        let older = try #require(harness.machine.usableCredential)
        harness.run(.advance(seconds: 10), .renew, .succeed(lifetime: 900), .advance(seconds: 10), .rejectInstalled)
        let current = try #require(harness.session?.credential)
        #expect(harness.expiredReason == .rejected)
        let before = harness.machine.state
        #expect(harness.machine.credentialRejected(current, at: harness.now).isEmpty)
        #expect(harness.machine.credentialRejected(older, at: harness.now).isEmpty)
        #expect(harness.machine.state == before)
    }
}
