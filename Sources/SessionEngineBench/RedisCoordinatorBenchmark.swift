import Foundation
import SessionEngine
import SessionEngineBackend
import SessionEngineRedis
import SessionEngineTestKit

/// What the fleet's coordinator on Redis costs a fetch, over loopback: one decision and one report, each a script on
/// the server, against a `PING` on the same connection (the floor of any command) and against the in-process
/// coordinator's same two calls. Reads never touch the coordinator: a coordinated pool's reads are counted in calls.
///
/// Starts its own `redis-server` on a free loopback port, with nothing saved to disk; runs only when named
/// (`--filter fleet-redis`) and reports why it did not run where the server or hiredis 0.14 is missing.
struct RedisCoordinatorBenchmark: Benchmark {
    let name = "fleet-redis"
    let summary = "the coordinator on Redis over loopback: a fetch's decision and report, p50 and p99; reads"
    var runsByDefault: Bool { false }

    func run(_ options: Options) async throws -> [Figure] {
        let calls = options.quick ? 300 : 3000
        guard let server = Self.startServer() else {
            progress("  fleet-redis: redis-server could not start; skipped")
            return [
                Figure(
                    name, Measurement("coordinator on Redis", .count, [0]),
                    goal: Goal(text: "redis-server runs", met: false), note: "redis-server is missing")
            ]
        }
        defer {
            // SIGKILL: the server keeps nothing, and a child of a thread that blocks SIGTERM would not see that.
            kill(server.process.processIdentifier, SIGKILL)
            server.process.waitUntilExit()
        }
        let limits = FleetLimits(startsPerSecond: 1e6, burst: 1_000_000, maximumInFlight: 1_000_000)
        let coordinator = try RedisFleetCoordinator(
            configuration: .init(
                port: server.port, keyPrefix: "bench", limits: limits, connectTimeout: .seconds(1),
                commandTimeout: .seconds(1)))
        let inProcess = InProcessFleetCoordinator(limits: limits, clock: SystemClock())
        let fetch = FleetFetch(account: "bench", isNeeded: true, heldExpiry: nil)
        let issued = FleetOutcome.issued(expiresAt: Date(timeIntervalSinceNow: 600))

        var fetchP50: [Double] = []
        var fetchP99: [Double] = []
        var pingP50: [Double] = []
        var pingP99: [Double] = []
        var inProcessP50: [Double] = []
        for round in 0..<(options.warmupRounds + options.rounds) {
            progress("  fleet-redis round \(round + 1)")
            var fetches: [Double] = []
            var pings: [Double] = []
            var local: [Double] = []
            for _ in 0..<calls {
                let started = ContinuousClock.now
                guard case .start(let lease) = try await coordinator.decide(fetch) else { continue }
                try await coordinator.fetchEnded(fetch, lease: lease, outcome: issued)
                fetches.append((ContinuousClock.now - started).seconds)
                let pinged = ContinuousClock.now
                try await coordinator.ping()
                pings.append((ContinuousClock.now - pinged).seconds)
                let inProcessStarted = ContinuousClock.now
                if case .start(let lease) = try await inProcess.decide(fetch) {
                    try await inProcess.fetchEnded(fetch, lease: lease, outcome: issued)
                }
                local.append((ContinuousClock.now - inProcessStarted).seconds)
            }
            guard round >= options.warmupRounds else { continue }
            fetches.sort()
            pings.sort()
            local.sort()
            fetchP50.append(percentile(fetches, 0.5))
            fetchP99.append(percentile(fetches, 0.99))
            pingP50.append(percentile(pings, 0.5))
            pingP99.append(percentile(pings, 0.99))
            inProcessP50.append(percentile(local, 0.5))
        }
        let reads = try await Self.coordinatorCallsDuringReads(options.quick ? 10_000 : 100_000)
        return [
            Figure(
                name, Measurement("a fetch's decision and report, p50", .seconds, fetchP50),
                against: Measurement("two PINGs on the same connection, p50", .seconds, pingP50.map { $0 * 2 }),
                note: String(
                    format: "%d fetches a round; in-process coordinator: %.2f µs", calls,
                    Summary(inProcessP50).median * 1e6), paired: true),
            Figure(
                name, Measurement("a fetch's decision and report, p99", .seconds, fetchP99),
                against: Measurement("two PINGs on the same connection, p99", .seconds, pingP99.map { $0 * 2 }),
                paired: true),
            Figure(
                name,
                Measurement(
                    "coordinator calls during \(reads.reads) reads of a coordinated pool", .count,
                    [Double(reads.calls)]),
                goal: Goal(text: "0: reads never touch the coordinator", met: reads.calls == 0)),
        ]
    }

