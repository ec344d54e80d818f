/// The choices of one run: at each choice point, the index into the runnable jobs in enqueue (FIFO) order.
///
/// Index 0 is "no deviation" (the job enqueued first). A schedule shorter than the run means FIFO for the rest, so
/// truncating a schedule and zeroing its tail are the same. The printed form is compact: the choices separated by
/// dots, a run of `n` equal choices `v` written `vxn` (`"0x12.3.0x5.1"`); the empty schedule prints as `"-"`.
package struct Schedule: Sendable, Hashable, CustomStringConvertible, LosslessStringConvertible {
    /// The choice at each choice point.
    package var choices: [Int]

    /// Creates a schedule from its choices.
    ///
    /// - Parameter choices: The index chosen at each choice point; index 0 is the FIFO choice.
    package init(_ choices: [Int] = []) {
        self.choices = choices
    }

    /// Parses the printed form (``description``); nil when `text` is not one.
    ///
    /// - Parameter description: Dot-separated choices, `vxn` for `n` repetitions of `v`, or `"-"` for none.
    package init?(_ description: String) {
        let text = description.trimmingWhitespace()
        if text.isEmpty || text == "-" {
            self.init([])
            return
        }
        var choices: [Int] = []
        for part in text.split(separator: ".", omittingEmptySubsequences: false) {
            let pieces = part.split(separator: "x", omittingEmptySubsequences: false)
            switch pieces.count {
            case 1:
                guard let value = Int(pieces[0]), value >= 0 else { return nil }
                choices.append(value)
            case 2:
                guard let value = Int(pieces[0]), value >= 0, let count = Int(pieces[1]), count >= 1,
                    count <= 10_000_000
                else { return nil }
                choices.append(contentsOf: repeatElement(value, count: count))
            default:
                return nil
            }
        }
        self.init(choices)
    }

    /// The number of choices that are not FIFO (non-zero).
    package var deviations: Int {
        choices.reduce(0) { $0 + ($1 == 0 ? 0 : 1) }
    }

    /// The same schedule without its trailing FIFO choices (which a replay makes anyway).
    package var trimmed: Schedule {
        var choices = choices
        while choices.last == 0 {
            choices.removeLast()
        }
        return Schedule(choices)
    }

    /// The compact printed form, e.g. `"0x12.3.0x5.1"`; `"-"` for the empty schedule.
    package var description: String {
        if choices.isEmpty {
            return "-"
        }
        var parts: [String] = []
        var index = 0
        while index < choices.count {
            var end = index + 1
            while end < choices.count && choices[end] == choices[index] {
                end += 1
            }
            let count = end - index
            parts.append(count == 1 ? "\(choices[index])" : "\(choices[index])x\(count)")
            index = end
        }
        return parts.joined(separator: ".")
    }

    /// Shrinks a failing schedule: truncates its tail, then zeroes its deviations one at a time, keeping each change
    /// while `stillFails` says the run it replays still fails.
    ///
    /// Zeroing a choice changes which jobs later indices name, so the result is a smaller failing schedule, not
    /// necessarily the smallest one.
    ///
    /// - Parameters:
    ///   - schedule: A schedule whose replay fails.
    ///   - stillFails: Replays a candidate and says whether it still fails.
    /// - Returns: A schedule with at most as many deviations that still fails (`schedule` itself when nothing
    ///   smaller does).
    package static func shrink(_ schedule: Schedule, stillFails: (Schedule) -> Bool) -> Schedule {
        var best = schedule.trimmed
        // Truncation: the shortest prefix that still fails, by halving the cut.
        var keep = best.choices.count
        var step = keep / 2
        while step > 0 {
            let candidate = Schedule(Array(best.choices.prefix(keep - step))).trimmed
            if candidate.choices.count < keep && stillFails(candidate) {
                best = candidate
                keep = candidate.choices.count
                step = min(step, keep / 2)
            } else {
                step /= 2
            }
        }
        // Zeroing: each remaining deviation, first to last, repeated until nothing changes.
        var changed = true
        while changed {
            changed = false
            for index in best.choices.indices where best.choices[index] != 0 {
                var candidate = best
                candidate.choices[index] = 0
                candidate = candidate.trimmed
                if stillFails(candidate) {
                    best = candidate
                    changed = true
                    break
                }
            }
        }
        return best
    }
}

extension String {
    /// The string without leading and trailing spaces, tabs and newlines.
    fileprivate func trimmingWhitespace() -> String {
        let isSpace: (Character) -> Bool = { $0 == " " || $0 == "\t" || $0 == "\n" || $0 == "\r" }
        guard let first = firstIndex(where: { !isSpace($0) }), let last = lastIndex(where: { !isSpace($0) }) else {
            return ""
        }
        return String(self[first...last])
    }
}
