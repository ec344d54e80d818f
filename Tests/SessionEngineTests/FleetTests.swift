import Foundation
import SessionEngineBackend
import SessionEngineTestKit
import Testing

@testable import SessionEngine

/// A coordinator whose every call fails while `failing` is set, or hangs (ignoring cancellation) while `hanging` is,
/// and otherwise answers as `answer` says, counting its calls.
private final class FaultyCoordinator: FleetCoordinator {
    let failing = Locked(false)
    let hanging = Locked(false)
    let calls = Locked(0)
    let decisions = Locked(0)
    let ended = Locked<[(lease: FleetLease?, outcome: FleetOutcome, reservation: FleetReservation?)]>()
    /// How long each decision takes on the clock before it answers.
    let delay = Locked(Duration.zero)
    private let clock: ManualClock
    private let answer: @Sendable (FleetFetch) -> FleetDecision

    struct Refused: Error {}

    init(
        clock: ManualClock,
        answer: @escaping @Sendable (FleetFetch) -> FleetDecision = { _ in .start(lease: FleetLease("l")) }
    ) {
        self.clock = clock
        self.answer = answer
    }

    private func misbehave() async throws {
        calls.withLock { $0 += 1 }
        if hanging.value { await clock.sleepIgnoringCancellation(for: .seconds(365 * 86_400)) }
        if failing.value { throw Refused() }
    }

    func decide(_ fetch: FleetFetch) async throws -> FleetDecision {
        decisions.withLock { $0 += 1 }
        if delay.value > .zero { await clock.sleepIgnoringCancellation(for: delay.value) }
        try await misbehave()
        return answer(fetch)
    }

    func fetchEnded(_ fetch: FleetFetch, lease: FleetLease?, outcome: FleetOutcome) async throws {
        try await misbehave()
        ended.append((lease, outcome, fetch.reservation))
    }
}

/// A backend that signs a 10-minute credential for `<account>@example.com` at once, on the clock.
private func backend(_ clock: ManualClock, secret: String = "fleet-secret") throws -> ScriptedCredentialFetcher {
    let signer = try IdentitySigner(
        projectID: "proj_fleet", secret: secret, lifetime: .seconds(600), clock: clock)
    return ScriptedCredentialFetcher(clock: clock) { request in
        .credential(try signer.sign(email: "\(request.account.rawValue)@example.com"))
    }
}

/// Replicas coordinate through a fleet's coordinator, and fail open: a coordinator that fails or hangs costs a fetch
/// no more than its call's deadline, a shared credential is installed only through the engine's own checks, and the
/// fleet's rules (`FleetLedger`) hold for every replica.
@Suite struct FleetTests {
    // MARK: - Sharing across replicas

    /// Three pools of one process, each holding alice, renew her credential for an hour. With a coordinator that
    /// shares credentials the backend sees one fetch per renewal; without one, three.
    @Test func replicasSharingCredentialsFetchOncePerRenewal() async throws {
        func run(coordinated: Bool) async throws -> (fetches: Int, renewals: Int, shares: Int) {
            let clock = ManualClock()
            let fetcher = try backend(clock)
            let coordinator = InProcessFleetCoordinator(
                limits: FleetLedger.Limits(sharesCredentials: true), clock: clock)
            let pools = (0..<3).map { index in
                let configuration = SessionPoolConfiguration(session: SessionConfiguration(randomSeed: UInt64(index)))
                return coordinated
                    ? SessionPool(
                        fetcher: fetcher, configuration: configuration, clock: clock,
                        coordination: FleetCoordination(coordinator, sharesCredentials: true))
                    : SessionPool(fetcher: fetcher, configuration: configuration, clock: clock)
            }
            for pool in pools {
                try await pool.startCall { try await $0.signIn("alice") }.value
            }
            let signIns = fetcher.requests.count
            await clock.advance(upTo: .seconds(3_600)) { false }
            for pool in pools { #expect(pool.state(of: "alice").isIdentified) }
            let renewals = pools.reduce(0) { $0 + ($1.metrics(for: "alice")?.renewals ?? 0) }
            let shares = pools.reduce(0) { $0 + ($1.metrics.fleet?.sharesInstalled ?? 0) }
            for pool in pools { await pool.shutdown() }
            return (fetcher.requests.count - signIns, renewals, shares)
        }
        let alone = try await run(coordinated: false)
        let fleet = try await run(coordinated: true)
        // Renewals per replica: an hour of 10-minute credentials renewed at about two thirds of their life.
        #expect(alone.renewals >= 15 && fleet.renewals >= 15)
        #expect(alone.fetches == alone.renewals, "without a coordinator every renewal is a fetch")
        #expect(fleet.shares > 0)
        let perRenewal = Double(fleet.fetches) / (Double(fleet.renewals) / 3)
        #expect(perRenewal <= 1.1, "fetches per renewal per account: \(perRenewal) (\(fleet))")
    }

    /// Two pools holding alice's credential both hear the service reject it after a rotation: one fetches, the other
    /// installs its credential, signed with the new secret.
    @Test func afterARotationReplicasFetchOnceAndShareTheNewSecretsCredential() async throws {
        let clock = ManualClock()
        let signer = Locked(
            try IdentitySigner(projectID: "proj_fleet", secret: "old-secret", lifetime: .seconds(600), clock: clock))
        let fetcher = ScriptedCredentialFetcher(clock: clock) { request in
            .credential(try signer.withLock { try $0.sign(email: "\(request.account.rawValue)@example.com") })
        }
        let coordinator = InProcessFleetCoordinator(limits: FleetLedger.Limits(sharesCredentials: true), clock: clock)
        let pools = (0..<2).map { _ in
            SessionPool(
                fetcher: fetcher, clock: clock, coordination: FleetCoordination(coordinator, sharesCredentials: true))
        }
        for pool in pools { try await pool.startCall { try await $0.signIn("alice") }.value }
        let signIns = fetcher.requests.count
        signer.withLock {
            $0 = try! IdentitySigner(
                projectID: "proj_fleet", secret: "new-secret", lifetime: .seconds(600), clock: clock)
        }
        let verifier = try IdentityVerifier(projectID: "proj_fleet", secret: "new-secret", clock: clock)
        for pool in pools {
            let rejected = try pool.identityHeaders(for: "alice").credential()
            await pool.credentialRejected(rejected, for: "alice")
        }
        let renewed = await clock.advance(upTo: .seconds(30)) {
            pools.allSatisfy { pool in
                (try? pool.identityHeaders(for: "alice").credential()).map { verifier.verify($0).isValid } ?? false
            }
        }
        #expect(renewed, "both pools hold a credential of the new secret")
        #expect(fetcher.requests.count - signIns == 1, "one fetch for the fleet")
        #expect(pools[1].metrics.fleet?.sharesInstalled == 1)
        for pool in pools { await pool.shutdown() }
    }

    /// A renewal waiting for its pool's budget when the service rejects the held credential becomes the fetch after
    /// the rejection, and asks the fleet as one: another replica's credential fetched before the rotation, though it
    /// expires later, is not installed.
    @Test func aRenewalQueuedWhenTheRejectionComesAsksAsFollowingIt() async throws {
        let clock = ManualClock()
        let signer = Locked(
            try IdentitySigner(projectID: "proj_fleet", secret: "old-secret", lifetime: .seconds(600), clock: clock))
        let fetcher = ScriptedCredentialFetcher(clock: clock) { request in
            .credential(try signer.withLock { try $0.sign(email: "\(request.account.rawValue)@example.com") })
        }
        let coordinator = InProcessFleetCoordinator(limits: FleetLedger.Limits(sharesCredentials: true), clock: clock)
        let coordination = FleetCoordination(coordinator, sharesCredentials: true)
        // A's budget has one start, for the sign-in; its renewal then waits about 1,000 s for the next.
        let starved = SessionPoolConfiguration(budget: .init(maximumInFlight: 4, startsPerSecond: 0.001, burst: 1))
        let a = SessionPool(fetcher: fetcher, configuration: starved, clock: clock, coordination: coordination)
        let b = SessionPool(fetcher: fetcher, clock: clock, coordination: coordination)
        for pool in [a, b] { try await pool.startCall { try await $0.signIn("alice") }.value }
        let held = try a.identityHeaders(for: "alice").credential()
        // B renews first and shares its credential, signed with the old secret; A's renewal waits for its budget.
        let renewed = await clock.advance(upTo: .seconds(600)) {
            (try? b.identityHeaders(for: "alice").credential().expiresAt).map { $0 > held.expiresAt } ?? false
        }
        #expect(renewed)
        #expect(a.metrics.queuedProactive == 1, "A's renewal waits for its budget")
        signer.withLock {
            $0 = try! IdentitySigner(
                projectID: "proj_fleet", secret: "new-secret", lifetime: .seconds(600), clock: clock)
        }
        await a.credentialRejected(held, for: "alice")
        let verifier = try IdentityVerifier(projectID: "proj_fleet", secret: "new-secret", clock: clock)
        let recovered = await clock.advance(upTo: .seconds(1_200)) {
            (try? a.identityHeaders(for: "alice").credential()).map { verifier.verify($0).isValid } ?? false
        }
        #expect(recovered, "A holds a credential of the new secret")
        #expect(a.metrics.fleet?.sharesInstalled == 0, "the credential from before the rotation was not installed")
        for pool in [a, b] { await pool.shutdown() }
    }

    /// The gate hands a credential of another replica to the account only when it is the pinned user's, byte for
    /// byte, expires later than the held one, and has not expired; before the first credential, only when the host
    /// named the user.
    @Test func aSharedCredentialMustBeThePinnedUsersNewerAndUnexpired() throws {
        let clock = ManualClock()
        let signer = try IdentitySigner(projectID: "proj_fleet", secret: "s", lifetime: .seconds(600), clock: clock)
        let held = try signer.sign(email: "alice@example.com")
        clock.advance(by: .seconds(60))
        let newer = try signer.sign(email: "alice@example.com")
        let mallory = try signer.sign(email: "mallory@example.com")
        let alice = "alice@example.com"
        #expect(FleetGate.accepts(newer, pinnedTo: alice, holding: held, now: clock.now))
        #expect(!FleetGate.accepts(held, pinnedTo: alice, holding: held, now: clock.now), "not newer")
        #expect(!FleetGate.accepts(held, pinnedTo: alice, holding: newer, now: clock.now), "older")
        #expect(!FleetGate.accepts(mallory, pinnedTo: alice, holding: held, now: clock.now), "another user's")
        #expect(!FleetGate.accepts(newer, pinnedTo: alice, holding: held, now: newer.expirationDate), "expired")
        #expect(FleetGate.accepts(newer, pinnedTo: alice, holding: nil, now: clock.now), "a sign-in naming alice")
        #expect(!FleetGate.accepts(mallory, pinnedTo: alice, holding: nil, now: clock.now), "naming alice, mallory's")
        #expect(!FleetGate.accepts(newer, pinnedTo: nil, holding: nil, now: clock.now), "no user to match")
        // Canonically equivalent, but not the bytes the backend signed: refused, as the install would refuse it.
        let accented = try signer.sign(email: "al\u{E9}@example.com")
        #expect(FleetGate.accepts(accented, pinnedTo: "al\u{E9}@example.com", holding: nil, now: clock.now))
        #expect(
            !FleetGate.accepts(accented, pinnedTo: "ale\u{301}@example.com", holding: nil, now: clock.now),
            "canonically equivalent, but not the bytes the backend signed")
    }

