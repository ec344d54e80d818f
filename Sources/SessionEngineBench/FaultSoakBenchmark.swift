import Foundation
import SessionEngine
import SessionEngineBackend

/// A pool of real engines over real loopback HTTP for minutes, through refused connections, `503` with `Retry-After`,
/// slow answers, hung answers and a secret rotation, while the process's resources must stay flat.
///
/// The backend is `Scripts/fault-soak-backend.py`, on 127.0.0.1 only: it signs real credentials that live 60 s, so
/// every account renews several times, and plays each fault on command. The pool fetches through
/// ``HTTPCredentialFetcher`` on the system clock. Every few seconds a line reports resident memory, open files,
/// threads, the backend's requests per second, applied clock offsets and accounts not identified; the summary gives
/// the slope of each after warm-up and a verdict per goal. Runs only when named (`--filter fault-soak`).
struct FaultSoakBenchmark: Benchmark {
    let name = "fault-soak"
    let summary = "a pool over loopback HTTP for minutes through refused, 503, slow and hung answers and a rotation"
    var runsByDefault: Bool { false }
    var failsOnMissedGoal: Bool { true }

    static let accounts = 300
    /// The backend's credentials' lifetime in seconds.
    static let lifetime = 60
    static let budget = SessionPoolConfiguration.Budget(
        maximumInFlight: 32, startsPerSecond: 20, burst: 20, outageThreshold: 8, outageProbeInterval: .seconds(5))
    /// How long the HTTP fetcher waits for an answer; the engine abandons a fetch after ``fetchTimeout``.
    static let httpTimeout: Duration = .seconds(3)
    static let fetchTimeout: Duration = .seconds(5)
    /// What the backend's `503` asks for.
    static let retryAfter = 4
    /// How long a slow answer takes.
    static let slowAnswer = 2.0
    /// Before the first fault: the sign-ins and the first renewals.
    static let warmup = 45.0
    /// A third of the lifetime, so accounts whose renewal falls into a fault expire before it ends.
    static let faultLength = 20.0
    /// The calm after each fault.
    static let calmLength = 20.0
    static let tick: Duration = .milliseconds(250)
    static let sampleEvery = 20
    /// The room an account has after a fault ends before its fetch goes: a probe's interval or the `Retry-After`,
    /// and one HTTP timeout, with 2 s to spare. The accounts still to identify then go at the budget's rate.
    static let recoverySlack = 10.0

    func run(_ options: Options) async throws -> [Figure] {
        let minutes = options.soakMinutes ?? 4
        let length = minutes * 60
        let schedule = Self.schedule(length: length)
        let secret = "fault-soak-" + (0..<4).map { _ in String(UInt64.random(in: .min ... .max), radix: 16) }.joined()
        let script = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent()
            .deletingLastPathComponent().appendingPathComponent("Scripts/fault-soak-backend.py").path
        guard
            let backend = PeerProcess(
                [
                    "python3", script, "--lifetime", String(Self.lifetime), "--retry-after", String(Self.retryAfter),
                    "--slow", String(Self.slowAnswer),
                ],
                environment: ["APPNORTH_PROJECT_ID": Fixtures.projectID, "APPNORTH_IDENTITY_SECRET": secret]),
            let portLine = backend.readLine(), portLine.hasPrefix("port "), let port = Int(portLine.dropFirst(5))
        else {
            progress("  fault-soak: python3 could not start the loopback backend; skipped")
            return [
                Figure(
                    name, Measurement("fault soak", .count, [0]),
                    goal: Goal(text: "the loopback backend runs", met: false), note: "python3 is missing")
            ]
        }
        defer { backend.finish() }
        progress(
            "  fault-soak: \(Self.accounts) accounts, \(Int(minutes * 60)) s against 127.0.0.1:\(port); faults: "
                + schedule.map { "\($0.fault.rawValue) at \(Int($0.start)) s" }.joined(separator: ", "))
        let run = SoakRun(backend: backend, port: port, secret: secret, schedule: schedule, length: length)
        let outcome = try await run.run()
        return figures(outcome, length: length)
    }

