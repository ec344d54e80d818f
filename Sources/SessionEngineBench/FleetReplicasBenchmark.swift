import Foundation
import SessionEngine

#if canImport(Glibc)
    import Glibc
#endif

/// Replicas of a daemon as processes, each keeping the same accounts identified, against one loopback backend that
/// counts its requests: first each replica on its own, then over one `redis-server` with shared credentials.
///
/// Each replica is `SessionEngineDemo replica` (its pool, the HTTP fetcher, the coordinator on Redis, and the service's
/// checks of its credentials); the backend is `Scripts/fault-soak-backend.py`, signing real credentials. Every phase
/// runs in real time: the sign-in, a steady state over more than one renewal of every account, a secret rotation,
/// and, coordinated, Redis killed for a minute with a second rotation inside it, then started again empty.
///
/// It runs only when named (`--filter fleet-replicas`), after `swift build -c release --product SessionEngineDemo`,
/// and reports why it did not run where the demo, `redis-server` or python3 is missing.
struct FleetReplicasBenchmark: Benchmark {
    let name = "fleet-replicas"
    let summary = "4 replica processes × 2,000 accounts over Redis: a rotation, the steady state, Redis down a minute"
    var runsByDefault: Bool { false }

    static let replicas = 4
    static let startsPerSecond = 50
    /// The fleet's bucket.
    static let fleetBurst = 1
    /// Each replica's own bucket: two, so that a replica handed several of the fleet's reserved starts in a row takes
    /// its own in time for them (with a bucket of one, its sleeper's late wake-ups lose it time the fleet's bucket
    /// does not lose, its fetches leave after their reserved time, and they meet the other replicas' in one second:
    /// 52 and 54 in the rotation's busiest second against the fleet's 51).
    static let replicaBurst = 2
    /// The credentials' lifetime: renewals at about two thirds of it, 25 a second for 2,000 accounts.
    static let lifetime = 120
    /// The steady state: from one lifetime after the sign-in, so that every account has renewed since, for two mean
    /// renewal intervals (two thirds of a lifetime each), so that the window's phase against the renewals matters
    /// little.
    static let settle: Duration = .seconds(120)
    static let steadyWindow: Duration = .seconds(160)
    static let redisDown: Duration = .seconds(60)

    /// What one run of the fleet saw.
    struct Run {
        var signIn = 0.0
        /// The backend's requests over the steady window, and the replicas' credentials installed meanwhile.
        var steadyFetches = 0
        var steadyInstalls = 0
        var rotationPeak = 0
        /// The busiest second of the rotation by the replicas' own count of the requests they sent.
        var rotationSentPeak = 0
        var rotationRecovery = 0.0
        var rotationFetches = 0
        var outagePeak = 0
        /// From the rotation inside Redis's outage until every identity was back.
        var outageRecovery = 0.0
        var outageUnidentified = 0
        var decisionsAfterRedisReturned = 0
    }

