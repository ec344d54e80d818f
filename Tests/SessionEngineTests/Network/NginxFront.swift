import Foundation
import SessionEngine

#if canImport(Glibc)
    import Glibc
#elseif canImport(Darwin)
    import Darwin
#endif

/// A real nginx in front of a loopback backend, started by a test: TLS with a certificate from a
/// ``PrivateAuthority``, one server block per ``Server``, each on its own loopback port, every one passing requests
/// to the backend with `proxy_pass`.
///
/// nginx runs as a child of `Fixtures/network/run_until_stdin_closes.py` with its own prefix, configuration, pid file
/// and logs in a fresh temporary directory (`-p prefix -c conf -e log -g 'daemon off;'`), so it needs no privilege
/// beyond what the test has and stops when the test process ends. nginx cannot listen on port 0, so free ports are
/// picked first and the start is retried on new ones when one was taken meanwhile. ``start(_:authority:backendPort:)``
/// returns once every port accepts connections. The access log has one line per request:
/// `port protocol "user agent" status connection`, the last nginx's serial number of the client connection.
final class NginxFront: Sendable {
    /// One server block.
    struct Server: Sendable {
        /// Whether it offers HTTP/2 (by ALPN) besides HTTP/1.1.
        var http2: Bool
        /// Extra directives of its `location /`.
        var directives: String = ""
        /// Whether it presents the authority's certificate for another host instead of `localhost`'s.
        var otherHost = false
        /// Whether it speaks TLS; plain HTTP/1.1 otherwise.
        var tls = true
    }

    /// `nginx` on `PATH` or in `/usr/sbin`, if any.
    static let nginx = Executable.find("nginx")

    /// Whether a front can start here; the reason when it cannot.
    static var unavailableReason: String? {
        if nginx == nil { return "nginx is not installed (Scripts/install-test-servers.sh installs it)" }
        if PrivateAuthority.openssl == nil { return "openssl is not on PATH" }
        if PythonServer.python == nil { return "python3 is not on PATH, so the loopback backend cannot start" }
        return nil
    }

    /// The port of each server block, in the order given.
    let ports: [Int]
    /// The prefix directory: configuration, logs, pid file and temporary files.
    let directory: URL
    private let child: ChildProcess

    private init(ports: [Int], directory: URL, child: ChildProcess) {
        self.ports = ports
        self.directory = directory
        self.child = child
    }

    /// The wrapper that stops a server when its standard input closes.
    static let wrapper = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent()
        .appendingPathComponent("Fixtures/network/run_until_stdin_closes.py")

    /// Starts `command` under ``wrapper``, which writes the server's exit status to `statusFile` once it has ended.
    static func launch(_ command: [String], name: String, statusFile: String) throws -> ChildProcess {
        guard let python = PythonServer.python else { throw NetworkTestFailure("python3 is not on PATH") }
        return try ChildProcess.launch(
            python, arguments: [wrapper.path, statusFile] + command, name: name, keepsInputOpen: true)
    }

    /// Starts nginx with `servers` in front of the backend on `backendPort`, and waits until every port accepts
    /// connections.
    static func start(_ servers: [Server], authority: PrivateAuthority, backendPort: Int) async throws -> NginxFront {
        guard let nginx else { throw NetworkTestFailure("nginx is not installed") }
        var failures: [String] = []
        for _ in 0..<5 {
            let directory = FileManager.default.temporaryDirectory
                .appendingPathComponent("session-engine-nginx-\(UUID().uuidString)")
            try FileManager.default.createDirectory(
                at: directory.appendingPathComponent("logs"), withIntermediateDirectories: true)
            let ports = try LoopbackPorts.free(count: servers.count)
            let configuration = directory.appendingPathComponent("nginx.conf")
            try Data(
                Self.configuration(
                    servers, ports: ports, authority: authority, backendPort: backendPort, directory: directory
                ).utf8
            ).write(to: configuration)
            let errorLog = directory.appendingPathComponent("logs/error.log").path
            let exited = directory.appendingPathComponent("exit-status").path
            let child = try Self.launch(
                [
                    nginx.path, "-p", directory.path, "-c", configuration.path, "-e", errorLog, "-g", "daemon off;",
                ],
                name: "nginx",
                statusFile: exited
            )
            let front = NginxFront(ports: ports, directory: directory, child: child)
            let pidFile = directory.appendingPathComponent("nginx.pid").path
            if try await LoopbackPorts.waitUntilAccepting(
                ports, pidFile: pidFile, unlessExists: exited, within: .seconds(20))
            {
                return front
            }
            // nginx ended: a port was taken meanwhile, or the configuration is wrong.
            let outcome = try await child.finish(within: .seconds(10))
            let log = (try? String(contentsOfFile: errorLog, encoding: .utf8)) ?? ""
            let reason = String((log + outcome.errorText).suffix(800))
            guard reason.contains("Address already in use") else {
                throw NetworkTestFailure("nginx did not start: \(reason)")
            }
            failures.append(reason)
        }
        throw NetworkTestFailure("nginx found no free ports in 5 tries: \(failures.last ?? "")")
    }

