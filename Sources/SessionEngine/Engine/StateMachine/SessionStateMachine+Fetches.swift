import Foundation

/// Fetch results: a credential is validated against the account session before it is installed; a failure backs
/// off or, when terminal, signs the account out in the same step.
extension SessionStateMachine {
    /// A fetch returned a credential, and perhaps the backend's clock offset the fetcher measured.
    ///
    /// The credential is judged on the clock that makes it plausible (``clockDecision(for:measured:for:at:)``): the
    /// backend's `Date` clock when it does, so a host whose clock runs far ahead of the backend's still accepts the
    /// backend's credentials; this host's clock when only it does, the offset then kept out; none, and it is refused
    /// as a misconfiguration with a report of which clocks disagree.
    mutating func fetchSucceeded(
        _ id: FetchID,
        credential: IdentityCredential,
        serverClockOffset measured: Duration? = nil,
        waited: Duration = .zero,
        at now: SessionInstant
    ) -> [Action] {
        guard var session = activeSession, case .inFlight(id, let reason) = session.fetch else {
            // A result of a cancelled fetch or an earlier epoch: it must not change anything.
            return []
        }
        if !session.admits(credential) {
            return fail(&session, reason: reason, error: Self.identityMismatch, waited: waited, at: now)
        }
        let actions: [Action]
        switch clockDecision(for: credential, measured: measured, for: session, at: now) {
        case .apply(let offset, let reports):
            serverClockOffset = offset
            actions = reports
        case .refuse(let error, let reports):
            return reports + fail(&session, reason: reason, error: error, waited: waited, at: now)
        }
        let fetch = FetchAttempt(
            number: session.failures + 1,
            duration: fetchDuration(session, waited: waited, at: now),
            serverClockOffset: measured
        )
        return actions + install(credential, into: &session, reason: reason, fetch: fetch, at: now)
    }

    /// The host handed over a credential it already holds for `account`: a renewal pushed by its backend, or the
    /// credential its sign-in response carried.
    ///
    /// It is validated exactly like a fetched credential (same user as the account's first credential, not expired
    /// on arrival, at most 24 hours of lifetime) and is subject to the same epoch rule: one for an account the
    /// engine is not signed in to, or is leaving, is refused and never installed.
    mutating func credentialPushed(
        _ credential: IdentityCredential,
        for account: AccountID,
        at now: SessionInstant
    ) -> PushDecision {
        switch state {
        case .shutDown:
            // Nothing is installed after shutdown.
            return .refused(Self.shutDownError, [])
        case .signedOut:
            // The engine has left every account: installing would sign an account in behind the host's back.
            return .refused(Self.notCurrent, [])
        case .switching(var change):
            // A change under way: only its target may receive a credential, and only while not shutting down.
            if change.shutsDown { return .refused(Self.shutDownError, []) }
            guard var target = change.target, target.account == account else { return .refused(Self.notCurrent, []) }
            if let refusal = refusal(of: credential, for: target, at: now) {
                return .refused(refusal, skewReport(of: credential, refusal: refusal, for: target, at: now))
            }
            guard change.prepared else {
                // The previous account's work is still draining: install it once the change is prepared.
                change.pushed = credential
                state = .switching(change)
                return .deferred
            }
            let fetch = FetchAttempt(number: target.failures + 1, duration: .zero, pushed: true)
            var actions: [Action] = fetchInFlight != nil ? [.cancelFetch] : []
            actions += install(credential, into: &target, reason: .firstCredential, fetch: fetch, at: now)
            return .installed(actions)
        case .identified(var session), .renewing(var session), .expired(var session):
            // A renewal the host's backend pushed: it replaces whatever fetch is running or planned.
            guard session.account == account else { return .refused(Self.notCurrent, []) }
            if let refusal = refusal(of: credential, for: session, at: now) {
                return .refused(refusal, skewReport(of: credential, refusal: refusal, for: session, at: now))
            }
            let fetch = FetchAttempt(number: session.failures + 1, duration: .zero, pushed: true)
            var actions: [Action] = fetchInFlight != nil ? [.cancelFetch] : []
            actions += install(credential, into: &session, reason: .renewal, fetch: fetch, at: now)
            return .installed(actions)
        }
    }

    /// Installs a validated credential in `session`: the state becomes `identified`, the renewal timer is armed and
    /// the waiting callers receive the credential.
    mutating func install(
        _ credential: IdentityCredential,
        into session: inout AccountSession,
        reason: FetchReason,
        fetch: FetchAttempt,
        at now: SessionInstant
    ) -> [Action] {
        session.setCredential(credential)
        session.fetch = .idle
        session.failures = 0
        session.expiredReason = nil
        session.rejectedSignature = nil
        // A backend's Retry-After holds for the account session until it has passed, also through a credential the
        // host hands over: the backend said when it may be asked again, and a pushed credential does not change that.
        if let notBefore = session.retryNotBefore, now.uptime >= notBefore { session.retryNotBefore = nil }
        session.lastFailure = nil
        session.renewedAfterRejection = reason == .rejection || reason == .retryAfterRejection
        if !session.renewedAfterRejection { session.rejectionStreak = 0 }
        // The renewal point is a share of the lifetime left on the backend's clock, expressed in local time.
        let backendNow = SessionInstant(wall: backendTime(now), uptime: now.uptime)
        let renewAt = localTime(ofBackend: renewalTime(for: credential, at: backendNow))
        session.renewAt = renewAt
        state = .identified(session)
        let identity = SessionIdentity(account: session.account, credential: credential, epoch: session.epoch)
        let expiry = localTime(ofBackend: credential.expirationDate)
        return [
            .scheduleTimer(arm(wall: min(renewAt, expiry), uptime: nil)),
            .emit(.renewed(identity, fetch), epoch: session.epoch),
            .resolveWaiters(epoch: session.epoch, kinds: [.identity, .nextOutcome], .installed(credential)),
        ]
    }