    /// The faults from the end of the warm-up on, each followed by a calm, for as many as fit into `length` seconds.
    static func schedule(length: Double) -> [ScheduledFault] {
        var faults: [ScheduledFault] = []
        var start = warmup
        for fault in FaultKind.allCases.cycled() {
            let faultLength = fault == .rotation ? 0 : Self.faultLength
            guard start + faultLength + calmLength <= length else { break }
            faults.append(ScheduledFault(fault: fault, start: start, end: start + faultLength))
            start += faultLength + calmLength
        }
        return faults
    }

    private func figures(_ outcome: SoakOutcome, length: Double) -> [Figure] {
        let warm = outcome.samples.filter { $0.time >= Self.warmup }
        func slope(_ value: (Sample) -> Double) -> Double {
            leastSquaresSlope(warm.map { ($0.time / 60, value($0)) })
        }
        let memorySlope = slope(\.memory)
        let filesSlope = slope { Double($0.files) }
        let threadsSlope = slope { Double($0.threads) }
        let rateSlope = slope(\.backendRate)
        let offsetsSlope = slope { Double($0.appliedOffsets) }
        let unidentifiedSlope = slope { Double($0.unidentified) }
        let bound = Self.budget.startsPerSecond + Double(Self.budget.burst)
        let meanMemory = warm.map(\.memory).reduce(0, +) / Double(max(1, warm.count))
        let meanRate = warm.map(\.backendRate).reduce(0, +) / Double(max(1, warm.count))
        var figures = [
            Figure(
                name, Measurement("resident memory after warm-up: slope per minute", .bytes, [memorySlope]),
                goal: Goal(text: "< 1 MiB/min", met: memorySlope < 1_048_576),
                note: String(
                    format: "%@ to %@ over %d samples, mean %@", Unit.bytes.format(warm.map(\.memory).min() ?? 0),
                    Unit.bytes.format(warm.map(\.memory).max() ?? 0), warm.count, Unit.bytes.format(meanMemory))),
            Figure(
                name, Measurement("open files after warm-up: slope per minute", .count, [filesSlope]),
                goal: Goal(text: "< 2/min", met: filesSlope < 2),
                note: "\(warm.map(\.files).min() ?? 0) to \(warm.map(\.files).max() ?? 0)"),
            Figure(
                name, Measurement("threads after warm-up: slope per minute", .count, [threadsSlope]),
                goal: Goal(text: "< 1/min", met: threadsSlope < 1),
                note: "\(warm.map(\.threads).min() ?? 0) to \(warm.map(\.threads).max() ?? 0)"),
            Figure(
                name, Measurement("backend requests per second after warm-up: slope per minute", .count, [rateSlope]),
                note: String(format: "mean %.1f/s, %d requests in all", meanRate, outcome.backendRequests)),
            Figure(
                name, Measurement("accounts not identified: slope per minute", .count, [unidentifiedSlope]),
                note: "at most \(outcome.samples.map(\.unidentified).max() ?? 0) in a sample"),
            Figure(
                name,
                Measurement(
                    "accounts with an applied clock offset, at most", .count,
                    [Double(outcome.maximumAppliedOffsets)]),
                goal: Goal(
                    text: "0, and no clockSkewSuspected (\(outcome.skewEvents))",
                    met: outcome.maximumAppliedOffsets == 0 && outcome.skewEvents == 0),
                note: String(format: "slope %.2f/min; %d events dropped", offsetsSlope, outcome.eventsDropped)),
            Figure(
                name, Measurement("peak fetch starts in any 1 s, at the pool", .perSecond, [outcome.clientPeak]),
                against: Measurement("the budget: rate plus bucket", .perSecond, [bound]),
                note: "\(outcome.clientStarts) fetch starts (authentication added) over the run"
            ).goal("≤ 1.0×") { $0 <= 1.0 },
            Figure(
                name,
                Measurement(
                    "peak requests in a calendar second, at the backend", .perSecond,
                    [outcome.backendPeak]),
                against: Measurement("the budget: rate plus bucket", .perSecond, [bound]),
                note: "refused connections never reach it"
            ).goal("≤ 1.0×") { $0 <= 1.0 },
            Figure(
                name,
                Measurement(
                    "budget wait of admitted fetches, largest p99 in a sample", .seconds,
                    [outcome.budgetWaitP99]),
                note: String(
                    format: "largest max %@; at the end: %@", Unit.seconds.format(outcome.budgetWaitMax),
                    outcome.finalBudgetWait)),
        ]
        for fault in outcome.faults {
            let limit = Self.recoverySlack + Double(fault.unidentifiedAtEnd) / Self.budget.startsPerSecond
            let recovered = fault.recovery.map { Unit.seconds.format($0) } ?? "never"
            figures.append(
                Figure(
                    name,
                    Measurement(
                        "\(fault.fault.description) at \(Int(fault.start)) s: every account identified after its end",
                        .seconds, [fault.recovery ?? .infinity]),
                    goal: Goal(
                        text: String(format: "≤ %.1f s", limit), met: fault.recovery.map { $0 <= limit } ?? false),
                    note: "\(fault.unidentifiedAtEnd) not identified at its end, at most \(fault.maximumUnidentified); "
                        + "recovered after \(recovered)"))
        }
        figures.append(
            Figure(
                name, Measurement("accounts not identified at the end", .count, [Double(outcome.finalUnidentified)]),
                goal: Goal(text: "0", met: outcome.finalUnidentified == 0), note: outcome.failures))
        return figures
    }
}

