import Foundation
import SessionEngine
import SessionEngineBackend
import SessionEngineExplorer
import SessionEngineModel
import SessionEngineTestKit

/// A program whose every interleaving is explored: a setup, then two or three calls that race, then the checks.
struct RaceProgram: Sendable {
    /// The name `--race` selects it by.
    let name: String
    /// What races, in a few words.
    let summary: String
    /// The delay bound of its exhaustive exploration.
    let bound: Int
    /// Builds a fresh run of the program; it throws on a broken rule.
    let make: @Sendable () -> @Sendable () async throws -> Void
}

/// The races the brief names, each an explicit small program.
enum Races {
    static let all: [RaceProgram] = [
        renewAnsweredAtOnce, signOutDuringRenewal, switchDuringFetch, lateResultFromEarlierEpoch, manyCallersAtExpiry,
        cancelledWaiter, joinedSwitch,
        rejectionDuringSwitch, shutdownDuringFetch, twoSwitches, lateResultThenShutdown, joinedSignInDeadline,
        joinedSwitchDeadline, pushesRaceRenewal, gracefulShutdownRacesCalls,
    ]

    /// Signs in as alice and moves past the minimum fetch interval, so a renewal really fetches.
    static func signedIn(latency: Int = 1, _ setUp: ((RaceRig) -> Void)? = nil) async throws -> RaceRig {
        let rig = RaceRig(latency: latency)
        await rig.start()
        try await rig.engine.signIn("alice")
        try rig.checkEstablished("alice", by: "signIn(alice)")
        await rig.advance(seconds: 10)
        setUp?(rig)
        return rig
    }

    static let renewAnsweredAtOnce = RaceProgram(
        name: "renew-answered-at-once",
        summary: "renew() whose fetch answers at once races its own registration, beside a fast-path reader",
        bound: 2
    ) {
        {
            // No other call ends the epoch here, so a caller that registers after its outcome was handed out is left
            // waiting in identified, which the settling reports.
            let rig = try await signedIn(latency: 0)
            rig.launch("renew") { try await $0.renew(allowed: []) }
            rig.launchFastPathReader()
            try await rig.finish(changes: 1, finalAccount: "alice")
        }
    }

    static let signOutDuringRenewal = RaceProgram(
        name: "sign-out-during-renewal",
        summary: "renew() and signOut() race after a sign-in",
        bound: 2
    ) {
        {
            let rig = try await signedIn()
            rig.launch("renew") { try await $0.renew(allowed: [.accountChanged, .signedOut]) }
            rig.launch("signOut") { rig in
                await rig.engine.signOut()
                return "returned"
            }
            try await rig.finish(changes: 2, finalAccount: .some(nil))
        }
    }

    static let switchDuringFetch = RaceProgram(
        name: "switch-during-fetch",
        summary: "renew() (its fetch answering at once) races switchAccount(bob) and a fast-path reader",
        bound: 2
    ) {
        {
            let rig = try await signedIn(latency: 0)
            rig.launch("renew") { try await $0.renew(allowed: [.accountChanged]) }
            rig.launch("switch") { try await $0.change(to: "bob") }
            rig.launchFastPathReader()
            try await rig.finish(changes: 2, finalAccount: "bob")
        }
    }

    static let lateResultFromEarlierEpoch = RaceProgram(
        name: "late-result",
        summary: "a renewal whose answer ignores cancellation races switchAccount(bob) and scoped work",
        bound: 2
    ) {
        {
            let rig = try await signedIn(latency: 2) { $0.fetcher.script(.late) }
            rig.launch("renew") { try await $0.renew(allowed: [.accountChanged]) }
            rig.launch("switch") { try await $0.change(to: "bob") }
            rig.launch("work") { rig in
                try await rig.work("work", allowed: [.accountChanged, .switching]) { _ in
                    try rig.checkFastPath(by: "work's headers")
                }
            }
            try await rig.finish(changes: 2, finalAccount: "bob")
        }
    }

