import Foundation
import SessionEngine
import SessionEngineBackend
import SessionEngineModel
import SessionEngineRedis
import SessionEngineTestKit
import Testing

/// A credential of `email` signed now, expiring in `lifetime` seconds.
private func credential(_ email: String, lifetime: Int = 600) throws -> IdentityCredential {
    try IdentitySigner(projectID: "proj_redis", secret: "redis-secret", lifetime: .seconds(lifetime))
        .sign(email: email)
}

/// How long a call may take at most when the server is gone or paused: its timeouts (connect 500 ms, command
/// 250 ms) many times over, a bound only a call that waits on the server for ever reaches, however busy the machine.
private let callBound: Duration = .seconds(10)

/// Runs `body` and returns how long it took.
private func timed<T>(_ body: () async throws -> T) async rethrows -> (T, Duration) {
    let start = ContinuousClock.now
    let value = try await body()
    return (value, ContinuousClock.now - start)
}

/// The coordinator on a real `redis-server`: the fleet's rules as scripts on the server, and the faults it must
/// survive (the server killed, started again empty, paused past the deadline, refusing the password, a replica that
/// dies holding a lease). Skipped with the reason where `redis-server` or hiredis 0.14 is missing.
@Suite(
    .serialized,
    .enabled(if: RedisServer.unavailableReason == nil, Comment(rawValue: RedisServer.unavailableReason ?? ""))
)
struct RedisFleetTests {
    @Test func oneReplicaFetchesAnAccountAndTheOthersAwaitItThenTakeItsCredential() async throws {
        let server = try await RedisServer.start()
        defer { Task { await server.stop() } }
        let limits = FleetLimits(sharesCredentials: true)
        let first = try RedisFleetCoordinator(configuration: server.configuration(limits: limits))
        let second = try RedisFleetCoordinator(configuration: server.configuration(limits: limits))
        let held = try credential("alice@example.com", lifetime: 300)
        let fetch = FleetFetch(account: "alice", isNeeded: false, heldExpiry: held.expirationDate)

        guard case .start(let lease) = try await first.decide(fetch) else {
            Issue.record("the first replica's fetch did not start")
            return
        }
        guard case .awaitPeer(let retryIn) = try await second.decide(fetch) else {
            Issue.record("the second replica did not wait for the first one's fetch")
            return
        }
        #expect(retryIn > .zero && retryIn <= limits.peerPollInterval)
        // A sign-in that names the user asks as holding one that expires now: it waits, then takes the share.
        let naming = FleetFetch(account: "alice", isNeeded: true, heldExpiry: Date())
        guard case .awaitPeer = try await second.decide(naming) else {
            Issue.record("a sign-in naming the user did not wait for the first replica's fetch")
            return
        }
        // A replica that holds nothing of the account has no user to match a share with: it fetches.
        let signingIn = FleetFetch(account: "alice", isNeeded: true, heldExpiry: nil)
        guard case .start(let own) = try await second.decide(signingIn) else {
            Issue.record("a replica holding no credential waited")
            return
        }
        try await second.fetchEnded(signingIn, lease: own, outcome: .abandoned)

        let fetched = try credential("alice@example.com", lifetime: 600)
        try await first.fetchEnded(fetch, lease: lease, outcome: .credential(fetched))
        #expect(try await second.decide(fetch) == .shared(fetched))
        #expect(try await second.decide(naming) == .shared(fetched))
        // Fencing: a replica that holds the fetched one already, or a newer one, is not handed it.
        let holding = FleetFetch(account: "alice", isNeeded: false, heldExpiry: fetched.expirationDate)
        guard case .start(let next) = try await second.decide(holding) else {
            Issue.record("a replica holding the shared credential was handed it again")
            return
        }
        try await second.fetchEnded(holding, lease: next, outcome: .abandoned)
    }