    /// Replicas signing alice in at once, each naming her, send the backend one fetch: the first fetches, the others
    /// wait for it and install its credential. A sign-in that names nobody fetches its own.
    @Test func signInsThatNameTheUserShareOneFetch() async throws {
        let clock = ManualClock()
        let signer = try IdentitySigner(projectID: "proj_fleet", secret: "s", lifetime: .seconds(600), clock: clock)
        // The backend takes a second, so the replicas' sign-ins overlap.
        let fetcher = ScriptedCredentialFetcher(clock: clock) { request in
            .credential(try signer.sign(email: "\(request.account.rawValue)@example.com"), after: .seconds(1))
        }
        let coordinator = InProcessFleetCoordinator(limits: FleetLedger.Limits(sharesCredentials: true), clock: clock)
        let pools = (0..<4).map { index in
            SessionPool(
                fetcher: fetcher,
                configuration: SessionPoolConfiguration(session: SessionConfiguration(randomSeed: UInt64(index))),
                clock: clock, coordination: FleetCoordination(coordinator, sharesCredentials: true))
        }
        var signIns: [Task<Void, any Error>] = []
        for pool in pools.prefix(3) {
            signIns.append(await pool.startCall { try await $0.signIn("alice", expecting: "alice@example.com") })
        }
        await pools[0].waitUntilIdle()
        #expect(fetcher.requests.count == 1, "the others wait for the first replica's fetch")
        let identified = await clock.advance(upTo: .seconds(10)) {
            pools.prefix(3).allSatisfy { $0.state(of: "alice").isIdentified }
        }
        #expect(identified)
        for signIn in signIns { try await signIn.value }
        #expect(fetcher.requests.count == 1)
        #expect(pools.prefix(3).reduce(0) { $0 + ($1.metrics.fleet?.sharesInstalled ?? 0) } == 2)
        for pool in pools.prefix(3) {
            #expect(try pool.identityHeaders(for: "alice").credential().email == "alice@example.com")
        }
        let last = await pools[3].startCall { try await $0.signIn("alice") }
        #expect(await clock.advance(upTo: .seconds(10)) { pools[3].state(of: "alice").isIdentified })
        try await last.value
        #expect(fetcher.requests.count == 2, "a sign-in naming nobody has no user to match a shared credential with")
        #expect(pools[3].metrics.fleet?.sharesInstalled == 0)
        for pool in pools { await pool.shutdown() }
    }

    /// A coordinator that hands an account another user's credential gets nowhere: the account fetches its own and
    /// stays its user's.
    @Test func anotherUsersSharedCredentialIsRefusedAndTheAccountFetchesItsOwn() async throws {
        let clock = ManualClock()
        let fetcher = try backend(clock)
        let signer = try IdentitySigner(projectID: "proj_fleet", secret: "fleet-secret", clock: clock)
        let mallory = try signer.sign(email: "mallory@example.com")
        let coordinator = FaultyCoordinator(clock: clock) { fetch in
            // Mallory's credential for anyone holding one older than it; asked again as holding one as new, a lease.
            guard let held = fetch.heldExpiry, held < mallory.expirationDate else {
                return .start(lease: FleetLease("lease"))
            }
            return .shared(mallory)
        }
        let engine = SessionEngine(
            fetcher: fetcher, configuration: SessionConfiguration(randomSeed: 1), clock: clock,
            coordination: FleetCoordination(coordinator))
        try await engine.startCall { try await $0.signIn("alice") }.value
        #expect(await clock.advance(upTo: .seconds(600)) { engine.metrics.renewals == 1 })
        #expect(fetcher.requests.count == 2, "the renewal fetched its own credential")
        #expect(try engine.identityHeaders().credential().email == "alice@example.com")
        #expect(engine.metrics.fleet?.sharesRefused == 1)
        #expect(engine.metrics.fleet?.started == 2, "asked again, the renewal went through the fleet's budget")
        await engine.shutdown()
    }

    // MARK: - Failing open

