import Foundation
import SessionEngine
import SessionEngineBackend
import SessionEngineExplorer
import SessionEngineModel
import SessionEngineTestKit
import Synchronization

/// A backend for the pool's races: answers every fetch after one scheduling point with a credential for the request's
/// account, and records how many fetches were in flight at most. A fetch counts as in flight from its call until it
/// returns or the engine abandons it (cancels its task): the budget frees an abandoned fetch's slot at once, whether
/// or not the fetcher has returned, so an abandoned call still ending is not one the budget owes a slot.
/// Kept apart from the kit's fetcher: it yields at the explorer's scheduling points and counts abandoned fetches,
/// which no host needs.
final class PoolRaceFetcher: CredentialFetcher {
    private struct State {
        var inFlight = 0
        var maximum = 0
        /// The accounts whose fetches started, in order.
        var starts: [AccountID] = []
        /// The account whose fetches wait at the gate until it opens.
        var held: (account: AccountID, gate: Gate)?
    }

    private let signer: IdentitySigner
    private let state = Mutex(State())

    init(signer: IdentitySigner) {
        self.signer = signer
    }

    /// The most fetches that were in flight at once.
    var maximumInFlight: Int { state.withLock { $0.maximum } }

    /// The accounts whose fetches started, in order.
    var starts: [AccountID] { state.withLock { $0.starts } }

    /// Holds `account`'s fetches, from now on, until `gate` opens.
    func hold(_ account: AccountID, until gate: Gate) {
        state.withLock { $0.held = (account, gate) }
    }

    func fetchCredential(for account: AccountID) async throws -> IdentityCredential {
        let gate = state.withLock { state -> Gate? in
            state.inFlight += 1
            state.maximum = max(state.maximum, state.inFlight)
            state.starts.append(account)
            return state.held?.account == account ? state.held?.gate : nil
        }
        let claim = Claim()
        let leave: @Sendable () -> Void = { [self] in
            if claim.held.exchange(false, ordering: .relaxed) { state.withLock { $0.inFlight -= 1 } }
        }
        defer { leave() }
        return try await withTaskCancellationHandler {
            // One scheduling point while the fetch is in flight, so that other accounts' fetches may overlap it.
            await Waypoint.pass()
            await gate?.wait()
            try Task.checkCancellation()
            return try signer.sign(email: exampleEmail(for: account))
        } onCancel: {
            leave()
        }
    }
}

/// A fleet's coordinator for the races: each decision passes one scheduling point, as a call over the network would,
/// and hands the fetch a credential another replica fetched for the account (its own user, signed now, so newer than
/// any the pool holds): no fetch of a coordinated rig reaches the backend.
final class SharingRaceCoordinator: FleetCoordinator {
    private let signer: IdentitySigner

    init(signer: IdentitySigner) {
        self.signer = signer
    }

    func decide(_ fetch: FleetFetch) async throws -> FleetDecision {
        await Waypoint.pass()
        return .shared(try signer.sign(email: exampleEmail(for: fetch.account)))
    }

    func fetchEnded(_ fetch: FleetFetch, lease: FleetLease?, outcome: FleetOutcome) async throws {
        await Waypoint.pass()
    }
}

/// A fleet's coordinator for the races that lets every fetch start, after a scheduling point of its own, and hears
/// every end after another: the fetch then waits for its start of the pool's budget, where a sign-out may end it.
final class StartingRaceCoordinator: FleetCoordinator {
    func decide(_ fetch: FleetFetch) async throws -> FleetDecision {
        await Waypoint.pass()
        return .start(lease: FleetLease(fetch.account.rawValue))
    }

    func fetchEnded(_ fetch: FleetFetch, lease: FleetLease?, outcome: FleetOutcome) async throws {
        await Waypoint.pass()
    }
}

/// Whether one fetch still counts as in flight.
private final class Claim: Sendable {
    let held = Atomic(true)
}

/// One pool race: a pool on a manual clock whose tasks all take the explorer's executor, its calls, and the checks.
final class PoolRaceRig: Sendable {
    let clock = ManualClock()
    let signer: IdentitySigner
    let fetcher: PoolRaceFetcher
    let pool: SessionPool
    private let tasks = Mutex<[Task<String, Never>]>([])

