import Foundation
import SessionEngine
import SessionEngineBackend
import SessionEngineRedis

#if canImport(FoundationNetworking)
    import FoundationNetworking
#endif
#if canImport(Glibc)
    import Glibc
#elseif canImport(Musl)
    import Musl
#elseif canImport(Darwin)
    import Darwin
#endif

/// One replica of a daemon: a pool keeping every account identified in real time, the service's checks of its
/// credentials, and the commands of standard input.
final class Replica: Sendable {
    /// How often the service checks every account's credential.
    static let checkInterval: Duration = .milliseconds(250)

    private let settings: ReplicaSettings
    private let pool: SessionPool
    private let accounts: [AccountID]
    private let service: ReplicaService
    private let sent: SentRequests

    init(_ settings: ReplicaSettings) throws {
        self.settings = settings
        let sent = SentRequests()
        self.sent = sent
        let fetcher = SentRequests.Counting(
            sent: sent,
            base: HTTPCredentialFetcher(endpoint: settings.backend, proxy: .none) { account, request in
                request.setValue("Bearer session-\(account.rawValue)", forHTTPHeaderField: "Authorization")
            })
        let configuration = SessionPoolConfiguration(budget: settings.budget)
        if let redis = settings.redis {
            let coordinator = try RedisFleetCoordinator(configuration: redis)
            pool = SessionPool(
                fetcher: fetcher, configuration: configuration,
                coordination: FleetCoordination(
                    coordinator, callTimeout: redis.commandTimeout * 2, sharesCredentials: settings.sharesCredentials))
        } else {
            pool = SessionPool(fetcher: fetcher, configuration: configuration)
        }
        accounts = (0..<settings.accounts).map { AccountID(String(format: "account-%05d", $0)) }
        service = try ReplicaService(projectID: settings.projectID, secret: settings.secret, accounts: accounts.count)
    }

    /// Signs every account in, answers standard input's commands until it ends, then shuts the pool down.
    func run() async {
        // A reader that went away makes an answer fail, not the process end: the end of input ends it.
        signal(SIGPIPE, SIG_IGN)
        let pool = self.pool
        let signIns = accounts.map { account in Task { _ = try? await pool.signIn(account) } }
        let checks = Task {
            while !Task.isCancelled {
                await check()
                try? await Task.sleep(for: Self.checkInterval)
            }
        }
        for await command in Self.commands() {
            switch command {
            case .text("status"): answer(status())
            case .text("rotate"): answer(["generation": service.rotate()])
            case .text: answer(["error": "unknown command (not shown); the commands are status and rotate"])
            case .tooLong: answer(["error": InputLines.tooLongReason])
            }
        }
        checks.cancel()
        await checks.value
        await pool.shutdown()
        for task in signIns { await task.value }
    }

    /// Checks every account's credential as the service would, and reports each one signed with an old secret.
    private func check() async {
        for (index, account) in accounts.enumerated() {
            let credential = try? pool.identityHeaders(for: account).credential()
            if let credential, service.takeRejection(credential, of: index) {
                await pool.credentialRejected(credential, for: account)
            }
        }
    }

    private func status() -> [String: Any] {
        var installed = 0
        var renewals = 0
        var fetches = 0
        for account in accounts {
            guard let metrics = pool.metrics(for: account) else { continue }
            installed += metrics.credentialsInstalled
            renewals += metrics.renewals
            fetches += metrics.fetchesStarted
        }
        var fleet: Any = NSNull()
        if let metrics = pool.metrics.fleet {
            fleet = [
                "started": metrics.started, "decidedLocally": metrics.decidedLocally,
                "sharesInstalled": metrics.sharesInstalled, "sharesRefused": metrics.sharesRefused,
                "peerWaits": metrics.peerWaits, "peerWaitsGivenUp": metrics.peerWaitsGivenUp, "holds": metrics.holds,
                "callsFailed": metrics.callsFailed,
            ]
        }
        let now = Date()
        let identified = accounts.indices.count { index in
            guard let credential = try? pool.identityHeaders(for: accounts[index]).credential() else { return false }
            return service.accepts(credential, of: index, now: now)
        }
        return [
            "identified": identified, "installed": installed, "renewals": renewals, "fetches": fetches,
            "generation": service.generation,
            "fleet": fleet, "sentPerSecond": sent.takeCompleteSeconds(),
        ]
    }

    private func answer(_ object: [String: Any]) {
        let data = (try? JSONSerialization.data(withJSONObject: object, options: [.sortedKeys])) ?? Data("{}".utf8)
        try? FileHandle.standardOutput.write(contentsOf: data + Data("\n".utf8))
    }

