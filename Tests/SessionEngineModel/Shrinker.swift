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
package enum Shrinker {
    package struct Result<Operation> {
        package var operations: [Operation]
        package var attempts: Int
        package var reductions: Int
    }

    package static func shrink<Operation: Shrinkable>(
        _ operations: [Operation],
        budget: Int,
        stillFails: ([Operation]) async -> Bool
    ) async -> Result<Operation> {
        var current = operations
        var attempts = 0
        var reductions = 0

        func attempt(_ candidate: [Operation]) async -> Bool {
            guard attempts < budget else { return false }
            attempts += 1
            guard await stillFails(candidate) else { return false }
            current = candidate
            reductions += 1
            return true
        }

        var progressed = true
        while progressed && attempts < budget {
            progressed = false

            // Drop chunks, largest first.
            var chunk = max(1, current.count / 2)
            while chunk >= 1 && attempts < budget {
                var start = 0
                while start < current.count && attempts < budget {
                    let end = min(current.count, start + chunk)
                    var candidate = current
                    candidate.removeSubrange(start..<end)
                    if await attempt(candidate) {
                        progressed = true
                    } else {
                        start += chunk
                    }
                }
                if chunk == 1 { break }
                chunk /= 2
            }

            // Simplify single operations.
            var index = 0
            while index < current.count && attempts < budget {
                var simplified = false
                for form in current[index].simplerForms {
                    var candidate = current
                    candidate.replaceSubrange(index...index, with: form)
                    if await attempt(candidate) {
                        progressed = true
                        simplified = true
                        break
                    }
                }
                if !simplified { index += 1 }
            }
        }
        return Result(operations: current, attempts: attempts, reductions: reductions)
    }
}
