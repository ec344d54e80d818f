import SessionEngineExplorer

extension ExhaustiveReport {
    /// The outcomes by case, without their text: `passed 1234, failed 2`.
    var outcomeSummary: String {
        var counts: [String: Int] = [:]
        for (outcome, count) in outcomes {
            let kind =
                switch outcome {
                case .passed: "passed"
                case .failed: "failed"
                case .deadlock: "deadlock"
                case .stepLimit: "step limit"
                case .captureBroken: "capture broken"
                }
            counts[kind, default: 0] += count
        }
        return counts.sorted { $0.key < $1.key }.map { "\($0.key) \($0.value)" }.joined(separator: ", ")
    }
}
