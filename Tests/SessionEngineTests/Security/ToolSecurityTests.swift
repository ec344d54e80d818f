import Foundation
import SessionEngine
import SessionEngineBackend
import SessionEngineTestKit
import Testing

/// The `sign` and `verify` tools of `SessionEngineDemo`, run as the operator runs them: never a trap, never a
/// secret or a stray argument echoed, never a secret silently re-encoded.
///
/// The tests run the demo binary that `swift build` put next to the test binary.
@Suite(.timeLimit(TimeLimits.minutes(1)))
struct ToolSecurityTests {
    /// `SessionEngineDemo` in the build directory of the running tests.
    static let demo: URL = URL(fileURLWithPath: "/proc/self/exe").resolvingSymlinksInPath()
        .deletingLastPathComponent().appendingPathComponent("SessionEngineDemo")

    struct Outcome {
        let status: Int32
        let reason: Process.TerminationReason
        let output: String
        let error: String
    }

    /// Runs the demo with `arguments` and `secret` in the environment (raw bytes, through `/bin/sh`'s `printf`).
    ///
    /// The demo runs as a ``ChildProcess``: its pipes are drained on a thread of their own and its exit awaited, so
    /// no thread of the concurrency pool waits for it, and a demo that hangs is killed and fails the test.
    static func run(_ arguments: [String], secretPrintf: String = "loopback-secret", input: String = "") async throws
        -> Outcome
    {
        let script = #"APPNORTH_IDENTITY_SECRET="$(printf '\#(secretPrintf)')" exec "$0" "$@""#
        var environment = ProcessInfo.processInfo.environment
        environment["APPNORTH_PROJECT_ID"] = "proj_tools"
        let outcome = try await ChildProcess.run(
            URL(fileURLWithPath: "/bin/sh"),
            arguments: ["-c", script, demo.path] + arguments,
            environment: environment,
            name: "SessionEngineDemo \(arguments.first ?? "")",
            input: Data(input.utf8)
        )
        return Outcome(
            status: outcome.status, reason: outcome.reason, output: outcome.outputText, error: outcome.errorText)
    }

    /// Starts the demo with `arguments` and the loopback secret, its standard input left open for ``ChildProcess/sendInput(_:)``.
    static func launch(_ arguments: [String]) throws -> ChildProcess {
        let script = #"APPNORTH_IDENTITY_SECRET=loopback-secret exec "$0" "$@""#
        var environment = ProcessInfo.processInfo.environment
        environment["APPNORTH_PROJECT_ID"] = "proj_tools"
        return try ChildProcess.launch(
            URL(fileURLWithPath: "/bin/sh"),
            arguments: ["-c", script, demo.path] + arguments,
            environment: environment,
            name: "SessionEngineDemo \(arguments.joined(separator: " "))",
            keepsInputOpen: true
        )
    }

    /// The longest input line the tools keep: 64 KiB, `HTTPCredentialFetcher.maximumResponseSize`.
    static let lineBound = HTTPCredentialFetcher.maximumResponseSize

    /// `json`, a JSON object's text, with spaces before its closing brace to make it exactly `length` bytes long.
    static func padded(_ json: String, to length: Int) -> String {
        precondition(json.hasSuffix("}") && json.utf8.count <= length)
        return json.dropLast() + String(repeating: " ", count: length - json.utf8.count) + "}"
    }