    /// The clock-skew report a refusal for expiry or lifetime implies; none for another user's credential.
    func skewReport(
        of credential: IdentityCredential,
        refusal: SessionError,
        for session: AccountSession,
        at now: SessionInstant
    ) -> [Action] {
        guard refusal.code != .identityMismatch else { return [] }
        let report = ClockSkewReport(
            account: session.account,
            localTime: Int64(now.wall.timeIntervalSince1970.rounded(.down)),
            expiresAt: credential.expiresAt,
            serverClockOffset: serverClockOffset == .zero ? nil : serverClockOffset,
            finding: .credentialRefused
        )
        return [.emit(.clockSkewSuspected(report), epoch: session.epoch)]
    }

    /// The size of a duration, whatever its sign.
    static func magnitude(_ duration: Duration) -> Duration {
        duration < .zero ? .zero - duration : duration
    }

    static let identityMismatch = SessionError(
        .identityMismatch,
        reason: "the backend returned a credential for a different user than the account's first credential",
        isTransient: true
    )

    static let notCurrent = SessionError(
        .accountChanged,
        reason: "the credential was handed over for an account the engine is not signed in to; it was not installed"
    )

    /// A fetch failed, after waiting `waited` for a pool's budget before it left.
    mutating func fetchFailed(
        _ id: FetchID, error: SessionError, waited: Duration = .zero, at now: SessionInstant
    ) -> [Action] {
        guard var session = activeSession, case .inFlight(id, let reason) = session.fetch else {
            // A failure of a cancelled fetch or an earlier epoch: it must not change anything.
            return []
        }
        return fail(&session, reason: reason, error: error, waited: waited, at: now)
    }

    /// Why a fetched credential must not be installed, if it must not.
    func refusal(
        of credential: IdentityCredential,
        for session: AccountSession,
        at now: SessionInstant
    ) -> SessionError? {
        if !session.admits(credential) {
            return Self.identityMismatch
        }
        if !isValid(credential, at: now) {
            return SessionError(
                .credentialExpiredOnArrival,
                reason: "the credential had already expired on arrival by the engine's clock; the clocks may disagree",
                isTransient: true
            )
        }
        let maximum = IdentityCredential.maximumLifetime.timeInterval + configuration.clockSkewTolerance.timeInterval
        if credential.expirationDate.timeIntervalSince(backendTime(now)) > maximum {
            return SessionError(
                .lifetimeTooLong,
                reason: "the credential lives longer than the 24-hour maximum",
                isTransient: true
            )
        }
        return nil
    }

    /// Records a failed fetch and decides what follows: a retry after backoff, or the end of the session.
    mutating func fail(
        _ session: inout AccountSession,
        reason: FetchReason,
        error: SessionError,
        waited: Duration = .zero,
        at now: SessionInstant
    ) -> [Action] {
        session.failures += 1
        let fetch = FetchAttempt(number: session.failures, duration: fetchDuration(session, waited: waited, at: now))
        guard error.isTransient else {
            // The backend ended the session: sign out in this same step, so the ended session's credential is never
            // handed out again and its work is cancelled at once. The sign-out runs the hooks like any other.
            session.fetch = .idle
            replace(session)
            let failure = FetchFailure(account: session.account, error: error, fetch: fetch, retryIn: nil)
            return [
                .emit(.fetchFailed(failure), epoch: session.epoch),
                .resolveWaiters(epoch: session.epoch, kinds: [.identity, .nextOutcome], .failed(error)),
            ] + beginChange(to: nil, shutsDown: false, waitersFail: error)
        }
        // A misconfiguration heals only when someone acts: it is retried on its own, slower schedule.
        var delay =
            error.failureClass == .misconfiguration
            ? slowBackoff(failures: session.failures, session: session, at: now)
            : backoff(failures: session.failures, session: session, at: now)
        // The backend's own delay (Retry-After) is a floor on top of the backoff, bounded by its own maximum; it
        // holds back every fetch of the session until it has passed, whatever asks for one.
        let serverDelay = error.retryAfter.map { min($0, configuration.maximumRetryAfter) }
        var error = error
        if let serverDelay {
            delay = max(delay, serverDelay)
            session.retryNotBefore = now.uptime + serverDelay
            // The error the event and the waiters see carries the delay the engine applies, so a capped request
            // shows one number everywhere.
            error.retryAfter = serverDelay
        }
        session.fetch = .waiting(until: now.uptime + delay, reason)
        session.lastFailure = error
        if session.credential == nil {
            // The first fetch of the account failed: no credential is available yet.
            session.expiredReason = .unavailable
            state = .expired(session)
        } else {
            replace(session)
        }
        let failure = FetchFailure(
            account: session.account,
            error: error,
            fetch: fetch,
            retryIn: delay,
            serverRetryAfter: serverDelay
        )
        return [
            .emit(.fetchFailed(failure), epoch: session.epoch),
            .resolveWaiters(epoch: session.epoch, kinds: [.nextOutcome], .failed(error)),
        ] + rearm(session)
    }
}