    /// Creates a rig; with `sharing`, the pool is a replica of a fleet whose coordinator shares a credential for every
    /// fetch (``SharingRaceCoordinator``), with `starting` one whose coordinator lets every fetch start
    /// (``StartingRaceCoordinator``). The bucket holds `burst` starts and refills a thousand a second.
    init(
        maximumInFlight: Int = 1, maximumAccounts: Int? = nil, idleTimeout: Duration? = nil,
        fetchTimeout: Duration? = nil, sharing: Bool = false, starting: Bool = false, burst: Int = 10
    ) {
        signer = try! IdentitySigner(projectID: RaceRig.projectID, secret: "race-secret", clock: clock)
        fetcher = PoolRaceFetcher(signer: signer)
        var session = RaceRig.configuration
        session.taskExecutor = Explorer.taskExecutor
        if let fetchTimeout { session.fetchTimeout = fetchTimeout }
        let configuration = SessionPoolConfiguration(
            session: session,
            // By default a bucket as large as the races' sign-ins: only the in-flight bound makes fetches wait.
            budget: .init(maximumInFlight: maximumInFlight, startsPerSecond: 1000, burst: burst),
            maximumAccounts: maximumAccounts, idleTimeout: idleTimeout
        )
        if sharing {
            pool = SessionPool(
                fetcher: fetcher, configuration: configuration, clock: clock,
                coordination: FleetCoordination(SharingRaceCoordinator(signer: signer), sharesCredentials: true))
        } else if starting {
            pool = SessionPool(
                fetcher: fetcher, configuration: configuration, clock: clock,
                coordination: FleetCoordination(StartingRaceCoordinator()))
        } else {
            pool = SessionPool(fetcher: fetcher, configuration: configuration, clock: clock)
        }
        let pool = self.pool
        Diagnostics.current = { "pool \(pool.metrics); accounts \(pool.accounts.map(\.rawValue).sorted())" }
    }

    /// Starts `call` in a task of its own (preferring the explorer's executor unless the race runs inline); its
    /// outcome is a string, or the error's code.
    func launch(_ call: @escaping @Sendable (SessionPool) async throws -> String) {
        let pool = self.pool
        let body: @Sendable () async -> String = {
            do {
                return try await call(pool)
            } catch let error as SessionError {
                return error.code.rawValue
            } catch {
                return "\(type(of: error))"
            }
        }
        let task =
            RaceRig.callsFollowTheirThread
            ? Task(operation: body) : Task(executorPreference: Explorer.taskExecutor, operation: body)
        tasks.withLock { $0.append(task) }
    }

    /// Starts a sign-in of `account`; its outcome is `identified` or the error's code.
    func launchSignIn(_ account: AccountID) {
        launch { pool in
            try await pool.signIn(account)
            return "identified"
        }
    }

    /// Starts a sign-out of `account`; its outcome is `signed out`.
    func launchSignOut(_ account: AccountID) {
        launch { pool in
            await pool.signOut(account)
            return "signed out"
        }
    }

    /// Starts scoped work for `account` whose body checks that it received the account's credential, passes one
    /// scheduling point and then checks that it was not cancelled; its outcome is `finished` or the error's code.
    ///
    /// - Returns: Whether the body has run.
    func launchWork(for account: AccountID) -> Locked<Bool> {
        let bodyRan = Locked(false)
        launch { pool in
            try await pool.withIdentity(for: account) { credential in
                bodyRan.withLock { $0 = true }
                if credential.email != exampleEmail(for: account) {
                    throw Violation("\(account)'s work got \(credential.email)'s credential")
                }
                await Waypoint.pass()
                try Task.checkCancellation()
            }
            return "finished"
        }
        return bodyRan
    }

    /// Starts a reader of the accounts' headers beside the racing calls: it checks each account's headers, passes one
    /// scheduling point and checks them again; its outcome is `read`.
    func launchReader(of accounts: [AccountID]) {
        launch { _ in
            for account in accounts { try self.checkHeaders(of: account) }
            await Waypoint.pass()
            for account in accounts { try self.checkHeaders(of: account) }
            return "read"
        }
    }