    @Test func credentialsStayOffTheServerUnlessTheLimitsShareThem() async throws {
        let server = try await RedisServer.start()
        defer { Task { await server.stop() } }
        let coordinator = try RedisFleetCoordinator(configuration: server.configuration())
        let held = try credential("bob@example.com", lifetime: 300)
        let fetch = FleetFetch(account: "bob", isNeeded: false, heldExpiry: held.expirationDate)
        guard case .start(let lease) = try await coordinator.decide(fetch) else {
            Issue.record("the fetch did not start")
            return
        }
        try await coordinator.fetchEnded(fetch, lease: lease, outcome: .credential(try credential("bob@example.com")))
        // A coordinator that shares, on the same keys, finds nothing to hand out: the credential never reached the
        // server.
        let sharing = try RedisFleetCoordinator(
            configuration: server.configuration(limits: FleetLimits(sharesCredentials: true)))
        guard case .start = try await sharing.decide(fetch) else {
            Issue.record("a credential reported without sharing was kept on the server")
            return
        }
    }

    @Test func theFleetsBudgetHoldsEveryReplicaTogether() async throws {
        let server = try await RedisServer.start()
        defer { Task { await server.stop() } }
        let limits = FleetLimits(startsPerSecond: 0.01, burst: 3, maximumInFlight: 2)
        let replicas = try (0..<3).map { _ in
            try RedisFleetCoordinator(configuration: server.configuration(limits: limits))
        }
        var leases: [(FleetFetch, FleetLease)] = []
        var holds = 0
        for (index, replica) in replicas.enumerated() {
            let fetch = FleetFetch(account: AccountID("account-\(index)"), isNeeded: true, heldExpiry: nil)
            switch try await replica.decide(fetch) {
            case .start(let lease): leases.append((fetch, lease))
            case .hold(_, reason: .budget): holds += 1
            case let other: Issue.record("unexpected decision \(other)")
            }
        }
        #expect(leases.count == 2 && holds == 1, "two in flight at most across three replicas")
        // One ends: a place in flight frees, and the bucket's third token lets one more start.
        try await replicas[0].fetchEnded(leases[0].0, lease: leases[0].1, outcome: .issued(expiresAt: .now + 600))
        let late = FleetFetch(account: "account-9", isNeeded: true, heldExpiry: nil)
        guard case .start(let third) = try await replicas[2].decide(late) else {
            Issue.record("a freed place did not let a fetch start")
            return
        }
        try await replicas[2].fetchEnded(late, lease: third, outcome: .issued(expiresAt: .now + 600))
        // The bucket is empty now: a start is reserved at the next token, 100 s away at 0.01 a second, and the next
        // one 100 s after it, whichever replica asks.
        guard case .reserved(let reservation, let retryIn) = try await replicas[1].decide(late),
            case .reserved(_, let nextIn) = try await replicas[2].decide(late)
        else {
            Issue.record("an empty bucket let a fetch start")
            return
        }
        #expect(retryIn > .seconds(90) && retryIn <= .seconds(100))
        #expect(nextIn > .seconds(190) && nextIn <= .seconds(200))
        // Asked again early, it keeps its place; a name the scripts did not make (another era) reserves anew.
        var reserved = late
        reserved.reservation = reservation
        guard case .reserved(let kept, let keptIn) = try await replicas[1].decide(reserved) else {
            Issue.record("the reservation was lost")
            return
        }
        #expect(kept == reservation && keptIn <= retryIn)
        reserved.reservation = FleetReservation("reserved-7-1")
        guard case .reserved(_, let anewIn) = try await replicas[1].decide(reserved) else {
            Issue.record("a reservation of another era started")
            return
        }
        #expect(anewIn > .seconds(290))
    }