    /// A coordinator that throws: the fetch starts at once as without one, the pool reports the coordinator
    /// unavailable once and decides locally for the retry interval; then one fetch asks again, and the pool reports it
    /// available.
    @Test func aFailingCoordinatorIsDecidedLocallyReportedOnceAndAskedAgain() async throws {
        let clock = ManualClock()
        let fetcher = try backend(clock)
        let coordinator = FaultyCoordinator(clock: clock)
        coordinator.failing.withLock { $0 = true }
        let pool = SessionPool(
            fetcher: fetcher, configuration: SessionPoolConfiguration(session: SessionConfiguration(randomSeed: 2)),
            clock: clock, coordination: FleetCoordination(coordinator, retryInterval: .seconds(5)))
        let events = Locked<[SessionPoolEvent.Kind]>()
        let subscription = pool.events()
        let listener = Task { for await event in subscription { events.append(event.kind) } }
        try await pool.startCall { try await $0.signIn("alice") }.value
        try await pool.startCall { try await $0.signIn("bob") }.value
        #expect(fetcher.requests.count == 2, "both sign-ins fetched without the coordinator's word")
        #expect(coordinator.decisions.value == 1, "bob's fetch did not ask: the coordinator is unavailable for 5 s")
        #expect(coordinator.calls.value == 3, "both fetches' ends were reported all the same")
        var fleet = try #require(pool.metrics.fleet)
        #expect(fleet.decidedLocally == 2 && fleet.callsFailed == 3 && !fleet.isAvailable)
        coordinator.failing.withLock { $0 = false }
        clock.advance(by: .seconds(5))
        try await pool.startCall { try await $0.signIn("carol") }.value
        fleet = try #require(pool.metrics.fleet)
        #expect(fleet.started == 1 && fleet.isAvailable)
        await pool.shutdown()
        await listener.value
        let reports = events.values.compactMap { kind -> String? in
            switch kind {
            case .coordinatorUnavailable(let reason): "unavailable: \(reason)"
            case .coordinatorAvailable: "available"
            default: nil
            }
        }
        #expect(reports == ["unavailable: the coordinator failed with Refused", "available"])
    }

    /// A coordinator that never answers holds a fetch for its call's deadline, and not a moment longer; the fetch
    /// then leaves at that time, which is neither latency nor clock skew.
    @Test func aHungCoordinatorHoldsAFetchForItsCallTimeoutAndNoLonger() async throws {
        let clock = ManualClock()
        let fetcher = try backend(clock)
        let coordinator = FaultyCoordinator(clock: clock)
        coordinator.hanging.withLock { $0 = true }
        let engine = SessionEngine(
            fetcher: fetcher, configuration: SessionConfiguration(randomSeed: 3), clock: clock,
            coordination: FleetCoordination(coordinator, callTimeout: .milliseconds(300)))
        let start = clock.now
        let signIn = await engine.startCall { try await $0.signIn("alice") }
        clock.advance(by: .milliseconds(299))
        await engine.waitUntilIdle()
        #expect(fetcher.requests.isEmpty, "the call's deadline has not passed")
        clock.advance(by: .milliseconds(1))
        await engine.waitUntilIdle()
        try await signIn.value
        let request = try #require(fetcher.requests.first)
        let leftAfter = try #require(request.startedAt).timeIntervalSince(start)
        #expect(abs(leftAfter - 0.3) < 1e-6, "the request leaves when the fleet let it go, not before: \(leftAfter)")
        #expect(engine.metrics.clockOffsetsKeptOut == 0 && engine.metrics.appliedClockOffset == nil)
        #expect(engine.metrics.fleet?.decidedLocally == 1 && engine.metrics.fleet?.callsFailed == 1)
        await engine.shutdown()
    }

    /// A fetch waits for another replica's credential at most `maximumPeerWait`, then fetches its own.
    @Test func aFetchWaitsForAPeerAtMostTheMaximumThenFetchesItsOwn() async throws {
        let clock = ManualClock()
        let fetcher = try backend(clock)
        let coordinator = FaultyCoordinator(clock: clock) { _ in .awaitPeer(retryIn: .seconds(1)) }
        let engine = SessionEngine(
            fetcher: fetcher, configuration: SessionConfiguration(randomSeed: 4), clock: clock,
            coordination: FleetCoordination(coordinator, maximumPeerWait: .seconds(3)))
        let signIn = await engine.startCall { try await $0.signIn("alice") }
        let start = clock.uptime
        #expect(await clock.advance(upTo: .seconds(60)) { !fetcher.requests.isEmpty })
        #expect(clock.uptime - start == .seconds(3), "three waits of a second, then its own fetch")
        try await signIn.value
        #expect(fetcher.requests.count == 1)
        #expect(engine.metrics.fleet?.peerWaits == 3 && engine.metrics.fleet?.peerWaitsGivenUp == 1)
        await engine.shutdown()
    }

    /// A hold between two waits for a peer starts the count again: a fetch the fleet's budget or outage held longer
    /// than the longest wait for a peer then waits for the peer fetching after it, and does not start outside the
    /// fleet's budget.
    @Test func aHoldBetweenTwoWaitsForAPeerStartsTheirCountAgain() async throws {
        let clock = ManualClock()
        let fetcher = try backend(clock)
        let asked = Locked(0)
        let coordinator = FaultyCoordinator(clock: clock) { _ in
            switch asked.withLock({ count -> Int in
                count += 1
                return count
            }) {
            case 1: .awaitPeer(retryIn: .milliseconds(500))
            case 2: .hold(retryIn: .seconds(5), reason: .outage)
            case 3, 4: .awaitPeer(retryIn: .milliseconds(500))
            default: .start(lease: FleetLease("after"))
            }
        }
        let engine = SessionEngine(
            fetcher: fetcher, configuration: SessionConfiguration(randomSeed: 4), clock: clock,
            coordination: FleetCoordination(coordinator, maximumPeerWait: .seconds(2)))
        let signIn = await engine.startCall { try await $0.signIn("alice") }
        #expect(await clock.advance(upTo: .seconds(60)) { !fetcher.requests.isEmpty })
        try await signIn.value
        #expect(engine.metrics.fleet?.peerWaitsGivenUp == 0, "\(String(describing: engine.metrics.fleet))")
        #expect(engine.metrics.fleet?.started == 1, "it started on the fleet's lease")
        await engine.shutdown()
    }

    /// A sign-out while the fetch waits for the fleet ends the wait: nothing reaches the backend, and the pool's
    /// budget slot is free.
    @Test func aSignOutWhileTheFleetHoldsTheFetchSendsNothing() async throws {
        let clock = ManualClock()
        let fetcher = try backend(clock)
        let coordinator = FaultyCoordinator(clock: clock) { _ in .hold(retryIn: .seconds(60), reason: .outage) }
        let pool = SessionPool(
            fetcher: fetcher, configuration: SessionPoolConfiguration(session: SessionConfiguration(randomSeed: 5)),
            clock: clock, coordination: FleetCoordination(coordinator))
        let signIn = await pool.startCall { try await $0.signIn("alice") }
        #expect(pool.metrics.fetchesInFlight == 1 && pool.metrics.fleet?.holds == 1)
        await pool.signOut("alice")
        await pool.waitUntilIdle()
        await #expect(throws: SessionError.self) { try await signIn.value }
        #expect(pool.metrics.fetchesInFlight == 0)
        clock.advance(by: .seconds(120))
        await pool.waitUntilIdle()
        #expect(fetcher.requests.isEmpty && coordinator.decisions.value == 1)
        await pool.shutdown()
    }

