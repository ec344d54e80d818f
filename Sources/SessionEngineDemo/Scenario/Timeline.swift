import Foundation
import SessionEngine
import Synchronization

/// Prints the scenario's timeline: one line per event, note and check, stamped with the simulated time.
///
/// In text mode the routine proactive renewals are collapsed after the first two of a run; in JSON mode every line
/// is one JSON object and nothing is collapsed. Nothing printed ever holds a secret or a signature: credentials are
/// shown by their public facts only.
final class Timeline: Sendable {
    private struct State {
        var state: SessionState = .signedOut
        var processing = false
        /// When each logged event happened, oldest first, for the events not yet printed.
        var stamps: [TimeInterval] = []
        var stampHead = 0
        var lastStamp: TimeInterval = 0
        var logged = 0
        var printed = 0
        var routineRun = 0
        var collapsed = 0
        var collapsedSince: TimeInterval = 0
        var collapsedUntil: TimeInterval = 0
        var failuresSinceInstall = 0
        var renewingBeforeInstall = false
        var renewals = 0
        var fetchFailures = 0
    }

    /// The engine's log messages that accompany exactly one event each.
    private static let eventMessages: Set<String> = [
        "state changed", "credential installed", "fetch failed", "credential rejected", "clock skew suspected",
    ]

    let json: Bool
    private let clock: ManualClock
    private let start: Date
    private let state = Mutex(State())

    init(json: Bool, clock: ManualClock) {
        self.json = json
        self.clock = clock
        self.start = clock.now
    }

    // MARK: - Events

    /// Receives the engine's log records, synchronously as the engine acts, to learn when each event happened.
    ///
    /// Events carry no time of their own, and the printer may see one after the clock has moved on; the log record
    /// that goes with an event is written in the same step as the event, so its time is the event's.
    func logged(_ record: SessionLogRecord) {
        guard Self.eventMessages.contains(record.message) else { return }
        let elapsed = clock.now.timeIntervalSince(start)
        state.withLock { state in
            state.stamps.append(elapsed)
            state.logged += 1
        }
    }

    /// Prints every event of the engine until the stream ends.
    func consume(_ events: SessionEvents) async {
        var iterator = events.makeAsyncIterator()
        var replay = true
        while true {
            state.withLock { $0.processing = false }
            guard let event = await iterator.next() else { break }
            state.withLock { $0.processing = true }
            receive(event, replay: replay)
            replay = false
        }
        state.withLock { $0.processing = false }
    }

    /// Whether every event the engine has logged so far has been printed.
    var isCaughtUp: Bool { state.withLock { !$0.processing && $0.printed == $0.logged } }

    /// How many credentials were installed, and how many fetches failed.
    var counts: (renewals: Int, fetchFailures: Int) {
        state.withLock { ($0.renewals, $0.fetchFailures) }
    }

    /// When the event happened: the time of its log record, or of the event before it for events that are not
    /// logged (cancelled work is reported in the same step as the state change before it).
    private func stamp(_ event: SessionEvent, replay: Bool, _ state: inout State) -> TimeInterval {
        let logged: Bool
        switch event {
        case .stateChanged: logged = !replay
        case .renewed, .fetchFailed, .credentialRejected, .clockSkewSuspected: logged = true
        case .workCancelled, .eventsDropped: logged = false
        }
        if replay {
            state.lastStamp = clock.now.timeIntervalSince(start)
        } else if logged, state.stampHead < state.stamps.count {
            state.lastStamp = state.stamps[state.stampHead]
            state.stampHead += 1
            state.printed += 1
            if state.stampHead > 256 {
                state.stamps.removeFirst(state.stampHead)
                state.stampHead = 0
            }
        }
        return state.lastStamp
    }

    private func receive(_ event: SessionEvent, replay: Bool) {
        let output = state.withLock { state -> [String] in
            let elapsed = stamp(event, replay: replay, &state)
            var routine = false
            var text: String?
            switch event {
            case .stateChanged(let new):
                if case .renewing = new { state.renewingBeforeInstall = true }
                if case .identified = new {
                } else if case .renewing = new {
                } else {
                    state.renewingBeforeInstall = false
                }
                state.state = new
                text = describe(new)
            case .renewed(let identity):
                state.renewals += 1
                routine = state.renewingBeforeInstall && state.failuresSinceInstall == 0
                state.failuresSinceInstall = 0
                state.renewingBeforeInstall = false
                text =
                    routine
                    ? "renewed \(identity.account)'s credential ahead of expiry; expires \(time(identity.expiresAt))"
                    : "credential installed for \(identity.account) <\(identity.email)> (\(identity.version)), "
                        + "expires \(time(identity.expiresAt))"
            case .fetchFailed(let failure):
                state.fetchFailures += 1
                state.failuresSinceInstall += 1
                let next = failure.retryIn.map { "retry in \(Self.describe($0))" } ?? "terminal: the engine signs out"
                text =
                    "fetch for \(failure.account) failed (#\(failure.consecutiveFailures)): \(failure.error); \(next)"
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
                    "clock skew suspected for \(report.account): the credential expires at \(report.expiresAt), "
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
        switch event {
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
        case .renewed(let identity):
            object.add("event", "renewed")
            object.add("email", identity.email)
            object.add("version", identity.version.rawValue)
            object.add("expiresAt", identity.expiresAt)
            object.add("epoch", Int64(identity.epoch))
        case .fetchFailed(let failure):
            object.add("event", "fetchFailed")
            object.add("code", failure.error.code.rawValue)
            object.add("reason", failure.error.reason)
            object.add("failures", failure.consecutiveFailures)
            if let retryIn = failure.retryIn {
                object.add("retryInSeconds", retryIn.seconds)
            } else {
                object.add("retryInSeconds", nil as String?)
            }
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