    /// Reservations on the server: the next start reserved in turn, kept when asked early, taken when it comes; with
    /// sharing, another replica of the reserved account is held behind it and the reserving fetch is not. A slow
    /// bucket (a start every 2 s) keeps the first two decisions within one start however busy the machine.
    @Test func aReservedStartIsKeptTakenWhenItComesAndHoldsItsAccountsOtherReplicas() async throws {
        let server = try await RedisServer.start()
        defer { Task { await server.stop() } }
        let limits = FleetLimits(startsPerSecond: 0.5, burst: 1, sharesCredentials: true)
        let first = try RedisFleetCoordinator(configuration: server.configuration(prefix: "reserve", limits: limits))
        let second = try RedisFleetCoordinator(configuration: server.configuration(prefix: "reserve", limits: limits))
        let held = try credential("yan@example.com", lifetime: 300)
        let x = FleetFetch(account: "xia", isNeeded: true, heldExpiry: held.expirationDate)
        var y = FleetFetch(account: "yan", isNeeded: true, heldExpiry: held.expirationDate)
        guard case .start(let lease) = try await first.decide(x),
            case .reserved(let reservation, let retryIn) = try await first.decide(y)
        else {
            Issue.record("a start, then a reservation")
            return
        }
        #expect(retryIn > .zero && retryIn <= .seconds(2))
        y.reservation = reservation
        guard case .reserved(let kept, _) = try await first.decide(y), kept == reservation else {
            Issue.record("asked early, the reservation keeps its place")
            return
        }
        let other = FleetFetch(account: "yan", isNeeded: true, heldExpiry: held.expirationDate)
        guard case .hold(_, .budget) = try await second.decide(other) else {
            Issue.record("another replica of yan waits for the reserved start")
            return
        }
        try await Task.sleep(for: retryIn + .milliseconds(20))
        guard case .start(let reserved) = try await first.decide(y) else {
            Issue.record("the reserved start, taken when it came")
            return
        }
        guard case .awaitPeer = try await second.decide(other) else {
            Issue.record("then the other replica waits for its fetch")
            return
        }
        try await first.fetchEnded(x, lease: lease, outcome: .abandoned)
        try await first.fetchEnded(y, lease: reserved, outcome: .abandoned)
    }

    /// A reservation its fetch abandons (reported without a lease, carrying it) no longer holds the account's other
    /// replicas on the server; a report naming another start frees nothing. A slow bucket (a start every 2 s) keeps
    /// the steps within one reserved start however busy the machine.
    @Test func anAbandonedReservationNoLongerHoldsItsAccount() async throws {
        let server = try await RedisServer.start()
        defer { Task { await server.stop() } }
        let limits = FleetLimits(startsPerSecond: 0.5, burst: 1, sharesCredentials: true)
        let first = try RedisFleetCoordinator(configuration: server.configuration(prefix: "abandon", limits: limits))
        let second = try RedisFleetCoordinator(configuration: server.configuration(prefix: "abandon", limits: limits))
        let held = try credential("zoe@example.com", lifetime: 300)
        var z = FleetFetch(account: "zoe", isNeeded: true, heldExpiry: held.expirationDate)
        let x = FleetFetch(account: "xia", isNeeded: true, heldExpiry: held.expirationDate)
        guard case .start(let lease) = try await first.decide(x),
            case .reserved(let zoes, _) = try await first.decide(z)
        else {
            Issue.record("a start, then zoe's fetch reserves the next")
            return
        }
        let otherZoe = FleetFetch(account: "zoe", isNeeded: true, heldExpiry: held.expirationDate)
        z.reservation = FleetReservation("reserved-1-1")
        try await first.fetchEnded(z, lease: nil, outcome: .abandoned)
        guard case .hold(_, .budget) = try await second.decide(otherZoe) else {
            Issue.record("another start's report freed zoe")
            return
        }
        z.reservation = zoes
        try await first.fetchEnded(z, lease: nil, outcome: .abandoned)
        switch try await second.decide(otherZoe) {
        case .reserved, .start: break
        case let other: Issue.record("the abandoned start still holds zoe: \(other)")
        }
        try await first.fetchEnded(x, lease: lease, outcome: .abandoned)
    }