    /// Waits for every launched call and returns their outcomes in launch order.
    func outcomes() async -> [String] {
        var outcomes: [String] = []
        for task in tasks.withLock({ $0 }) { outcomes.append(await task.value) }
        return outcomes
    }

    /// The account's headers, if it is identified: they must be its own.
    func checkHeaders(of account: AccountID) throws {
        guard let headers = try? pool.identityHeaders(for: account) else { return }
        let email = try headers.credential().email
        if email != exampleEmail(for: account) {
            throw Violation("\(account)'s headers hold \(email)'s credential")
        }
    }

    /// The budget was never exceeded, and once the pool is idle (a cancelled fetch may still be ending when the calls
    /// have returned) nothing is left in flight or queued.
    func checkBudget(maximumInFlight: Int) async throws {
        await Explorer.waitUntilIdle()
        if fetcher.maximumInFlight > maximumInFlight {
            throw Violation("\(fetcher.maximumInFlight) fetches were in flight at once, at most \(maximumInFlight)")
        }
        let metrics = pool.metrics
        if metrics.fetchesInFlight != 0 || metrics.queuedNeeded != 0 || metrics.queuedProactive != 0 {
            throw Violation("the budget holds fetches after the race: \(metrics)")
        }
    }
}

/// The pool's races: accounts sharing one budget, an account leaving while its fetch waits, an eviction racing work,
/// the pool's shared timers firing while an account leaves, calls racing the pool's shutdown.
enum PoolRaces {
    static let all: [RaceProgram] = [
        signInsShareTheBudget, signOutWhileQueued, evictionRacesWork, renewalRacesSignOut, callsRaceShutdown,
        signInsRaceGracefulShutdown, expectedUserJoinsASignIn, pushesRaceRenewal, callerJoinsAQueuedRenewal,
        idleSweepRacesWork, sharedCredentialRacesSignOut, sharedRenewalsRaceSignOut, signOutRacesAFetchWaitingToLeave,
    ]

    static let signOutRacesAFetchWaitingToLeave = RaceProgram(
        name: "pool-fleet-sign-out-races-a-fetch-waiting-to-leave",
        summary: "the fleet lets bob's fetch go while alice's took the bucket's one start; bob signs out while the "
            + "clock gives the bucket its next start",
        bound: 2
    ) {
        {
            let rig = PoolRaceRig(maximumInFlight: 2, starting: true, burst: 1)
            try await rig.pool.signIn("alice")
            await Explorer.waitUntilIdle()
            rig.launchSignIn("bob")
            rig.launchSignOut("bob")
            // Past the next start's time: a sleeper set in a lock step that read the clock just before this
            // advance, or whose start the bucket's arithmetic puts a nanosecond later, still wakes.
            rig.launch { _ in
                rig.clock.advance(by: .milliseconds(2))
                return "advanced"
            }
            let outcomes = await rig.outcomes()
            if !["identified", "ACCOUNT_CHANGED"].contains(outcomes[0]) || outcomes[1...] != ["signed out", "advanced"]
            {
                throw Violation("outcomes \(outcomes)")
            }
            await Explorer.waitUntilIdle()
            if rig.pool.accounts.contains("bob")
                && (outcomes[0] != "identified" || !rig.pool.state(of: "bob").isIdentified)
            {
                throw Violation("bob is held as \(rig.pool.state(of: "bob")) but his sign-in ended \(outcomes[0])")
            }
            // One start in the bucket and one more by the clock: a fetch that gave up waiting to leave took none.
            let starts = rig.fetcher.starts
            if starts.count > 2 || starts.filter({ $0 == "bob" }).count > 1 {
                throw Violation("the backend saw \(starts); the bucket held two starts")
            }
            if outcomes[0] == "identified", !starts.contains("bob") {
                throw Violation("bob was identified without a fetch")
            }
            try await rig.checkBudget(maximumInFlight: 2)
            await rig.pool.shutdown()
        }
    }

