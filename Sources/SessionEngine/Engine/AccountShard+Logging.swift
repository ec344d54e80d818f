import Foundation

/// Log records for the host's logger, at the levels a library should use.
extension AccountShard {
    func log(_ level: SessionLogRecord.Level, _ message: String, _ metadata: [String: String]) {
        configuration.log?(SessionLogRecord(level: level, message: message, metadata: metadata))
    }

    /// Logs an event at the level a library should: routine work at `debug`, what a daemon expects now and then
    /// (a failed fetch that will be retried, a rejection, a clock offset) at `info`, and `error` only where the host
    /// must act because the engine cannot recover by itself (``logLevel(for:)``).
    func logEvent(_ event: SessionEvent.Kind) {
        switch event {
        case .renewed(let identity, _):
            log(
                .debug, "credential installed",
                ["account": identity.account.rawValue, "expiresAt": "\(identity.expiresAt)"])
        case .fetchFailed(let failure):
            log(
                Self.logLevel(for: failure),
                "fetch failed",
                [
                    "account": failure.account.rawValue, "code": failure.error.code.rawValue,
                    "class": failure.error.failureClass?.rawValue ?? "none", "reason": failure.error.reason,
                    "retryIn": failure.retryIn?.readable ?? "never",
                    "serverRetryAfter": failure.serverRetryAfter?.readable ?? "none",
                ]
            )
        case .credentialRejected(let report):
            log(
                .info, "credential rejected", ["account": report.account.rawValue, "renewing": "\(report.renewing)"])
        case .clockSkewSuspected(let report):
            // No clock that makes the credential plausible is a misconfiguration someone must fix; clocks that
            // disagree beyond the tolerance are worth a look; an offset back to none is routine.
            let level: SessionLogRecord.Level =
                switch report.finding {
                case .noClockPlausible: .error
                case .dateHeaderIgnored: .warning
                default: report.serverClockOffset == nil ? .info : .warning
                }
            log(
                level,
                report.finding == .noClockPlausible
                    ? "clocks disagree: no clock makes the credential plausible"
                    : "clock skew suspected",
                [
                    "account": report.account.rawValue, "localTime": "\(report.localTime)",
                    "expiresAt": "\(report.expiresAt)",
                    "finding": report.finding?.rawValue ?? "none",
                    "lifetimeOnHostClock": report.expiresAt == 0 ? "none" : report.lifetimeOnHostClock.readable,
                    "dateHeaderOffset": report.dateHeaderOffset?.readable ?? "none",
                    "lifetimeOnDateHeaderClock": report.expiresAt == 0
                        ? "none" : report.lifetimeOnDateHeaderClock?.readable ?? "none",
                    "serverClockOffset": report.serverClockOffset?.readable ?? "none",
                ]
            )
        case .stateChanged, .workCancelled, .eventsDropped:
            break
        }
    }

    /// The level of a failed fetch's record: `info` for an outage the engine retries (the backend's to fix and the
    /// engine's to wait out) and for a backend session that ended (the user signed out elsewhere); `error` where
    /// someone must fix the backend, the network path or the host's setup: every failure of class
    /// ``SessionError/FailureClass/misconfiguration`` (retried slowly, but it never heals by itself: another user's
    /// credential, a refused endpoint, an untrusted certificate, …), and a session that ended because its
    /// credentials can never be used.
    static func logLevel(for failure: FetchFailure) -> SessionLogRecord.Level {
        if failure.error.failureClass == .misconfiguration { return .error }
        guard failure.retryIn == nil else { return .info }
        switch failure.error.code {
        case .backendSessionEnded: return .info
        default: return .error
        }
    }
}
