import Foundation
import Testing

@testable import SessionEngine

/// The rows from `identified`, and leaving an account from any of its states.
extension SessionStateMachineRuleTests {
    @Test func identifiedRenewsWhenTheRenewalTimeComes() throws {
        var harness = MachineHarness.identified(as: "alice")
        let credential = try #require(harness.machine.usableCredential)
        let timer = try #require(harness.machine.timer)
        let renewAt = try #require(timer.wallDeadline)
        harness.advance(by: .seconds(renewAt.timeIntervalSince(harness.now.wall)))
        let actions = harness.machine.timerFired(timer.id, at: harness.now)
        #expect(Self.effects(actions) == [.startFetch("alice", epoch: 1), .scheduleTimer])
        #expect(harness.machine.publicState.name == "renewing")
        // The timer now watches the credential's expiry.
        #expect(harness.machine.timer?.wallDeadline == credential.expirationDate)

        // Due by the wall clock less than the minimum interval after the last fetch started: the fetch is planned.
        var early = MachineHarness.identified(as: "alice")
        let earlyTimer = try #require(early.machine.timer)
        early.run(.advance(seconds: 1), .jumpWall(seconds: 850))
        let planned = early.machine.timerFired(earlyTimer.id, at: early.now)
        #expect(Self.effects(planned) == [.scheduleTimer])
        #expect(early.machine.publicState.name == "renewing")
        #expect(early.fetch == .waiting(until: .seconds(5), .renewal))
        #expect(early.machine.timer?.uptimeDeadline == .seconds(5))
    }

    @Test func identifiedExpiresWhenTheWallClockPassedExpiry() throws {
        var harness = MachineHarness.identified(as: "alice")
        let timer = try #require(harness.machine.timer)
        harness.run(.advance(seconds: 10), .jumpWall(seconds: 7200))
        let actions = harness.machine.timerFired(timer.id, at: harness.now)
        #expect(Self.effects(actions) == [.startFetch("alice", epoch: 1)])
        #expect(harness.expiredReason == .expired)
        #expect(harness.machine.usableCredential == nil)
    }

    @Test func identifiedRearmsWhenTheWallClockWentBack() throws {
        var harness = MachineHarness.identified(as: "alice")
        let timer = try #require(harness.machine.timer)
        harness.run(.advance(seconds: 10), .jumpWall(seconds: -7200))
        let actions = harness.machine.timerFired(timer.id, at: harness.now)
        #expect(Self.effects(actions) == [.scheduleTimer])
        #expect(harness.machine.publicState.name == "identified")
        #expect(harness.fetch == .idle)
        let rearmed = try #require(harness.machine.timer)
        #expect(rearmed.id != timer.id && rearmed.wallDeadline == timer.wallDeadline)
    }

    @Test func identifiedRenewOnRequestStartsAFetch() {
        var harness = MachineHarness.identified(as: "alice")
        harness.run(.advance(seconds: 10))
        let decision = harness.machine.renewRequested(at: harness.now)
        guard case .wait(epoch: 1, _) = decision else {
            Issue.record("expected to wait for epoch 1, got \(decision)")
            return
        }
        #expect(Self.effects(decision) == [.startFetch("alice", epoch: 1), .scheduleTimer])
        #expect(harness.machine.publicState.name == "renewing")
    }

    @Test func identifiedRenewWithinTheMinimumIntervalReturnsTheCurrentCredential() throws {
        var harness = MachineHarness.identified(as: "alice")
        let credential = try #require(harness.machine.usableCredential)
        harness.run(.advance(seconds: 1))
        let before = harness.machine.state
        let decision = harness.machine.renewRequested(at: harness.now)
        guard case .current(let current) = decision else {
            Issue.record("expected the current credential, got \(decision)")
            return
        }
        #expect(current == credential)
        #expect(harness.machine.state == before)
    }

    @Test func identifiedRejectionRenewsOnceAtOnce() throws {
        var harness = MachineHarness.identified(as: "alice")
        let credential = try #require(harness.machine.usableCredential)
        harness.run(.advance(seconds: 10))
        let actions = harness.machine.credentialRejected(credential, at: harness.now)
        #expect(Self.effects(actions) == [.rejected(renewing: true), .startFetch("alice", epoch: 1), .cancelTimer])
        #expect(harness.expiredReason == .rejected)
        guard case .inFlight(_, .rejection) = harness.fetch else {
            Issue.record("no renewal after the rejection: \(String(describing: harness.fetch))")
            return
        }
    }