    static let sharedCredentialRacesSignOut = RaceProgram(
        name: "pool-fleet-share-races-sign-out",
        summary: "bob's sign-in naming his user takes another replica's credential from the fleet while he signs out, "
            + "beside a reader",
        bound: 2
    ) {
        {
            let rig = PoolRaceRig(maximumInFlight: 1, sharing: true)
            rig.launch { pool in
                try await pool.signIn("bob", expecting: exampleEmail(for: "bob"))
                return "identified"
            }
            rig.launchSignOut("bob")
            rig.launchReader(of: ["bob"])
            let outcomes = await rig.outcomes()
            // The sign-out came first (bob then signs in), ended the sign-in, or came after it returned: a credential
            // the fleet handed over after the sign-out never makes him identified.
            if !["identified", "ACCOUNT_CHANGED"].contains(outcomes[0]) || outcomes[1...] != ["signed out", "read"] {
                throw Violation("outcomes \(outcomes)")
            }
            let identified = rig.pool.state(of: "bob").isIdentified
            if rig.pool.accounts.contains("bob") && (outcomes[0] != "identified" || !identified) {
                throw Violation("bob is held as \(rig.pool.state(of: "bob")) but his sign-in ended \(outcomes[0])")
            }
            try rig.checkHeaders(of: "bob")
            if !rig.fetcher.starts.isEmpty {
                throw Violation("\(rig.fetcher.starts.count) fetches reached the backend; the fleet shared every one")
            }
            try await rig.checkBudget(maximumInFlight: 1)
            await rig.pool.shutdown()
        }
    }

    static let sharedRenewalsRaceSignOut = renewalsRaceSignOut(sharing: true)

    static let signInsShareTheBudget = RaceProgram(
        name: "pool-sign-ins",
        summary: "three accounts sign in to a pool with one fetch in flight, beside a reader of every account",
        bound: 2
    ) {
        {
            let rig = PoolRaceRig(maximumInFlight: 1)
            let accounts: [AccountID] = ["alice", "bob", "carol"]
            for account in accounts {
                rig.launchSignIn(account)
            }
            rig.launchReader(of: accounts)
            let outcomes = await rig.outcomes()
            if outcomes != ["identified", "identified", "identified", "read"] {
                throw Violation("outcomes \(outcomes)")
            }
            for account in accounts {
                try rig.checkHeaders(of: account)
                guard rig.pool.state(of: account).isIdentified else {
                    throw Violation("\(account) is \(rig.pool.state(of: account)) after its sign-in returned")
                }
            }
            try await rig.checkBudget(maximumInFlight: 1)
            await rig.pool.shutdown()
        }
    }

    static let signOutWhileQueued = RaceProgram(
        name: "pool-sign-out-while-queued",
        summary: "bob signs out while his first fetch may wait for the budget behind alice's",
        bound: 2
    ) {
        {
            let rig = PoolRaceRig(maximumInFlight: 1)
            rig.launchSignIn("alice")
            rig.launchSignIn("bob")
            rig.launchSignOut("bob")
            let outcomes = await rig.outcomes()
            try rig.checkHeaders(of: "alice")
            guard rig.pool.state(of: "alice").isIdentified else {
                throw Violation("alice is \(rig.pool.state(of: "alice")); outcomes \(outcomes)")
            }
            // The sign-out came first (bob then signs in), ended bob's sign-in, or came after it returned.
            if !["identified", "ACCOUNT_CHANGED"].contains(outcomes[1]) {
                throw Violation("bob's sign-in ended \(outcomes[1])")
            }
            let bobIdentified = rig.pool.state(of: "bob").isIdentified
            if rig.pool.accounts.contains("bob") && (outcomes[1] != "identified" || !bobIdentified) {
                throw Violation("bob is held as \(rig.pool.state(of: "bob")) but his sign-in ended \(outcomes[1])")
            }
            try await rig.checkBudget(maximumInFlight: 1)
            await rig.pool.shutdown()
        }
    }

