import Foundation
import SessionEngine
import SessionEngineBackend

/// The backend side: `IdentitySigner` signatures per second on one core, against the same payloads signed by Node's
/// `createHmac` and Python's `hmac` in their own processes, with `openssl speed` as the hardware reference.
struct SigningBenchmark: Benchmark {
    let name = "signing"
    let summary = "IdentitySigner v1/v2 signatures per second against Node, Python and openssl speed"

    /// Distinct users signed per batch.
    private static let users = 64

    func run(_ options: Options) async throws -> [Figure] {
        let window: Duration = options.quick ? .milliseconds(60) : .milliseconds(300)
        let signer = Fixtures.signer(clock: SystemClock())
        let expiresAt = Int64(Date().timeIntervalSince1970) + 900
        let properties = try IdentityProperties(["plan": .string("team"), "seats": .number(12), "beta": .boolean(true)])
        // Emails as a backend session holds them: the signer trims and lowercases them.
        let emails = (0..<Self.users).map { "Member\($0)@Example.com" }
        let v1 = emails.map { try! signer.sign(email: $0, properties: nil, expiresAt: expiresAt) }
        let v2 = emails.map { try! signer.sign(email: $0, properties: properties, expiresAt: expiresAt) }
        let payloads = ["v1": v1, "v2": v2].mapValues { $0.map { $0.signingPayload(projectID: Fixtures.projectID) } }

        func signing(_ properties: IdentityProperties?) -> @Sendable () -> Int {
            {
                var sum = 0
                for email in emails {
                    sum &+= try! signer.sign(email: email, properties: properties, expiresAt: expiresAt).signature.utf8
                        .count
                }
                return sum
            }
        }
        let signV1 = signing(nil)
        let signV2 = signing(properties)
        let hmac = HMACSHA256(key: Array(Fixtures.secret.utf8))
        let v1Payloads = payloads["v1"]!
        let hmacV1: @Sendable () -> Int = {
            var sum = 0
            for payload in v1Payloads { sum &+= hmac.authenticate(payload).hexString.utf8.count }
            return sum
        }

        let configuration = try peerConfiguration(payloads: payloads, credentials: ["v1": v1, "v2": v2])
        var peers: [(name: String, process: PeerProcess)] = []
        var notes: [String: String] = [:]
        for (name, command) in [
            ("Node", ["node", "-e", PeerScripts.node]), ("Python", ["python3", "-c", PeerScripts.python]),
        ] {
            guard let peer = PeerProcess(command), let answer = peer.ask(configuration) else {
                notes[name] = "\(name) not available: skipped"
                continue
            }
            guard answer == "ok" else {
                notes[name] = "\(name) skipped: \(answer)"
                peer.finish()
                continue
            }
            peers.append((name, peer))
        }

        var series: [String: [Double]] = [:]
        for round in 0..<(options.warmupRounds + options.rounds) {
            progress("  signing round \(round + 1)")
            var values: [String: Double] = [:]
            values["swift v1"] = await threadRates(threads: 1, duration: window, batchSize: Self.users, signV1).meanRate
            values["swift v2"] = await threadRates(threads: 1, duration: window, batchSize: Self.users, signV2).meanRate
            values["swift hmac v1"] = await threadRates(threads: 1, duration: window, batchSize: Self.users, hmacV1)
                .meanRate
            for peer in peers {
                for set in ["v1", "v2"] {
                    values["\(peer.name) \(set)"] = peer.process.ask("\(set) \(window.seconds)").flatMap(Double.init)
                }
            }
            guard round >= options.warmupRounds else { continue }
            for (key, value) in values { series[key, default: []].append(value) }
        }
        for peer in peers.reversed() { peer.process.finish() }

        var figures: [Figure] = []
        for set in ["v1", "v2"] {
            let swift = Measurement("IdentitySigner.sign \(set), 1 core", .perSecond, series["swift \(set)"]!)
            for peer in ["Node", "Python"] {
                var figure = Figure(name, swift, note: notes[peer])
                if let rates = series["\(peer) \(set)"] {
                    let baseline = Measurement(peer == "Node" ? "Node createHmac" : "Python hmac", .perSecond, rates)
                    figure = Figure(name, swift, against: baseline, paired: true).goal("≥ 4×") { $0 >= 4 }
                }
                // The absolute goal goes on the first v1 line.
                if set == "v1" && peer == "Node" {
                    let fast = swift.summary.median >= 2e6
                    let goal = figure.goal.map { Goal(text: "≥ 2 M/s and \($0.text)", met: fast && $0.met) }
                    figure.goal = goal ?? Goal(text: "≥ 2 M/s", met: fast)
                }
                figures.append(figure)
            }
        }
        let hmacOnly = Measurement("HMAC-SHA256 + hex of the v1 payloads", .perSecond, series["swift hmac v1"]!)
        if let node = series["Node v1"] {
            figures.append(
                Figure(name, hmacOnly, against: Measurement("Node createHmac", .perSecond, node), paired: true))
        }
        figures += await hardwareReference(options)
        return figures
    }

