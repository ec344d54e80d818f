import Foundation
import SessionEngine

/// Prints the scenario's timeline: one line per event, note and check, stamped with the simulated time.
///
/// In text mode the routine proactive renewals are collapsed after the first two of a run; in JSON mode every line
/// is one JSON object and nothing is collapsed. Nothing printed ever holds a secret or a signature: credentials are
/// shown by their public facts only.
final class Timeline: Sendable {
    private struct State {
        var state: SessionState = .signedOut
        /// The sequence number of the last event published.
        var publishedThrough: UInt64 = 0
        /// The sequence number of the last event printed.
        var printedThrough: UInt64 = 0
        /// Whether the engine's events have ended.
        var ended = false
        /// Callers waiting until an event has been printed, by its sequence number.
        var waiters: [(sequence: UInt64, continuation: CheckedContinuation<Void, Never>)] = []
        var routineRun = 0
        var collapsed = 0
        var collapsedSince: TimeInterval = 0
        var collapsedUntil: TimeInterval = 0
        var failuresSinceInstall = 0
        var renewingBeforeInstall = false

        /// Removes and returns the waiters whose event has been printed, or all of them once the events ended.
        mutating func readyWaiters() -> [CheckedContinuation<Void, Never>] {
            var ready: [CheckedContinuation<Void, Never>] = []
            waiters.removeAll { waiter in
                guard ended || waiter.sequence <= printedThrough else { return false }
                ready.append(waiter.continuation)
                return true
            }
            return ready
        }
    }

    let json: Bool
    private let clock: any SessionClock
    private let start: Date
    private let state = SanitizedMutex(State())

    init(json: Bool, clock: any SessionClock) {
        self.json = json
        self.clock = clock
        self.start = clock.now
    }

    // MARK: - Events

    /// Prints every event of the engine until the stream ends.
    ///
    /// Each event is stamped with its own time, the engine clock's wall time of the step that published it, so
    /// the printer may fall behind the clock without misplacing anything.
    func consume(_ events: SessionEvents) async {
        for await event in events {
            receive(event)
            let ready = state.withLock { state in
                state.printedThrough = max(state.printedThrough, event.sequence)
                return state.readyWaiters()
            }
            for continuation in ready { continuation.resume() }
        }
        let ready = state.withLock { state in
            state.ended = true
            return state.readyWaiters()
        }
        for continuation in ready { continuation.resume() }
    }

    /// Notes that the engine published `event`; called by the engine's observer in the step that publishes it.
    func published(_ event: SessionEvent) {
        state.withLock { $0.publishedThrough = event.sequence }
    }

    /// Waits until every event the engine has published so far has been printed, or the events have ended.
    func waitUntilCaughtUp() async {
        await withCheckedContinuation { (continuation: CheckedContinuation<Void, Never>) in
            let ready = state.withLock { state -> Bool in
                if state.ended || state.publishedThrough <= state.printedThrough { return true }
                state.waiters.append((state.publishedThrough, continuation))
                return false
            }
            if ready { continuation.resume() }
        }
    }