    /// Standard input's lines, read on a thread of their own: a read blocks, and no thread of the concurrency pool
    /// may wait for a person or a pipe.
    private static func commands() -> AsyncStream<InputLines.Line> {
        let (stream, continuation) = AsyncStream.makeStream(of: InputLines.Line.self)
        let thread = Thread {
            var input = InputLines()
            while let line = try? input.next() { continuation.yield(line) }
            continuation.finish()
        }
        thread.start()
        return stream
    }
}

/// The replica's requests to the backend per Unix second, counted as the fetcher sends them: beside the backend's
/// own count, which is taken when its handler runs, they tell the replicas' timing from the backend's.
final class SentRequests: Sendable {
    /// A fetcher that counts each fetch as it starts, then sends it.
    struct Counting: CredentialFetcher {
        let sent: SentRequests
        let base: HTTPCredentialFetcher

        func fetchCredential(for account: AccountID) async throws -> IdentityCredential {
            sent.count()
            return try await base.fetchCredential(for: account)
        }

        func fetch(_ request: FetchRequest) async throws -> FetchedCredential {
            sent.count()
            return try await base.fetch(request)
        }
    }

    /// The seconds kept between two statuses: a replica nobody asks drops the oldest past an hour.
    static let kept = 3_600

    private let perSecond = SanitizedMutex<[Int: Int]>([:])

    /// Counts a request sent now. The time is read under the lock, so no count lands in a second already taken.
    func count() {
        perSecond.withLock { counts in
            counts[Self.second(Date()), default: 0] += 1
            if counts.count > Self.kept, let oldest = counts.keys.min() { counts[oldest] = nil }
        }
    }

    /// The counts of the seconds before the current one, as `[second, requests]` pairs, which are counted no more.
    func takeCompleteSeconds() -> [[Int]] {
        perSecond.withLock { counts in
            let current = Self.second(Date())
            let done = counts.keys.filter { $0 < current }.sorted()
            defer { done.forEach { counts[$0] = nil } }
            return done.map { [$0, counts[$0] ?? 0] }
        }
    }

    private static func second(_ date: Date) -> Int { Int(date.timeIntervalSince1970.rounded(.down)) }
}

/// The service's side of a replica: which secret it checks with, and what it decided for each account's credential.
///
/// A verdict is kept per account for the credential last checked, so each credential is verified once.
final class ReplicaService: Sendable {
    enum Verdict: Equatable {
        case accepted
        /// Signed with another secret: the service rejects it.
        case rejected
        /// Expired, or refused for a reason other than its signature.
        case refused
    }

    private struct Checked {
        var signature: String
        var verdict: Verdict
        /// Whether the replica has reported the credential rejected.
        var reported = false
    }

    private struct State {
        var verifier: IdentityVerifier
        var generation = 0
        var checked: [Checked?]
    }

    private let secret: String
    private let state: SanitizedMutex<State>

    init(projectID: String, secret: String, accounts: Int) throws {
        self.secret = secret
        state = SanitizedMutex(
            State(
                verifier: try IdentityVerifier(projectID: projectID, secret: secret),
                checked: Array(repeating: nil, count: accounts)))
    }

    var generation: Int { state.withLock { $0.generation } }

    /// Moves to the next secret, as the backend's `rotate` does.
    ///
    /// - Returns: The new generation.
    func rotate() -> Int {
        state.withLock { state in
            state.generation += 1
            // The secret is the backend's, non-empty, so the verifier accepts it.
            try? state.verifier.rotateSecret(to: "\(secret):rotated:\(state.generation)")
            state.checked = Array(repeating: nil, count: state.checked.count)
            return state.generation
        }
    }

    /// Whether account `index`'s credential is one the service rejects that the replica has not reported yet; it
    /// counts as reported from now on.
    func takeRejection(_ credential: IdentityCredential, of index: Int) -> Bool {
        state.withLock { state in
            let verdict = Self.verdict(credential, of: index, in: &state)
            guard verdict == .rejected, state.checked[index]?.reported == false else { return false }
            state.checked[index]?.reported = true
            return true
        }
    }

    /// Whether the service accepts account `index`'s credential at `now`.
    func accepts(_ credential: IdentityCredential, of index: Int, now: Date) -> Bool {
        let verdict = state.withLock { Self.verdict(credential, of: index, in: &$0) }
        return verdict == .accepted && TimeInterval(credential.expiresAt) > now.timeIntervalSince1970
    }

    private static func verdict(_ credential: IdentityCredential, of index: Int, in state: inout State) -> Verdict {
        if let checked = state.checked[index], checked.signature == credential.signature { return checked.verdict }
        let verdict: Verdict
        switch state.verifier.verify(credential) {
        case .valid: verdict = .accepted
        case .invalid(let failure): verdict = failure.check == .signatureMismatch ? .rejected : .refused
        }
        state.checked[index] = Checked(signature: credential.signature, verdict: verdict)
        return verdict
    }
}
