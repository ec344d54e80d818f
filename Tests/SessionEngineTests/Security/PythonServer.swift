import Foundation
import Testing

/// A Python server from `Fixtures/backend`, started by a test on a free loopback port.
///
/// The server binds `127.0.0.1` port 0 and prints the port it got; it stops when its standard input closes, so it
/// cannot outlive the test process. It runs as a ``ChildProcess``: no thread of the concurrency pool reads its output
/// or waits for its exit, and each of those waits is bounded.
final class PythonServer: Sendable {
    /// `python3` on `PATH`, if any.
    static let python = Executable.find("python3")

    /// The directory of the fixture servers.
    static let directory = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent()
        .appendingPathComponent("Fixtures/backend")

    /// How long a server may take to print its port (the TLS servers make a certificate first).
    static let startLimit: Duration = .seconds(30)
    /// How long a stopped server may take to exit before it is killed.
    static let stopLimit: Duration = .seconds(10)

    let port: Int
    private let child: ChildProcess

    private init(port: Int, child: ChildProcess) {
        self.port = port
        self.child = child
    }

    /// Starts `script` (a file name in `Fixtures/backend`) and waits until it has printed its port.
    ///
    /// - Parameter tls: A directory for the server's self-signed certificate (`certificate.pem`); the server then
    ///   speaks HTTPS.
    static func start(_ script: String, environment extra: [String: String] = [:], tls: URL? = nil) async throws
        -> PythonServer
    {
        guard let python else { throw BackendFailure(description: "python3 is not on PATH") }
        let child = try ChildProcess.launch(
            python,
            arguments: [directory.appendingPathComponent(script).path, "--exit-on-stdin-eof"]
                + (tls.map { ["--tls", $0.path] } ?? []),
            environment: ProcessInfo.processInfo.environment.merging(extra) { $1 },
            name: script,
            keepsInputOpen: true
        )
        let line: String
        do {
            line = try await child.firstLine(within: startLimit)
        } catch {
            child.kill()
            throw error
        }
        guard let port = Int(line.trimmingCharacters(in: .whitespacesAndNewlines)) else {
            child.kill()
            throw BackendFailure(description: "\(script) did not print its port")
        }
        return PythonServer(port: port, child: child)
    }

    /// Waits until the server has printed `line` on standard output, as a server reports what it saw.
    func printed(_ line: String, within limit: Duration = .seconds(30)) async throws {
        try await child.printed(line, within: limit)
    }

    /// A fresh directory for a TLS server's certificate.
    static func certificateDirectory() throws -> URL {
        let directory = FileManager.default.temporaryDirectory
            .appendingPathComponent("session-engine-tls-\(UUID().uuidString)")
        try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
        return directory
    }

    /// Stops the server and waits for it to exit; a server that does not exit within ``stopLimit``, or that wrote
    /// more than a ``ChildProcess`` may, fails the running test.
    func stop() async {
        child.closeInput()
        child.terminate()
        do {
            _ = try await child.finish(within: Self.stopLimit)
        } catch is CancellationError {
            // The test was cancelled, and the wait killed the server.
        } catch {
            Issue.record("stopping the server: \(error)")
        }
    }
}
