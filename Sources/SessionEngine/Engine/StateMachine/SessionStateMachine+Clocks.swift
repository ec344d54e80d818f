import Foundation

/// The backend's clock, cross-checked: a fetched credential is judged on the clock that makes it plausible.
///
/// Two clocks can judge a fresh credential: this host's wall clock, and the backend's clock as its `Date` header
/// says (the measured offset, or the one applied since an earlier response when a fetch measures none). The signer's
/// clock is the third, seen only through the credential's `expiresAt`. A credential is plausible on a clock when it
/// has not expired there and lives at most 24 hours (plus the tolerance) from there. Where both clocks find the
/// credential plausible, the one under which it expires sooner decides: a backend clock ahead of this host's is
/// applied, one behind it is kept out, so no lying clock can postpone expiry (at worst a renewal comes early). Where
/// only one clock finds it plausible, that one decides: an offset that would make it implausible while the host's
/// clock finds it plausible is kept out too, and a backend clock that alone finds it plausible is applied. Every
/// disagreement beyond the tolerance is reported (an event, a metric, a log record at warning). A credential that no
/// clock makes plausible is refused, with a report of which clocks disagree and by how much, as a misconfiguration
/// retried on the slow schedule.
extension SessionStateMachine {
    /// How a fetched credential fares on one clock.
    enum Plausibility: Sendable, Hashable {
        /// Not expired and at most 24 hours (plus the tolerance) of lifetime left.
        case plausible
        /// Expired this long ago on that clock.
        case expired(ago: Duration)
        /// Lives this long on that clock, past the 24-hour maximum plus the tolerance.
        case tooLong(lifetime: Duration)
    }

    /// What ``clockDecision(for:measured:for:at:)`` decided.
    enum ClockDecision: Sendable {
        /// Install the credential with this offset applied, after performing the actions (reports).
        case apply(offset: Duration, [Action])
        /// Refuse the credential with this error, after performing the actions (reports).
        case refuse(SessionError, [Action])
    }

    /// How `credential` fares on the clock `offset` away from this host's wall clock at `now`.
    func plausibility(of credential: IdentityCredential, offset: Duration, at now: SessionInstant) -> Plausibility {
        let clock = now.wall.addingTimeInterval(offset.timeInterval)
        let lifetime = credential.expirationDate.timeIntervalSince(clock)
        guard credential.isValid(at: clock) else { return .expired(ago: .seconds(max(0, -lifetime))) }
        let maximum = IdentityCredential.maximumLifetime.timeInterval + configuration.clockSkewTolerance.timeInterval
        return lifetime > maximum ? .tooLong(lifetime: .seconds(lifetime)) : .plausible
    }

    /// Decides which clock judges a fetched credential, and reports what the clocks say when it matters.
    ///
    /// - Parameters:
    ///   - credential: The fetched credential, already checked for its user.
    ///   - measured: The backend's clock offset the fetcher measured with it, if any.
    ///   - session: The account session it was fetched for.
    ///   - now: The step's instant.
    func clockDecision(
        for credential: IdentityCredential,
        measured: Duration?,
        for session: AccountSession,
        at now: SessionInstant
    ) -> ClockDecision {
        let tolerance = configuration.clockSkewTolerance
        // The backend's clock: what this response's Date says, or the offset applied since an earlier one.
        let backend = measured ?? serverClockOffset
        let backendOffset = Self.magnitude(backend) > tolerance ? backend : Duration.zero
        let onBackend = plausibility(of: credential, offset: backendOffset, at: now)
        let onHost = plausibility(of: credential, offset: .zero, at: now)
        // Both clocks plausible: the backend's decides only if the credential expires sooner on it (its clock is
        // ahead); a clock that lags would keep handing the credential out after it expired on this host's.
        if onBackend == .plausible, backendOffset >= .zero || onHost != .plausible {
            return .apply(
                offset: backendOffset, offsetChangeReport(to: backendOffset, measured: measured, for: session, at: now))
        }
        if backendOffset != .zero, onHost == .plausible {
            // The Date header's clock lags this host's, or would refuse what this host's clock accepts: the
            // credential is installed on the host's clock, under which it expires sooner, and the offset kept out
            // until a response agrees.
            let report = ClockSkewReport(
                account: session.account,
                localTime: Int64(now.wall.timeIntervalSince1970.rounded(.down)),
                expiresAt: credential.expiresAt,
                serverClockOffset: nil,
                dateHeaderOffset: backendOffset,
                finding: .dateHeaderIgnored
            )
            return .apply(offset: .zero, [.emit(.clockSkewSuspected(report), epoch: session.epoch)])
        }
        // No clock makes the credential plausible: say which disagree and by how much, and retry slowly.
        let report = ClockSkewReport(
            account: session.account,
            localTime: Int64(now.wall.timeIntervalSince1970.rounded(.down)),
            expiresAt: credential.expiresAt,
            serverClockOffset: serverClockOffset == .zero ? nil : serverClockOffset,
            dateHeaderOffset: measured ?? (serverClockOffset == .zero ? nil : serverClockOffset),
            finding: .noClockPlausible
        )
        let code: SessionError.Code
        switch onHost {
        case .expired: code = .credentialExpiredOnArrival
        case .tooLong, .plausible: code = .lifetimeTooLong
        }
        let error = SessionError(
            code,
            reason: Self.implausibilityReason(
                onHost: onHost, onBackend: onBackend, backendOffset: backendOffset,
                measured: measured ?? (serverClockOffset == .zero ? nil : serverClockOffset)),
            isTransient: true,
            failureClass: .misconfiguration
        )
        return .refuse(error, [.emit(.clockSkewSuspected(report), epoch: session.epoch)])
    }

    /// The report of a change of the applied offset that matters: none within the tolerance of the previous one.
    func offsetChangeReport(
        to applied: Duration,
        measured: Duration?,
        for session: AccountSession,
        at now: SessionInstant
    ) -> [Action] {
        let tolerance = configuration.clockSkewTolerance
        let previous = serverClockOffset
        guard (applied == .zero) != (previous == .zero) || Self.magnitude(applied - previous) > tolerance else {
            return []
        }
        let report = ClockSkewReport(
            account: session.account,
            localTime: Int64(now.wall.timeIntervalSince1970.rounded(.down)),
            expiresAt: session.credential?.expiresAt ?? 0,
            serverClockOffset: applied == .zero ? nil : applied,
            dateHeaderOffset: measured,
            finding: .offsetApplied
        )
        return [.emit(.clockSkewSuspected(report), epoch: session.epoch)]
    }

    /// Which clocks disagree with the credential and by how much, in words.
    static func implausibilityReason(
        onHost: Plausibility,
        onBackend: Plausibility,
        backendOffset: Duration,
        measured: Duration?
    ) -> String {
        func verdict(_ plausibility: Plausibility) -> String {
            switch plausibility {
            case .plausible: "is plausible"
            case .expired(let ago): "expired \(ago.readable) ago"
            case .tooLong(let lifetime): "lives \(lifetime.readable), past the 24-hour maximum"
            }
        }
        var reason = "no clock makes the credential plausible: on this host's clock it \(verdict(onHost))"
        if backendOffset != .zero {
            reason +=
                "; on the backend's Date clock (\(backendOffset.readable) from this host's) it \(verdict(onBackend))"
            reason += "; the signer's clock disagrees with both"
        } else if let measured {
            reason += ", and the backend's Date agrees with this host's clock (\(measured.readable) apart)"
            reason += "; the signer's clock disagrees with both"
        } else {
            reason += "; the backend sent no Date to compare; the signer's clock disagrees with this host's"
        }
        return reason
    }
}
