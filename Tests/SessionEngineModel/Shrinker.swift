/// An operation that knows simpler forms of itself, for shrinking a failing program.
package protocol Shrinkable {
    /// Replacements for this operation, simplest first; each is a sequence, so a compound operation can be split
    /// into its parts. Removing the operation altogether is tried separately.
    var simplerForms: [[Self]] { get }
}

/// Reduces a failing operation sequence to a small one that still fails.
///
/// First whole chunks of operations are dropped (halves, then quarters, down to single operations), then each
/// remaining operation is replaced by its simpler forms; both passes repeat until neither makes progress or the
/// budget of attempts is spent. Every candidate is run through `stillFails`, so a reduction is kept only if it
/// reproduces a failure.
///
/// The passes live in one value, ``Search``, that proposes candidates and is told whether each still fails; the
/// asynchronous `shrink` (the property tests) and the synchronous one (the schedule explorer, which runs every
/// candidate to completion on its own thread, outside any task) only differ in how they run a candidate.
package enum Shrinker {
    package struct Result<Operation> {
        package var operations: [Operation]
        package var attempts: Int
        package var reductions: Int
    }

    /// Reduces a failing program, running each candidate in an async context.
    ///
    /// - Parameters:
    ///   - operations: A failing program.
    ///   - budget: How many candidates may run.
    ///   - stillFails: Runs a candidate and says whether it still fails.
    /// - Returns: The smallest failing program found, with the attempts and reductions made.
    package static func shrink<Operation: Shrinkable>(
        _ operations: [Operation],
        budget: Int,
        stillFails: ([Operation]) async -> Bool
    ) async -> Result<Operation> {
        var search = Search(operations, budget: budget)
        while let candidate = search.nextCandidate() {
            search.record(stillFails: await stillFails(candidate))
        }
        return search.result
    }

    /// Reduces a failing program with the same passes, for a caller that has no async context.
    ///
    /// - Parameters:
    ///   - operations: A failing program.
    ///   - budget: How many candidates may run.
    ///   - stillFails: Runs a candidate and says whether it still fails.
    /// - Returns: The smallest failing program found, with the attempts and reductions made.
    package static func shrink<Operation: Shrinkable>(
        _ operations: [Operation],
        budget: Int,
        stillFails: ([Operation]) -> Bool
    ) -> Result<Operation> {
        var search = Search(operations, budget: budget)
        while let candidate = search.nextCandidate() {
            search.record(stillFails: stillFails(candidate))
        }
        return search.result
    }

    /// The shrinking passes as a value: it proposes the next candidate, and is told whether that candidate still
    /// fails before it proposes another.
    package struct Search<Operation: Shrinkable> {
        /// Where the passes stand.
        private enum Pass {
            /// Dropping `chunk` operations from `start`.
            case dropping(chunk: Int, start: Int)
            /// Replacing the operation at `index` by its simpler form number `form`.
            case simplifying(index: Int, form: Int)
            /// Neither pass made progress, or the budget is spent.
            case done
        }

        /// The smallest failing program so far.
        package private(set) var current: [Operation]
        private let budget: Int
        private var attempts = 0
        private var reductions = 0
        private var pass: Pass
        /// Whether a candidate was kept since the dropping pass last began.
        private var progressed = false
        /// The candidate proposed and not yet recorded.
        private var pending: [Operation]?

        /// Begins shrinking `operations` with at most `budget` candidates.
        package init(_ operations: [Operation], budget: Int) {
            current = operations
            self.budget = budget
            pass = .dropping(chunk: max(1, operations.count / 2), start: 0)
        }

        /// What shrinking found so far.
        package var result: Result<Operation> {
            Result(operations: current, attempts: attempts, reductions: reductions)
        }

        /// The next candidate to run, or `nil` when shrinking is over; ``record(stillFails:)`` must follow each.
        package mutating func nextCandidate() -> [Operation]? {
            precondition(pending == nil, "the previous candidate was not recorded")
            while attempts < budget {
                switch pass {
                case .dropping(let chunk, let start):
                    if start < current.count {
                        // Drop chunks, largest first.
                        var candidate = current
                        candidate.removeSubrange(start..<min(current.count, start + chunk))
                        pending = candidate
                        return candidate
                    }
                    pass = chunk == 1 ? .simplifying(index: 0, form: 0) : .dropping(chunk: chunk / 2, start: 0)
                case .simplifying(let index, let form):
                    if index < current.count {
                        // Simplify single operations.
                        let forms = current[index].simplerForms
                        guard form < forms.count else {
                            pass = .simplifying(index: index + 1, form: 0)
                            continue
                        }
                        var candidate = current
                        candidate.replaceSubrange(index...index, with: forms[form])
                        pending = candidate
                        return candidate
                    }
                    // The end of both passes: repeat them while they make progress.
                    guard progressed else {
                        pass = .done
                        return nil
                    }
                    progressed = false
                    pass = .dropping(chunk: max(1, current.count / 2), start: 0)
                case .done:
                    return nil
                }
            }
            return nil
        }

        /// Records whether the candidate ``nextCandidate()`` proposed still fails; a failing one becomes the
        /// current program.
        package mutating func record(stillFails: Bool) {
            guard let candidate = pending else { preconditionFailure("no candidate was proposed") }
            pending = nil
            attempts += 1
            if stillFails {
                current = candidate
                reductions += 1
                progressed = true
            }
            switch pass {
            case .dropping(let chunk, let start):
                // A kept drop leaves the next operations at `start`; a refused one moves past the chunk.
                pass = .dropping(chunk: chunk, start: stillFails ? start : start + chunk)
            case .simplifying(let index, let form):
                // A kept form is simplified again from its first form; a refused one tries the next.
                pass = .simplifying(index: index, form: stillFails ? 0 : form + 1)
            case .done:
                break
            }
        }
    }
}