    static let evictionRacesWork = RaceProgram(
        name: "pool-eviction-races-work",
        summary: "carol's sign-in evicts alice from a full pool while alice's scoped work starts",
        bound: 2
    ) {
        {
            let rig = PoolRaceRig(maximumInFlight: 2, maximumAccounts: 2)
            try await rig.pool.signIn("alice")
            try await rig.pool.signIn("bob")
            // An eviction that cancelled the running work would show as its outcome.
            let bodyRan = rig.launchWork(for: "alice")
            // Bob is used after alice's work may have looked her up, so that she is the least recently used account
            // whether or not it has: carol's sign-in may pick her while the work is on its way into her engine.
            await Waypoint.pass()
            rig.clock.advance(by: .seconds(1))
            _ = try? rig.pool.identityHeaders(for: "bob")
            rig.launchSignIn("carol")
            let outcomes = await rig.outcomes()
            // Work whose body ran is never cancelled by an eviction: it finishes.
            if bodyRan.value && outcomes[0] != "finished" {
                throw Violation("alice's running work ended \(outcomes[0]): an eviction cancelled it")
            }
            if outcomes[1] != "identified" { throw Violation("carol's sign-in ended \(outcomes[1])") }
            if rig.pool.accounts.count != 2 || !rig.pool.accounts.contains("carol") {
                throw Violation("the pool holds \(rig.pool.accounts) after carol's sign-in")
            }
            try await rig.checkBudget(maximumInFlight: 2)
            await rig.pool.shutdown()
        }
    }

    static let renewalRacesSignOut = renewalsRaceSignOut(sharing: false)

    /// The pool's timers fire alice's and bob's renewals while alice signs out and bob's headers are read; with
    /// `sharing`, the fleet answers each renewal with another replica's credential, and no fetch reaches the backend.
    static func renewalsRaceSignOut(sharing: Bool) -> RaceProgram {
        RaceProgram(
            name: sharing ? "pool-fleet-shared-renewals-race-sign-out" : "pool-renewal-races-sign-out",
            summary: sharing
                ? "the timers fire alice's and bob's renewals, each answered by the fleet with another replica's "
                    + "credential, while alice signs out and bob's headers are read"
                : "the pool's timers fire alice's and bob's renewals while alice signs out and bob's headers are read",
            bound: 2
        ) {
            {
                let rig = PoolRaceRig(maximumInFlight: 2, sharing: sharing)
                for account: AccountID in ["alice", "bob"] {
                    // A shared credential is taken only by an account pinned to its user.
                    if sharing {
                        try await rig.pool.signIn(account, expecting: exampleEmail(for: account))
                    } else {
                        try await rig.pool.signIn(account)
                    }
                }
                await Explorer.waitUntilIdle()
                let before = try rig.pool.identityHeaders(for: "bob").credential().expirationDate
                // Short of expiry, past both renewal times: the shared timers wake once and fire both.
                rig.launch { _ in
                    rig.clock.advance(by: .seconds(890))
                    return "advanced"
                }
                rig.launchSignOut("alice")
                rig.launchReader(of: ["bob"])
                let outcomes = await rig.outcomes()
                if outcomes != ["advanced", "signed out", "read"] { throw Violation("outcomes \(outcomes)") }
                await Explorer.waitUntilIdle()
                if rig.pool.accounts != ["bob"] { throw Violation("the pool holds \(rig.pool.accounts)") }
                guard rig.pool.state(of: "bob").isIdentified else {
                    throw Violation("bob is \(rig.pool.state(of: "bob")) after his renewal")
                }
                try rig.checkHeaders(of: "bob")
                let after = try rig.pool.identityHeaders(for: "bob").credential().expirationDate
                if after <= before || rig.pool.metrics(for: "bob")?.renewals != 1 {
                    throw Violation("bob renewed \(rig.pool.metrics(for: "bob")?.renewals ?? 0) times, to \(after)")
                }
                if sharing, !rig.fetcher.starts.isEmpty {
                    throw Violation(
                        "\(rig.fetcher.starts.count) fetches reached the backend; the fleet shared every one")
                }
                // Alice's timer left with her; bob's next renewal is the one timer left.
                if rig.pool.metrics.timers != 1 { throw Violation("\(rig.pool.metrics.timers) timers after the race") }
                try await rig.checkBudget(maximumInFlight: 2)
                await rig.pool.shutdown()
                if rig.pool.metrics.timers != 0 { throw Violation("\(rig.pool.metrics.timers) timers after shutdown") }
            }
        }
    }

