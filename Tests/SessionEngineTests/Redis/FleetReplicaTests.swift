import Foundation
import Testing

/// Why the replicas cannot run here, or `nil` when they can.
private var replicasUnavailableReason: String? {
    RedisServer.unavailableReason ?? (PrivateAuthority.openssl == nil ? "openssl is not on PATH" : nil)
}

/// Replicas of a daemon as processes: four `SessionEngineDemo replica` processes keep the same accounts identified
/// against one loopback backend (`Scripts/fault-soak-backend.py`, which counts its requests) and one real
/// `redis-server` that speaks TLS only, sharing credentials. Skipped with the reason where `redis-server`, hiredis
/// 0.14, openssl or python3 is missing; `SessionEngineBench --filter fleet-replicas` measures the same fleet at 2,000
/// accounts over plain TCP.
@Suite(.serialized, .enabled(if: replicasUnavailableReason == nil, Comment(rawValue: replicasUnavailableReason ?? "")))
struct FleetReplicaTests {
    static let replicas = 4
    static let accounts = 100
    static let startsPerSecond = 50
    /// The fleet's bucket; each replica's own holds one more start, two, so that it takes its starts in time for the
    /// fleet's reserved ones (`FleetReplicasBenchmark.replicaBurst`).
    static let fleetBurst = 1
    static let secret = "fleet-replica-test-secret-0123456789"

    /// Through a secret rotation the fleet fetches each account about once, never faster than its one budget, and the
    /// other replicas install the credentials it fetched; every identity is back on every replica. The replicas
    /// reach Redis over TLS, proving the server by a private authority and themselves by a client certificate.
    @Test func aRotationCostsTheFleetOneFetchPerAccountWithinItsOneBudget() async throws {
        let authority = try await PrivateAuthority.make()
        let server = try await RedisServer.start(authority: authority)
        defer { Task { await server.stop() } }
        let backend = try await LineChild.backend()
        defer { backend.child.closeInput() }
        var environment = ProcessInfo.processInfo.environment
        environment["APPNORTH_PROJECT_ID"] = "proj_fleet"
        environment["APPNORTH_IDENTITY_SECRET"] = Self.secret
        // A command's timeout far above a loopback round trip on a busy machine: the budget under test is Redis's,
        // not each replica's own after a call failed.
        let arguments = [
            "replica", "--backend", "http://127.0.0.1:\(backend.port)/identity", "--accounts", String(Self.accounts),
            "--redis", "rediss://127.0.0.1:\(server.port)", "--redis-ca", authority.certificate, "--redis-certificate",
            authority.clientCertificate, "--redis-key", authority.clientKey, "--key-prefix", "replicas",
            "--share-credentials",
            "--redis-timeout", "2000", "--starts-per-second", String(Self.startsPerSecond), "--burst",
            String(Self.fleetBurst + 1), "--fleet-burst", String(Self.fleetBurst),
        ]
        var replicas: [LineChild] = []
        for index in 0..<Self.replicas {
            let child = try ChildProcess.launch(
                ToolSecurityTests.demo, arguments: arguments, environment: environment, name: "replica \(index)",
                keepsInputOpen: true)
            replicas.append(LineChild(child))
        }
        let total = Self.replicas * Self.accounts
        #expect(try await identified(replicas, total, within: .seconds(120)), "every replica signed every account in")

        let before = try await backend.stats().requests
        _ = try await backend.ask("rotate")
        let rotatedAt = Int(Date().timeIntervalSince1970)
        for replica in replicas { _ = try await replica.ask("rotate") }
        #expect(try await identified(replicas, total, within: .seconds(120)), "every identity is back after rotation")
        try await Task.sleep(for: .seconds(1.1))
        let stats = try await backend.stats()
        let fetches = stats.requests - before
        let busiest = stats.perSecond.filter { $0.second >= rotatedAt }.map(\.count).max() ?? 0

        let statuses = try await replicas.asyncMap { try await $0.status() }
        for (index, status) in statuses.enumerated() {
            #expect(status.fleet?.callsFailed == 0, "replica \(index) decided locally: \(status)")
        }
        // Every identity took a new credential, by a fetch or a share: the replica that rejected first may well have
        // fetched every account itself, and the others taken shares.
        let shares = statuses.reduce(0) { $0 + ($1.fleet?.sharesInstalled ?? 0) }
        #expect(shares + fetches >= total, "\(shares) shares and \(fetches) fetches for \(total) identities")
        // Each replica on its own would fetch every account: four times as many.
        #expect(fetches <= Self.accounts * 3 / 2, "\(fetches) fetches for \(Self.accounts) accounts")
        // The backend counts requests by the second they arrive in, after a trip through a replica's process, TLS
        // and HTTP: a start the fleet's bucket granted late in one second may land in the next, so a second can see
        // the bucket's rate and burst plus the starts in transit. On a loaded machine (both cores busy) that trip took
        // up to a few tens of milliseconds (52 against 51 in one run of ten); a fifth of a second's starts are allowed
        // for it. Four replicas each on a budget of their own would reach four times the rate.
        let inTransit = Self.startsPerSecond / 5
        #expect(
            busiest <= Self.startsPerSecond + Self.fleetBurst + inTransit,
            "the busiest second after the rotation: \(busiest), budget \(Self.startsPerSecond)/s")

