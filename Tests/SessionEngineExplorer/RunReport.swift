/// What one run under the explorer did.
package struct RunReport: Sendable {
    /// How a run ended.
    package enum Outcome: Sendable, Hashable, CustomStringConvertible {
        /// The program's task returned and every job left ran.
        case passed
        /// The program threw; the message is the error's description.
        case failed(String)
        /// Nothing was runnable while the program's task had not finished; the text is the caller's diagnostics
        /// (what is parked).
        case deadlock(String)
        /// The run took more steps than its limit.
        case stepLimit
        /// A job escaped the explorer (it was enqueued or took a lock on another thread, asked for real time or the
        /// main actor, or was queued before the run began); the run's interleaving is not the schedule's.
        case captureBroken(String)

        /// One line: the case and its text.
        package var description: String {
            switch self {
            case .passed: return "passed"
            case .failed(let message): return "failed: \(message)"
            case .deadlock(let parked): return "deadlock: \(parked)"
            case .stepLimit: return "step limit"
            case .captureBroken(let reason): return "capture broken: \(reason)"
            }
        }

        /// Whether the outcome is ``passed``.
        package var isPassed: Bool { self == .passed }
    }

    /// How the run ended.
    package var outcome: Outcome
    /// The jobs run.
    package var steps: Int
    /// The steps at which more than one job was runnable.
    package var choicePoints: Int
    /// The choices made; replaying it (``Strategy/replay(_:)``) repeats this run exactly.
    package var schedule: Schedule
}

/// Why the explorer cannot run, or a self-test failed.
package struct ExplorerError: Error, Sendable, CustomStringConvertible {
    /// What went wrong, with where to look.
    package var reason: String

    /// Creates an error.
    ///
    /// - Parameter reason: What went wrong, with where to look.
    package init(_ reason: String) {
        self.reason = reason
    }

    /// The reason.
    package var description: String { reason }
}