    static let callsRaceShutdown = RaceProgram(
        name: "pool-calls-race-shutdown",
        summary: "bob signs in, alice's work starts and alice signs out while the pool shuts down",
        bound: 2
    ) {
        {
            let rig = PoolRaceRig(maximumInFlight: 2)
            try await rig.pool.signIn("alice")
            rig.launchSignIn("bob")
            rig.launch { pool in
                try await pool.withIdentity(for: "alice") { _ in await Waypoint.pass() }
                return "worked"
            }
            rig.launchSignOut("alice")
            rig.launch { pool in
                await pool.shutdown()
                // Nothing the racing calls began outlives the shutdown: no account is held or identified.
                if !pool.accounts.isEmpty { return "shut down, holding \(pool.accounts)" }
                for account: AccountID in ["alice", "bob"] where pool.state(of: account) != .signedOut {
                    return "shut down, with \(account) \(pool.state(of: account))"
                }
                return "shut down"
            }
            let outcomes = await rig.outcomes()
            // A sign-in either returned before the shutdown began and was then shut down, or was refused.
            if !["identified", "SHUT_DOWN", "ACCOUNT_CHANGED"].contains(outcomes[0]) {
                throw Violation("bob's sign-in ended \(outcomes[0])")
            }
            // The work came before the sign-out and the shutdown, found alice leaving (an account change under way),
            // found her gone, or was cancelled by either.
            let workOutcomes = [
                "worked", "SWITCHING", "SHUT_DOWN", "SIGNED_OUT", "ACCOUNT_CHANGED", "CancellationError",
            ]
            if !workOutcomes.contains(outcomes[1]) {
                throw Violation("alice's work ended \(outcomes[1])")
            }
            if outcomes[3] != "shut down" { throw Violation("the shutdown returned: \(outcomes[3])") }
            if (try? rig.pool.identityHeaders(for: "bob")) != nil {
                throw Violation("bob's headers read after shutdown")
            }
            await Explorer.waitUntilIdle()
            if rig.pool.metrics.timers != 0 { throw Violation("\(rig.pool.metrics.timers) timers after shutdown") }
            if rig.pool.metrics.fetchesInFlight != 0 { throw Violation("a fetch is in flight after shutdown") }
        }
    }

    static let signInsRaceGracefulShutdown = RaceProgram(
        name: "pool-sign-ins-race-graceful-shutdown",
        summary: "bob signs in with a deadline while the pool shuts down gracefully and run() runs",
        bound: 2
    ) {
        {
            let rig = PoolRaceRig(maximumInFlight: 1)
            try await rig.pool.signIn("alice", with: try rig.signer.sign(email: exampleEmail(for: "alice")))
            let left = Mutex<[AccountID]>([])
            await rig.pool.addAccountChangeHook { change in
                if let account = change.from, change.to == nil { left.withLock { $0.append(account) } }
            }
            rig.launch { pool in
                try await pool.run()
                return pool.accounts.isEmpty ? "ran" : "returned holding \(pool.accounts)"
            }
            rig.launch { pool in
                try await pool.signIn("bob", timeout: .seconds(5))
                return "identified"
            }
            rig.launch { pool in
                await pool.shutdown(gracePeriod: .seconds(5))
                return pool.accounts.isEmpty ? "shut down" : "shut down, holding \(pool.accounts)"
            }
            let outcomes = await rig.outcomes()
            if outcomes[0] != "ran" || outcomes[2] != "shut down" { throw Violation("outcomes \(outcomes)") }
            // The sign-in came before the shutdown (and was signed out by it) or was refused; its deadline is on the
            // pool's clock, which no call moves, so it never passes.
            if !["identified", "SHUT_DOWN", "ACCOUNT_CHANGED"].contains(outcomes[1]) {
                throw Violation("bob's sign-in ended \(outcomes[1])")
            }
            // A graceful shutdown signs every account out with its hooks: alice, and every account that signed in.
            var mustLeave: Set<AccountID> = ["alice"]
            if outcomes[1] == "identified" { mustLeave.insert("bob") }
            let leftWithHooks = Set(left.withLock { $0 })
            if !mustLeave.isSubset(of: leftWithHooks) {
                throw Violation(
                    "accounts left without their hooks: \(mustLeave.subtracting(leftWithHooks)); \(outcomes)")
            }
            await Explorer.waitUntilIdle()
            if rig.pool.metrics.timers != 0 || rig.pool.metrics.fetchesInFlight != 0 {
                throw Violation("after the shutdown: \(rig.pool.metrics)")
            }
        }
    }