    /// A pool whose budget holds one start an hour: alice's fetch, which the fleet answers with another replica's
    /// credential, leaves that start unspent, so bob's fetch reaches the backend at once. A coordinated fetch takes
    /// its start of the pool's budget when the fleet lets it leave, not when the budget admits it.
    @Test func aFetchTheFleetAnswersSpendsNoneOfThePoolsStarts() async throws {
        let clock = ManualClock()
        let fetcher = try backend(clock)
        let signer = try IdentitySigner(projectID: "proj_fleet", secret: "peer", lifetime: .seconds(600), clock: clock)
        let coordinator = FaultyCoordinator(clock: clock) { fetch in
            fetch.account == "alice"
                ? .shared(try! signer.sign(email: "alice@example.com")) : .start(lease: FleetLease("bob"))
        }
        var configuration = SessionPoolConfiguration(session: SessionConfiguration(randomSeed: 8))
        configuration.budget = SessionPoolConfiguration.Budget(startsPerSecond: 1.0 / 3_600, burst: 1)
        let pool = SessionPool(
            fetcher: fetcher, configuration: configuration, clock: clock,
            coordination: FleetCoordination(coordinator, sharesCredentials: true))
        try await pool.startCall { try await $0.signIn("alice", expecting: "alice@example.com") }.value
        #expect(fetcher.requests.isEmpty && pool.metrics.fleet?.sharesInstalled == 1)
        let signIn = await pool.startCall { try await $0.signIn("bob") }
        await pool.waitUntilIdle()
        #expect(fetcher.requestedAccounts == ["bob"] && pool.state(of: "bob").isIdentified)
        #expect(pool.metrics.fetchesAdmitted == 1 && pool.metrics.fetchesInFlight == 0)
        #expect(pool.budget.starts?.snapshot.inFlight == 0, "alice's share took no start")
        await pool.shutdown()
        _ = try? await signIn.value
    }

    /// Four fetches the fleet holds for ten seconds and then lets go together leave at the pool's own rate (a start a
    /// second, a bucket of one), not at once: every request the backend sees took a start of the pool's budget, so its
    /// starts stay within `burst + rate × T` whatever the fleet held.
    @Test func fetchesTheFleetLetsGoTogetherLeaveAtThePoolsRate() async throws {
        let clock = ManualClock()
        let fetcher = try backend(clock)
        let opens = clock.now.addingTimeInterval(10)
        let coordinator = FaultyCoordinator(clock: clock) { [clock] fetch in
            clock.now < opens
                ? .hold(retryIn: .seconds(opens.timeIntervalSince(clock.now)), reason: .budget)
                : .start(lease: FleetLease("\(fetch.account)"))
        }
        var configuration = SessionPoolConfiguration(session: SessionConfiguration(randomSeed: 9))
        configuration.budget = SessionPoolConfiguration.Budget(maximumInFlight: 4, startsPerSecond: 1, burst: 1)
        let pool = SessionPool(
            fetcher: fetcher, configuration: configuration, clock: clock, coordination: FleetCoordination(coordinator))
        let accounts: [AccountID] = ["a", "b", "c", "d"]
        var signIns: [Task<Void, any Error>] = []
        for account in accounts { signIns.append(await pool.startCall { try await $0.signIn(account) }) }
        #expect(fetcher.requests.isEmpty, "the fleet holds every fetch")
        #expect(await clock.advance(upTo: .seconds(60)) { fetcher.requests.count == 4 })
        for signIn in signIns { try await signIn.value }
        let times = fetcher.requests.compactMap(\.receivedAt).sorted()
        #expect(times.count == 4)
        for (earlier, later) in zip(times, times.dropFirst()) {
            #expect(later.timeIntervalSince(earlier) >= 0.999, "\(times)")
        }
        #expect(times.first.map { $0 >= opens } == true)
        await pool.shutdown()
    }

    /// The fleet reserves alice's start 3 s ahead and bob's 3.5 s ahead; the pool's budget gives a start a second, from
    /// a bucket of one. Each fetch takes its start while it waits for its reserved time, so both leave when the fleet
    /// said: bob at 3.5 s, not at 4 s, when a start taken on leaving would have come. The fleet's spacing of its
    /// starts is what the backend sees.
    @Test func aFetchTakesItsStartWhileItWaitsForItsReservedStartAndLeavesOnTime() async throws {
        let clock = ManualClock()
        let fetcher = try backend(clock)
        let begin = clock.now
        let coordinator = FaultyCoordinator(clock: clock) { [clock] fetch in
            let at = fetch.account == "alice" ? 3.0 : 3.5
            let left = at - clock.now.timeIntervalSince(begin)
            return left > 0.001
                ? .reserved(FleetReservation("\(fetch.account)"), retryIn: .seconds(left))
                : .start(lease: FleetLease("\(fetch.account)"))
        }
        var configuration = SessionPoolConfiguration(session: SessionConfiguration(randomSeed: 11))
        configuration.budget = SessionPoolConfiguration.Budget(startsPerSecond: 1, burst: 1)
        let pool = SessionPool(
            fetcher: fetcher, configuration: configuration, clock: clock, coordination: FleetCoordination(coordinator))
        let signIns = [
            await pool.startCall { try await $0.signIn("alice") }, await pool.startCall { try await $0.signIn("bob") },
        ]
        #expect(await clock.advance(upTo: .seconds(60)) { fetcher.requests.count == 2 })
        for signIn in signIns { try await signIn.value }
        let left = fetcher.requests.map { ($0.account, $0.receivedAt.map { $0.timeIntervalSince(begin) } ?? -1) }
        #expect(left.map(\.0) == ["alice", "bob"], "\(left)")
        #expect(zip(left.map(\.1), [3.0, 3.5]).allSatisfy { abs($0 - $1) < 0.001 }, "\(left)")
        await pool.shutdown()
    }

    /// A sign-out while the fetch the fleet let go waits for a start of the pool's budget ends the wait: nothing
    /// reaches the backend, the lease goes back to the coordinator as abandoned, and neither a slot nor a start is
    /// held for it.
    @Test func aSignOutWhileTheFetchWaitsToLeaveSendsNothingAndGivesItsLeaseBack() async throws {
        let clock = ManualClock()
        let fetcher = try backend(clock)
        let coordinator = FaultyCoordinator(clock: clock) { .start(lease: FleetLease("\($0.account)")) }
        var configuration = SessionPoolConfiguration(session: SessionConfiguration(randomSeed: 10))
        configuration.budget = SessionPoolConfiguration.Budget(startsPerSecond: 1.0 / 60, burst: 1)
        let pool = SessionPool(
            fetcher: fetcher, configuration: configuration, clock: clock, coordination: FleetCoordination(coordinator))
        try await pool.startCall { try await $0.signIn("alice") }.value
        let signIn = await pool.startCall { try await $0.signIn("bob") }
        #expect(pool.metrics.queuedNeeded == 1 && pool.metrics.fetchesInFlight == 1, "bob waits for a start")
        await pool.signOut("bob")
        await pool.waitUntilIdle()
        await #expect(throws: SessionError.self) { try await signIn.value }
        #expect(pool.metrics.fetchesInFlight == 0 && pool.metrics.queuedNeeded == 0)
        let bobs = coordinator.ended.values.filter { $0.lease == FleetLease("bob") }
        #expect(bobs.count == 1)
        if case .abandoned? = bobs.first?.outcome {} else { Issue.record("\(bobs)") }
        #expect(pool.budget.starts?.snapshot.inFlight == 0 && pool.budget.starts?.snapshot.queuedNeeded == 0)
        clock.advance(by: .seconds(120))
        await pool.waitUntilIdle()
        #expect(fetcher.requestedAccounts == ["alice"])
        await pool.shutdown()
    }

