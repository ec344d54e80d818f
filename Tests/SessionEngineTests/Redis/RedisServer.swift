import Foundation
import SessionEngine
import SessionEngineRedis

/// A real `redis-server`, started by a test on a free loopback port with nothing saved to disk, and the faults the
/// coordinator must survive: killed, started again empty on the same port, paused with `SIGSTOP` and resumed.
///
/// Like ``TinyProxy`` it runs under `Fixtures/network/run_until_stdin_closes.py`, so it never outlives the test
/// process, with its pid file and working directory in a fresh temporary directory.
final class RedisServer: Sendable {
    /// `redis-server` on `PATH` or in `/usr/sbin`, if any.
    static let executable = Executable.find("redis-server")

    /// Why a server cannot start here, or `nil` when it can.
    static var unavailableReason: String? {
        if executable == nil { return "redis-server is not installed (Scripts/install-test-servers.sh installs it)" }
        do {
            _ = try RedisFleetCoordinator(configuration: .init())
        } catch {
            return "\(error) (Scripts/install-test-servers.sh installs it)"
        }
        if PythonServer.python == nil { return "python3 is not on PATH, so the server's wrapper cannot start" }
        return nil
    }

    /// The port it listens on, on 127.0.0.1.
    let port: Int
    let password: String?
    /// The authority whose server certificate it presents when it speaks TLS only, and which signs its clients'.
    let authority: PrivateAuthority?
    private let directory: URL
    private let child: ChildProcess

    private init(port: Int, password: String?, authority: PrivateAuthority?, directory: URL, child: ChildProcess) {
        self.port = port
        self.password = password
        self.authority = authority
        self.directory = directory
        self.child = child
    }

    /// Starts a server on `port` (a free one when `nil`), requiring `password` when given, and waits until it
    /// accepts connections. With `authority` it speaks TLS only, presents the authority's server certificate and
    /// asks every client for a certificate the authority signed (Redis's default, `tls-auth-clients yes`); with
    /// `presentingOtherHost` its certificate names `other.invalid` instead of `localhost` and `127.0.0.1`.
    static func start(
        port: Int? = nil, password: String? = nil, authority: PrivateAuthority? = nil, presentingOtherHost: Bool = false
    ) async throws -> RedisServer {
        guard let executable else { throw NetworkTestFailure("redis-server is not installed") }
        var last = ""
        for _ in 0..<5 {
            let directory = FileManager.default.temporaryDirectory
                .appendingPathComponent("session-engine-redis-\(UUID().uuidString)")
            try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
            let chosen = try port ?? LoopbackPorts.free(count: 1)[0]
            let pidFile = directory.appendingPathComponent("redis.pid").path
            let ports =
                authority.map { _ in ["--port", "0", "--tls-port", String(chosen)] } ?? ["--port", String(chosen)]
            var arguments =
                [executable.path] + ports + [
                    "--bind", "127.0.0.1", "--save", "", "--appendonly", "no",
                    "--dir", directory.path, "--pidfile", pidFile, "--loglevel", "warning",
                ]
            if let password { arguments += ["--requirepass", password] }
            if let authority {
                arguments += [
                    "--tls-cert-file",
                    presentingOtherHost ? authority.otherHostCertificate : authority.serverCertificate,
                    "--tls-key-file", presentingOtherHost ? authority.otherHostKey : authority.serverKey,
                    "--tls-ca-cert-file", authority.certificate,
                ]
            }
            let exited = directory.appendingPathComponent("exit-status").path
            let child = try NginxFront.launch(arguments, name: "redis-server", statusFile: exited)
            let server = RedisServer(
                port: chosen, password: password, authority: authority, directory: directory, child: child)
            if try await LoopbackPorts.waitUntilAccepting(
                [chosen], pidFile: pidFile, unlessExists: exited, within: .seconds(20))
            {
                return server
            }
            let outcome = try await child.finish(within: .seconds(10))
            last = String(outcome.errorText.suffix(800))
            // A port given must be the one: a server started again takes its predecessor's.
            if port != nil { try await Task.sleep(for: .milliseconds(200)) }
        }
        throw NetworkTestFailure("redis-server did not start in 5 tries: \(last)")
    }

    /// The server's process ID, from its pid file.
    private var pid: pid_t? {
        let path = directory.appendingPathComponent("redis.pid").path
        let text = (try? String(contentsOfFile: path, encoding: .utf8)) ?? ""
        return pid_t(text.trimmingCharacters(in: .whitespacesAndNewlines))
    }

    /// Kills the server with `SIGKILL`, as a crash would, and waits until it has exited.
    func kill() async {
        if let pid { Foundation.kill(pid, SIGKILL) }
        _ = try? await child.finish(within: .seconds(20))
    }

    /// Pauses the server with `SIGSTOP`: it keeps its connections and answers nothing.
    func pause() {
        if let pid { Foundation.kill(pid, SIGSTOP) }
    }

    /// Resumes a paused server.
    func resume() {
        if let pid { Foundation.kill(pid, SIGCONT) }
    }

    /// Stops the server, waits for it to exit and removes its directory.
    func stop() async {
        resume()
        child.closeInput()
        _ = try? await child.finish(within: .seconds(20))
        try? FileManager.default.removeItem(at: directory)
    }

    /// A coordinator's configuration for this server.
    func configuration(
        prefix: String = "test", limits: FleetLimits = FleetLimits(), password: String? = nil,
        connectTimeout: Duration = .milliseconds(500), commandTimeout: Duration = .milliseconds(250),
        tls: RedisFleetCoordinator.Configuration.TLS? = nil
    ) throws -> RedisFleetCoordinator.Configuration {
        try RedisFleetCoordinator.Configuration(
            port: port, password: password ?? self.password, keyPrefix: prefix, limits: limits,
            connectTimeout: connectTimeout, commandTimeout: commandTimeout, tls: tls)
    }
}