    static let expectedUserJoinsASignIn = RaceProgram(
        name: "pool-expected-user-joins-a-sign-in",
        summary: "signIn(carol) and signIn(carol, expecting: her user spelled otherwise) join one sign-in, beside a "
            + "reader",
        bound: 2
    ) {
        {
            let rig = PoolRaceRig(maximumInFlight: 1)
            rig.launchSignIn("carol")
            rig.launch { pool in
                try await pool.signIn("carol", expecting: " CAROL@Example.com", timeout: .seconds(5))
                return "identified"
            }
            rig.launchReader(of: ["carol"])
            // Whichever comes first, the account session is pinned to carol's user, which her credential names.
            let outcomes = await rig.outcomes()
            if outcomes != ["identified", "identified", "read"] { throw Violation("outcomes \(outcomes)") }
            try rig.checkHeaders(of: "carol")
            guard rig.pool.state(of: "carol").isIdentified, rig.fetcher.starts == ["carol"] else {
                throw Violation("carol is \(rig.pool.state(of: "carol")) after \(rig.fetcher.starts.count) fetches")
            }
            try await rig.checkBudget(maximumInFlight: 1)
            await rig.pool.shutdown()
        }
    }

    static let pushesRaceRenewal = RaceProgram(
        name: "pool-pushes-race-renewal",
        summary: "alice's pushed credential, renew(for: alice), a rejection of alice's credential, bob's sign-in with "
            + "his credential and a hook's registration race",
        bound: 2
    ) {
        {
            let rig = PoolRaceRig(maximumInFlight: 1)
            try await rig.pool.signIn("alice")
            let first = try rig.pool.identityHeaders(for: "alice").credential()
            rig.clock.advance(by: .seconds(10))
            let pushed = try rig.signer.sign(email: exampleEmail(for: "alice"))
            let bobs = try rig.signer.sign(email: exampleEmail(for: "bob"))
            let hooked = Mutex<[AccountChange]>([])
            rig.launch { pool in
                try await pool.setIdentityCredential(pushed, for: "alice")
                return "installed"
            }
            rig.launch { pool in
                let credential = try await pool.renew(for: "alice")
                return credential.email == exampleEmail(for: "alice") ? "renewed" : "renewed as \(credential.email)"
            }
            rig.launch { pool in
                await pool.credentialRejected(first, for: "alice")
                return "reported"
            }
            rig.launch { pool in
                try await pool.signIn("bob", with: bobs)
                return "identified"
            }
            rig.launch { pool in
                await pool.addAccountChangeHook { change in hooked.withLock { $0.append(change) } }
                return "added"
            }
            let outcomes = await rig.outcomes()
            if outcomes != ["installed", "renewed", "reported", "identified", "added"] {
                throw Violation("outcomes \(outcomes)")
            }
            try rig.checkHeaders(of: "alice")
            try rig.checkHeaders(of: "bob")
            // Bob's first credential is the one handed over: the pool fetches nothing for him.
            if try rig.pool.identityHeaders(for: "bob").credential().signature != bobs.signature {
                throw Violation("bob does not hold the credential handed over")
            }
            // A hook registered before a change begins runs for it.
            await rig.pool.signOut("bob")
            if !hooked.withLock({ $0.contains(AccountChange(from: "bob", to: nil)) }) {
                throw Violation("the hook added before bob signed out did not run for it: \(hooked.withLock { $0 })")
            }
            try await rig.checkBudget(maximumInFlight: 1)
            await rig.pool.shutdown()
        }
    }