        for replica in replicas { replica.child.closeInput() }
        for (index, replica) in replicas.enumerated() {
            let outcome = try await replica.child.finish(within: .seconds(60))
            #expect(outcome.status == 0, "replica \(index): \(outcome.errorText)")
            #expect(!outcome.outputText.contains(Self.secret) && !outcome.errorText.contains(Self.secret))
        }
    }

    /// Whether every replica has every account identified within `limit`, asked twice a second.
    private func identified(_ replicas: [LineChild], _ total: Int, within limit: Duration) async throws -> Bool {
        let started = ContinuousClock.now
        while ContinuousClock.now - started < limit {
            var sum = 0
            for replica in replicas { sum += try await replica.status().identified }
            if sum == total { return true }
            try await Task.sleep(for: .milliseconds(500))
        }
        return false
    }
}

/// A child answering one line per command line: a replica, or the loopback backend.
private final class LineChild {
    struct Status: Decodable {
        struct Fleet: Decodable {
            var started: Int
            var sharesInstalled: Int
            var callsFailed: Int
        }

        var identified: Int
        var installed: Int
        var fleet: Fleet?
    }

    struct Stats: Decodable {
        var requests: Int
        var perSecond: [[Int]]
    }

    let child: ChildProcess
    /// Lines read so far, the first ones excluded (`skipped`).
    private var answered = 0
    private let skipped: Int
    private(set) var port = 0

    init(_ child: ChildProcess, skipped: Int = 0) {
        self.child = child
        self.skipped = skipped
    }

    /// Starts `Scripts/fault-soak-backend.py` with two-minute credentials and reads its port.
    static func backend() async throws -> LineChild {
        guard let python = PythonServer.python else { throw NetworkTestFailure("python3 is not on PATH") }
        let script = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent()
            .deletingLastPathComponent().deletingLastPathComponent().appendingPathComponent(
                "Scripts/fault-soak-backend.py")
        var environment = ProcessInfo.processInfo.environment
        environment["APPNORTH_PROJECT_ID"] = "proj_fleet"
        environment["APPNORTH_IDENTITY_SECRET"] = FleetReplicaTests.secret
        let child = try ChildProcess.launch(
            python, arguments: [script.path, "--lifetime", "120"], environment: environment,
            name: "fault-soak-backend.py", keepsInputOpen: true)
        let line = try await child.firstLine(within: .seconds(30))
        guard line.hasPrefix("port "), let port = Int(line.dropFirst(5)) else {
            child.kill()
            throw NetworkTestFailure("the backend did not print its port")
        }
        let backend = LineChild(child, skipped: 1)
        backend.port = port
        return backend
    }

    /// Sends `command` and returns its one-line answer.
    func ask(_ command: String) async throws -> String {
        answered += 1
        child.sendInput(Data((command + "\n").utf8))
        let lines = try await child.printedLines(skipped + answered, within: .seconds(30))
        return lines.last ?? ""
    }

    func status() async throws -> Status {
        try JSONDecoder().decode(Status.self, from: Data(try await ask("status").utf8))
    }

    /// The backend's requests so far, and its counts per Unix second since the last call.
    func stats() async throws -> (requests: Int, perSecond: [(second: Int, count: Int)]) {
        let stats = try JSONDecoder().decode(Stats.self, from: Data(try await ask("stats").utf8))
        return (stats.requests, stats.perSecond.compactMap { $0.count == 2 ? ($0[0], $0[1]) : nil })
    }
}

extension Array {
    fileprivate func asyncMap<T>(_ transform: (Element) async throws -> T) async rethrows -> [T] {
        var values: [T] = []
        for element in self { values.append(try await transform(element)) }
        return values
    }
}
