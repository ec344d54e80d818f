import Foundation
import SessionEngine
import SessionEngineBackend

/// `SessionEngineDemo verify`: checks credentials as the service does and says which check failed.
enum VerifyCommand {
    static let usage = """
        USAGE: SessionEngineDemo verify [--credential JSON] [--project-id ID] [--now UNIX]

        Checks credentials {"email","expiresAt","signature","properties"?} as the service does, with the secret in
        APPNORTH_IDENTITY_SECRET (read only from the environment, never printed) and the project in --project-id or
        APPNORTH_PROJECT_ID. Reads one credential per line from standard input, or one from --credential. A line
        longer than \(InputLines.maximumLength) bytes is reported as malformed without being shown.

          --credential JSON    the credential to check instead of standard input
          --now UNIX           check expiry at this Unix time (0 to 253402300799) instead of now

        For each credential it prints "valid", or "invalid" with the check that failed: malformed,
        signatureMismatch, expired or lifetimeTooLong. For a signature mismatch it prints the exact payload it
        signed, as a JSON string (newlines shown as \\n), to compare with the payload your backend signed. The
        signature itself is never printed.

        Exit status: 0 when every credential is valid, 1 when any is invalid, 2 for a usage error.
        """

    static func run(_ arguments: [String]) -> Int32 {
        let verifier: IdentityVerifier
        let credential: String?
        let now: Int64
        do {
            let options = try Options(command: arguments, valued: ["credential", "project-id", "now"], flags: [])
            if options.has("help") {
                print(usage)
                return 0
            }
            let secret = try IdentityEnvironment.secret()
            let projectID = try IdentityEnvironment.requiredProjectID(options)
            now = try options.integer("now", in: 0...latestNow, default: Int64(Date().timeIntervalSince1970))
            do {
                verifier = try IdentityVerifier(
                    projectID: projectID,
                    secret: secret,
                    clock: FixedClock(now: Date(timeIntervalSince1970: TimeInterval(now)))
                )
            } catch {
                throw Options.UsageError(description: error.description)
            }
            credential = options["credential"]
        } catch {
            return usageFailure(error)
        }
        if let credential {
            let lines = report(credential, verifier: verifier, now: now)
            print(lines.text.joined(separator: "\n"))
            return lines.valid ? 0 : 1
        }
        do {
            return try verifyStandardInput(verifier: verifier, now: now)
        } catch {
            return usageFailure(error)
        }
    }

    /// Verifies standard input line by line as it arrives, holding one line at a time.
    ///
    /// Each report is prefixed with its line number (`line 7: `) when the input holds more than one credential, so
    /// the first report waits for a second credential or the end of the input. Blank lines are skipped.
    private static func verifyStandardInput(verifier: IdentityVerifier, now: Int64) throws -> Int32 {
        var input = InputLines()
        var lineNumber = 0
        var first: (number: Int, valid: Bool, text: [String])?
        var reported = 0
        var allValid = true
        func emit(_ number: Int, _ text: [String], prefixed: Bool) {
            let prefix = prefixed ? "line \(number): " : ""
            print(prefix + text.joined(separator: "\n" + String(repeating: " ", count: prefix.count)))
        }
        while let line = try input.next() {
            lineNumber += 1
            let outcome: (valid: Bool, text: [String])
            switch line {
            case .text(let text):
                if text.allSatisfy(\.isWhitespace) { continue }
                outcome = report(text, verifier: verifier, now: now)
            case .tooLong:
                outcome = (false, ["invalid (malformed): \(InputLines.tooLongReason)"])
            }
            allValid = allValid && outcome.valid
            reported += 1
            if reported == 1 {
                first = (lineNumber, outcome.valid, outcome.text)
                continue
            }
            if let held = first {
                emit(held.number, held.text, prefixed: true)
                first = nil
            }
            emit(lineNumber, outcome.text, prefixed: true)
        }
        guard reported > 0 else {
            throw Options.UsageError(description: "no credential on standard input")
        }
        if let held = first { emit(held.number, held.text, prefixed: false) }
        return allValid ? 0 : 1
    }

    private static func usageFailure(_ error: any Error) -> Int32 {
        let reason = (error as? InputProblem)?.describedReason ?? "\(error)"
        FileHandle.standardError.write(Data("error: \(reason)\nRun SessionEngineDemo verify --help for usage.\n".utf8))
        return 2
    }

    /// The latest `--now` accepted: the last second of the year 9999.
    static let latestNow: Int64 = 253_402_300_799

    /// `later - earlier` in seconds, saturating instead of trapping when an `Int64` cannot hold it.
    static func seconds(from earlier: Int64, to later: Int64) -> Int64 {
        let (difference, overflow) = later.subtractingReportingOverflow(earlier)
        guard overflow else { return difference }
        return later > earlier ? .max : .min
    }

    /// Verifies one credential line and describes the outcome.
    static func report(_ input: String, verifier: IdentityVerifier, now: Int64) -> (valid: Bool, text: [String]) {
        let credential: IdentityCredential
        do {
            credential = try IdentityCredential(json: Data(input.utf8))
        } catch {
            return (false, ["invalid (malformed): \(error.description)"])
        }
        switch verifier.verify(credential) {
        case .valid(let credential):
            let remaining = seconds(from: now, to: credential.expiresAt)
            return (true, ["valid: \(credential), expires in \(describe(seconds: remaining))"])
        case .invalid(let failure):
            var text = ["invalid (\(failure.check)): \(failure.reason)"]
            switch failure.check {
            case .signatureMismatch:
                if let payload = failure.signedPayload {
                    text.append(
                        "  signed payload (\(credential.version), as a JSON string): \(JSONObject.quoted(payload))")
                    text.append(
                        "  compare it byte for byte with what your backend signed; usual causes: another project ID or "
                            + "secret, an email not trimmed and lowercased before signing, properties not serialized "
                            + "as JSON.stringify with sorted keys"
                    )
                }
            case .expired:
                let ago = seconds(from: credential.expiresAt, to: now)
                text.append("  expiresAt \(credential.expiresAt) was \(describe(seconds: ago)) ago")
            case .lifetimeTooLong:
                let ahead = seconds(from: now, to: credential.expiresAt)
                text.append("  expiresAt \(credential.expiresAt) is \(describe(seconds: ahead)) from now")
            case .malformed:
                break
            }
            return (false, text)
        }
    }

    /// `1h 02m 03s`, `4m 05s` or `6s`.
    static func describe(seconds: Int64) -> String {
        let seconds = max(0, seconds)
        let (hours, minutes, rest) = (seconds / 3600, seconds % 3600 / 60, seconds % 60)
        func two(_ value: Int64) -> String { value < 10 ? "0\(value)" : "\(value)" }
        if hours > 0 { return "\(hours)h \(two(minutes))m \(two(rest))s" }
        if minutes > 0 { return "\(minutes)m \(two(rest))s" }
        return "\(rest)s"
    }
}

/// A clock that stays at one moment: the verifier checks expiry against `--now` or the time it started.
private struct FixedClock: SessionClock {
    let now: Date
    let uptime: Duration = .zero

    /// The verifier never sleeps; a sleep returns at once.
    func sleep(for duration: Duration) async throws {
        try Task.checkCancellation()
    }
}