    /// A fetch holding a reserved start that it does not take reports the start abandoned, so that the account's other
    /// replicas are not held for it: when its account signs out while it waits for the start, and when the fleet
    /// hands it another replica's credential instead. One that takes its start reports only its lease's end; one that
    /// goes ahead on its own (its call passed the deadline) leaves the reservation to hold the other replicas for the
    /// credential it will share.
    @Test(arguments: ["signed out", "shared", "started", "decided locally"])
    func aReservedStartTheFetchDoesNotTakeIsReportedAbandoned(ending: String) async throws {
        let clock = ManualClock()
        let fetcher = try backend(clock)
        let signer = try IdentitySigner(projectID: "proj_fleet", secret: "peer", lifetime: .seconds(600), clock: clock)
        let reservation = FleetReservation("reserved-1-5000")
        let coordinator = FaultyCoordinator(clock: clock) { fetch in
            guard fetch.reservation == reservation else { return .reserved(reservation, retryIn: .seconds(5)) }
            switch ending {
            case "shared": return .shared(try! signer.sign(email: "alice@example.com"))
            case "started": return .start(lease: FleetLease("taken"))
            default: return .hold(retryIn: .seconds(60), reason: .budget)
            }
        }
        let pool = SessionPool(
            fetcher: fetcher, configuration: SessionPoolConfiguration(session: SessionConfiguration(randomSeed: 7)),
            clock: clock, coordination: FleetCoordination(coordinator, sharesCredentials: true))
        let signIn = await pool.startCall { try await $0.signIn("alice", expecting: "alice@example.com") }
        #expect(pool.metrics.fleet?.holds == 1, "the fetch waits for its reserved start")
        switch ending {
        case "signed out": await pool.signOut("alice")
        case "decided locally":
            coordinator.delay.withLock { $0 = .seconds(3600) }
            #expect(await clock.advance(upTo: .seconds(60)) { !fetcher.requests.isEmpty })
        default: clock.advance(by: .seconds(5))
        }
        await pool.waitUntilIdle()
        _ = try? await signIn.value
        await pool.waitUntilIdle()
        let reported = coordinator.ended.values
        switch ending {
        case "started":
            #expect(reported.map(\.lease) == [FleetLease("taken")] && reported.allSatisfy { $0.reservation == nil })
        case "decided locally":
            #expect(reported.count == 1 && reported.allSatisfy { $0.lease == nil && $0.reservation == nil })
        default:
            #expect(reported.count == 1 && reported.first?.lease == nil, "\(reported)")
            #expect(reported.first?.reservation == reservation, "\(reported)")
            if case .abandoned? = reported.first?.outcome {} else { Issue.record("\(reported)") }
        }
        #expect(fetcher.requests.count == (["started", "decided locally"].contains(ending) ? 1 : 0))
        #expect(pool.metrics.fetchesInFlight == 0 && pool.budget.starts?.snapshot.inFlight == 0, "nothing held")
        await pool.shutdown()
    }

    /// A fetch holds the start it took for its reserved start while it waits for it; when the fleet then holds it
    /// (its hold began and the reservation lapsed), it gives the start up, unused: held through the fleet's hold it
    /// could be the replica's one probe, which the fetch the fleet lets probe would wait for.
    @Test func aStartTakenForAReservationIsGivenUpWhenTheFleetHoldsTheFetch() async throws {
        let clock = ManualClock()
        let fetcher = try backend(clock)
        let asked = Locked(0)
        let coordinator = FaultyCoordinator(clock: clock) { _ in
            asked.withLock { $0 += 1 }
            return asked.value == 1
                ? .reserved(FleetReservation("r"), retryIn: .seconds(5)) : .hold(retryIn: .seconds(60), reason: .outage)
        }
        var configuration = SessionPoolConfiguration(session: SessionConfiguration(randomSeed: 12))
        configuration.budget = SessionPoolConfiguration.Budget(startsPerSecond: 1.0 / 3_600, burst: 1)
        let pool = SessionPool(
            fetcher: fetcher, configuration: configuration, clock: clock, coordination: FleetCoordination(coordinator))
        let signIn = await pool.startCall { try await $0.signIn("alice") }
        #expect(pool.budget.starts?.snapshot.inFlight == 1, "it holds its start while it waits for the reserved one")
        clock.advance(by: .seconds(5))
        await pool.waitUntilIdle()
        #expect(asked.value == 2 && pool.budget.starts?.snapshot.inFlight == 0, "given up when the fleet holds it")
        #expect(pool.metrics.fetchesInFlight == 1 && fetcher.requests.isEmpty, "the fetch still holds its slot")
        await pool.shutdown()
        _ = try? await signIn.value
    }

    /// Every fetch a replica starts is reported with how it ended, the fetches it decided on locally too; the
    /// credential itself only when the replica shares its credentials, its expiry otherwise.
    @Test(arguments: [false, true]) func everyFetchsEndIsReported(sharing: Bool) async throws {
        let clock = ManualClock()
        let fetcher = try backend(clock)
        let coordinator = FaultyCoordinator(clock: clock)
        let engine = SessionEngine(
            fetcher: fetcher, configuration: SessionConfiguration(randomSeed: 6), clock: clock,
            coordination: FleetCoordination(coordinator, sharesCredentials: sharing))
        try await engine.startCall { try await $0.signIn("alice") }.value
        coordinator.failing.withLock { $0 = true }
        try await engine.startCall { try await $0.switchAccount(to: "bob") }.value
        await engine.waitUntilIdle()
        let ended = coordinator.ended.values
        #expect(ended.map(\.lease) == [FleetLease("l")], "the second end's report failed: nothing recorded it")
        #expect(coordinator.calls.value == 4, "two decisions, two reports, the locally decided fetch's too")
        let credential = try #require(fetcher.requests.first.map { _ in try engine.identityHeaders().credential() })
        switch ended.first?.outcome {
        case .credential(let reported): #expect(sharing && reported.email == "alice@example.com")
        case .issued(let expiresAt): #expect(!sharing && expiresAt.timeIntervalSince1970 > 0)
        default: Issue.record("expected the fetched credential or its expiry, got \(ended)")
        }
        #expect(credential.email == "bob@example.com")
        await engine.shutdown()
    }

    /// A decision that arrives after the fetch stopped waiting for it (its call's deadline passed) gives back the
    /// lease it granted, at once, rather than leaving it to lapse.
    @Test func aLeaseGrantedAfterTheCallsDeadlineIsGivenBack() async throws {
        let clock = ManualClock()
        let fetcher = try backend(clock)
        let coordinator = FaultyCoordinator(clock: clock)
        coordinator.delay.withLock { $0 = .seconds(1) }
        let engine = SessionEngine(
            fetcher: fetcher, configuration: SessionConfiguration(randomSeed: 7), clock: clock,
            coordination: FleetCoordination(coordinator, callTimeout: .milliseconds(300)))
        let signIn = await engine.startCall { try await $0.signIn("alice") }
        #expect(await clock.advance(upTo: .seconds(5)) { coordinator.ended.values.count == 2 })
        try await signIn.value
        #expect(engine.metrics.fleet?.decidedLocally == 1)
        let ended = coordinator.ended.values
        #expect(ended.contains { $0.lease == FleetLease("l") && $0.outcome == .abandoned })
        #expect(ended.contains { $0.lease == nil }, "the fetch it decided on locally")
        await engine.shutdown()
    }

    /// The longest wait for a peer counts the clock, the calls' own time included.
    @Test func theWaitForAPeerCountsTheCallsOwnTime() async throws {
        let clock = ManualClock()
        let fetcher = try backend(clock)
        let coordinator = FaultyCoordinator(clock: clock) { _ in .awaitPeer(retryIn: .milliseconds(100)) }
        coordinator.delay.withLock { $0 = .milliseconds(200) }
        let engine = SessionEngine(
            fetcher: fetcher, configuration: SessionConfiguration(randomSeed: 8), clock: clock,
            coordination: FleetCoordination(coordinator, maximumPeerWait: .seconds(1)))
        let start = clock.uptime
        let signIn = await engine.startCall { try await $0.signIn("alice") }
        #expect(await clock.advance(upTo: .seconds(10)) { !fetcher.requests.isEmpty })
        // The first call (0.2 s), a second of waiting for the peer, and the call that found it over (0.2 s); counting
        // only the sleeps, the fetch would have waited ten calls and ten sleeps, 3.2 s.
        #expect(clock.uptime - start <= .milliseconds(1_400))
        try await signIn.value
        await engine.shutdown()
    }
}

/// The fleet's rules as the in-process coordinator keeps them, one example each.
@Suite struct FleetLedgerTests {
    private let now = Duration.seconds(100)
    private let wall = Date(timeIntervalSince1970: 1_800_000_000)

    private func fetch(_ account: AccountID, holding expiry: Date? = nil) -> FleetFetch {
        FleetFetch(account: account, isNeeded: false, heldExpiry: expiry)
    }