    static let callerJoinsAQueuedRenewal = RaceProgram(
        name: "pool-caller-joins-a-queued-renewal",
        summary:
            "renew(for: carol) races the timers that queue bob's and carol's renewals while alice's fetch holds the "
            + "one slot",
        bound: 2
    ) {
        {
            // Fetches wait as long as the race needs: no deadline frees alice's slot.
            let rig = PoolRaceRig(maximumInFlight: 1, fetchTimeout: .seconds(86_400))
            for account: AccountID in ["alice", "bob", "carol"] {
                try await rig.pool.signIn(account)
                rig.clock.advance(by: .seconds(5))
            }
            // Past the minimum interval between fetches since carol's first: a caller that comes before her renewal
            // fetches, whenever it comes.
            rig.clock.advance(by: .seconds(10))
            // Alice's caller takes the one slot, and her fetch holds it.
            let released = Gate()
            rig.fetcher.hold("alice", until: released)
            rig.launch { pool in
                _ = try await pool.renew(for: "alice")
                return "renewed"
            }
            await Explorer.waitUntilIdle()
            let before = rig.fetcher.starts.count
            guard rig.fetcher.starts.last == "alice" else { throw Violation("alice's fetch did not start") }
            // Past every renewal time, short of expiry: bob's and carol's renewals queue as proactive. Carol's caller
            // comes before, while or after her renewal is queued: whenever it comes, her fetch is needed and goes
            // before bob's.
            rig.launch { _ in
                rig.clock.advance(by: .seconds(860))
                return "advanced"
            }
            rig.launch { pool in
                let credential = try await pool.renew(for: "carol")
                return credential.email == exampleEmail(for: "carol") ? "renewed" : "renewed as \(credential.email)"
            }
            // Both have done all they can before the slot frees: the advance has returned, and carol's caller waits.
            await Explorer.waitUntilIdle()
            released.open()
            let outcomes = await rig.outcomes()
            if outcomes != ["renewed", "advanced", "renewed"] { throw Violation("outcomes \(outcomes)") }
            await Explorer.waitUntilIdle()
            let starts = Array(rig.fetcher.starts.dropFirst(before))
            guard let carol = starts.firstIndex(of: "carol"), let bob = starts.firstIndex(of: "bob") else {
                throw Violation("after alice's, the fetches started for \(starts)")
            }
            if bob < carol { throw Violation("bob's proactive renewal went before carol's needed one: \(starts)") }
            try await rig.checkBudget(maximumInFlight: 1)
            await rig.pool.shutdown()
        }
    }

    static let idleSweepRacesWork = RaceProgram(
        name: "pool-idle-sweep-races-work",
        summary: "the idle sweep comes due while alice's scoped work starts and bob's headers are read",
        bound: 2
    ) {
        {
            let rig = PoolRaceRig(maximumInFlight: 2, idleTimeout: .seconds(60))
            try await rig.pool.signIn("alice")
            try await rig.pool.signIn("bob")
            let left = Mutex<[AccountID]>([])
            await rig.pool.addAccountChangeHook { change in
                if let account = change.from, change.to == nil { left.withLock { $0.append(account) } }
            }
            // Short of the idle timeout: the sweeps until then find both used.
            rig.clock.advance(by: .seconds(50))
            await Explorer.waitUntilIdle()
            // A sweep that cancelled the running work would show as its outcome.
            let bodyRan = rig.launchWork(for: "alice")
            rig.launch { _ in
                try rig.checkHeaders(of: "bob")
                return "read"
            }
            // Past the timeout: the sweep takes every account unused since, unless its work runs.
            rig.launch { _ in
                rig.clock.advance(by: .seconds(40))
                return "advanced"
            }
            let outcomes = await rig.outcomes()
            // Work whose body ran is never cancelled by the sweep; work that came as alice left found her leaving,
            // or gone.
            let refused = ["SIGNED_OUT", "SWITCHING", "ACCOUNT_CHANGED"]
            if bodyRan.value ? outcomes[0] != "finished" : !refused.contains(outcomes[0]) {
                throw Violation("alice's work ended \(outcomes[0]), its body ran: \(bodyRan.value)")
            }
            if outcomes[1] != "read" || outcomes[2] != "advanced" { throw Violation("outcomes \(outcomes)") }
            await Explorer.waitUntilIdle()
            // Every account that left went with its hooks, and one the pool holds still answers.
            let gone = Set<AccountID>(["alice", "bob"]).subtracting(rig.pool.accounts)
            if !gone.isSubset(of: Set(left.withLock { $0 })) {
                throw Violation("\(gone) left without their hooks: \(left.withLock { $0 })")
            }
            for account in rig.pool.accounts { try rig.checkHeaders(of: account) }
            try await rig.checkBudget(maximumInFlight: 2)
            await rig.pool.shutdown()
        }
    }
}
