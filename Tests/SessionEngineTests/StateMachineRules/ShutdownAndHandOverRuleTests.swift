import Foundation
import Testing

@testable import SessionEngine

/// The rows that apply from many states: shutdown, stale inputs, credentials the host hands over, and the graceful
/// shutdown.
extension SessionStateMachineRuleTests {
    @Test func shutdownBeginsAChangeWithoutHooksOrJoinsASignOut() {
        var harness = MachineHarness.renewing(as: "alice")
        let decision = harness.machine.shutdownRequested(at: harness.now)
        guard case .began(epoch: 2, _) = decision else {
            Issue.record("expected a change of epoch 2, got \(decision)")
            return
        }
        #expect(
            Self.effects(decision)
                == Self.changeBegun(epoch: 2, leaving: "alice", cancellingFetch: true, waitersFail: .shutDown)
                + [.failAllWaiters(.shutDown)])
        guard case .switching(let change) = harness.machine.state else {
            Issue.record("not switching: \(harness.machine.state)")
            return
        }
        #expect(change.target == nil && change.shutsDown && !change.runsHooks)
        #expect(harness.machine.hooksDue(epoch: 2) == nil)

        // A sign-out under way is joined: it shuts down once prepared, and its hooks still run.
        var signingOut = MachineHarness.identified(as: "alice")
        signingOut.run(.signOut)
        let joined = signingOut.machine.shutdownRequested(at: signingOut.now)
        guard case .began(epoch: 2, _) = joined else {
            Issue.record("expected to join the change of epoch 2, got \(joined)")
            return
        }
        #expect(Self.effects(joined) == [.failAllWaiters(.shutDown)])
        #expect(signingOut.machine.hooksDue(epoch: 2) == AccountChange(from: "alice", to: nil))
        let prepared = signingOut.machine.changePrepared(epoch: 2, at: signingOut.now)
        #expect(Self.effects(prepared) == [.failAllWaiters(.shutDown), .finishShutdown])
        #expect(signingOut.machine.state == .shutDown)
    }

    @Test func shutDownRefusesOrIgnoresEveryInput() throws {
        var harness = MachineHarness.identified(as: "alice")
        let credential = try #require(harness.machine.usableCredential)
        let timer = try #require(harness.machine.timer)
        harness.run(.shutdown, .prepare)
        #expect(harness.machine.state == .shutDown)
        var machine = harness.machine
        let now = harness.now

        guard case .shutDown = machine.changeAccount(to: "bob", at: now) else {
            Issue.record("an account change was not refused")
            return
        }
        guard case .fail(let renewError) = machine.renewRequested(at: now) else {
            Issue.record("renew() did not fail")
            return
        }
        #expect(renewError.code == .shutDown)
        guard
            case .refused(let pushError, let pushActions) = machine.credentialPushed(credential, for: "alice", at: now)
        else {
            Issue.record("a handed-over credential was not refused")
            return
        }
        #expect(pushError.code == .shutDown && pushActions.isEmpty)
        guard case .shutDown = machine.shutdownRequested(at: now) else {
            Issue.record("a second shutdown was not refused")
            return
        }
        #expect(machine.hooksDue(epoch: 2) == nil)
        #expect(machine.changePrepared(epoch: 2, at: now).isEmpty)
        #expect(machine.fetchSucceeded(1, credential: credential, at: now).isEmpty)
        #expect(machine.fetchFailed(1, error: .fetchFailed("late"), at: now).isEmpty)
        #expect(machine.timerFired(timer.id, at: now).isEmpty)
        #expect(machine.credentialRejected(credential, at: now).isEmpty)
        #expect(machine.gracefulShutdownRequested(grace: .seconds(30), at: now).isEmpty)
        #expect(machine.gracePeriodEnded(at: now).isEmpty)
        #expect(machine.state == .shutDown && machine.timer == nil)
    }

    @Test func staleFetchResultsAndTimersChangeNothing() throws {
        var harness = MachineHarness.identified(as: "alice")
        let oldTimer = try #require(harness.machine.timer)
        let oldFetch = try #require(harness.retiredFetches.last)
        harness.run(.advance(seconds: 10), .renew)
        let before = harness.machine.state
        let timer = harness.machine.timer
        let late = harness.freshCredential(lifetime: 900)
        #expect(harness.machine.fetchSucceeded(oldFetch, credential: late, at: harness.now).isEmpty)
        #expect(harness.machine.fetchFailed(oldFetch, error: .backendSessionEnded(), at: harness.now).isEmpty)
        #expect(harness.machine.timerFired(oldTimer.id, at: harness.now).isEmpty)
        #expect(harness.machine.state == before && harness.machine.timer == timer)
    }

    @Test func signInWithARefusedCredentialChangesNothing() throws {
        // Expired on arrival: clock skew is reported, the caller fails.
        var harness = MachineHarness.signedOut()
        let wall = Int64(harness.now.wall.timeIntervalSince1970)
        let expired = harness.credential(email: "alice@example.com", expiresAt: wall - 60)
        let decision = harness.machine.changeAccount(to: "alice", pushing: expired, at: harness.now)
        guard case .refused(let error, _) = decision else {
            Issue.record("expected a refusal, got \(decision)")
            return
        }
        #expect(error.code == .credentialExpiredOnArrival)
        #expect(Self.effects(decision) == [.clockSkew(.credentialRefused)])
        #expect(harness.machine.state == .signedOut && harness.machine.epoch == 0)

        // Another user's than the host said: no clock report; nothing of the current account changes.
        for var from in [MachineHarness.identified(as: "alice"), .renewing(as: "alice"), .expired(as: "alice")] {
            let before = from.machine.state
            let mallory = from.credential(email: MachineHarness.otherEmail, expiresAt: wall + 900)
            let refused = from.machine.changeAccount(
                to: "bob", pushing: mallory, expecting: "bob@example.com", at: from.now)
            guard case .refused(let mismatch, let actions) = refused else {
                Issue.record("expected a refusal from \(before), got \(refused)")
                continue
            }
            #expect(mismatch.code == .identityMismatch && actions.isEmpty)
            #expect(from.machine.state == before && from.machine.epoch == 1)
        }
    }

    @Test func preparedSignInInstallsTheHandedOverCredential() {
        var harness = MachineHarness.signedOut()
        let wall = Int64(harness.now.wall.timeIntervalSince1970)
        let credential = harness.credential(email: "alice@example.com", expiresAt: wall + 900)
        _ = harness.machine.changeAccount(to: "alice", pushing: credential, at: harness.now)
        _ = harness.machine.hooksDue(epoch: 1)
        let actions = harness.machine.changePrepared(epoch: 1, at: harness.now)
        #expect(Self.effects(actions) == Self.installed(credential, for: "alice", epoch: 1, pushed: true))
        #expect(harness.machine.usableCredential == credential)

        // It expired while the change was prepared: reported, and the first fetch starts as usual.
        var late = MachineHarness.signedOut()
        let lateCredential = late.credential(email: "alice@example.com", expiresAt: wall + 900)
        _ = late.machine.changeAccount(to: "alice", pushing: lateCredential, at: late.now)
        late.advance(by: .seconds(1000))
        _ = late.machine.hooksDue(epoch: 1)
        let fetching = late.machine.changePrepared(epoch: 1, at: late.now)
        #expect(Self.effects(fetching) == [.clockSkew(.credentialRefused), .startFetch("alice", epoch: 1)])
        #expect(late.machine.publicState == .switching(from: nil, to: "alice"))
    }

    @Test func handedOverCredentialReplacesTheRunningRenewal() {
        var renewing = MachineHarness.renewing(as: "alice")
        let credential = renewing.freshCredential(lifetime: 900)
        let decision = renewing.machine.credentialPushed(credential, for: "alice", at: renewing.now)
        guard case .installed = decision else {
            Issue.record("expected an install, got \(decision)")
            return
        }
        #expect(
            Self.effects(decision) == [.cancelFetch] + Self.installed(credential, for: "alice", epoch: 1, pushed: true))
        #expect(renewing.machine.usableCredential == credential)
        #expect(renewing.machine.publicState.name == "identified")

        var expired = MachineHarness.expired(as: "alice")
        let fresh = expired.freshCredential(lifetime: 900)
        let fromExpired = expired.machine.credentialPushed(fresh, for: "alice", at: expired.now)
        #expect(
            Self.effects(fromExpired) == [.cancelFetch] + Self.installed(fresh, for: "alice", epoch: 1, pushed: true))
        #expect(expired.machine.publicState.name == "identified")

        // Identified: no fetch to cancel.
        var identified = MachineHarness.identified(as: "alice")
        let next = identified.freshCredential(lifetime: 900)
        let fromIdentified = identified.machine.credentialPushed(next, for: "alice", at: identified.now)
        #expect(Self.effects(fromIdentified) == Self.installed(next, for: "alice", epoch: 1, pushed: true))
        #expect(identified.machine.usableCredential == next)
    }

    @Test func handedOverCredentialBeforePreparationIsKept() {
        var harness = MachineHarness.switching(to: "alice")
        let credential = harness.freshCredential(lifetime: 900)
        let decision = harness.machine.credentialPushed(credential, for: "alice", at: harness.now)
        guard case .deferred = decision else {
            Issue.record("expected the credential to be kept, got \(decision)")
            return
        }
        guard case .switching(let change) = harness.machine.state else {
            Issue.record("not switching: \(harness.machine.state)")
            return
        }
        #expect(change.pushed == credential && !change.prepared)
        #expect(harness.machine.usableCredential == nil)
    }

    @Test func handedOverCredentialAfterPreparationReplacesTheFirstFetch() {
        var harness = MachineHarness.signingIn(as: "alice")
        let credential = harness.freshCredential(lifetime: 900)
        let decision = harness.machine.credentialPushed(credential, for: "alice", at: harness.now)
        #expect(
            Self.effects(decision) == [.cancelFetch] + Self.installed(credential, for: "alice", epoch: 1, pushed: true))
        #expect(harness.machine.usableCredential == credential)
        #expect(harness.machine.publicState.name == "identified")
    }

    @Test func handedOverCredentialForAnotherAccountOrRefusedChangesNothing() {
        func expectRefused(
            _ decision: SessionStateMachine.PushDecision,
            _ code: SessionError.Code,
            _ effects: [Effect] = [],
            sourceLocation: SourceLocation = #_sourceLocation
        ) {
            guard case .refused(let error, _) = decision else {
                Issue.record("expected a refusal, got \(decision)", sourceLocation: sourceLocation)
                return
            }
            #expect(error.code == code, sourceLocation: sourceLocation)
            #expect(Self.effects(decision) == effects, sourceLocation: sourceLocation)
        }
        var harness = MachineHarness.identified(as: "alice")
        let before = harness.machine.state
        let wall = Int64(harness.now.wall.timeIntervalSince1970)
        let bobs = harness.credential(email: "bob@example.com", expiresAt: wall + 900)
        expectRefused(harness.machine.credentialPushed(bobs, for: "bob", at: harness.now), .accountChanged)
        let expired = harness.credential(email: "alice@example.com", expiresAt: wall - 60)
        expectRefused(
            harness.machine.credentialPushed(expired, for: "alice", at: harness.now), .credentialExpiredOnArrival,
            [.clockSkew(.credentialRefused)])
        let overLong = harness.credential(email: "alice@example.com", expiresAt: wall + 86_400 + 3600)
        expectRefused(
            harness.machine.credentialPushed(overLong, for: "alice", at: harness.now), .lifetimeTooLong,
            [.clockSkew(.credentialRefused)])
        let mallory = harness.credential(email: MachineHarness.otherEmail, expiresAt: wall + 900)
        expectRefused(harness.machine.credentialPushed(mallory, for: "alice", at: harness.now), .identityMismatch)
        #expect(harness.machine.state == before)

        // Not the target of the change under way, or no account at all.
        var switching = MachineHarness.switching(to: "alice")
        let switchingBefore = switching.machine.state
        expectRefused(switching.machine.credentialPushed(bobs, for: "bob", at: switching.now), .accountChanged)
        #expect(switching.machine.state == switchingBefore)
        var signedOut = MachineHarness.signedOut()
        expectRefused(signedOut.machine.credentialPushed(bobs, for: "bob", at: signedOut.now), .accountChanged)
        #expect(signedOut.machine.state == .signedOut)
    }

    @Test func gracefulShutdownRefusesNewWorkAndStartsTheGracePeriod() {
        var harness = MachineHarness.identified(as: "alice")
        let before = harness.machine.state
        let actions = harness.machine.gracefulShutdownRequested(grace: .seconds(30), at: harness.now)
        #expect(Self.effects(actions) == [.refuseNewWork, .startGracePeriod(.seconds(30))])
        #expect(harness.machine.state == before)
        guard case .shutDown = harness.machine.changeAccount(to: "bob", at: harness.now) else {
            Issue.record("an account change was not refused during the grace period")
            return
        }
        #expect(harness.machine.state == before)
    }

    @Test func gracePeriodEndSignsOutWithHooksAndShutsDown() {
        var harness = MachineHarness.identified(as: "alice")
        harness.run(.gracefulShutdown)
        let actions = harness.machine.gracePeriodEnded(at: harness.now)
        #expect(
            Self.effects(actions)
                == Self.changeBegun(epoch: 2, leaving: "alice", waitersFail: .shutDown) + [.failAllWaiters(.shutDown)])
        #expect(harness.machine.publicState == .switching(from: "alice", to: nil))
        #expect(harness.machine.hooksDue(epoch: 2) == AccountChange(from: "alice", to: nil))
        let prepared = harness.machine.changePrepared(epoch: 2, at: harness.now)
        #expect(Self.effects(prepared) == [.failAllWaiters(.shutDown), .finishShutdown])
        #expect(harness.machine.state == .shutDown)

        // No account entered: the final change runs no hooks.
        var signedOut = MachineHarness.signedOut()
        signedOut.run(.gracefulShutdown)
        let fromSignedOut = signedOut.machine.gracePeriodEnded(at: signedOut.now)
        #expect(
            Self.effects(fromSignedOut)
                == Self.changeBegun(epoch: 1, leaving: nil, waitersFail: .shutDown) + [.failAllWaiters(.shutDown)])
        #expect(signedOut.machine.hooksDue(epoch: 1) == nil)
    }
}