    @Test func oneReplicasOutageAndRetryAfterHoldTheFleetWithOneProbe() async throws {
        let server = try await RedisServer.start()
        defer { Task { await server.stop() } }
        let limits = FleetLimits(
            startsPerSecond: 1000, burst: 100, outageThreshold: 2, probeInterval: .seconds(2))
        let first = try RedisFleetCoordinator(configuration: server.configuration(limits: limits))
        let second = try RedisFleetCoordinator(configuration: server.configuration(limits: limits))
        for index in 0..<2 {
            let fetch = FleetFetch(account: AccountID("failing-\(index)"), isNeeded: true, heldExpiry: nil)
            guard case .start(let lease) = try await first.decide(fetch) else {
                Issue.record("no start")
                return
            }
            try await first.fetchEnded(fetch, lease: lease, outcome: .outage)
        }
        let other = FleetFetch(account: "other", isNeeded: true, heldExpiry: nil)
        guard case .hold(_, reason: .outage) = try await second.decide(other) else {
            Issue.record("another replica's fetch was not held by the fleet's outage")
            return
        }
        // After the probe interval one probe goes, and only one.
        var probe: FleetLease?
        let deadline = ContinuousClock.now + callBound
        while probe == nil, ContinuousClock.now < deadline {
            if case .start(let lease) = try await second.decide(other) { probe = lease }
            try await Task.sleep(for: .milliseconds(50))
        }
        let lease = try #require(probe, "no probe within \(callBound)")
        guard case .hold(_, reason: .outage) = try await first.decide(other) else {
            Issue.record("a second probe went while the first one ran")
            return
        }
        // The backend answers: the hold ends for every replica.
        try await second.fetchEnded(other, lease: lease, outcome: .issued(expiresAt: .now + 600))
        guard case .start(let after) = try await first.decide(other) else {
            Issue.record("the fleet still held after the backend answered")
            return
        }
        try await first.fetchEnded(other, lease: after, outcome: .retryAfter(.seconds(120)))
        guard case .hold(let retryIn, reason: .retryAfter) = try await second.decide(other) else {
            Issue.record("one replica's Retry-After did not hold the other")
            return
        }
        #expect(retryIn > .seconds(100))
    }

    @Test func aLeaseOfAReplicaThatDiedLapsesAndAnotherReplicaFetches() async throws {
        let server = try await RedisServer.start()
        defer { Task { await server.stop() } }
        let limits = FleetLimits(leaseDuration: .seconds(2), sharesCredentials: true)
        let dying = try RedisFleetCoordinator(configuration: server.configuration(limits: limits))
        let survivor = try RedisFleetCoordinator(configuration: server.configuration(limits: limits))
        let held = try credential("carol@example.com", lifetime: 300)
        let fetch = FleetFetch(account: "carol", isNeeded: false, heldExpiry: held.expirationDate)
        guard case .start = try await dying.decide(fetch) else {
            Issue.record("no lease for the first replica")
            return
        }
        // The replica dies here: it never reports. The other waits for it until its lease lapses, then fetches.
        var waited = 0
        var started = false
        let deadline = ContinuousClock.now + callBound
        while !started, ContinuousClock.now < deadline {
            switch try await survivor.decide(fetch) {
            case .awaitPeer(let retryIn):
                waited += 1
                try await Task.sleep(for: retryIn)
            case .start: started = true
            case let other:
                Issue.record("unexpected decision \(other)")
                return
            }
        }
        #expect(started, "the dead replica's lease never lapsed")
        #expect(waited >= 1)
    }

    @Test func aServerKilledStartedAgainEmptyOrPausedCostsACallItsTimeoutAndCoordinationResumes() async throws {
        var server = try await RedisServer.start()
        let port = server.port
        let coordinator = try RedisFleetCoordinator(configuration: server.configuration())
        let fetch = FleetFetch(account: "dave", isNeeded: true, heldExpiry: nil)
        func decidesAgain() async throws {
            guard case .start(let lease) = try await coordinator.decide(fetch) else {
                Issue.record("coordination did not resume")
                return
            }
            try await coordinator.fetchEnded(fetch, lease: lease, outcome: .issued(expiresAt: .now + 600))
        }
        try await decidesAgain()

        // Killed: the call fails at once or within its timeouts.
        await server.kill()
        let (killed, killedTook) = await timed { await Result { try await coordinator.decide(fetch) } }
        #expect(throws: RedisCoordinatorError.self) { try killed.get() }
        #expect(killedTook < callBound)

        // Started again empty on the same port: no scripts, no state; the coordinator loads its scripts again.
        await server.stop()
        server = try await RedisServer.start(port: port)
        try await decidesAgain()
        try await decidesAgain()

        // Paused past the deadline: the call fails within the command's timeout, and the calls after it are not
        // stuck behind it once the server comes back.
        server.pause()
        let (paused, pausedTook) = await timed { await Result { try await coordinator.decide(fetch) } }
        let error = try #require(paused.failure as? RedisCoordinatorError)
        #expect(error.code == .connectionLost || error.code == .timedOut, "\(error)")
        #expect(pausedTook < callBound)
        server.resume()
        try await decidesAgain()
        await server.stop()
    }

