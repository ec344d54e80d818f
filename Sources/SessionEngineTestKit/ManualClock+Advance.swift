extension ManualClock {
    /// Advances the clock from one sleeper's deadline to the next until `condition` holds or `limit` has passed.
    ///
    /// Before each check it waits until the clock's ``executor`` is idle
    /// (``SessionEngine/SessionEngine/waitUntilIdle()``), so the check sees every engine's and pool's whole reaction to
    /// the previous step; then it moves to the earliest deadline, never beyond `limit`. It stops when nothing sleeps on
    /// the clock, since no deadline would ever change anything. The clock never waits on real time.
    ///
    /// - Parameters:
    ///   - limit: How far the clock may move in all.
    ///   - condition: Checked whenever everything on the clock is idle, first before the clock moves.
    /// - Returns: `true` once `condition` holds; `false` when `limit` has passed or nothing sleeps first.
    /// - Throws: What `condition` throws.
    @discardableResult
    public func advance(upTo limit: Duration, until condition: () throws -> Bool) async rethrows -> Bool {
        let start = uptime
        while true {
            await executor.waitUntilIdle()
            if try condition() { return true }
            let elapsed = uptime - start
            guard elapsed < limit, nextDeadline != nil else { return false }
            advanceToNextDeadline(limit: limit - elapsed)
        }
    }
}
