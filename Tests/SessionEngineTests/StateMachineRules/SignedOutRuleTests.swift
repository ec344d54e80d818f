import Foundation
import Testing

@testable import SessionEngine

/// The rows from `signedOut`.
extension SessionStateMachineRuleTests {
    @Test func signedOutSignInBeginsSwitchingWithANewEpoch() {
        var harness = MachineHarness.signedOut()
        let decision = harness.machine.changeAccount(to: "alice", at: harness.now)
        guard case .began(epoch: 1, _) = decision else {
            Issue.record("expected a change of epoch 1, got \(decision)")
            return
        }
        #expect(Self.effects(decision) == Self.changeBegun(epoch: 1, leaving: nil))
        #expect(harness.machine.publicState == .switching(from: nil, to: "alice"))
        guard case .switching(let change) = harness.machine.state else {
            Issue.record("not switching: \(harness.machine.state)")
            return
        }
        #expect(!change.prepared && change.runsHooks && !change.shutsDown)
    }

    @Test func signedOutSignOutChangesNothing() {
        var harness = MachineHarness.signedOut()
        let decision = harness.machine.changeAccount(to: nil, at: harness.now)
        guard case .alreadyCurrent(epoch: 0) = decision else {
            Issue.record("expected nothing to change, got \(decision)")
            return
        }
        #expect(harness.machine.state == .signedOut)
        #expect(harness.machine.epoch == 0)
    }

    @Test func signedOutRenewFailsWithSignedOut() {
        var harness = MachineHarness.signedOut()
        let decision = harness.machine.renewRequested(at: harness.now)
        guard case .fail(let error) = decision else {
            Issue.record("expected a failure, got \(decision)")
            return
        }
        #expect(error.code == .signedOut)
        #expect(harness.machine.state == .signedOut)
    }

    @Test func signedOutIgnoresStalePreparationsResultsTimersAndRejections() throws {
        // Signed in, identified, then signed out: the fetch, timer and credential of the account left are stale.
        var harness = MachineHarness.identified(as: "alice")
        let credential = try #require(harness.machine.usableCredential)
        let timer = try #require(harness.machine.timer)
        harness.run(.signOut, .prepare)
        #expect(harness.machine.state == .signedOut)
        let before = harness.machine
        var machine = harness.machine
        let now = harness.now

        #expect(machine.changePrepared(epoch: 1, at: now).isEmpty)
        #expect(machine.changePrepared(epoch: 2, at: now).isEmpty)
        #expect(machine.fetchSucceeded(1, credential: credential, at: now).isEmpty)
        #expect(machine.fetchFailed(1, error: .fetchFailed("late"), at: now).isEmpty)
        #expect(machine.timerFired(timer.id, at: now).isEmpty)
        #expect(machine.credentialRejected(credential, at: now).isEmpty)
        #expect(machine.state == before.state && machine.epoch == before.epoch && machine.timer == nil)
    }
}