    static let manyCallersAtExpiry = RaceProgram(
        name: "many-callers-at-expiry",
        summary: "two renew() calls and scoped work race the credential's expiry after failed renewals",
        bound: 2
    ) {
        {
            let rig = RaceRig()
            await rig.start()
            rig.fetcher.script(.credential(lifetime: 60))
            try await rig.engine.signIn("alice")
            try rig.checkEstablished("alice", by: "signIn(alice)")
            rig.fetcher.failing = true
            await rig.advance(seconds: 59)
            rig.fetcher.failing = false
            let fetches = rig.fetcher.total
            for index in 1...2 {
                rig.launch("renew \(index)") { try await $0.renew(allowed: []) }
            }
            rig.launch("work") { rig in
                try await rig.work("work", allowed: [.invalidIdentity])
            }
            rig.launch("expiry", enters: 0) { rig in
                rig.clock.advance(by: .seconds(2))
                try rig.checkFastPath(by: "headers at expiry")
                return "clock moved"
            }
            try await rig.settle()
            if rig.fetcher.total - fetches > 1 {
                throw Violation("the callers at expiry shared no fetch: \(rig.fetcher.total - fetches) fetches")
            }
            try await rig.finish(changes: 1, finalAccount: "alice")
        }
    }

    static let cancelledWaiter = RaceProgram(
        name: "cancelled-waiter",
        summary: "two renew() callers share a fetch (answering at once) while one of them is cancelled",
        bound: 2
    ) {
        {
            let rig = try await signedIn(latency: 0)
            let cancelled = rig.launch("renew (cancelled)") { try await $0.renew(allowed: []) }
            rig.launch("renew") { try await $0.renew(allowed: []) }
            rig.launch("cancel", enters: 0) { _ in
                cancelled.cancel()
                return "cancelled"
            }
            try await rig.settle()
            if rig.fetcher.cancelled > 0 {
                throw Violation("cancelling one waiter cancelled the fetch the other waits for")
            }
            if !rig.probe.outcomes.contains(where: { $0.hasPrefix("renew: credential") }) {
                throw Violation("the caller that was not cancelled got no credential: \(rig.probe.outcomes)")
            }
            try await rig.finish(changes: 1, finalAccount: "alice")
        }
    }

    static let joinedSwitch = RaceProgram(
        name: "joined-switch",
        summary: "switchAccount(bob) at background priority, joined by switchAccount(bob) at high priority and a "
            + "fast-path reader, bob's fetch answering at once",
        bound: 2
    ) {
        {
            // The engine's tasks for the change inherit the first caller's priority, so the second caller's job on
            // the engine's actor runs before theirs once both are queued: it must still return only once bob's
            // credential is installed.
            let rig = try await signedIn(latency: 0)
            rig.launch("switch (background)", priority: .background) { try await $0.change(to: "bob") }
            rig.launch("switch (high)", priority: .high) { try await $0.change(to: "bob") }
            rig.launchFastPathReader()
            try await rig.finish(changes: 2, finalAccount: "bob")
        }
    }

    static let rejectionDuringSwitch = RaceProgram(
        name: "rejection-during-switch",
        summary: "credentialRejected(alice's), scoped work the service rejects and switchAccount(bob) race",
        bound: 2
    ) {
        {
            let rig = try await signedIn()
            let credential = try rig.engine.identityHeaders().credential()
            rig.launch("reject") { rig in
                await rig.engine.credentialRejected(credential)
                return "reported"
            }
            rig.launch("rejected work") { rig in
                try await rig.work(
                    "rejected work",
                    allowed: [.accountChanged, .credentialRejected, .switching, .invalidIdentity]
                ) { credential in
                    await Waypoint.pass()
                    if credential.email == exampleEmail(for: "alice") { throw SessionError.credentialRejected }
                }
            }
            rig.launch("switch") { try await $0.change(to: "bob") }
            try await rig.finish(changes: 2, finalAccount: "bob")
            if rig.fetcher.requests.contains(where: { $0.epoch > 1 && $0.account != "bob" }) {
                throw Violation("a fetch for another account ran in bob's session: \(rig.fetcher.requests)")
            }
        }
    }

    static let shutdownDuringFetch = RaceProgram(
        name: "shutdown-during-fetch",
        summary: "shutdown() races renew() with its fetch hanging and long scoped work",
        bound: 2
    ) {
        {
            let rig = try await signedIn { $0.fetcher.script(.hang) }
            rig.launch("renew") { try await $0.renew(allowed: [.shutDown, .accountChanged, .signedOut]) }
            rig.launch("work") { rig in
                try await rig.work("work", allowed: [.shutDown, .accountChanged, .signedOut, .switching]) { _ in
                    try await rig.clock.sleep(for: .seconds(600))
                }
            }
            rig.launch("shutdown") { rig in
                await rig.engine.shutdown()
                let metrics = rig.engine.metrics
                if metrics.scopedWork > 0 || metrics.waiters > 0 {
                    throw Violation("shutdown() returned with work or waiters left: \(rig.activity)")
                }
                return "returned"
            }
            // shutdown() runs no hooks (only a graceful shutdown does): the last hook entered alice.
            try await rig.finish(changes: 2, finalAccount: .some(nil), hooksEndAt: ["alice"])
        }
    }