    func run(_ options: Options) async throws -> [Figure] {
        let accounts = options.quick ? 400 : 2000
        let steadyWindow = options.quick ? Duration.seconds(90) : Self.steadyWindow
        let demo = URL(fileURLWithPath: "/proc/self/exe").resolvingSymlinksInPath().deletingLastPathComponent()
            .appendingPathComponent("SessionEngineDemo")
        let script = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent()
            .deletingLastPathComponent().appendingPathComponent("Scripts/fault-soak-backend.py").path
        func skipped(_ reason: String) -> [Figure] {
            progress("  fleet-replicas: \(reason); skipped")
            return [
                Figure(
                    name, Measurement("fleet of replica processes", .count, [0]),
                    goal: Goal(text: "the fleet runs", met: false), note: reason)
            ]
        }
        guard FileManager.default.isExecutableFile(atPath: demo.path) else {
            return skipped("build the demo first: swift build -c release --product SessionEngineDemo")
        }
        let secret = "fleet-" + (0..<4).map { _ in String(UInt64.random(in: .min ... .max), radix: 16) }.joined()
        let environment = ["APPNORTH_PROJECT_ID": Fixtures.projectID, "APPNORTH_IDENTITY_SECRET": secret]
        let logs = ProcessLogs()
        progress("  fleet-replicas: the processes' standard error in \(logs.directory.path)")
        guard let probe = CountingBackend(script: script, environment: environment, standardError: nil) else {
            return skipped("python3 could not start the loopback backend")
        }
        probe.finish()
        guard let started = RedisCoordinatorBenchmark.startServer() else {
            return skipped("redis-server could not start")
        }
        let redis = RedisProcess(started)
        defer { redis.kill() }
        let fleet = ReplicaFleet(
            demo: demo.path, script: script, accounts: accounts, environment: environment, logs: logs)

        progress("  fleet-replicas: \(Self.replicas) replicas × \(accounts) accounts, each on its own")
        let alone = try await day(fleet, redis: nil, steadyWindow: steadyWindow)
        progress("  fleet-replicas: the same over Redis, sharing credentials")
        let coordinated = try await day(fleet, redis: redis, steadyWindow: steadyWindow)

        let rate = Double(Self.startsPerSecond)
        let fleetSecond = Self.startsPerSecond + Self.fleetBurst
        let replicaSecond = Self.startsPerSecond + Self.replicaBurst
        let ideal = Double(accounts) / rate
        // One replica alone renews every account once per renewal: a quarter of the fleet's fetches alone.
        let perRenewal =
            Double(coordinated.steadyFetches) / (Double(alone.steadyFetches) / Double(Self.replicas))
        return [
            Figure(
                name,
                Measurement(
                    "a rotation, the backend's busiest second / the fleet's starts per second", .ratio,
                    [Double(coordinated.rotationPeak) / rate]),
                against: Measurement("each replica on its own", .ratio, [Double(alone.rotationPeak) / rate]),
                goal: Goal(
                    text: "≤ 1.0× (\(Self.startsPerSecond)/s, at most \(fleetSecond) in a second with its burst)",
                    met: coordinated.rotationPeak <= fleetSecond),
                note:
                    "\(coordinated.rotationFetches) fetches for \(accounts) accounts; alone \(alone.rotationFetches); "
                    + "by the replicas' count as sent \(coordinated.rotationSentPeak) (alone \(alone.rotationSentPeak))"
            ),
            Figure(
                name,
                Measurement(
                    "a rotation, every account identified again on every replica / (accounts / R)", .ratio,
                    [coordinated.rotationRecovery / ideal]),
                against: Measurement("each replica on its own", .ratio, [alone.rotationRecovery / ideal]),
                goal: Goal(text: "≤ 1.1", met: coordinated.rotationRecovery / ideal <= 1.1),
                note: String(
                    format: "%.1f s, alone %.1f s, accounts / R = %.0f s", coordinated.rotationRecovery,
                    alone.rotationRecovery, ideal)),
            Figure(
                name,
                Measurement(
                    "steady state, fetches per renewal per account (the fleet's fetches / one replica's alone)",
                    .ratio, [perRenewal]),
                against: Measurement(
                    "each replica on its own (fetches × replicas / credentials installed)", .ratio,
                    [Double(alone.steadyFetches * Self.replicas) / Double(max(1, alone.steadyInstalls))]),
                goal: Goal(text: "≤ 1.1 (alone: \(Self.replicas))", met: perRenewal <= 1.1),
                note:
                    "\(Int(steadyWindow.seconds)) s of \(Self.lifetime) s credentials from \(Int(Self.settle.seconds)) s "
                    + "after the sign-in: \(coordinated.steadyFetches) "
                    + "fetches coordinated, \(alone.steadyFetches) alone"),
            Figure(
                name,
                Measurement(
                    "Redis down a minute with a rotation in it: the backend's busiest second", .count,
                    [Double(coordinated.outagePeak)]),
                goal: Goal(
                    text: "≤ \(Self.replicas) × \(replicaSecond), each replica's own budget",
                    met: coordinated.outagePeak <= Self.replicas * replicaSecond),
                note: String(
                    format: "every identity back %.1f s after the rotation, Redis still down; %d decisions on Redis "
                        + "after it returned", coordinated.outageRecovery, coordinated.decisionsAfterRedisReturned)),
            Figure(
                name,
                Measurement(
                    "Redis down a minute: identities not identified at its end", .count,
                    [Double(coordinated.outageUnidentified)]),
                goal: Goal(text: "0 lost", met: coordinated.outageUnidentified == 0)),
        ]
    }

