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
}
