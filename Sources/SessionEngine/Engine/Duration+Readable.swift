extension Duration {
    /// The duration as people read it, in at most two units: `250 ms`, `5.9 s`, `2 min 30 s`, `1 h 5 min`,
    /// `2 d 3 h`; a negative duration starts with `-`.
    ///
    /// Every description, error reason and log record of the engine writes durations this way, rounded to the
    /// precision its largest unit needs, so `retryIn=5.899879770538004 seconds` reads `retryIn=5.9 s`. Programs read
    /// the `Duration` values of events and metrics, never this text.
    package var readable: String {
        let (seconds, attoseconds) = components
        let total = Double(seconds) + Double(attoseconds) / 1e18
        guard total != 0 else { return "0 s" }
        return (total < 0 ? "-" : "") + Self.readable(seconds: Swift.abs(total))
    }

    /// A positive number of seconds in at most two units, each tier rounded before its range is checked, so a value
    /// just below a boundary reads as the next tier (`59.97 s` is `1 min`, never `60 s` or `1 min 60 s`).
    private static func readable(seconds: Double) -> String {
        let milliseconds = (seconds * 1000).rounded()
        if milliseconds < 1 { return "< 1 ms" }
        if milliseconds < 1000 { return "\(Int(milliseconds)) ms" }
        let tenths = (seconds * 10).rounded()
        if tenths < 600 {
            let whole = Int(tenths) / 10
            let tenth = Int(tenths) % 10
            return tenth == 0 ? "\(whole) s" : "\(whole).\(tenth) s"
        }
        let wholeSeconds = seconds.rounded()
        if wholeSeconds < 3600 { return pair(Int(wholeSeconds), 60, "min", "s") }
        let minutes = (seconds / 60).rounded()
        if minutes < 24 * 60 { return pair(Int(minutes), 60, "h", "min") }
        let hours = (seconds / 3600).rounded()
        return pair(Int(hours), 24, "d", "h")
    }

    /// `value` split into a large and a small unit, the small one left out when zero.
    private static func pair(_ value: Int, _ perLarge: Int, _ large: String, _ small: String) -> String {
        let (big, rest) = value.quotientAndRemainder(dividingBy: perLarge)
        return rest == 0 ? "\(big) \(large)" : "\(big) \(large) \(rest) \(small)"
    }
}