    private static func configuration(
        _ servers: [Server], ports: [Int], authority: PrivateAuthority, backendPort: Int, directory: URL
    ) -> String {
        let prefix = directory.path
        var blocks = ""
        for (server, port) in zip(servers, ports) {
            let certificate = server.otherHost ? authority.otherHostCertificate : authority.serverCertificate
            let key = server.otherHost ? authority.otherHostKey : authority.serverKey
            let tls = """
                ssl_certificate \(certificate);
                        ssl_certificate_key \(key);
                        ssl_protocols TLSv1.2 TLSv1.3;
                """
            blocks += """
                    server {
                        listen 127.0.0.1:\(port)\(server.tls ? " ssl" : "")\(server.http2 ? " http2" : "");
                        \(server.tls ? tls : "")
                        location / {
                            proxy_pass http://127.0.0.1:\(backendPort);
                            \(server.directives)
                        }
                    }

                """
        }
        return """
            worker_processes 1;
            pid \(prefix)/nginx.pid;
            error_log \(prefix)/logs/error.log notice;
            events {
                worker_connections 256;
            }
            http {
                log_format session '$server_port $server_protocol "$http_user_agent" $status $connection';
                access_log \(prefix)/logs/access.log session;
                client_body_temp_path \(prefix)/client_body;
                proxy_temp_path \(prefix)/proxy;
                fastcgi_temp_path \(prefix)/fastcgi;
                uwsgi_temp_path \(prefix)/uwsgi;
                scgi_temp_path \(prefix)/scgi;
            \(blocks)}

            """
    }

    /// The access log's lines so far, once at least `count` are there (nginx writes a line just after it has sent
    /// the response, so the last one may lag the fetch a little), or those there after 30 s (a bound that only a
    /// missing line reaches, however busy the machine).
    func accessLog(atLeast count: Int) async throws -> [String] {
        let path = directory.appendingPathComponent("logs/access.log").path
        let deadline = ContinuousClock.now + .seconds(30)
        while true {
            let text = (try? String(contentsOfFile: path, encoding: .utf8)) ?? ""
            let lines = text.split(separator: "\n").map(String.init)
            if lines.count >= count || ContinuousClock.now >= deadline { return lines }
            try await Task.sleep(for: .milliseconds(20))
        }
    }

    /// Stops nginx (the wrapper sends it SIGTERM), waits for it to exit and removes its directory.
    func stop() async {
        child.closeInput()
        _ = try? await child.finish(within: .seconds(10))
        try? FileManager.default.removeItem(at: directory)
    }
}

/// Free loopback ports, and waiting for a server to accept on them.
///
/// Two servers started at once by tests running in parallel must not be given one port: every port handed out is
/// remembered and never handed out again in this process. A port the system gives another program in between (a
/// loopback backend binds port 0) makes the server fail to start, which its starter sees (no pid file, an exit
/// status) and retries on new ports; a server counts as ready only once it has written its pid file, which nginx and
/// tinyproxy do after binding every port, so the listener on the port is the server's own.
enum LoopbackPorts {
    private static let handedOut = SanitizedMutex<Set<Int>>([])

    /// `count` distinct ports that were free a moment ago and were never handed out before in this process: each
    /// bound on 127.0.0.1 port 0, all at once, then closed.
    static func free(count: Int) throws -> [Int] {
        var sockets: [Int32] = []
        defer { sockets.forEach { _ = close($0) } }
        var ports: [Int] = []
        while ports.count < count {
            let descriptor = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
            guard descriptor >= 0 else { throw NetworkTestFailure("socket() failed: errno \(errno)") }
            sockets.append(descriptor)
            var address = loopback(port: 0)
            var length = socklen_t(MemoryLayout<sockaddr_in>.size)
            let bound = withUnsafeMutablePointer(to: &address) { pointer in
                pointer.withMemoryRebound(to: sockaddr.self, capacity: 1) { address in
                    bind(descriptor, address, length) == 0 && getsockname(descriptor, address, &length) == 0
                }
            }
            guard bound else { throw NetworkTestFailure("bind() to 127.0.0.1 port 0 failed: errno \(errno)") }
            let port = Int(UInt16(bigEndian: address.sin_port))
            // A port handed out before stays bound here (so the next bind gets another) and is not used.
            if handedOut.withLock({ $0.insert(port).inserted }) { ports.append(port) }
            guard sockets.count < 1000 else { throw NetworkTestFailure("no loopback port left that was not used") }
        }
        return ports
    }

    /// Whether something accepts connections on 127.0.0.1 `port` now. A loopback connect is answered at once, so
    /// this does not wait.
    static func accepts(_ port: Int) -> Bool {
        let descriptor = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
        guard descriptor >= 0 else { return false }
        defer { close(descriptor) }
        var address = loopback(port: port)
        return withUnsafePointer(to: &address) { pointer in
            pointer.withMemoryRebound(to: sockaddr.self, capacity: 1) { address in
                connect(descriptor, address, socklen_t(MemoryLayout<sockaddr_in>.size)) == 0
            }
        }
    }

    /// Waits until the server has written `pidFile` and every port accepts connections (`true`), or the server has
    /// ended, which the wrapper says by writing `statusFile` (`false`); throws past `limit`.
    static func waitUntilAccepting(
        _ ports: [Int], pidFile: String, unlessExists statusFile: String, within limit: Duration
    ) async throws -> Bool {
        let deadline = ContinuousClock.now + limit
        while ContinuousClock.now < deadline {
            if FileManager.default.fileExists(atPath: pidFile), ports.allSatisfy(accepts) { return true }
            if FileManager.default.fileExists(atPath: statusFile) { return false }
            try await Task.sleep(for: .milliseconds(20))
        }
        throw NetworkTestFailure("the server did not accept connections on \(ports) within \(limit)")
    }

    private static func loopback(port: Int) -> sockaddr_in {
        var address = sockaddr_in()
        address.sin_family = sa_family_t(AF_INET)
        address.sin_port = UInt16(port).bigEndian
        address.sin_addr.s_addr = UInt32(0x7F00_0001).bigEndian
        return address
    }
}
