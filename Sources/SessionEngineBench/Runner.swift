import Foundation

/// How the benchmarks run, from the command line.
struct Options: Sendable {
    /// A smoke run: fewer and shorter rounds and smaller workloads, to prove the benchmarks still work.
    var quick = false
    /// Print one JSON document instead of the table.
    var json = false
    /// Run only benchmarks whose name contains this text.
    var filter: String?
    /// Renewal cycles of the soak benchmark; `nil` for the mode's default.
    var soakCycles: Int?
    /// Accounts of the pool-day benchmark's 24-hour days; `nil` for the mode's default.
    var dayAccounts: Int?
    /// Accounts the pool benchmark signs in and reads; `nil` for the mode's default.
    var poolAccounts: Int?
    /// Minutes of the fault-soak benchmark; `nil` for its default.
    var soakMinutes: Double?

    /// Measured rounds per figure.
    var rounds: Int { quick ? 3 : 7 }
    /// Rounds run and discarded before measuring.
    var warmupRounds: Int { 1 }
}

/// One benchmark: a named workload that measures figures against baselines run in the same process.
protocol Benchmark: Sendable {
    /// The name `--filter` matches.
    var name: String { get }
    /// One line on what it measures.
    var summary: String { get }
    /// Runs the benchmark and returns its figures.
    func run(_ options: Options) async throws -> [Figure]
    /// Whether a run without `--filter` includes it; one that does not runs only when `--filter` names it exactly.
    var runsByDefault: Bool { get }
    /// Whether a goal it misses makes the process exit non-zero.
    var failsOnMissedGoal: Bool { get }
}

extension Benchmark {
    var runsByDefault: Bool { true }
    var failsOnMissedGoal: Bool { false }
}

/// How a figure is printed: the unit of its values.
enum Unit: String, Codable, Sendable {
    /// Seconds, printed as ns, µs, ms or s.
    case seconds
    /// Operations per second.
    case perSecond
    /// Bytes, printed as B, KiB or MiB.
    case bytes
    /// A plain count.
    case count
    /// A dimensionless ratio.
    case ratio

    func format(_ value: Double) -> String {
        switch self {
        case .seconds:
            let magnitude = abs(value)
            if magnitude < 1e-6 { return String(format: "%.1f ns", value * 1e9) }
            if magnitude < 1e-3 { return String(format: "%.2f µs", value * 1e6) }
            if magnitude < 1 { return String(format: "%.2f ms", value * 1e3) }
            return String(format: "%.2f s", value)
        case .perSecond:
            if value >= 1e6 { return String(format: "%.2f M/s", value / 1e6) }
            if value >= 1e3 { return String(format: "%.1f k/s", value / 1e3) }
            return String(format: "%.1f /s", value)
        case .bytes:
            let magnitude = abs(value)
            if magnitude >= 1_048_576 { return String(format: "%.2f MiB", value / 1_048_576) }
            if magnitude >= 1024 { return String(format: "%.1f KiB", value / 1024) }
            return String(format: "%.0f B", value)
        case .count:
            return value == value.rounded() ? String(format: "%.0f", value) : String(format: "%.2f", value)
        case .ratio:
            return String(format: "%.2f×", value)
        }
    }
}

/// A named series of rounds.
struct Measurement: Codable, Sendable {
    var name: String
    var unit: Unit
    var summary: Summary

    init(_ name: String, _ unit: Unit, _ rounds: [Double]) {
        self.name = name
        self.unit = unit
        self.summary = Summary(rounds)
    }
}

/// A goal the figure is meant to reach, and whether this run reached it.
struct Goal: Codable, Sendable {
    var text: String
    var met: Bool
}

/// One line of the report: a measurement, the baseline it is compared with and their ratio.
struct Figure: Codable, Sendable {
    var benchmark: String
    var measurement: Measurement
    var baseline: Measurement?
    /// The measurement divided by the baseline: the median of the round-by-round ratios when the two were measured
    /// in alternating rounds, otherwise the ratio of the medians.
    var ratio: Double?
    var goal: Goal?
    var note: String?