    /// One run of the fleet with a backend of its own: sign-in, steady state, rotation and, over Redis, Redis down
    /// for a minute.
    private func day(_ fleet: ReplicaFleet, redis: RedisProcess?, steadyWindow: Duration) async throws -> Run {
        var run = Run()
        guard
            let backend = CountingBackend(
                script: fleet.script, environment: fleet.environment,
                standardError: fleet.logs.file("backend-\(redis == nil ? "alone" : "coordinated")"))
        else {
            throw BenchmarkFailure("the loopback backend did not start")
        }
        defer { backend.finish() }
        let prefix = "bench-\(UInt32.random(in: 0 ... .max))"
        let replicas = try fleet.start(
            backendPort: backend.port, redisPort: redis?.port, keyPrefix: prefix,
            phase: redis == nil ? "alone" : "coordinated")
        defer { replicas.finish() }
        let total = fleet.accounts * Self.replicas

        run.signIn = try await replicas.waitUntilIdentified(total, within: .seconds(900), backend: backend)
        progress(String(format: "    signed in: %.1f s", run.signIn))

        try await Task.sleep(for: steadyWindow == Self.steadyWindow ? Self.settle : .zero)
        backend.drain()
        let requestsBefore = backend.requests
        let installedBefore = replicas.statuses().reduce(0) { $0 + $1.installed }
        try await Task.sleep(for: steadyWindow)
        backend.drain()
        run.steadyInstalls = replicas.statuses().reduce(0) { $0 + $1.installed } - installedBefore
        run.steadyFetches = backend.requests - requestsBefore
        progress(
            "    steady state: \(run.steadyFetches) fetches, \(run.steadyInstalls) credentials installed; "
                + replicas.fleetCounts())

        backend.drain()
        let beforeRotation = backend.requests
        var wall = Date().timeIntervalSince1970
        backend.rotate()
        replicas.rotate()
        run.rotationRecovery = try await replicas.waitUntilIdentified(total, within: .seconds(900), backend: backend)
        try await Task.sleep(for: .seconds(1.1))
        backend.drain()
        run.rotationPeak = backend.perSecond.peak(since: wall)
        run.rotationFetches = backend.requests - beforeRotation
        _ = replicas.statuses()
        run.rotationSentPeak = replicas.sentPerSecond.peak(since: wall)
        progress(
            String(
                format: "    rotation: %.1f s, busiest second %d (%d as sent), %d fetches; %@", run.rotationRecovery,
                run.rotationPeak, run.rotationSentPeak, run.rotationFetches, replicas.fleetCounts()))

        guard let redis else { return run }
        wall = Date().timeIntervalSince1970
        let started = ContinuousClock.now
        redis.kill()
        try await Task.sleep(for: .seconds(5))
        backend.rotate()
        replicas.rotate()
        let rotated = ContinuousClock.now
        var back: Duration?
        while ContinuousClock.now - started < Self.redisDown {
            try await Task.sleep(for: .milliseconds(500))
            backend.drain()
            if back == nil, replicas.statuses().reduce(0, { $0 + $1.identified }) == total {
                back = ContinuousClock.now - rotated
            }
        }
        try redis.restart()
        let decisionsBefore = replicas.statuses().reduce(0) { $0 + ($1.fleet?.started ?? 0) }
        // Identities not back when Redis returns are lost to the outage; then the wait goes on for the figure.
        run.outageUnidentified = total - replicas.statuses().reduce(0) { $0 + $1.identified }
        _ = try await replicas.waitUntilIdentified(total, within: .seconds(900), backend: backend)
        run.outageRecovery = (back ?? (ContinuousClock.now - rotated)).seconds
        // Renewals go through Redis again once a call tries it (after the replica's retry interval).
        try await Task.sleep(for: .seconds(10))
        backend.drain()
        run.outagePeak = backend.perSecond.peak(since: wall)
        run.decisionsAfterRedisReturned =
            replicas.statuses().reduce(0) { $0 + ($1.fleet?.started ?? 0) } - decisionsBefore
        progress(
            String(
                format:
                    "    Redis down: busiest second %d, identified again %.1f s after the rotation, %d decisions after",
                run.outagePeak, run.outageRecovery, run.decisionsAfterRedisReturned))
        return run
    }
}