    @Test func theDemoBinaryIsBuilt() {
        #expect(
            FileManager.default.isExecutableFile(atPath: Self.demo.path), "run swift build first: \(Self.demo.path)")
    }

    @Test func verifyNeverTrapsOnExtremeTimes() async throws {
        let now = Date()
        let signer = try IdentitySigner(projectID: "proj_tools", secret: "loopback-secret")
        let expired = try signer.sign(email: "a@b.c", properties: nil, expiresAt: 1)
        let expiredJSON = #"{"email":"a@b.c","expiresAt":1,"signature":"\#(expired.signature)"}"#
        // A correctly signed credential that expires at Int64.max, signed on a clock just before then.
        let farClock = ManualClock(now: Date(timeIntervalSince1970: TimeInterval(Int64.max)))
        let far = try IdentitySigner(projectID: "proj_tools", secret: "loopback-secret", clock: farClock)
            .sign(email: "a@b.c", properties: nil, expiresAt: .max)
        let farJSON = #"{"email":"a@b.c","expiresAt":\#(Int64.max),"signature":"\#(far.signature)"}"#
        let cases: [([String], Int32)] = [
            (["verify", "--credential", expiredJSON, "--now", String(Int64.max)], 2),
            (["verify", "--credential", expiredJSON, "--now", "-9223372036854775808"], 2),
            (["verify", "--credential", expiredJSON, "--now", "253402300799"], 1),
            (["verify", "--credential", farJSON, "--now", "0"], 1),
            (["verify", "--credential", farJSON, "--now", "-1"], 2),
            (["verify", "--credential", farJSON], 1),
            (["verify", "--credential", expiredJSON, "--now", String(Int64(now.timeIntervalSince1970))], 1),
        ]
        for (arguments, status) in cases {
            let outcome = try await Self.run(arguments)
            #expect(outcome.reason == .exit, "\(arguments) trapped: \(outcome.error)")
            #expect(outcome.status == status, "\(arguments): \(outcome.output) \(outcome.error)")
            #expect(!(outcome.output + outcome.error).isEmpty)
        }
    }

    @Test func aSecretThatIsNotUTF8IsRefused() async throws {
        // `ab\xff\xfecd` used to sign as `ab\u{FFFD}\u{FFFD}cd`, another key than the backend's.
        for command in [["sign", "--email", "a@b.c"], ["verify", "--credential", "{}"]] {
            let outcome = try await Self.run(command, secretPrintf: #"ab\377\376cd"#)
            #expect(outcome.status == 2, "\(command): \(outcome.output)")
            #expect(outcome.error.contains("not valid UTF-8"))
            #expect(!outcome.output.contains("signature"))
        }
        let valid = try await Self.run(["sign", "--email", "a@b.c"], secretPrintf: #"caf\303\251"#)
        #expect(valid.status == 0, "\(valid.error)")
    }

    @Test func aStrayArgumentIsNamedByPositionNeverEchoed() async throws {
        for arguments in [
            ["sign", "--email", "a@b.c", "XYZSECRET"], ["verify", "XYZSECRET"], ["sign", "--XYZSECRET"],
            ["verify", "--now", "1", "--XYZSECRET=1"],
        ] {
            let outcome = try await Self.run(arguments)
            #expect(outcome.status == 2)
            #expect(!(outcome.output + outcome.error).contains("XYZSECRET"), "\(arguments): \(outcome.error)")
            #expect(outcome.error.contains("position"), "\(arguments): \(outcome.error)")
        }
    }

    @Test func redisOptionsAreCheckedAndAPasswordInAnArgumentIsRefusedUnechoed() async throws {
        let backend = ["replica", "--backend", "http://127.0.0.1:9/identity"]
        for (arguments, says) in [
            (["--redis", "redis://127.0.0.1:6379"], "--redis applies only with --fleet"),
            (["--fleet", "2", "--redis", "redis://:XYZSECRET@127.0.0.1"], "SESSION_ENGINE_REDIS_URL"),
            (["--fleet", "2", "--redis-ca", #filePath], "--redis-ca applies only with --redis"),
            (["--fleet", "2", "--redis", "redis://127.0.0.1", "--redis-certificate", #filePath], "rediss://"),
            (backend + ["--redis", "redis://app:XYZSECRET@127.0.0.1"], "SESSION_ENGINE_REDIS_URL"),
            (backend + ["--redis", "rediss://127.0.0.1", "--redis-ca", "/nonexistent/ca.pem"], "--redis-ca"),
            (
                backend + ["--redis", "rediss://127.0.0.1", "--redis-key", #filePath],
                "needs a client certificate"
            ),
            (backend + ["--share-credentials"], "--share-credentials applies only with --redis"),
            (backend + ["--fleet-burst", "2"], "--fleet-burst applies only with --redis"),
            (backend + ["--redis", "redis://127.0.0.1", "--fleet-burst", "0"], "--fleet-burst must be a whole number"),
        ] {
            let outcome = try await Self.run(arguments)
            #expect(outcome.status == 2, "\(arguments): \(outcome.error)")
            #expect(outcome.error.contains(says), "\(arguments): \(outcome.error)")
            #expect(!(outcome.output + outcome.error).contains("XYZSECRET"), "\(arguments): \(outcome.error)")
        }
    }

    @Test func aLineOverTheBoundIsRefusedWithoutEcho() async throws {
        let signer = try IdentitySigner(projectID: "proj_tools", secret: "loopback-secret")
        let credential = try signer.sign(email: "a@b.c", properties: nil)
        let credentialJSON =
            #"{"email":"a@b.c","expiresAt":\#(credential.expiresAt),"signature":"\#(credential.signature)"}"#
        // The over-long line carries what looks like a secret; no byte of it may come back.
        let secretLike = String(repeating: "XYZSECRET", count: 8_000)
        let overLong = #"{"email":"a@b.c","signature":"\#(secretLike)"}"#
        #expect(overLong.utf8.count > Self.lineBound)

        // verify: the line at the bound is checked, the one a byte over it is refused, and the lines after it are
        // still read.
        let verifyInput = [
            Self.padded(credentialJSON, to: Self.lineBound),
            Self.padded(credentialJSON, to: Self.lineBound + 1),
            overLong,
            credentialJSON,
        ]
        let verified = try await Self.run(["verify"], input: verifyInput.joined(separator: "\n") + "\n")
        let verifyLines = verified.output.split(separator: "\n").map(String.init)
        #expect(verified.status == 1, "\(verified.error)")
        #expect(verifyLines.count == 4, "\(verified.output)")
        #expect(verifyLines.first?.hasPrefix("line 1: valid: ") == true, "\(verified.output)")
        let refusal = "invalid (malformed): the line is longer than 65536 bytes"
        for number in [2, 3] {
            #expect(verifyLines.contains { $0.hasPrefix("line \(number): \(refusal)") }, "\(verified.output)")
        }
        #expect(verifyLines.last?.hasPrefix("line 4: valid: ") == true, "\(verified.output)")
        #expect(!(verified.output + verified.error).contains("XYZSECRET"))
        #expect(!(verified.output + verified.error).contains(credential.signature))

        // A single over-long credential on standard input is refused the same way.
        let single = try await Self.run(["verify"], input: overLong)
        #expect(single.status == 1)
        #expect(single.output.hasPrefix("invalid (malformed): the line is longer than 65536 bytes"), "\(single.output)")
        #expect(!(single.output + single.error).contains("XYZSECRET"))

        // sign --batch: one answer per line, in order; the over-long one is an error that does not show it. Its
        // output is signed credentials, so the expectations below never quote it.
        let signInput = [
            Self.padded(#"{"email":"first@example.com"}"#, to: Self.lineBound),
            Self.padded(#"{"email":"second@example.com"}"#, to: Self.lineBound + 1),
            overLong,
            #"{"email":"last@example.com"}"#,
        ]
        let signed = try await Self.run(["sign", "--batch"], input: signInput.joined(separator: "\n"))
        let signLines = signed.output.split(separator: "\n").map(String.init)
        let answers = signLines.map { line in
            if line.hasPrefix(#"{"email":"first@example.com","#) { return "first" }
            if line.hasPrefix(#"{"email":"last@example.com","#) { return "last" }
            if line.hasPrefix(#"{"error":"lineTooLong: the line is longer than 65536 bytes"#) { return "lineTooLong" }
            return "unexpected"
        }
        #expect(signed.status == 1, "\(signed.error)")
        #expect(answers == ["first", "lineTooLong", "lineTooLong", "last"])
        let echoed = (signed.output + signed.error).contains("XYZSECRET")
        #expect(!echoed)
    }

    /// Feeds a tool 40 MiB (a 32 MiB line, then 8 MiB of lines at half the bound) while it runs, and measures how
    /// much its peak resident memory grew over what it held after its first two lines. The old tools kept a whole
    /// line (`sign --batch`: the 32 MiB one) or the whole input (`verify`) and grew by more than the input; a
    /// streaming tool holds one bounded line and grows by a few hundred KiB. The bound, 16 MiB, is half the long
    /// line, and 256 of the bound's lines.
    @Test(arguments: ["verify", "sign"])
    func aLargeInputRunsInFlatMemory(tool: String) async throws {
        try #require(MemoryProbe.isAvailable, "needs /proc")
        let signer = try IdentitySigner(projectID: "proj_tools", secret: "loopback-secret")
        let credential = try signer.sign(email: "a@b.c", properties: nil)
        let line: String
        let arguments: [String]
        if tool == "verify" {
            line = #"{"email":"a@b.c","expiresAt":\#(credential.expiresAt),"signature":"\#(credential.signature)"}"#
            arguments = ["verify"]
        } else {
            line = #"{"email":"a@b.c"}"#
            arguments = ["sign", "--batch"]
        }
        let child = try Self.launch(arguments)
        defer { child.kill() }

        child.sendInput(Data((line + "\n" + line + "\n").utf8))
        try await child.printedLines(2, within: .seconds(30))
        let baseline = try #require(MemoryProbe.peakResidentBytes(ofProcess: child.processIdentifier))

        var large = Data(count: 32 << 20)
        large.append(UInt8(ascii: "\n"))
        let halfBound = Data((Self.padded(line, to: Self.lineBound / 2) + "\n").utf8)
        let lines = (8 << 20) / halfBound.count
        for _ in 0..<lines { large.append(halfBound) }
        child.sendInput(large)
        large = Data()
        // Every line answered, including the over-long one, while the tool still runs and still waits for input.
        try await child.printedLines(2 + 1 + lines, within: .seconds(50))
        let peak = try #require(MemoryProbe.peakResidentBytes(ofProcess: child.processIdentifier))
        child.closeInput()
        let outcome = try await child.finish(within: .seconds(10))

        let growth = peak - baseline
        #expect(growth < 16 << 20, "\(tool) grew by \(growth >> 20) MiB for 40 MiB of input (peak \(peak >> 20) MiB)")
        #expect(outcome.status == 1, "the over-long line is an error: \(outcome.errorText)")
        // `sign` prints credentials: the expectations count its lines and never quote them.
        let answered = outcome.outputText.split(separator: "\n").count
        #expect(answered == 2 + 1 + lines)
        if tool == "verify" {
            let shown = outcome.outputText.contains(credential.signature)
            #expect(!shown, "verify printed the signature")
        }
    }
}