    @Test func credentialRenewedAfterRejectionRejectedAgainRetriesOnlyAfterBackoff() throws {
        var harness = MachineHarness.identified(as: "alice")
        harness.run(.advance(seconds: 10), .rejectInstalled, .succeed(lifetime: 900), .advance(seconds: 10))
        let renewed = try #require(harness.machine.usableCredential)
        #expect(harness.session?.renewedAfterRejection == true)
        let actions = harness.machine.credentialRejected(renewed, at: harness.now)
        #expect(Self.effects(actions) == [.rejected(renewing: false), .scheduleTimer])
        #expect(harness.expiredReason == .rejected)
        #expect(harness.session?.rejectionStreak == 1)
        guard case .waiting(let until, .retryAfterRejection) = harness.fetch,
            case .emit(.credentialRejected(let report), _) = actions.first
        else {
            Issue.record("no retry after backoff: \(String(describing: harness.fetch))")
            return
        }
        // The first round's ceiling is 1 s; the last fetch started 10 s ago, so no floor applies.
        #expect(until > harness.now.uptime && until <= harness.now.uptime + .seconds(1))
        #expect(report.retryIn == until - harness.now.uptime)
    }

    @Test func identifiedIgnoresRejectionOfAnOlderCredential() throws {
        var harness = MachineHarness.identified(as: "alice")
        let older = try #require(harness.machine.usableCredential)
        harness.run(.advance(seconds: 10), .renew, .succeed(lifetime: 900))
        #expect(harness.machine.usableCredential != older)
        let before = harness.machine.state
        #expect(harness.machine.credentialRejected(older, at: harness.now).isEmpty)
        #expect(harness.machine.state == before)
    }

    @Test func signingInAgainExpectingAnotherUserThanThePinnedOneIsRefused() throws {
        var harness = MachineHarness.identified(as: "alice")
        let before = harness.machine.state
        #expect(harness.session?.pinnedEmail == "alice@example.com")
        let same = harness.machine.changeAccount(to: "alice", expecting: "alice@example.com", at: harness.now)
        guard case .alreadyCurrent(epoch: 1) = same else {
            Issue.record("expected the current account session, got \(same)")
            return
        }
        for other in ["bob@example.com", "alice@example.co"] {
            let refused = harness.machine.changeAccount(to: "alice", expecting: other, at: harness.now)
            guard case .refused(let error, let actions) = refused else {
                Issue.record("expected a refusal of \(other), got \(refused)")
                return
            }
            #expect(error.code == .identityMismatch)
            #expect(actions.isEmpty)
        }
        #expect(harness.machine.state == before)
        #expect(harness.machine.epoch == 1)

        // Expired before any credential (the first fetch failed): the session is pinned by the first sign-in that
        // expects a user, and a later one that expects another is refused.
        var unpinned = MachineHarness.signingIn(as: "alice")
        _ = unpinned.machine.fetchFailed(try unpinned.fetchID(), error: .fetchFailed("timed out"), at: unpinned.now)
        #expect(unpinned.expiredReason == .unavailable)
        #expect(unpinned.session?.pinnedEmail == nil)
        let pinning = unpinned.machine.changeAccount(to: "alice", expecting: "alice@example.com", at: unpinned.now)
        guard case .alreadyCurrent(epoch: 1) = pinning else {
            Issue.record("expected the current account session, got \(pinning)")
            return
        }
        #expect(unpinned.session?.pinnedEmail == "alice@example.com")
        #expect(unpinned.expiredReason == .unavailable)
        let refused = unpinned.machine.changeAccount(to: "alice", expecting: "bob@example.com", at: unpinned.now)
        guard case .refused(let error, _) = refused else {
            Issue.record("expected a refusal, got \(refused)")
            return
        }
        #expect(error.code == .identityMismatch)
    }

    @Test func leavingAnAccountCancelsItsFetchTimerAndWork() {
        var identified = MachineHarness.identified(as: "alice")
        let fromIdentified = identified.machine.changeAccount(to: "bob", at: identified.now)
        #expect(Self.effects(fromIdentified) == Self.changeBegun(epoch: 2, leaving: "alice"))
        #expect(identified.machine.publicState == .switching(from: "alice", to: "bob"))

        var renewing = MachineHarness.renewing(as: "alice")
        let fromRenewing = renewing.machine.changeAccount(to: "bob", at: renewing.now)
        #expect(Self.effects(fromRenewing) == Self.changeBegun(epoch: 2, leaving: "alice", cancellingFetch: true))
        #expect(renewing.machine.publicState == .switching(from: "alice", to: "bob"))

        var expired = MachineHarness.expired(as: "alice")
        let fromExpired = expired.machine.changeAccount(to: "bob", at: expired.now)
        #expect(Self.effects(fromExpired) == Self.changeBegun(epoch: 2, leaving: "alice", cancellingFetch: true))
        #expect(expired.machine.publicState == .switching(from: "alice", to: "bob"))

        // `changeAccount(nil)` is the sign-out.
        var signingOut = MachineHarness.identified(as: "alice")
        let signOut = signingOut.machine.changeAccount(to: nil, at: signingOut.now)
        #expect(Self.effects(signOut) == Self.changeBegun(epoch: 2, leaving: "alice"))
        #expect(signingOut.machine.publicState == .switching(from: "alice", to: nil))
    }
}