    private func receive(_ event: SessionEvent) {
        let elapsed = event.time.wall.timeIntervalSince(start)
        let output = state.withLock { state -> [String] in
            var routine = false
            var text: String?
            switch event.kind {
            case .stateChanged(let new):
                if case .renewing = new { state.renewingBeforeInstall = true }
                if case .identified = new {
                } else if case .renewing = new {
                } else {
                    state.renewingBeforeInstall = false
                }
                state.state = new
                text = describe(new)
            case .renewed(let identity, _):
                routine = state.renewingBeforeInstall && state.failuresSinceInstall == 0
                state.failuresSinceInstall = 0
                state.renewingBeforeInstall = false
                text =
                    routine
                    ? "renewed \(identity.account)'s credential ahead of expiry; expires \(time(identity.expiresAt))"
                    : "installed a credential for \(identity.account) <\(identity.email)> (\(identity.version)), "
                        + "expires \(time(identity.expiresAt))"
            case .fetchFailed(let failure):
                state.failuresSinceInstall += 1
                var next = failure.retryIn.map { "retry in \(Self.describe($0))" } ?? "terminal: the engine signs out"
                if let asked = failure.serverRetryAfter {
                    next += ", honouring the backend's Retry-After of \(Self.describe(asked))"
                }
                text =
                    "fetch for \(failure.account) failed (#\(failure.fetch.number)): "
                    + "\(failure.error.code): \(failure.error.reason); \(next)"
            case .credentialRejected(let report):
                state.failuresSinceInstall += 1
                text =
                    report.renewing
                    ? "the service rejected \(report.account)'s credential; renewing it once"
                    : "the renewed credential of \(report.account) was rejected too; retry in "
                        + (report.retryIn.map(Self.describe) ?? "?")
            case .workCancelled(let account, let count):
                text = "cancelled \(count) scoped task\(count == 1 ? "" : "s") of \(account?.rawValue ?? "nobody")"
            case .clockSkewSuspected(let report):
                text =
                    "suspected clock skew for \(report.account): the credential expires at \(report.expiresAt), "
                    + "local time \(report.localTime)"
            case .eventsDropped(let count):
                text = "\(count) events were dropped"
            }
            if json { return [jsonLine(event, state: state.state, elapsed: elapsed)] }
            guard let text else { return [] }
            if routine {
                state.routineRun += 1
                if state.routineRun > 2 {
                    if state.collapsed == 0 { state.collapsedSince = elapsed }
                    state.collapsed += 1
                    state.collapsedUntil = elapsed
                    return []
                }
                return [line(elapsed, state.state.name, text)]
            }
            var lines = flushCollapsed(&state)
            state.routineRun = 0
            lines.append(line(elapsed, state.state.name, text))
            return lines
        }
        write(output)
    }

    /// The text of a state change, or `nil` when the renewal line that follows says it all.
    private func describe(_ state: SessionState) -> String? {
        switch state {
        case .signedOut:
            return "signed out"
        case .switching(let from, let to):
            switch (from, to) {
            case (nil, let to?): return "signing in \(to)"
            case (let from?, nil): return "signing out \(from)"
            case (let from?, let to?): return "switching \(from) -> \(to)"
            case (nil, nil): return "signing out"
            }
        case .identified, .renewing:
            return nil
        case .expired(let expired):
            switch expired.reason {
            case .expired:
                return "\(expired.account)'s credential expired: identified work is blocked with INVALID_IDENTITY"
            case .rejected:
                return "\(expired.account)'s credential was rejected: identified work waits for the renewal"
            case .unavailable:
                return "no credential for \(expired.account) yet: the engine retries with backoff"
            }
        }
    }

    // MARK: - Notes, checks and summaries

    /// Prints a line from the scenario.
    func note(_ text: String) {
        let elapsed = clock.now.timeIntervalSince(start)
        let output = state.withLock { state -> [String] in
            if json {
                var object = header(kind: "note", elapsed: elapsed, state: state.state)
                object.add("text", text)
                return [object.json]
            }
            var lines = flushCollapsed(&state)
            state.routineRun = 0
            lines.append(line(elapsed, state.state.name, text))
            return lines
        }
        write(output)
    }

    /// Prints one part of a Verify check.
    func check(_ number: Int, _ passed: Bool, _ text: String) {
        if json {
            let elapsed = clock.now.timeIntervalSince(start)
            let object = state.withLock { state -> JSONObject in
                var object = header(kind: "check", elapsed: elapsed, state: state.state)
                object.add("check", number)
                object.add("ok", passed)
                object.add("text", text)
                return object
            }
            write([object.json])
        } else {
            note("check \(number) \(passed ? "ok" : "FAILED"): \(text)")
        }
    }

    /// Prints free text outside the timeline (text mode only).
    func plain(_ text: String) {
        guard !json else { return }
        write([text])
    }

    /// Prints a JSON object (JSON mode only).
    func object(_ object: JSONObject) {
        guard json else { return }
        write([object.json])
    }

    /// Prints any collapsed renewals that are still pending.
    func flush() {
        let lines = state.withLock { state in flushCollapsed(&state) }
        write(lines)
    }

    private func flushCollapsed(_ state: inout State) -> [String] {
        guard state.collapsed > 0 else { return [] }
        defer { state.collapsed = 0 }
        let count = state.collapsed
        let text =
            count == 1
            ? "... 1 more proactive renewal"
            : "... \(count) more proactive renewals since \(Self.stamp(state.collapsedSince))"
        return [line(state.collapsedUntil, "identified", text)]
    }

    // MARK: - Formatting

