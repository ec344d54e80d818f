import SessionEngine

/// The outcome of each Verify check: it passes when every part of it passed.
final class Verdicts: Sendable {
    private let state = SanitizedMutex<[Int: Bool]>([:])

    /// Records one part of check `check`.
    func record(_ check: Int, _ passed: Bool) {
        state.withLock { $0[check] = ($0[check] ?? true) && passed }
    }

    /// Each check reached so far, by number, and whether every part of it passed.
    var results: [Int: Bool] { state.withLock { $0 } }
}