    static let twoSwitches = RaceProgram(
        name: "two-switches",
        summary: "switchAccount(bob) and switchAccount(carol) race each other and renew()",
        bound: 2
    ) {
        {
            let rig = try await signedIn()
            rig.launch("switch to bob") { try await $0.change(to: "bob", allowed: [.accountChanged]) }
            rig.launch("switch to carol") { try await $0.change(to: "carol", allowed: [.accountChanged]) }
            rig.launch("renew") { try await $0.renew(allowed: [.accountChanged]) }
            try await rig.finish(changes: 3, finalAccount: nil)
        }
    }

    static let lateResultThenShutdown = RaceProgram(
        name: "late-result-then-shutdown",
        summary: "a late answer of alice's cancelled renewal races bob's first fetch, which hangs until shutdown",
        bound: 2
    ) {
        {
            let rig = try await signedIn(latency: 2) { $0.fetcher.script(.late, .hang) }
            rig.launch("renew") { try await $0.renew(allowed: [.accountChanged, .shutDown]) }
            rig.launch("switch") { try await $0.change(to: "bob", allowed: [.shutDown]) }
            // Wait until bob's fetch hangs (or, when the late answer went to bob's first fetch, bob is identified),
            // then shut down: a hanging fetch must be cancelled.
            for _ in 0..<20 {
                await Explorer.waitUntilIdle()
                if rig.fetcher.pending > 0 || (rig.engine.state.isIdentified && rig.engine.state.account == "bob") {
                    break
                }
                await Waypoint.pass()
            }
            await rig.engine.shutdown()
            // shutdown() runs no hooks: the last hook entered bob when the switch was prepared before the shutdown
            // began, alice when the shutdown superseded it (a superseded change runs no hooks).
            try await rig.finish(changes: 3, finalAccount: .some(nil), hooksEndAt: ["bob", "alice"])
        }
    }

    static let joinedSignInDeadline = RaceProgram(
        name: "joined-sign-in-deadline",
        summary:
            "signIn(alice, timeout: 5 s) and signIn(alice) join one sign-in whose first fetch hangs past the deadline",
        bound: 2
    ) {
        {
            let rig = RaceRig(latency: 1)
            await rig.start()
            rig.fetcher.script(.hang)
            rig.launch("signIn (5 s)") { rig in
                try await rig.engine.signIn("alice", timeout: .seconds(5))
                return "returned"
            }
            rig.launch("signIn") { rig in
                try await rig.engine.signIn("alice")
                try rig.checkEstablished("alice", by: "signIn(alice)")
                return "returned"
            }
            try await rig.settle()
            try checkDeadlineFailedOnlyItsCaller(rig, deadline: "signIn (5 s)", other: "signIn")
            try await rig.finish(changes: 1, finalAccount: "alice")
        }
    }

    static let joinedSwitchDeadline = RaceProgram(
        name: "joined-switch-deadline",
        summary: "switchAccount(bob, timeout: 5 s) and switchAccount(bob) join one switch whose first fetch hangs past "
            + "the deadline",
        bound: 2
    ) {
        {
            let rig = try await signedIn()
            rig.fetcher.script(.hang)
            rig.launch("switch (5 s)") { rig in
                try await rig.engine.switchAccount(to: "bob", timeout: .seconds(5))
                return "returned"
            }
            rig.launch("switch") { try await $0.change(to: "bob") }
            try await rig.settle()
            try checkDeadlineFailedOnlyItsCaller(rig, deadline: "switch (5 s)", other: "switch")
            try await rig.finish(changes: 2, finalAccount: "bob")
        }
    }