    private func credential(expiringIn seconds: Int) throws -> IdentityCredential {
        let clock = ManualClock(now: wall)
        let signer = try IdentitySigner(
            projectID: "proj_fleet", secret: "s", lifetime: .seconds(seconds), clock: clock)
        return try signer.sign(email: "alice@example.com")
    }

    @Test func theBudgetStartsItsBurstThenReservesTheNextStartsInTurn() {
        var ledger = FleetLedger(limits: .init(startsPerSecond: 2, burst: 2), now: now)
        guard case .start = ledger.decide(fetch("a"), now: now, wall: wall),
            case .start = ledger.decide(fetch("b"), now: now, wall: wall)
        else { return #expect(Bool(false), "the burst starts two") }
        // The bucket is empty: the next fetches are given the next free starts, half a second apart, in turn.
        guard case .reserved(let first, let firstIn) = ledger.decide(fetch("c"), now: now, wall: wall),
            case .reserved(let second, let secondIn) = ledger.decide(fetch("d"), now: now, wall: wall)
        else { return #expect(Bool(false), "an empty bucket reserves") }
        #expect(firstIn == .milliseconds(500) && secondIn == .seconds(1))
        // Asked again early, a reservation keeps its place; asked when its start has come, it starts without a token.
        var c = fetch("c")
        c.reservation = first
        #expect(
            ledger.decide(c, now: now + .milliseconds(200), wall: wall) == .reserved(first, retryIn: .milliseconds(300))
        )
        guard case .start = ledger.decide(c, now: now + .milliseconds(500), wall: wall) else {
            return #expect(Bool(false), "the reserved start")
        }
        // A fetch without a reservation asking now queues behind d: its start is 1.5 s from the first question.
        guard case .reserved(_, let thirdIn) = ledger.decide(fetch("e"), now: now + .milliseconds(500), wall: wall)
        else { return #expect(Bool(false)) }
        #expect(thirdIn == .seconds(1))
        var d = fetch("d")
        d.reservation = second
        guard case .start = ledger.decide(d, now: now + .seconds(1), wall: wall) else {
            return #expect(Bool(false), "d's start, though the bucket is still short")
        }
    }

    /// A reservation stands for its account's lease: another replica's fetch of the account waits for its start rather
    /// than queueing a second one, then waits for its fetch and takes its credential.
    @Test func anotherReplicaOfAReservedAccountWaitsForItsStartAndTakesItsCredential() throws {
        var ledger = FleetLedger(
            limits: .init(startsPerSecond: 1, burst: 1, sharesCredentials: true, peerPollInterval: .milliseconds(100)),
            now: now)
        let held = try credential(expiringIn: 300)
        let renewal = fetch("alice", holding: held.expirationDate)
        guard case .start = ledger.decide(fetch("bob", holding: held.expirationDate), now: now, wall: wall),
            case .reserved(let reservation, let retryIn) = ledger.decide(renewal, now: now, wall: wall)
        else { return #expect(Bool(false)) }
        #expect(retryIn == .seconds(1))
        #expect(
            ledger.decide(renewal, now: now, wall: wall) == .hold(retryIn: .milliseconds(1100), reason: .budget),
            "the second replica of alice waits for the first one's start")
        var reserved = renewal
        reserved.reservation = reservation
        guard case .start(let lease) = ledger.decide(reserved, now: now + .seconds(1), wall: wall) else {
            return #expect(Bool(false))
        }
        guard case .awaitPeer = ledger.decide(renewal, now: now + .milliseconds(1100), wall: wall) else {
            return #expect(Bool(false), "then for its fetch")
        }
        let fetched = try credential(expiringIn: 600)
        ledger.fetchEnded(reserved, lease: lease, outcome: .credential(fetched), now: now + .seconds(1), wall: wall)
        #expect(ledger.decide(renewal, now: now + .milliseconds(1200), wall: wall) == .shared(fetched))
    }

    /// A reserved start taken more than the grace late is lost, and the fetch queues again: starts that came due while
    /// the fetches in flight were full, or a replica was paused, never come all at once.
    @Test func aReservedStartTakenTooLateIsLostAndTheFetchQueuesAgain() {
        var ledger = FleetLedger(limits: .init(startsPerSecond: 1, burst: 1), now: now)
        guard case .start = ledger.decide(fetch("a"), now: now, wall: wall),
            case .reserved(let reservation, _) = ledger.decide(fetch("b"), now: now, wall: wall),
            case .reserved = ledger.decide(fetch("c"), now: now, wall: wall)
        else { return #expect(Bool(false)) }
        var b = fetch("b")
        b.reservation = reservation
        // b's start was at +1 s; at +2.5 s, more than the grace late, it is lost: the bucket, at +0.5 after c's
        // start, reserves b the next one.
        guard case .reserved(let again, let retryIn) = ledger.decide(b, now: now + .milliseconds(2500), wall: wall)
        else {
            return #expect(Bool(false), "a start a second and a half late is not taken")
        }
        #expect(again != reservation && retryIn == .milliseconds(500))
    }

    /// A renewal of a replica that has not heard of the rejection yet, and a sign-in naming the user, respect the
    /// account's fence: a credential fetched before it is not handed to them, though it expires later.
    @Test func aFetchThatDoesNotFollowTheRejectionRespectsTheFence() throws {
        var ledger = FleetLedger(limits: .init(sharesCredentials: true), now: now)
        let rejected = try credential(expiringIn: 300)
        let beforeRotation = try credential(expiringIn: 600)
        let renewal = fetch("a", holding: rejected.expirationDate)
        let afterRejection = FleetFetch(
            account: "a", isNeeded: true, heldExpiry: rejected.expirationDate, followsRejection: true)
        guard case .start(let early) = ledger.decide(renewal, now: now, wall: wall),
            case .start = ledger.decide(afterRejection, now: now + .seconds(1), wall: wall)
        else { return #expect(Bool(false)) }
        ledger.fetchEnded(
            renewal, lease: early, outcome: .credential(beforeRotation), now: now + .seconds(2), wall: wall)
        let signIn = fetch("a", holding: wall)
        guard case .awaitPeer = ledger.decide(signIn, now: now + .seconds(2), wall: wall) else {
            return #expect(Bool(false), "a sign-in waits for the fetch started at the fence, not the earlier one")
        }
    }

    /// A replica that asks after the reserved start has come, before the reserving fetch took it, still waits for it;
    /// a reservation no fetch takes lapses a lease's duration after its start, and the account's fetch goes through the
    /// budget again.
    @Test func aReservationHoldsTheAccountUntilItsFetchTakesItOrItLapses() throws {
        var ledger = FleetLedger(
            limits: .init(
                startsPerSecond: 1, burst: 1, leaseDuration: .seconds(35), sharesCredentials: true,
                peerPollInterval: .milliseconds(100)),
            now: now)
        let held = try credential(expiringIn: 300)
        let renewal = fetch("alice", holding: held.expirationDate)
        guard case .start = ledger.decide(fetch("bob", holding: held.expirationDate), now: now, wall: wall),
            case .reserved = ledger.decide(renewal, now: now, wall: wall)
        else { return #expect(Bool(false)) }
        #expect(
            ledger.decide(renewal, now: now + .seconds(2), wall: wall)
                == .hold(retryIn: .milliseconds(100), reason: .budget),
            "the start has come and its fetch is late: wait for it")
        guard case .start = ledger.decide(renewal, now: now + .seconds(36), wall: wall) else {
            return #expect(Bool(false), "35 s after its start the reservation lapsed: the bucket, refilled, starts it")
        }
    }

    /// A reserved fetch that does not take its start (cancelled, decided locally, given another replica's credential)
    /// reports it abandoned without a lease: the account's other replicas are no longer held for it, and a report of
    /// another start, or of one already replaced, changes nothing.
    @Test func aReservationItsFetchAbandonsNoLongerHoldsTheAccount() throws {
        var ledger = FleetLedger(
            limits: .init(
                startsPerSecond: 1, burst: 1, leaseDuration: .seconds(35), sharesCredentials: true,
                peerPollInterval: .milliseconds(100)),
            now: now)
        let held = try credential(expiringIn: 300)
        var renewal = fetch("alice", holding: held.expirationDate)
        guard case .start = ledger.decide(fetch("bob", holding: held.expirationDate), now: now, wall: wall),
            case .reserved(let reservation, _) = ledger.decide(renewal, now: now, wall: wall)
        else { return #expect(Bool(false)) }
        guard case .hold(_, .budget) = ledger.decide(renewal, now: now + .seconds(2), wall: wall) else {
            return #expect(Bool(false), "another replica's renewal waits for the reserved start")
        }
        var other = renewal
        other.reservation = FleetReservation("reserved-0-9-0")
        ledger.fetchEnded(other, lease: nil, outcome: .abandoned, now: now + .seconds(2), wall: wall)
        guard case .hold(_, .budget) = ledger.decide(renewal, now: now + .seconds(2), wall: wall) else {
            return #expect(Bool(false), "another start's report frees nothing")
        }
        renewal.reservation = reservation
        ledger.fetchEnded(renewal, lease: nil, outcome: .abandoned, now: now + .seconds(2), wall: wall)
        renewal.reservation = nil
        guard case .start = ledger.decide(renewal, now: now + .seconds(2), wall: wall) else {
            return #expect(Bool(false), "the abandoned start no longer holds alice: the refilled bucket starts her")
        }
    }

    /// The fleet's hold voids every reservation and gives back the starts they counted: when it ends, the fetches
    /// held meanwhile queue again at the fleet's rate, rather than all starting on reservations made before it.
    @Test func aHoldVoidsTheReservationsMadeBeforeIt() {
        var ledger = FleetLedger(
            limits: .init(startsPerSecond: 1, burst: 1, outageThreshold: 1, probeInterval: .seconds(5)), now: now)
        guard case .start(let lease) = ledger.decide(fetch("a"), now: now, wall: wall),
            case .reserved(let reservation, _) = ledger.decide(fetch("b"), now: now, wall: wall)
        else { return #expect(Bool(false)) }
        ledger.fetchEnded(fetch("a"), lease: lease, outcome: .outage, now: now, wall: wall)
        var b = fetch("b")
        b.reservation = reservation
        guard case .hold(_, .outage) = ledger.decide(b, now: now + .seconds(5) - .milliseconds(1), wall: wall) else {
            return #expect(Bool(false), "held")
        }
        guard case .start(let probe) = ledger.decide(fetch("c"), now: now + .seconds(5), wall: wall) else {
            return #expect(Bool(false), "the probe")
        }
        ledger.fetchEnded(fetch("c"), lease: probe, outcome: .refused, now: now + .seconds(5), wall: wall)
        // b's reservation lapsed with the hold: it takes the bucket's token as any fetch would, and the next waits.
        guard case .start = ledger.decide(b, now: now + .seconds(5), wall: wall),
            case .reserved(_, let retryIn) = ledger.decide(b, now: now + .seconds(5), wall: wall)
        else { return #expect(Bool(false)) }
        #expect(retryIn == .seconds(1))
    }

    @Test func theBudgetHoldsAtItsFetchesInFlightUntilOneEnds() {
        var ledger = FleetLedger(limits: .init(startsPerSecond: 100, burst: 100, maximumInFlight: 1), now: now)
        guard case .start(let lease) = ledger.decide(fetch("a"), now: now, wall: wall) else {
            return #expect(Bool(false))
        }
        guard case .hold(_, .budget) = ledger.decide(fetch("b"), now: now, wall: wall) else {
            return #expect(Bool(false), "one in flight")
        }
        ledger.fetchEnded(fetch("a"), lease: lease, outcome: .refused, now: now, wall: wall)
        guard case .start = ledger.decide(fetch("b"), now: now, wall: wall) else { return #expect(Bool(false)) }
    }

    @Test func outagesInARowHoldTheFleetButOneProbeAndAnAnswerEndsIt() {
        var ledger = FleetLedger(limits: .init(burst: 10, outageThreshold: 2, probeInterval: .seconds(5)), now: now)
        for account: AccountID in ["a", "b"] {
            guard case .start(let lease) = ledger.decide(fetch(account), now: now, wall: wall) else {
                return #expect(Bool(false))
            }
            ledger.fetchEnded(fetch(account), lease: lease, outcome: .outage, now: now, wall: wall)
        }
        #expect(ledger.holdReason == .outage)
        #expect(ledger.decide(fetch("c"), now: now, wall: wall) == .hold(retryIn: .seconds(5), reason: .outage))
        guard case .start(let probe) = ledger.decide(fetch("c"), now: now + .seconds(5), wall: wall) else {
            return #expect(Bool(false), "the probe goes after the interval")
        }
        guard case .hold(_, .outage) = ledger.decide(fetch("d"), now: now + .seconds(5), wall: wall) else {
            return #expect(Bool(false), "one probe at a time")
        }
        ledger.fetchEnded(fetch("c"), lease: probe, outcome: .refused, now: now + .seconds(6), wall: wall)
        #expect(ledger.holdReason == nil)
        guard case .start = ledger.decide(fetch("d"), now: now + .seconds(6), wall: wall) else {
            return #expect(Bool(false))
        }
    }

    @Test func aRetryAfterHoldsEveryReplicaUntilItHasPassedThenOneProbeGoes() {
        var ledger = FleetLedger(limits: .init(), now: now)
        guard case .start(let lease) = ledger.decide(fetch("a"), now: now, wall: wall) else {
            return #expect(Bool(false))
        }
        ledger.fetchEnded(fetch("a"), lease: lease, outcome: .retryAfter(.seconds(30)), now: now, wall: wall)
        #expect(ledger.decide(fetch("b"), now: now, wall: wall) == .hold(retryIn: .seconds(30), reason: .retryAfter))
        guard case .start = ledger.decide(fetch("b"), now: now + .seconds(30), wall: wall) else {
            return #expect(Bool(false))
        }
        guard case .hold(_, .retryAfter) = ledger.decide(fetch("c"), now: now + .seconds(30), wall: wall) else {
            return #expect(Bool(false), "the probe goes alone")
        }
    }

    @Test func aLeaseOfAReplicaThatDiedLapsesAndAnotherTakesTheAccountOver() {
        var ledger = FleetLedger(limits: .init(leaseDuration: .seconds(35), sharesCredentials: true), now: now)
        let renewal = fetch("a", holding: wall)
        guard case .start = ledger.decide(renewal, now: now, wall: wall) else { return #expect(Bool(false)) }
        guard case .awaitPeer = ledger.decide(renewal, now: now + .seconds(34), wall: wall) else {
            return #expect(Bool(false), "the holder's fetch is under way")
        }
        guard case .start = ledger.decide(renewal, now: now + .seconds(35), wall: wall) else {
            return #expect(Bool(false), "the lease lapsed")
        }
        #expect(ledger.inFlight == 1)
    }

    @Test func aCredentialIsSharedOnlyWithAReplicaHoldingAnOlderOneAndOnlyUntilItExpires() throws {
        var ledger = FleetLedger(limits: .init(sharesCredentials: true), now: now)
        let older = try credential(expiringIn: 300)
        let fetched = try credential(expiringIn: 600)
        guard case .start(let lease) = ledger.decide(fetch("a", holding: older.expirationDate), now: now, wall: wall)
        else { return #expect(Bool(false)) }
        ledger.fetchEnded(fetch("a"), lease: lease, outcome: .credential(fetched), now: now, wall: wall)
        #expect(ledger.decide(fetch("a", holding: older.expirationDate), now: now, wall: wall) == .shared(fetched))
        for held in [fetched.expirationDate, nil] {
            guard case .start(let lease) = ledger.decide(fetch("a", holding: held), now: now, wall: wall) else {
                return #expect(Bool(false), "not newer than the held one, or nothing held: no share")
            }
            ledger.fetchEnded(fetch("a"), lease: lease, outcome: .abandoned, now: now, wall: wall)
        }
        let later = wall.addingTimeInterval(600)
        guard case .start = ledger.decide(fetch("a", holding: older.expirationDate), now: now, wall: later) else {
            return #expect(Bool(false), "expired: dropped")
        }
        #expect(ledger.sharedCredentials == 0)
    }

    /// After a rotation a replica's credential fetched before it may expire later than a rejected one and still carry
    /// the old secret: the first report of the rejection fences it off, and only a fetch started since is shared or
    /// waited for.
    @Test func afterARejectionOnlyAFetchStartedSinceIsSharedOrWaitedFor() throws {
        var ledger = FleetLedger(limits: .init(sharesCredentials: true), now: now)
        let rejected = try credential(expiringIn: 300)
        let beforeRotation = try credential(expiringIn: 600)
        let afterRotation = try credential(expiringIn: 610)
        let renewal = fetch("a", holding: rejected.expirationDate)
        let afterRejection = FleetFetch(
            account: "a", isNeeded: true, heldExpiry: rejected.expirationDate, followsRejection: true)
        guard case .start(let early) = ledger.decide(renewal, now: now, wall: wall) else {
            return #expect(Bool(false), "a renewal under way when the secret rotates")
        }
        guard case .start(let fenced) = ledger.decide(afterRejection, now: now + .seconds(1), wall: wall) else {
            return #expect(Bool(false), "no wait for a fetch that started before the rejection")
        }
        ledger.fetchEnded(
            renewal, lease: early, outcome: .credential(beforeRotation), now: now + .seconds(2), wall: wall)
        guard case .awaitPeer = ledger.decide(renewal, now: now + .seconds(2), wall: wall) else {
            return #expect(Bool(false), "a renewal that has not heard of the rejection respects the fence too")
        }
        guard case .awaitPeer = ledger.decide(afterRejection, now: now + .seconds(2), wall: wall) else {
            return #expect(Bool(false), "the same rejection reported again keeps the fence: wait for its fetch")
        }
        ledger.fetchEnded(
            afterRejection, lease: fenced, outcome: .credential(afterRotation), now: now + .seconds(3), wall: wall)
        #expect(ledger.decide(afterRejection, now: now + .seconds(3), wall: wall) == .shared(afterRotation))
    }

    /// The fleet's queue after a rotation may outlast the rejected credential: a replica that reports the rejection
    /// after that credential expired still waits for the fetch started at the fence and takes its credential, rather
    /// than fetching its own; a fetch started before the fence is still not handed to it.
    @Test func aFenceOutlivesTheRejectedCredential() throws {
        var ledger = FleetLedger(limits: .init(sharesCredentials: true), now: now)
        let rejected = try credential(expiringIn: 10)
        let beforeRotation = try credential(expiringIn: 900)
        let afterRotation = try credential(expiringIn: 1200)
        let renewal = fetch("a", holding: rejected.expirationDate)
        let afterRejection = FleetFetch(
            account: "a", isNeeded: true, heldExpiry: rejected.expirationDate, followsRejection: true)
        guard case .start(let early) = ledger.decide(renewal, now: now, wall: wall),
            case .start(let fenced) = ledger.decide(afterRejection, now: now + .seconds(1), wall: wall)
        else { return #expect(Bool(false)) }
        ledger.fetchEnded(
            renewal, lease: early, outcome: .credential(beforeRotation), now: now + .seconds(2), wall: wall)
        // Twenty seconds on, the fenced fetch still under way: the rejected credential expired ten seconds ago.
        let later = wall.addingTimeInterval(20)
        guard case .awaitPeer = ledger.decide(afterRejection, now: now + .seconds(20), wall: later) else {
            return #expect(Bool(false), "the fenced fetch is still the one to wait for")
        }
        ledger.fetchEnded(
            afterRejection, lease: fenced, outcome: .credential(afterRotation), now: now + .seconds(21), wall: later)
        #expect(ledger.decide(afterRejection, now: now + .seconds(21), wall: later) == .shared(afterRotation))
    }

    /// Replicas may hold different credentials of one account when the secret rotates: one that expires later than
    /// the credential whose rejection set the fence keeps it, and waits for the fenced fetch. Only the rejection of a
    /// credential fetched since the fence (the secret rotated again) moves it.
    @Test func theFenceMovesOnlyWhenACredentialFetchedSinceIsRejected() throws {
        var ledger = FleetLedger(limits: .init(sharesCredentials: true), now: now)
        let older = try credential(expiringIn: 300)
        let newer = try credential(expiringIn: 400)
        let fetched = try credential(expiringIn: 600)
        func rejecting(_ held: IdentityCredential) -> FleetFetch {
            FleetFetch(account: "a", isNeeded: true, heldExpiry: held.expirationDate, followsRejection: true)
        }
        guard case .start(let lease) = ledger.decide(rejecting(older), now: now, wall: wall) else {
            return #expect(Bool(false), "the first rejection sets the fence and fetches")
        }
        guard case .awaitPeer = ledger.decide(rejecting(newer), now: now + .seconds(1), wall: wall) else {
            return #expect(Bool(false), "a newer credential from before the rotation keeps the fence")
        }
        ledger.fetchEnded(
            rejecting(older), lease: lease, outcome: .credential(fetched), now: now + .seconds(2), wall: wall)
        #expect(ledger.decide(rejecting(newer), now: now + .seconds(2), wall: wall) == .shared(fetched))
        // A renewal of the credential fetched since, then the secret rotates again and that credential is rejected:
        // the renewal's result may carry the second secret or not, so it is not handed out.
        let later = try credential(expiringIn: 900)
        let renewing = fetch("a", holding: fetched.expirationDate)
        guard case .start(let third) = ledger.decide(renewing, now: now + .seconds(3), wall: wall) else {
            return #expect(Bool(false))
        }
        ledger.fetchEnded(renewing, lease: third, outcome: .credential(later), now: now + .seconds(4), wall: wall)
        guard case .start = ledger.decide(rejecting(fetched), now: now + .seconds(5), wall: wall) else {
            return #expect(Bool(false), "the credential fetched since is rejected: a new fence, nothing shared")
        }
    }

    @Test func aFailedProbeNeverCutsARetryAfterShort() {
        var ledger = FleetLedger(limits: .init(probeInterval: .seconds(5)), now: now)
        guard case .start(let first) = ledger.decide(fetch("a"), now: now, wall: wall),
            case .start(let second) = ledger.decide(fetch("b"), now: now, wall: wall)
        else { return #expect(Bool(false)) }
        ledger.fetchEnded(fetch("a"), lease: first, outcome: .retryAfter(.seconds(60)), now: now, wall: wall)
        ledger.fetchEnded(fetch("b"), lease: second, outcome: .outage, now: now, wall: wall)
        guard case .hold(let wait, _) = ledger.decide(fetch("c"), now: now, wall: wall) else {
            return #expect(Bool(false))
        }
        #expect(wait == .seconds(60))
    }

    @Test func aReplicaHoldingNoCredentialDoesNotWaitForAPeer() {
        var ledger = FleetLedger(limits: .init(sharesCredentials: true), now: now)
        guard case .start = ledger.decide(fetch("a", holding: wall), now: now, wall: wall),
            case .start = ledger.decide(fetch("a"), now: now, wall: wall)
        else { return #expect(Bool(false), "a first sign-in takes no share, so it fetches at once") }
    }

    @Test func withoutSharingReplicasOfOneAccountDoNotWaitForEachOther() {
        var ledger = FleetLedger(limits: .init(sharesCredentials: false), now: now)
        guard case .start = ledger.decide(fetch("a"), now: now, wall: wall),
            case .start = ledger.decide(fetch("a"), now: now, wall: wall)
        else { return #expect(Bool(false)) }
    }
}
