import Foundation

/// A private certificate authority a test makes with the `openssl` command: the authority's certificate, and server
/// certificates it signed, one for `localhost` and `127.0.0.1` and one for another host, and a client certificate, each
/// with its key.
///
/// Everything is made before ``make()`` returns, through ``ChildProcess`` (no thread of the concurrency pool waits
/// for openssl), in a fresh temporary directory.
struct PrivateAuthority: Sendable {
    /// `openssl` on `PATH`, if any.
    static let openssl = Executable.find("openssl")

    /// The directory that holds every file.
    let directory: URL

    /// The authority's certificate, PEM.
    var certificate: String { path("ca.pem") }
    /// The server certificate for `localhost` and `127.0.0.1`, PEM.
    var serverCertificate: String { path("server.pem") }
    /// The server certificate's private key, PEM.
    var serverKey: String { path("server.key") }
    /// A server certificate the authority signed for `other.invalid` only.
    var otherHostCertificate: String { path("other.pem") }
    /// That certificate's private key.
    var otherHostKey: String { path("other.key") }
    /// A client certificate the authority signed (`clientAuth`), for a server that asks for one.
    var clientCertificate: String { path("client.pem") }
    /// That certificate's private key.
    var clientKey: String { path("client.key") }
    /// A self-signed certificate of about 64 KiB (an extension of 64,000 characters), PEM: the tests of what libcurl
    /// takes repeat it a hundred times where the authority's would take five thousand, each parsed and checked.
    var largeCertificate: String { path("large.pem") }

    func path(_ name: String) -> String {
        directory.appendingPathComponent(name).path
    }

    /// Makes the authority and its server certificates in a new temporary directory.
    static func make() async throws -> PrivateAuthority {
        guard let openssl else { throw NetworkTestFailure("openssl is not on PATH") }
        let directory = FileManager.default.temporaryDirectory
            .appendingPathComponent("session-engine-ca-\(UUID().uuidString)")
        try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
        let authority = PrivateAuthority(directory: directory)
        let key = ["-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes"]
        try await run(
            openssl,
            ["req", "-x509"] + key + [
                "-keyout", authority.path("ca.key"), "-out", authority.certificate, "-days", "2",
                "-subj", "/CN=SessionEngine test authority",
                "-addext", "basicConstraints=critical,CA:TRUE", "-addext", "keyUsage=critical,keyCertSign,cRLSign",
            ])
        try await run(
            openssl,
            ["req", "-x509"] + key + [
                "-keyout", authority.path("large.key"), "-out", authority.largeCertificate, "-days", "2",
                "-subj", "/CN=SessionEngine large test certificate",
                "-addext", "1.2.3.4.5=ASN1:UTF8String:" + String(repeating: "a", count: 64_000),
            ])
        for (serial, (name, names)) in [
            ("server", "DNS:localhost,IP:127.0.0.1"), ("other", "DNS:other.invalid"), ("client", "DNS:replica.invalid"),
        ].enumerated() {
            let extensions = authority.path("\(name).ext")
            try Data(
                """
                subjectAltName=\(names)
                basicConstraints=CA:FALSE
                keyUsage=critical,digitalSignature
                extendedKeyUsage=\(name == "client" ? "clientAuth" : "serverAuth")

                """.utf8
            ).write(to: URL(fileURLWithPath: extensions))
            try await run(
                openssl,
                ["req"] + key + [
                    "-keyout", authority.path("\(name).key"), "-out", authority.path("\(name).csr"),
                    "-subj", "/CN=\(name)",
                ])
            try await run(
                openssl,
                [
                    "x509", "-req", "-in", authority.path("\(name).csr"), "-CA", authority.certificate,
                    "-CAkey", authority.path("ca.key"), "-set_serial", String(serial + 2),
                    "-days", "2", "-out", authority.path("\(name).pem"), "-extfile", extensions,
                ])
        }
        return authority
    }

    private static func run(_ openssl: URL, _ arguments: [String]) async throws {
        let outcome = try await ChildProcess.run(openssl, arguments: arguments, timeLimit: .seconds(60))
        guard outcome.reason == .exit, outcome.status == 0 else {
            throw NetworkTestFailure("openssl \(arguments[0]) failed: \(outcome.errorText.suffix(500))")
        }
    }
}

/// A failure of a network test's own machinery (a server that would not start, a tool that failed).
struct NetworkTestFailure: Error, CustomStringConvertible {
    let description: String

    init(_ description: String) {
        self.description = description
    }
}

/// Finding programs for the network tests.
enum Executable {
    /// The program named `name` on `PATH`, or in `/usr/sbin` and `/sbin` (where nginx lives), if any.
    static func find(_ name: String) -> URL? {
        let path = (ProcessInfo.processInfo.environment["PATH"] ?? "/usr/bin:/bin") + ":/usr/sbin:/sbin"
        return path.split(separator: ":").lazy
            .map { URL(fileURLWithPath: String($0)).appendingPathComponent(name) }
            .first { FileManager.default.isExecutableFile(atPath: $0.path) }
    }
}