    /// The first line sent to a peer: the secret, the payloads and the Swift signer's signatures, as JSON.
    private func peerConfiguration(
        payloads: [String: [String]],
        credentials: [String: [IdentityCredential]]
    ) throws -> String {
        struct PayloadSet: Encodable {
            var name: String
            var payloads: [String]
            var signatures: [String]
        }
        struct Configuration: Encodable {
            var secret: String
            var sets: [PayloadSet]
        }
        let sets = ["v1", "v2"].map { name in
            PayloadSet(name: name, payloads: payloads[name]!, signatures: credentials[name]!.map(\.signature))
        }
        let data = try JSONEncoder().encode(Configuration(secret: Fixtures.secret, sets: sets))
        return String(decoding: data, as: UTF8.self)
    }

    /// SHA-256 of 64-byte messages against `openssl speed`, which uses the CPU's SHA instructions where it has
    /// them: with the implementation the process uses (the goal) and with the portable Swift one.
    private func hardwareReference(_ options: Options) async -> [Figure] {
        let message = [UInt8](repeating: 0x61, count: 64)
        func hashing(_ implementation: SHA256.Implementation) -> @Sendable () -> Int {
            {
                var sum = 0
                message.withUnsafeBytes { bytes in
                    for _ in 0..<64 { sum &+= SHA256.hash(bytes, using: implementation).hexString.utf8.count }
                }
                return sum
            }
        }
        let active = SHA256.Implementation.active
        let window: Duration = options.quick ? .milliseconds(60) : .milliseconds(300)
        var rates: [SHA256.Implementation: [Double]] = [:]
        var openssl: [Double] = []
        for _ in 0..<(options.quick ? 1 : 3) {
            for implementation in Set([active, .portable]) {
                let rate = await threadRates(threads: 1, duration: window, batchSize: 64, hashing(implementation))
                rates[implementation, default: []].append(rate.meanRate)
            }
            guard let rate = await opensslSHA256Rate() else { break }
            openssl.append(rate)
        }
        let measurement = Measurement("SHA-256 of 64 B, Swift (\(active))", .perSecond, rates[active]!)
        let portable = Measurement("SHA-256 of 64 B, portable Swift", .perSecond, rates[.portable]!)
        guard !openssl.isEmpty else {
            return [Figure(name, measurement, note: "openssl not available: skipped")]
        }
        let reference = Measurement("openssl speed sha256", .perSecond, openssl)
        var figures = [
            Figure(name, measurement, against: reference, note: "hardware reference", paired: true)
                .goal("≥ 0.8×") { $0 >= 0.8 }
        ]
        if active != .portable {
            figures.append(Figure(name, portable, against: reference, note: "the fallback", paired: true))
        }
        return figures
    }

    /// Hashes per second of `openssl speed -evp sha256` on 64-byte blocks for one second, or `nil` without openssl.
    ///
    /// Without `-elapsed`, openssl divides by the CPU time it used, as the other rates here do.
    private func opensslSHA256Rate() async -> Double? {
        let command = ["openssl", "speed", "-mr", "-seconds", "1", "-bytes", "64", "-evp", "sha256"]
        guard let text = await commandOutput(command) else { return nil }
        // `+F:<index>:sha256:<bytes per second>`
        for line in text.split(separator: "\n") where line.hasPrefix("+F:") {
            if let bytesPerSecond = line.split(separator: ":").last.flatMap({ Double($0) }) {
                return bytesPerSecond / 64
            }
        }
        return nil
    }
}