/// The fleet's `redis-server`: killed as a crash would, and started again empty on the same port.
private final class RedisProcess {
    private var process: Process
    let port: Int

    init(_ started: (process: Process, port: Int)) {
        process = started.process
        port = started.port
    }

    /// Kills the server with `SIGKILL` (the server keeps nothing) and waits until it has exited.
    func kill() {
        guard process.isRunning else { return }
        Glibc.kill(process.processIdentifier, SIGKILL)
        process.waitUntilExit()
    }

    func restart() throws {
        guard let started = RedisCoordinatorBenchmark.startServer(port: port) else {
            throw BenchmarkFailure("redis-server did not start again on port \(port)")
        }
        process = started.process
    }
}

/// The loopback backend and the requests it counted, per Unix second.
private final class CountingBackend {
    private let process: PeerProcess
    let port: Int
    private(set) var requests = 0
    private(set) var perSecond = PerSecondCounts()

    /// Starts `Scripts/fault-soak-backend.py` and reads its port, or returns `nil`.
    init?(script: String, environment: [String: String], standardError: FileHandle?) {
        guard
            let process = PeerProcess(
                ["python3", script, "--lifetime", String(FleetReplicasBenchmark.lifetime)], environment: environment,
                standardError: standardError)
        else { return nil }
        guard let line = process.readLine(), line.hasPrefix("port "), let port = Int(line.dropFirst(5)) else {
            process.finish()
            return nil
        }
        self.process = process
        self.port = port
    }

    /// Ends the backend: the end of its input stops it.
    func finish() { process.finish() }

    func rotate() { _ = process.ask("rotate") }

    /// Takes the backend's counts since the last call.
    func drain() {
        guard let stats = process.backendStats() else { return }
        requests = stats.requests
        for (second, count) in stats.perSecond { perSecond.add(count, in: second) }
    }
}

/// How to start the replicas.
private struct ReplicaFleet {
    let demo: String
    /// The loopback backend's script.
    let script: String
    let accounts: Int
    let environment: [String: String]
    let logs: ProcessLogs

    func start(backendPort: Int, redisPort: Int?, keyPrefix: String, phase: String) throws -> Replicas {
        var arguments = [
            demo, "replica", "--backend", "http://127.0.0.1:\(backendPort)/identity", "--accounts", String(accounts),
            "--starts-per-second", String(FleetReplicasBenchmark.startsPerSecond), "--burst",
            String(FleetReplicasBenchmark.replicaBurst),
        ]
        if let redisPort {
            arguments += [
                "--redis", "redis://127.0.0.1:\(redisPort)", "--key-prefix", keyPrefix, "--share-credentials",
                "--fleet-burst", String(FleetReplicasBenchmark.fleetBurst),
            ]
        }
        var processes: [PeerProcess] = []
        for index in 0..<FleetReplicasBenchmark.replicas {
            guard
                let process = PeerProcess(
                    arguments, environment: environment, standardError: logs.file("replica-\(index)-\(phase)"))
            else {
                processes.reversed().forEach { $0.finish() }
                throw BenchmarkFailure("a replica did not start")
            }
            processes.append(process)
        }
        return Replicas(processes)
    }
}

/// The replica processes, asked one line at a time.
private final class Replicas {
    struct Status: Decodable {
        struct Fleet: Decodable {
            var started: Int
            var decidedLocally: Int
            var sharesInstalled: Int
            var peerWaitsGivenUp: Int
            var callsFailed: Int
        }