    static let pushesRaceRenewal = RaceProgram(
        name: "pushes-race-renewal",
        summary: "setIdentityCredential(alice's), renew() and signIn(bob, with: bob's) race, beside a fast-path reader",
        bound: 2
    ) {
        {
            let rig = try await signedIn()
            let alices = try rig.signer.sign(email: exampleEmail(for: "alice"))
            rig.probe.issued(alices, account: "alice", epoch: 1)
            let bobs = try rig.signer.sign(email: exampleEmail(for: "bob"))
            rig.probe.issued(bobs, account: "bob", epoch: 2)
            rig.launch("push") { rig in
                try await rig.engine.setIdentityCredential(alices, for: "alice")
                return "installed"
            }
            rig.launch("renew") { try await $0.renew(allowed: [.accountChanged]) }
            rig.launch("sign in with") { rig in
                try await rig.engine.signIn("bob", with: bobs)
                try rig.checkEstablished("bob", by: "signIn(bob, with:)")
                return "returned"
            }
            rig.launchFastPathReader()
            try await rig.settle()
            let outcomes = rig.probe.outcomes
            // The push came before bob's sign-in began, or found alice left.
            if !outcomes.contains("push: installed") && !outcomes.contains("push: ACCOUNT_CHANGED") {
                throw Violation("alice's pushed credential was neither installed nor refused as stale: \(outcomes)")
            }
            if !outcomes.contains("sign in with: returned") { throw Violation("bob's sign-in: \(outcomes)") }
            // Bob's first credential is the one the host handed over: the engine fetches nothing for bob, unless the
            // renewal reached the engine once bob was current (it may then also hand out bob's credential without a
            // fetch, within the minimum interval).
            let installed = try rig.engine.identityHeaders().credential()
            let bobFetched = rig.fetcher.requests.contains { $0.account == "bob" }
            let renewedBob = outcomes.contains("renew: credential of epoch 2")
            if bobFetched ? !renewedBob : installed.signature != bobs.signature {
                throw Violation(
                    "bob's session holds \(installed.email)'s credential of \(installed.expiresAt), fetched for bob: "
                        + "\(bobFetched); \(outcomes)")
            }
            try await rig.finish(changes: 2, finalAccount: "bob")
        }
    }

    static let gracefulShutdownRacesCalls = RaceProgram(
        name: "graceful-shutdown-races-calls",
        summary: "shutdown(gracePeriod: 5 s) races scoped work and signIn(bob, expecting:) while run() runs",
        bound: 2
    ) {
        {
            let rig = try await signedIn()
            rig.launch("run") { rig in
                try await rig.engine.run()
                if rig.engine.state != .signedOut { throw Violation("run() returned in \(rig.engine.state)") }
                return "returned"
            }
            rig.launch("work") { rig in
                try await rig.work("work", allowed: [.shutDown, .accountChanged, .switching]) { _ in
                    await Waypoint.pass()
                }
            }
            rig.launch("sign in expecting") { rig in
                try await rig.engine.signIn("bob", expecting: " Bob@Example.COM")
                return "returned"
            }
            rig.launch("graceful shutdown") { rig in
                await rig.engine.shutdown(gracePeriod: .seconds(5))
                let metrics = rig.engine.metrics
                if metrics.scopedWork > 0 || metrics.waiters > 0 || rig.engine.state != .signedOut {
                    throw Violation("shutdown(gracePeriod:) returned with \(rig.activity)")
                }
                return "returned"
            }
            try await rig.settle()
            let outcomes = rig.probe.outcomes
            for expected in ["run: returned", "graceful shutdown: returned"] where !outcomes.contains(expected) {
                throw Violation("expected \(expected): \(outcomes)")
            }
            // A sign-in that came first returned (and was signed out by the shutdown), or the shutdown refused it.
            let signIn = ["returned", "SHUT_DOWN", "ACCOUNT_CHANGED"].map { "sign in expecting: \($0)" }
            if !outcomes.contains(where: signIn.contains) { throw Violation("bob's sign-in: \(outcomes)") }
            // A graceful shutdown signs out with hooks: the last hook leaves for no account.
            try await rig.finish(changes: 3, finalAccount: .some(nil), hooksEndAt: [nil])
        }
    }

    /// A caller's deadline ends that caller's wait alone: it times out (the fetch hangs past it), and the caller that
    /// joined without one returns once the account's credential is installed.
    static func checkDeadlineFailedOnlyItsCaller(_ rig: RaceRig, deadline: String, other: String) throws {
        let outcomes = rig.probe.outcomes
        if !outcomes.contains("\(deadline): \(SessionError.Code.signInTimedOut)") {
            throw Violation("the caller with a deadline did not time out: \(outcomes)")
        }
        if !outcomes.contains("\(other): returned") {
            throw Violation("the caller without a deadline did not return once identified: \(outcomes)")
        }
    }
}