    init(
        _ benchmark: String,
        _ measurement: Measurement,
        against baseline: Measurement? = nil,
        goal: Goal? = nil,
        note: String? = nil,
        paired: Bool = false
    ) {
        self.benchmark = benchmark
        self.measurement = measurement
        self.baseline = baseline
        if let baseline {
            let rounds = measurement.summary.rounds
            let baselineRounds = baseline.summary.rounds
            if paired, rounds.count == baselineRounds.count, !baselineRounds.contains(0) {
                self.ratio = Summary(zip(rounds, baselineRounds).map { $0 / $1 }).median
            } else if baseline.summary.median != 0 {
                self.ratio = measurement.summary.median / baseline.summary.median
            }
        }
        self.goal = goal
        self.note = note
    }
}

extension Figure {
    /// The figure with a goal on its ratio.
    ///
    /// - Parameters:
    ///   - text: The goal as printed, such as `≤ 3×`.
    ///   - isMet: Whether a ratio meets the goal.
    func goal(_ text: String, _ isMet: (Double) -> Bool) -> Figure {
        var figure = self
        figure.goal = Goal(text: text, met: ratio.map(isMet) ?? false)
        return figure
    }
}

/// `1000` as `1,000`.
func grouped(_ value: Int) -> String {
    let digits = String(value)
    var result = ""
    for (index, digit) in digits.enumerated() {
        if index > 0 && (digits.count - index) % 3 == 0 { result.append(",") }
        result.append(digit)
    }
    return result
}

/// Writes progress to standard error, so standard output holds only the report.
func progress(_ message: String) {
    FileHandle.standardError.write(Data((message + "\n").utf8))
}

/// Prints the figures as a Markdown table, ratios first in each row's reading order.
func printTable(_ figures: [Figure]) {
    print("| Benchmark | Measure | Median | Spread | Baseline (median) | Ratio | Goal |")
    print("|---|---|---|---|---|---|---|")
    for figure in figures {
        let measurement = figure.measurement
        let summary = measurement.summary
        let spread = summary.rounds.count > 1 ? String(format: "±%.0f%%", summary.spread * 50) : "n=1"
        let baseline = figure.baseline.map { "\($0.name): \($0.unit.format($0.summary.median))" } ?? "—"
        let ratio = figure.ratio.map { String(format: $0 < 0.1 ? "**%.2g×**" : "**%.2f×**", $0) } ?? "—"
        var goal = figure.goal.map { "\($0.text) \($0.met ? "✅" : "❌ missed")" } ?? ""
        if let note = figure.note { goal += goal.isEmpty ? note : "; \(note)" }
        let cells = [
            figure.benchmark, measurement.name, measurement.unit.format(summary.median), spread, baseline, ratio,
            goal.isEmpty ? "—" : goal,
        ]
        print("| " + cells.map { $0.replacingOccurrences(of: "|", with: "\\|") }.joined(separator: " | ") + " |")
    }
}

/// Prints the figures and the run's context as one JSON document.
func printJSON(_ figures: [Figure], options: Options, wallTime: Duration) throws {
    struct Report: Encodable {
        var date: String
        var machine: String
        var quick: Bool
        var wallTimeSeconds: Double
        var figures: [Figure]
    }
    let report = Report(
        date: ISO8601DateFormatter().string(from: Date()),
        machine: machineDescription(),
        quick: options.quick,
        wallTimeSeconds: wallTime.seconds,
        figures: figures
    )
    let encoder = JSONEncoder()
    encoder.outputFormatting = [.prettyPrinted, .sortedKeys]
    print(String(decoding: try encoder.encode(report), as: UTF8.self))
}

/// The CPU model and the number of processors, for the report's header.
func machineDescription() -> String {
    var model = "unknown CPU"
    if let info = try? String(contentsOfFile: "/proc/cpuinfo", encoding: .utf8),
        let line = info.split(separator: "\n").first(where: { $0.hasPrefix("model name") }),
        let colon = line.firstIndex(of: ":")
    {
        model = line[line.index(after: colon)...].trimmingCharacters(in: .whitespaces)
    }
    return "\(model), \(ProcessInfo.processInfo.activeProcessorCount) cores"
}