    private func header(kind: String, elapsed: TimeInterval, state: SessionState) -> JSONObject {
        var object = JSONObject()
        object.add("kind", kind)
        object.add("t", Self.stamp(elapsed))
        object.add("seconds", Int64(elapsed.rounded()))
        object.add("state", state.name)
        object.add("account", state.account?.rawValue)
        return object
    }

    private func jsonLine(_ event: SessionEvent, state: SessionState, elapsed: TimeInterval) -> String {
        var object = header(kind: "event", elapsed: elapsed, state: state)
        switch event.kind {
        case .stateChanged(let new):
            object.add("event", "stateChanged")
            switch new {
            case .identified(let identity), .renewing(let identity):
                object.add("email", identity.email)
                object.add("expiresAt", identity.expiresAt)
                object.add("epoch", Int64(identity.epoch))
            case .expired(let expired):
                object.add("reason", expired.reason.rawValue)
                object.add("epoch", Int64(expired.epoch))
            case .switching(let from, let to):
                object.add("from", from?.rawValue)
                object.add("to", to?.rawValue)
            case .signedOut:
                break
            }
        case .renewed(let identity, _):
            object.add("event", "renewed")
            object.add("email", identity.email)
            object.add("version", identity.version.rawValue)
            object.add("expiresAt", identity.expiresAt)
            object.add("epoch", Int64(identity.epoch))
        case .fetchFailed(let failure):
            object.add("event", "fetchFailed")
            object.add("code", failure.error.code.rawValue)
            object.add("reason", failure.error.reason)
            object.add("failures", failure.fetch.number)
            if let retryIn = failure.retryIn {
                object.add("retryInSeconds", retryIn.seconds)
            } else {
                object.add("retryInSeconds", nil as String?)
            }
            if let asked = failure.serverRetryAfter { object.add("serverRetryAfterSeconds", asked.seconds) }
        case .credentialRejected(let report):
            object.add("event", "credentialRejected")
            object.add("expiresAt", report.expiresAt)
            object.add("renewing", report.renewing)
            if let retryIn = report.retryIn { object.add("retryInSeconds", retryIn.seconds) }
        case .workCancelled(let account, let count):
            object.add("event", "workCancelled")
            object.add("of", account?.rawValue)
            object.add("count", count)
        case .clockSkewSuspected(let report):
            object.add("event", "clockSkewSuspected")
            object.add("localTime", report.localTime)
            object.add("expiresAt", report.expiresAt)
        case .eventsDropped(let count):
            object.add("event", "eventsDropped")
            object.add("count", count)
        }
        return object.json
    }

    private func line(_ elapsed: TimeInterval, _ state: String, _ text: String) -> String {
        let name = state.padding(toLength: 10, withPad: " ", startingAt: 0)
        return "\(Self.stamp(elapsed))  \(name)  \(text)"
    }

    /// A Unix time as simulated time since the start, `+HH:MM:SS`.
    func time(_ unixSeconds: Int64) -> String {
        Self.stamp(TimeInterval(unixSeconds) - start.timeIntervalSince1970)
    }

    /// `+HH:MM:SS`, hours unbounded.
    static func stamp(_ elapsed: TimeInterval) -> String {
        // Whole seconds, as `expiresAt` counts them; the nudge absorbs the clock's floating-point sums.
        let total = Int64((elapsed + 1e-6).rounded(.down))
        let sign = total < 0 ? "-" : "+"
        let seconds = abs(total)
        func two(_ value: Int64) -> String { value < 10 ? "0\(value)" : "\(value)" }
        return "\(sign)\(two(seconds / 3600)):\(two(seconds % 3600 / 60)):\(two(seconds % 60))"
    }

    /// `850 ms`, `3.2 s` or `4 min 05 s`.
    static func describe(_ duration: Duration) -> String {
        let seconds = duration.seconds
        if seconds < 1 { return "\(Int((seconds * 1000).rounded())) ms" }
        if seconds < 60 { return "\((seconds * 10).rounded() / 10) s" }
        let whole = Int(seconds.rounded())
        return "\(whole / 60) min \(whole % 60 < 10 ? "0" : "")\(whole % 60) s"
    }

    private func write(_ lines: [String]) {
        guard !lines.isEmpty else { return }
        state.withLock { _ in
            for line in lines { print(line) }
        }
    }
}

extension Duration {
    /// The duration in seconds.
    var seconds: Double {
        let (seconds, attoseconds) = components
        return Double(seconds) + Double(attoseconds) / 1e18
    }
}
