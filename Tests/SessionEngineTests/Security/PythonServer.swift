import Foundation

/// A Python server from `Fixtures/backend`, started by a test on a free loopback port.
///
/// The server binds `127.0.0.1` port 0 and prints the port it got; it stops when its standard input closes, so it
/// cannot outlive the test process.
final class PythonServer: Sendable {
    /// `python3` on `PATH`, if any.
    static let python: URL? = {
        let path = ProcessInfo.processInfo.environment["PATH"] ?? "/usr/bin:/bin"
        return path.split(separator: ":").lazy
            .map { URL(fileURLWithPath: String($0)).appendingPathComponent("python3") }
            .first { FileManager.default.isExecutableFile(atPath: $0.path) }
    }()

    /// The directory of the fixture servers.
    static let directory = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent()
        .appendingPathComponent("Fixtures/backend")

    let port: Int
    private let process: Process
    private let input: Pipe

    private init(port: Int, process: Process, input: Pipe) {
        self.port = port
        self.process = process
        self.input = input
    }

    /// Starts `script` (a file name in `Fixtures/backend`) and waits until it has printed its port.
    ///
    /// - Parameter tls: A directory for the server's self-signed certificate (`certificate.pem`); the server then
    ///   speaks HTTPS.
    static func start(_ script: String, environment extra: [String: String] = [:], tls: URL? = nil) async throws
        -> PythonServer
    {
        guard let python else { throw BackendFailure(description: "python3 is not on PATH") }
        let process = Process()
        process.executableURL = python
        process.arguments =
            [directory.appendingPathComponent(script).path, "--exit-on-stdin-eof"]
            + (tls.map { ["--tls", $0.path] } ?? [])
        process.environment = ProcessInfo.processInfo.environment.merging(extra) { $1 }
        let input = Pipe()
        let output = Pipe()
        process.standardInput = input
        process.standardOutput = output
        try process.run()
        let reader = output.fileHandleForReading
        let line = await withCheckedContinuation { (continuation: CheckedContinuation<String, Never>) in
            DispatchQueue.global().async {
                var buffer = Data()
                while !buffer.contains(UInt8(ascii: "\n")) {
                    let chunk = reader.availableData
                    if chunk.isEmpty { break }
                    buffer.append(chunk)
                }
                continuation.resume(returning: String(decoding: buffer, as: UTF8.self))
            }
        }
        guard let port = Int(line.trimmingCharacters(in: .whitespacesAndNewlines)) else {
            process.terminate()
            throw BackendFailure(description: "\(script) did not print its port")
        }
        return PythonServer(port: port, process: process, input: input)
    }

    /// A fresh directory for a TLS server's certificate.
    static func certificateDirectory() throws -> URL {
        let directory = FileManager.default.temporaryDirectory
            .appendingPathComponent("session-engine-tls-\(UUID().uuidString)")
        try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
        return directory
    }

    /// Stops the server and waits for it to exit.
    func stop() async {
        try? input.fileHandleForWriting.close()
        let process = self.process
        process.terminate()
        await withCheckedContinuation { (continuation: CheckedContinuation<Void, Never>) in
            DispatchQueue.global().async {
                process.waitUntilExit()
                continuation.resume()
            }
        }
    }
}
