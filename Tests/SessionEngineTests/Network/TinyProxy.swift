import Foundation

/// A real forward proxy, tinyproxy, started by a test on a free loopback port: it tunnels `CONNECT` to the ports
/// it is given and refuses the others with 403.
///
/// Like ``NginxFront`` it runs under `Fixtures/network/run_until_stdin_closes.py`, in the foreground (`-d`), with
/// its own configuration, pid file and log in a fresh temporary directory, and the start is retried on a new port
/// when the one picked was taken meanwhile. ``start(connectPorts:)`` returns once the port accepts connections.
final class TinyProxy: Sendable {
    /// `tinyproxy` on `PATH` or in `/usr/sbin`, if any.
    static let tinyproxy = Executable.find("tinyproxy")

    /// Why a proxy cannot start here, or `nil` when it can.
    static var unavailableReason: String? {
        if tinyproxy == nil { return "tinyproxy is not installed (Scripts/install-test-servers.sh installs it)" }
        return NginxFront.unavailableReason
    }

    /// The port it listens on, on 127.0.0.1.
    let port: Int
    private let directory: URL
    private let child: ChildProcess

    private init(port: Int, directory: URL, child: ChildProcess) {
        self.port = port
        self.directory = directory
        self.child = child
    }

    /// The proxy's URL.
    var url: URL { URL(string: "http://127.0.0.1:\(port)")! }

    /// Starts tinyproxy, allowing `CONNECT` to `connectPorts` only, and waits until it accepts connections. With
    /// `basicAuth` it answers 407 to a client that does not send that user and password.
    static func start(connectPorts: [Int], basicAuth: (user: String, password: String)? = nil) async throws
        -> TinyProxy
    {
        guard let tinyproxy else { throw NetworkTestFailure("tinyproxy is not installed") }
        var last = ""
        for _ in 0..<5 {
            let directory = FileManager.default.temporaryDirectory
                .appendingPathComponent("session-engine-tinyproxy-\(UUID().uuidString)")
            try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
            let port = try LoopbackPorts.free(count: 1)[0]
            let log = directory.appendingPathComponent("tinyproxy.log").path
            let configuration = directory.appendingPathComponent("tinyproxy.conf")
            try Data(
                """
                Port \(port)
                Listen 127.0.0.1
                Timeout 30
                MaxClients 64
                LogFile "\(log)"
                LogLevel Connect
                PidFile "\(directory.appendingPathComponent("tinyproxy.pid").path)"
                Allow 127.0.0.1
                \(connectPorts.map { "ConnectPort \($0)" }.joined(separator: "\n"))
                \(basicAuth.map { "BasicAuth \($0.user) \($0.password)" } ?? "")

                """.utf8
            ).write(to: configuration)
            let exited = directory.appendingPathComponent("exit-status").path
            let child = try NginxFront.launch(
                [tinyproxy.path, "-d", "-c", configuration.path], name: "tinyproxy", statusFile: exited)
            let proxy = TinyProxy(port: port, directory: directory, child: child)
            let pidFile = directory.appendingPathComponent("tinyproxy.pid").path
            if try await LoopbackPorts.waitUntilAccepting(
                [port], pidFile: pidFile, unlessExists: exited, within: .seconds(20))
            {
                return proxy
            }
            let outcome = try await child.finish(within: .seconds(10))
            last = String((((try? String(contentsOfFile: log, encoding: .utf8)) ?? "") + outcome.errorText).suffix(800))
        }
        throw NetworkTestFailure("tinyproxy did not start in 5 tries: \(last)")
    }

    /// The `CONNECT` requests tinyproxy logged, as `host:port`, once at least `count` are there, or those there after
    /// 30 s (a bound that only a missing line reaches, however busy the machine).
    func tunnels(atLeast count: Int) async throws -> [String] {
        let path = directory.appendingPathComponent("tinyproxy.log").path
        let deadline = ContinuousClock.now + .seconds(30)
        while true {
            let text = (try? String(contentsOfFile: path, encoding: .utf8)) ?? ""
            let tunnels = text.split(separator: "\n").compactMap { line -> String? in
                guard let range = line.range(of: "Request (file descriptor ") else { return nil }
                let request = line[range.upperBound...].drop { $0 != ":" }.dropFirst().trimmingCharacters(
                    in: .whitespaces)
                guard request.hasPrefix("CONNECT ") else { return nil }
                return String(request.dropFirst("CONNECT ".count).prefix { $0 != " " })
            }
            if tunnels.count >= count || ContinuousClock.now >= deadline { return tunnels }
            try await Task.sleep(for: .milliseconds(20))
        }
    }

    /// Stops tinyproxy, waits for it to exit and removes its directory.
    func stop() async {
        child.closeInput()
        _ = try? await child.finish(within: .seconds(10))
        try? FileManager.default.removeItem(at: directory)
    }
}
