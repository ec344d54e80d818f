extension Shrinker {
    /// Reduces a failing operation sequence with the same passes as the asynchronous `shrink`, for a caller that has
    /// no async context: the schedule explorer runs every candidate to completion on its own thread, outside any task.
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
        var current = operations
        var attempts = 0
        var reductions = 0

        func attempt(_ candidate: [Operation]) -> Bool {
            guard attempts < budget else { return false }
            attempts += 1
            guard stillFails(candidate) else { return false }
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
                    if attempt(candidate) {
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
                    if attempt(candidate) {
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