    @Test func aRefusedPasswordIsATypedErrorThatNamesNoSecret() async throws {
        let server = try await RedisServer.start(password: "correct-horse-battery")
        defer { Task { await server.stop() } }
        let wrong = "wrong-staple-\(UUID().uuidString)"
        let refused = try RedisFleetCoordinator(configuration: server.configuration(password: wrong))
        let fetch = FleetFetch(account: "erin", isNeeded: true, heldExpiry: nil)
        do {
            _ = try await refused.decide(fetch)
            Issue.record("a wrong password was accepted")
        } catch let error as RedisCoordinatorError {
            #expect(error.code == .authenticationFailed)
            #expect(!"\(error)".contains(wrong) && !"\(error)".contains("correct-horse"))
        }
        #expect(!"\(refused.configuration)".contains(wrong))
        let accepted = try RedisFleetCoordinator(configuration: server.configuration())
        try await accepted.ping()
        guard case .start(let lease) = try await accepted.decide(fetch) else {
            Issue.record("the right password did not coordinate")
            return
        }
        try await accepted.fetchEnded(fetch, lease: lease, outcome: .abandoned)
    }

    /// The scripts and `FleetLedger` decide alike: random sequences of decisions and reports by replicas about three
    /// accounts, with sharing, a small budget, outages and `Retry-After`, go to both, and every decision must be of the
    /// same kind (a start, a wait for a peer, the same shared credential, or a hold for the same reason).
    ///
    /// The server's clock runs on while the ledger's is given; the steps come in short phases with 1.1 s between them,
    /// and every interval that can come due (the probe, a `Retry-After`) is 0.5 s, so both sides pass it between two
    /// phases and neither within one. No token refills and no lease lapses within a run. Within a phase the ledger's
    /// clock follows the test's, so a fence (a fetch after a rejection) and the leases before and after it are in the
    /// same order on both sides; a fence waits 2 ms first, so that no lease before it shares its millisecond on the
    /// server.
    ///
    /// Each seed sleeps through its phases in real time (about 9 s); under the thread sanitizer, which watches the
    /// same code whatever the seed, one seed runs.
    @Test(arguments: (PropertySettings.isThreadSanitizerLoaded ? [1] : [1, 2]) as [UInt64])
    func theScriptsDecideAsTheLedgerDoes(seed: UInt64) async throws {
        let server = try await RedisServer.start()
        defer { Task { await server.stop() } }
        let limits = FleetLimits(
            startsPerSecond: 0.0001, burst: 12, maximumInFlight: 3, leaseDuration: .seconds(3600), outageThreshold: 2,
            probeInterval: .milliseconds(500), sharesCredentials: true)
        let redis = try RedisFleetCoordinator(
            configuration: server.configuration(prefix: "diff\(seed)", limits: limits))
        var ledger = FleetLedger(limits: limits, now: .zero)
        var now = Duration.zero
        var random = SplitMix64(seed: seed)
        let accounts: [AccountID] = ["ann", "ben", "cat"]
        // Each account's credential a replica may hold: one older than every shared one, one newer (a replica that
        // renewed since, or a credential fetched after a fence being rejected in turn).
        let held = try accounts.map { account in
            try [300, 900].map { try credential("\(account.rawValue)@example.com", lifetime: $0) }
        }
        // The leases each side gave, for the fetches that started on both.
        var open: [(fetch: FleetFetch, ledger: FleetLease, redis: FleetLease)] = []
        var kinds: Set<String> = []
        func kind(_ decision: FleetDecision) -> String {
            switch decision {
            case .start: "start"
            case .awaitPeer: "await"
            case .shared(let credential): "shared \(credential.expiresAt)"
            case .hold(_, let reason): "hold \(reason)"
            case .reserved: "reserved"
            }
        }
        for phase in 0..<8 {
            let phaseStart = ContinuousClock.now
            let phaseTime = now
            for step in 0..<8 {
                now = phaseTime + phaseStart.duration(to: .now)
                if !open.isEmpty, random.next() % 3 == 0 {
                    let ended = open.remove(at: Int(random.next() % UInt64(open.count)))
                    let outcome: FleetOutcome =
                        switch random.next() % 4 {
                        case 0: .outage
                        case 1: .retryAfter(.milliseconds(500))
                        case 2: .issued(expiresAt: .now + 600)
                        default:
                            .credential(
                                try credential(
                                    "\(ended.fetch.account.rawValue)@example.com",
                                    lifetime: random.next() % 2 == 0 ? 600 : 1200))
                        }
                    ledger.fetchEnded(ended.fetch, lease: ended.ledger, outcome: outcome, now: now, wall: .now)
                    try await redis.fetchEnded(ended.fetch, lease: ended.redis, outcome: outcome)
                    continue
                }
                let index = Int(random.next() % UInt64(accounts.count))
                let holds = random.next() % 4 != 0
                let rejected = holds && random.next() % 3 == 0
                if rejected {
                    try await Task.sleep(for: .milliseconds(2))
                    now = phaseTime + phaseStart.duration(to: .now)
                }
                let fetch = FleetFetch(
                    account: accounts[index], isNeeded: !holds,
                    heldExpiry: holds ? held[index][Int(random.next() % 2)].expirationDate : nil,
                    followsRejection: rejected)
                let expected = ledger.decide(fetch, now: now, wall: .now)
                let actual = try await redis.decide(fetch)
                kinds.insert(kind(expected).components(separatedBy: " ").prefix(2).joined(separator: " "))
                #expect(
                    kind(actual) == kind(expected),
                    "phase \(phase), step \(step), \(fetch): the ledger \(expected), Redis \(actual)")
                if case .start(let mine) = expected, case .start(let theirs) = actual {
                    open.append((fetch, mine, theirs))
                } else if case .start(let lease) = expected {
                    ledger.fetchEnded(fetch, lease: lease, outcome: .abandoned, now: now, wall: .now)
                } else if case .start(let lease) = actual {
                    try await redis.fetchEnded(fetch, lease: lease, outcome: .abandoned)
                }
            }
            try await Task.sleep(for: .milliseconds(1100))
            now = phaseTime + .milliseconds(1100)
        }
        // The runs reach the rules they compare: starts, waits for a peer, shares and holds.
        #expect(
            kinds.contains("start") && kinds.contains("await") && kinds.contains { $0.hasPrefix("hold") }, "\(kinds)")
    }

    /// The fence on the server: a fetch that follows a rejection takes no credential fetched before the fleet heard
    /// of it, waits for the fetch started at it even when it held a newer credential from before the rotation, and
    /// the fence moves when a credential fetched since is rejected in turn.
    @Test func aRejectionFencesOffEarlierFetchesAndOnlyANewRotationMovesTheFence() async throws {
        let server = try await RedisServer.start()
        defer { Task { await server.stop() } }
        let redis = try RedisFleetCoordinator(
            configuration: server.configuration(prefix: "fence", limits: FleetLimits(sharesCredentials: true)))
        let rejected = try credential("alice@example.com", lifetime: 300)
        let newer = try credential("alice@example.com", lifetime: 400)
        let beforeRotation = try credential("alice@example.com", lifetime: 500)
        let fetched = try credential("alice@example.com", lifetime: 600)
        let later = try credential("alice@example.com", lifetime: 900)
        func rejecting(_ held: IdentityCredential) -> FleetFetch {
            FleetFetch(account: "alice", isNeeded: true, heldExpiry: held.expirationDate, followsRejection: true)
        }
        let renewal = FleetFetch(account: "alice", isNeeded: false, heldExpiry: rejected.expirationDate)
        guard case .start(let early) = try await redis.decide(renewal) else {
            Issue.record("a renewal under way when the secret rotates")
            return
        }
        try await Task.sleep(for: .milliseconds(5))
        guard case .start(let fenced) = try await redis.decide(rejecting(rejected)) else {
            Issue.record("no wait for a fetch that started before the rejection")
            return
        }
        try await redis.fetchEnded(renewal, lease: early, outcome: .credential(beforeRotation))
        guard case .awaitPeer = try await redis.decide(rejecting(newer)) else {
            Issue.record("a newer credential from before the rotation keeps the fence: wait for its fetch")
            return
        }
        try await redis.fetchEnded(rejecting(rejected), lease: fenced, outcome: .credential(fetched))
        #expect(try await redis.decide(rejecting(newer)) == .shared(fetched))
        // A renewal of the credential fetched since, then the secret rotates again and that credential is rejected:
        // the renewal's result may carry the second secret or not, so it is not handed out.
        let renewing = FleetFetch(account: "alice", isNeeded: false, heldExpiry: fetched.expirationDate)
        guard case .start(let third) = try await redis.decide(renewing) else {
            Issue.record("the renewal")
            return
        }
        try await redis.fetchEnded(renewing, lease: third, outcome: .credential(later))
        try await Task.sleep(for: .milliseconds(5))
        guard case .start(let moved) = try await redis.decide(rejecting(fetched)) else {
            Issue.record("the fence moved: nothing fetched before it is handed out")
            return
        }
        try await redis.fetchEnded(rejecting(fetched), lease: moved, outcome: .abandoned)

        // The fleet's queue after a rotation may outlast the rejected credential: reported after it expired, the
        // rejection still fences, and the second replica waits for the first one's fetch rather than fetching its own.
        let carol = FleetFetch(
            account: "carol", isNeeded: true, heldExpiry: Date().addingTimeInterval(-10), followsRejection: true)
        guard case .start(let first) = try await redis.decide(carol) else {
            Issue.record("the first replica of carol")
            return
        }
        try await Task.sleep(for: .milliseconds(5))
        guard case .awaitPeer = try await redis.decide(carol) else {
            Issue.record("an expired rejected credential still fences: wait for the fetch started at the fence")
            return
        }
        try await redis.fetchEnded(carol, lease: first, outcome: .abandoned)
    }

    @Test func hostileExpiriesNeitherTrapNorHoldTheFleet() async throws {
        let server = try await RedisServer.start()
        defer { Task { await server.stop() } }
        let coordinator = try RedisFleetCoordinator(
            configuration: server.configuration(limits: FleetLimits(sharesCredentials: true)))
        // Expiries no replica would install, as a hostile backend or a corrupt share could hand a replica: far
        // beyond what a Double converts to an Int64, and not a number at all.
        for expiry in [Date(timeIntervalSince1970: 1e300), Date(timeIntervalSince1970: -1e300), Date.distantFuture] {
            let fetch = FleetFetch(account: "ivan", isNeeded: false, heldExpiry: expiry)
            guard case .start(let lease) = try await coordinator.decide(fetch) else {
                Issue.record("a fetch holding a credential until \(expiry) did not start")
                return
            }
            try await coordinator.fetchEnded(fetch, lease: lease, outcome: .issued(expiresAt: expiry))
        }
        // The fleet still decides: nothing was left held.
        let fetch = FleetFetch(account: "ivan", isNeeded: true, heldExpiry: nil)
        guard case .start = try await coordinator.decide(fetch) else {
            Issue.record("a hostile expiry left the fleet holding")
            return
        }
    }

    @Test func thePasswordIsInNoDescriptionAndNoMirror() throws {
        let configuration = try RedisFleetCoordinator.Configuration(username: "app", password: "hunter2-secret")
        var dumped = ""
        dump(configuration, to: &dumped)
        for text in [dumped, "\(configuration)", String(reflecting: configuration)] {
            #expect(!text.contains("hunter2"), "\(text)")
        }
    }

    @Test func poolsOverRedisStayIdentifiedWhileTheServerIsGoneAndCoordinateWhenItIsBack() async throws {
        let server = try await RedisServer.start()
        let port = server.port
        let signer = try IdentitySigner(projectID: "proj_redis", secret: "redis-secret", lifetime: .seconds(600))
        let fetcher = ScriptedCredentialFetcher { account in try signer.sign(email: "\(account.rawValue)@example.com") }
        let coordinator = try RedisFleetCoordinator(
            configuration: server.configuration(limits: FleetLimits(sharesCredentials: true)))
        let coordination = FleetCoordination(coordinator, callTimeout: .seconds(2), retryInterval: .milliseconds(200))
        let pools = (0..<2).map { _ in SessionPool(fetcher: fetcher, coordination: coordination) }
        for pool in pools { try await pool.signIn("frank") }
        #expect(pools.allSatisfy { $0.metrics.fleet?.started ?? 0 >= 1 })

        await server.kill()
        for pool in pools { try await pool.signIn("grace") }
        for pool in pools {
            #expect(try pool.identityHeaders(for: "grace").credential().email == "grace@example.com")
            #expect(pool.metrics.fleet?.decidedLocally ?? 0 >= 1)
        }

        await server.stop()
        let restarted = try await RedisServer.start(port: port)
        try await Task.sleep(for: .milliseconds(300))
        let before = pools[0].metrics.fleet?.started ?? 0
        try await pools[0].signIn("heidi")
        #expect(pools[0].metrics.fleet?.started ?? 0 > before, "coordination did not resume")
        for pool in pools { await pool.shutdown() }
        await restarted.stop()
    }

    @Test(arguments: [
        ("", 6379, "the host"), ("bad host", 6379, "the host"), ("evil.example/x", 6379, "the host"),
        ("user@10.0.0.5", 6379, "the host"), ("[::1]", 6379, "the host"), ("a:b:zz", 6379, "the host"),
        ("127.0.0.1", 0, "the port"), ("127.0.0.1", 65_536, "the port"),
    ])
    func aConfigurationOutOfRangeIsRefusedWithTheValueNamed(host: String, port: Int, named: String) {
        #expect {
            _ = try RedisFleetCoordinator.Configuration(host: host, port: port)
        } throws: { error in
            let error = error as? RedisCoordinatorError
            return error?.code == .invalidConfiguration && error?.reason.contains(named) == true
        }
    }

    @Test func aURLIsReadWithoutRepeatingItsPassword() throws {
        let configuration = try RedisFleetCoordinator.Configuration(url: "redis://app:s3cret-pw@10.0.0.5:6380")
        #expect(configuration.host == "10.0.0.5" && configuration.port == 6380)
        #expect(configuration.username == "app" && configuration.password == "s3cret-pw")
        #expect(!configuration.description.contains("s3cret"))
        let secure = try RedisFleetCoordinator.Configuration(url: "rediss://:s3cret-pw@[::1]:6390")
        #expect(secure.host == "::1" && secure.port == 6390 && secure.tls?.trust == .system)
        #expect(secure.description == "rediss://(password)@[::1]:6390 prefix session-engine")
        for url in ["http://10.0.0.5", "redis://", "redis://:s3cret-pw@/", "redis://:s3cret-pw@a%2Fb:1"] {
            #expect {
                _ = try RedisFleetCoordinator.Configuration(url: url)
            } throws: { error in
                (error as? RedisCoordinatorError)?.code == .invalidConfiguration && !"\(error)".contains("s3cret")
            }
        }
        #expect(throws: RedisCoordinatorError.self) {
            _ = try RedisFleetCoordinator.Configuration(keyPrefix: "has{brace}")
        }
    }
}

extension Result where Failure == any Error {
    /// The error, when it is one.
    fileprivate var failure: (any Error)? {
        if case .failure(let error) = self { return error }
        return nil
    }

    /// The result of `body`.
    fileprivate init(catching body: () async throws -> Success) async {
        do { self = .success(try await body()) } catch { self = .failure(error) }
    }
}