        var identified: Int
        var installed: Int
        var fetches: Int
        var fleet: Fleet?
        var sentPerSecond: [[Int]]
    }

    private let processes: [PeerProcess]
    /// The requests the replicas sent per Unix second, summed over the replicas, from every status so far.
    private(set) var sentPerSecond = PerSecondCounts()

    init(_ processes: [PeerProcess]) { self.processes = processes }

    /// Every replica's status, in order; a replica that has exited or answers otherwise has none. The requests sent
    /// that a replica reports are counted here, once: it reports each second once.
    func statuses() -> [Status] {
        let statuses = processes.compactMap { process in
            process.ask("status").flatMap { try? JSONDecoder().decode(Status.self, from: Data($0.utf8)) }
        }
        for pair in statuses.flatMap(\.sentPerSecond) where pair.count == 2 {
            sentPerSecond.add(pair[1], in: pair[0])
        }
        return statuses
    }

    func rotate() { for process in processes { _ = process.ask("rotate") } }

    /// The coordinators' counts over every replica, for the progress lines.
    func fleetCounts() -> String {
        let fleets = statuses().compactMap(\.fleet)
        guard !fleets.isEmpty else { return "no coordinator" }
        return
            "decided on Redis \(fleets.reduce(0) { $0 + $1.started }), locally \(fleets.reduce(0) { $0 + $1.decidedLocally }), "
            + "shares installed \(fleets.reduce(0) { $0 + $1.sharesInstalled }), peer waits given up "
            + "\(fleets.reduce(0) { $0 + $1.peerWaitsGivenUp }), calls failed \(fleets.reduce(0) { $0 + $1.callsFailed })"
    }

    /// Seconds until every replica has every account identified, polled twice a second.
    func waitUntilIdentified(_ total: Int, within limit: Duration, backend: CountingBackend) async throws -> Double {
        let started = ContinuousClock.now
        while ContinuousClock.now - started < limit {
            backend.drain()
            let statuses = statuses()
            if statuses.reduce(0, { $0 + $1.identified }) == total { return (ContinuousClock.now - started).seconds }
            guard statuses.count == processes.count else {
                let running = processes.map { $0.isRunning ? "running" : "exited" }.joined(separator: ", ")
                throw BenchmarkFailure(
                    "a replica stopped answering (replicas \(running); their standard error is kept, see above)")
            }
            try await Task.sleep(for: .milliseconds(500))
        }
        let identified = statuses().map { String($0.identified) }.joined(separator: ", ")
        throw BenchmarkFailure(
            "the replicas did not identify every account within \(limit) (identified \(identified) of "
                + "\(total / processes.count) each)")
    }

    /// Ends every replica: the end of its input shuts its pool down.
    func finish() { processes.reversed().forEach { $0.finish() } }
}

/// Requests counted per Unix second: the backend's as it received them, or the replicas' as they sent them.
private struct PerSecondCounts {
    private var counts: [Int: Int] = [:]

    mutating func add(_ count: Int, in second: Int) { counts[second, default: 0] += count }

    /// The most requests in one second, from the second holding `wall` on.
    func peak(since wall: TimeInterval) -> Int {
        counts.filter { $0.key >= Int(wall) }.values.max() ?? 0
    }
}

/// Files for the standard error of the benchmark's processes, in a directory of its own.
private struct ProcessLogs {
    let directory: URL

    init() {
        directory = FileManager.default.temporaryDirectory.appendingPathComponent(
            "fleet-replicas-\(getpid())", isDirectory: true)
        try? FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
    }

    /// A new file named `name`, open for writing, or `nil` where it cannot be made.
    func file(_ name: String) -> FileHandle? {
        let url = directory.appendingPathComponent(name + ".stderr")
        guard FileManager.default.createFile(atPath: url.path, contents: nil) else { return nil }
        return try? FileHandle(forWritingTo: url)
    }
}

/// Why a benchmark could not finish.
struct BenchmarkFailure: Error, CustomStringConvertible {
    let description: String

    init(_ description: String) { self.description = description }
}
