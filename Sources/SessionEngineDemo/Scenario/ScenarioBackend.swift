import Foundation
import SessionEngine
import SessionEngineBackend
import SessionEngineTestKit

#if canImport(FoundationNetworking)
    import FoundationNetworking
#endif

/// The host's backend as the scenario drives it: it issues credentials and can be made to fail or rotate.
protocol ScenarioBackend: CredentialFetcher {
    /// A short description for the timeline.
    var label: String { get }
    /// Starts or ends an outage: while it lasts every fetch fails with a 503.
    func setOutage(_ on: Bool) async throws
    /// The signing secret's current generation (see ``DemoSecrets``): 0 until the first rotation. A backend that
    /// outlives one run of the scenario starts the next at the generation the last run left it at.
    func secretGeneration() async throws -> Int
    /// Rotates the signing secret to the next generation (see ``DemoSecrets``).
    ///
    /// - Returns: The new generation.
    func rotateSecret() async throws -> Int
}

/// A backend in the process: it signs with ``IdentitySigner`` over the host's own sessions, as the contract's
/// handler does, stamping `expiresAt` from the scenario's clock.
final class EmbeddedBackend: ScenarioBackend {
    private struct State {
        var signer: IdentitySigner
        var generation = 0
        var outage = false
        var issued = 0
    }

    let label = "embedded backend"
    private let projectID: String
    private let baseSecret: String
    private let clock: any SessionClock
    private let state: SanitizedMutex<State>

    init(projectID: String, secret: String, clock: any SessionClock) throws {
        self.projectID = projectID
        self.baseSecret = secret
        self.clock = clock
        state = SanitizedMutex(State(signer: try IdentitySigner(projectID: projectID, secret: secret, clock: clock)))
    }

    /// How many credentials the backend has issued.
    var issuedCount: Int { state.withLock { $0.issued } }

    func fetchCredential(for account: AccountID) async throws -> IdentityCredential {
        try state.withLock { state throws -> IdentityCredential in
            guard !state.outage else { throw SessionError.fetchFailed("the backend answered 503") }
            guard let session = DemoAccounts.session(for: account) else {
                throw SessionError.backendSessionEnded("the backend answered 401; the account's session has ended")
            }
            state.issued += 1
            return try state.signer.sign(email: session.rawEmail, properties: session.properties)
        }
    }

    func setOutage(_ on: Bool) async throws {
        state.withLock { $0.outage = on }
    }

    func secretGeneration() async throws -> Int {
        state.withLock { $0.generation }
    }

    func rotateSecret() async throws -> Int {
        let projectID = self.projectID
        let baseSecret = self.baseSecret
        let clock = self.clock
        return try state.withLock { state throws -> Int in
            state.generation += 1
            let secret = DemoSecrets.rotated(baseSecret, generation: state.generation)
            state.signer = try IdentitySigner(projectID: projectID, secret: secret, clock: clock)
            return state.generation
        }
    }
}

/// A backend over HTTP, reached with ``HTTPCredentialFetcher``: the loopback backend of the tests, or any backend
/// with the same sessions, admin endpoints and simulated-clock header.
///
/// The scenario's time is a manual clock's while the requests take real time: each fetch runs as work the clock's
/// executor counts (`RealTimeFetcher`), so the scenario never moves the clock while a request is on the wire.
final class RemoteBackend: ScenarioBackend {
    let label: String
    private let fetcher: RealTimeFetcher<HTTPCredentialFetcher>
    private let endpoint: URL

    init(endpoint target: BackendTarget, clock: ManualClock) {
        let endpoint = target.url
        self.endpoint = endpoint
        label = "backend at \(endpoint.host ?? "?"):\(endpoint.port.map(String.init) ?? "default port")"
        let http = HTTPCredentialFetcher(endpoint: endpoint, timeout: .seconds(5), trust: target.trust, clock: clock) {
            account, request in
            request.setValue("Bearer \(DemoAccounts.sessionToken(for: account))", forHTTPHeaderField: "Authorization")
            // The backend signs on the scenario's simulated clock, so accelerated time and expiry agree.
            request.setValue(String(Int64(clock.now.timeIntervalSince1970)), forHTTPHeaderField: "X-Demo-Clock")
        }
        fetcher = RealTimeFetcher(http, clock: clock)
    }

    func fetchCredential(for account: AccountID) async throws -> IdentityCredential {
        try await fetcher.fetchCredential(for: account)
    }

    func fetch(_ request: FetchRequest) async throws -> FetchedCredential {
        // The backend's clock offset and its Retry-After reach the engine.
        try await fetcher.fetch(request)
    }

    func setOutage(_ on: Bool) async throws {
        try await post("/admin/outage", query: "on=\(on ? 1 : 0)")
    }

    func secretGeneration() async throws -> Int {
        try Self.generation(in: await call("GET", "/admin/generation", query: nil))
    }

    func rotateSecret() async throws -> Int {
        try Self.generation(in: await call("POST", "/admin/rotate", query: nil))
    }

    private func post(_ path: String, query: String?) async throws {
        _ = try await call("POST", path, query: query)
    }

    /// Reads `{"generation": n}` from an admin endpoint's answer.
    private static func generation(in body: Data) throws -> Int {
        guard body.count <= 1024,
            let object = try? JSONSerialization.jsonObject(with: body) as? [String: Any],
            let generation = object["generation"] as? Int, generation >= 0
        else {
            throw SessionError.fetchFailed("the backend's admin endpoint did not answer with a secret generation")
        }
        return generation
    }

    /// Calls one of the backend's admin endpoints the way fetches go (the same transfer and trust); returns its body.
    private func call(_ method: String, _ path: String, query: String?) async throws -> Data {
        guard var components = URLComponents(url: endpoint, resolvingAgainstBaseURL: false) else {
            throw SessionError.fetchFailed("the backend URL is not valid")
        }
        components.path = path
        components.query = query
        guard let url = components.url else { throw SessionError.fetchFailed("the backend URL is not valid") }
        var request = URLRequest(url: url)
        request.httpMethod = method
        let (status, body) = try await fetcher.base.exchange(request)
        guard status == 200 else {
            throw SessionError.fetchFailed("the backend's \(path) endpoint did not answer 200")
        }
        return Data(body)
    }
}