/// A fault the backend plays.
enum FaultKind: String, CaseIterable, Sendable, CustomStringConvertible {
    case refused
    case retryAfter = "retry-after"
    case slow
    case hung
    case rotation

    var description: String {
        switch self {
        case .refused: "connections refused"
        case .retryAfter: "503 with Retry-After: \(FaultSoakBenchmark.retryAfter)"
        case .slow: "answers after \(FaultSoakBenchmark.slowAnswer) s"
        case .hung: "hung answers"
        case .rotation: "secret rotation"
        }
    }
}

extension Array {
    /// The elements again and again, for as long as the caller reads.
    fileprivate func cycled() -> some Sequence<Element> {
        sequence(state: 0) { index in
            defer { index += 1 }
            return self.isEmpty ? nil : self[index % self.count]
        }
    }
}

/// A fault and when it runs, in seconds from the start.
struct ScheduledFault: Sendable {
    var fault: FaultKind
    var start: Double
    var end: Double
}

/// One line of the soak's report.
struct Sample: Sendable {
    var time: Double
    var memory: Double
    var files: Int
    var threads: Int
    var backendRate: Double
    var appliedOffsets: Int
    var unidentified: Int
}

/// What the soak saw.
struct SoakOutcome: Sendable {
    /// How one fault went.
    struct Fault: Sendable {
        var fault: FaultKind
        var start: Double
        var unidentifiedAtEnd: Int
        var maximumUnidentified: Int
        /// Seconds from the fault's end until every account was identified (by a credential the service accepts).
        var recovery: Double?
    }

    var samples: [Sample] = []
    var faults: [Fault] = []
    var maximumAppliedOffsets = 0
    var skewEvents = 0
    var eventsDropped = 0
    var clientPeak = 0.0
    var clientStarts = 0
    var backendPeak = 0.0
    var backendRequests = 0
    var budgetWaitP99 = 0.0
    var budgetWaitMax = 0.0
    var finalBudgetWait = ""
    var finalUnidentified = 0
    var failures = ""
}

/// The least-squares slope of `points` (x, y); 0 for fewer than two distinct x.
func leastSquaresSlope(_ points: [(Double, Double)]) -> Double {
    guard points.count >= 2 else { return 0 }
    let count = Double(points.count)
    let meanX = points.map(\.0).reduce(0, +) / count
    let meanY = points.map(\.1).reduce(0, +) / count
    let covariance = points.map { ($0.0 - meanX) * ($0.1 - meanY) }.reduce(0, +)
    let variance = points.map { ($0.0 - meanX) * ($0.0 - meanX) }.reduce(0, +)
    return variance > 0 ? covariance / variance : 0
}

/// The process's open file descriptors, from `/proc/self/fd`.
func openFiles() -> Int {
    // The directory's own descriptor, open while it is read, is not counted.
    max(0, ((try? FileManager.default.contentsOfDirectory(atPath: "/proc/self/fd"))?.count ?? 1) - 1)
}

/// The process's threads, from `Threads` in `/proc/self/status`.
func threadCount() -> Int {
    guard let status = try? String(contentsOfFile: "/proc/self/status", encoding: .utf8) else { return 0 }
    for line in status.split(separator: "\n") where line.hasPrefix("Threads:") {
        return Int(line.dropFirst("Threads:".count).trimmingCharacters(in: .whitespaces)) ?? 0
    }
    return 0
}
