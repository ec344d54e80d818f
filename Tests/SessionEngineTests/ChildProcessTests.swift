import Foundation
import Testing

/// `ChildProcess`, the way the tests run the demo and the Python backends: both output pipes drained together, input
/// written while output is read, and every wait bounded.
///
/// The children are `/bin/sh` scripts and coreutils. The only real-time waits are the limits a hung child is killed
/// at; they wait for a child process, never for the engine.
@Suite(.timeLimit(TimeLimits.minutes(1)))
struct ChildProcessTests {
    static let shell = URL(fileURLWithPath: "/bin/sh")
    static let mebibyte = 1 << 20

    /// `count` bytes of `letter` on standard output, as a shell command.
    static func write(_ count: Int, of letter: Character) -> String {
        "head -c \(count) /dev/zero | tr '\\0' '\(letter)'"
    }

    @Test(arguments: [true, false])
    func aChildThatFillsBothPipesFinishes(errorFirst: Bool) async throws {
        // 1 MiB on each pipe, one after the other: reading either pipe to its end before the other deadlocks once the
        // child blocks on the other pipe's 64 KiB.
        let error = Self.write(Self.mebibyte, of: "e") + " >&2"
        let output = Self.write(Self.mebibyte, of: "o")
        let script = errorFirst ? "\(error); \(output)" : "\(output); \(error)"
        let outcome = try await ChildProcess.run(Self.shell, arguments: ["-c", script])
        #expect(outcome.reason == .exit)
        #expect(outcome.status == 0, "\(outcome.errorText.prefix(200))")
        #expect(outcome.output == Data(repeating: UInt8(ascii: "o"), count: Self.mebibyte))
        #expect(outcome.error == Data(repeating: UInt8(ascii: "e"), count: Self.mebibyte))
    }

    @Test func inputIsWrittenWhileOutputIsRead() async throws {
        // `cat` echoes as it reads, so writing all 1 MiB before reading would deadlock on the full output pipe.
        let input = Data((0..<Self.mebibyte).map { UInt8(truncatingIfNeeded: $0 &* 31) })
        let outcome = try await ChildProcess.run(URL(fileURLWithPath: "/bin/cat"), input: input)
        #expect(outcome.status == 0)
        #expect(outcome.output == input)
    }

    @Test func aChildPastItsTimeLimitIsKilledAndNamed() async throws {
        // The sleep runs in a pipeline, so only killing the child's whole process group ends it.
        let failure = await #expect(throws: ChildProcess.Failure.self) {
            try await ChildProcess.run(
                Self.shell, arguments: ["-c", "echo started >&2; sleep 60 | cat"], name: "the sleeper",
                timeLimit: .milliseconds(300))
        }
        let description = failure?.description ?? ""
        #expect(description.contains("the sleeper did not exit within"), "\(description)")
        #expect(description.contains("so it was killed"), "\(description)")
        #expect(description.contains("started"), "the failure shows the end of standard error: \(description)")
    }

    @Test func aChildThatWritesTooMuchIsKilled() async throws {
        let failure = await #expect(throws: ChildProcess.Failure.self) {
            try await ChildProcess.run(
                Self.shell, arguments: ["-c", "exec yes"], name: "yes", outputLimit: Self.mebibyte)
        }
        #expect(failure?.description.contains("yes wrote more than 1048576 bytes") == true, "\(failure as Any)")
    }

    @Test func aFirstLineIsReadWhileTheChildRuns() async throws {
        let child = try ChildProcess.launch(
            Self.shell, arguments: ["-c", "echo 4242; exec cat >/dev/null"], keepsInputOpen: true)
        #expect(try await child.firstLine(within: .seconds(30)) == "4242")
        // The child runs until its standard input closes.
        child.closeInput()
        let outcome = try await child.finish(within: .seconds(30))
        #expect(outcome.reason == .exit)
        #expect(outcome.status == 0)
    }

    @Test func aChildThatEndsBeforeALineFails() async throws {
        let child = try ChildProcess.launch(
            Self.shell, arguments: ["-c", "printf 'no newline'; echo oops >&2; exit 3"])
        let failure = await #expect(throws: ChildProcess.Failure.self) {
            try await child.firstLine(within: .seconds(30))
        }
        #expect(failure?.description.contains("closed its standard output before printing a line") == true)
        let outcome = try await child.finish(within: .seconds(30))
        #expect(outcome.status == 3)
        #expect(outcome.outputText == "no newline")
        #expect(outcome.errorText == "oops\n")
    }

    @Test func cancellingTheWaitKillsTheChild() async throws {
        let child = try ChildProcess.launch(Self.shell, arguments: ["-c", "exec sleep 60"], keepsInputOpen: true)
        let wait = Task { try await child.finish(within: .seconds(60)) }
        wait.cancel()
        await #expect(throws: CancellationError.self) { try await wait.value }
        // The child was killed, so a new wait ends at once: the bound here is never reached.
        await #expect(throws: CancellationError.self) { try await child.finish(within: .seconds(30)) }
    }
}