    /// Signs one account in to a pool over a counting coordinator, then reads its headers `reads` times.
    private static func coordinatorCallsDuringReads(_ reads: Int) async throws -> (reads: Int, calls: Int) {
        let counter = CountingCoordinator()
        let signer = try IdentitySigner(projectID: Fixtures.projectID, secret: "bench-secret", lifetime: .seconds(900))
        let fetcher = ScriptedCredentialFetcher { account in try signer.sign(email: "\(account.rawValue)@example.com") }
        let pool = SessionPool(fetcher: fetcher, coordination: FleetCoordination(counter))
        try await pool.signIn("reader")
        // The sign-in's fetch made two calls, a decision and its report, which is sent without waiting: let it land.
        let settled = ContinuousClock.now + .seconds(5)
        while counter.calls.value < 2, ContinuousClock.now < settled { try await Task.sleep(for: .milliseconds(1)) }
        let before = counter.calls.value
        for _ in 0..<reads { _ = try pool.identityHeaders(for: "reader") }
        let calls = counter.calls.value - before
        await pool.shutdown()
        return (reads, calls)
    }

    /// A coordinator that lets every fetch start and counts its calls.
    private final class CountingCoordinator: FleetCoordinator {
        let calls = Locked(0)

        func decide(_ fetch: FleetFetch) async throws -> FleetDecision {
            calls.withLock { $0 += 1 }
            return .start(lease: FleetLease("lease"))
        }

        func fetchEnded(_ fetch: FleetFetch, lease: FleetLease?, outcome: FleetOutcome) async throws {
            calls.withLock { $0 += 1 }
        }
    }

    /// Starts `redis-server` with nothing saved on `port` (a free loopback port when `nil`) and waits until it answers,
    /// or returns `nil`.
    static func startServer(port fixed: Int? = nil) -> (process: Process, port: Int)? {
        for _ in 0..<5 {
            let port = fixed ?? Int.random(in: 20_000..<60_000)
            let process = Process()
            process.executableURL = URL(fileURLWithPath: "/usr/bin/env")
            process.arguments = [
                "redis-server", "--port", String(port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no",
                "--loglevel", "warning",
            ]
            process.standardOutput = FileHandle.nullDevice
            process.standardError = FileHandle.nullDevice
            guard (try? process.run()) != nil else { return nil }
            for _ in 0..<100 {
                if !process.isRunning { break }
                if Self.accepts(port) { return (process, port) }
                Thread.sleep(forTimeInterval: 0.05)
            }
            if process.isRunning {
                kill(process.processIdentifier, SIGKILL)
                process.waitUntilExit()
            }
        }
        return nil
    }

    /// Whether a connection to the loopback port is accepted.
    private static func accepts(_ port: Int) -> Bool {
        let socket = Glibc.socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
        guard socket >= 0 else { return false }
        defer { close(socket) }
        var address = sockaddr_in()
        address.sin_family = sa_family_t(AF_INET)
        address.sin_port = in_port_t(UInt16(port).bigEndian)
        address.sin_addr.s_addr = inet_addr("127.0.0.1")
        return withUnsafePointer(to: &address) { pointer in
            pointer.withMemoryRebound(to: sockaddr.self, capacity: 1) {
                connect(socket, $0, socklen_t(MemoryLayout<sockaddr_in>.size)) == 0
            }
        }
    }
}
