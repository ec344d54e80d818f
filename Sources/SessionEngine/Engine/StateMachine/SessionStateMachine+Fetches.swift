import Foundation

/// Fetch results: a credential is validated against the account session before it is installed; a failure backs
/// off or, when terminal, signs the account out in the same step.
extension SessionStateMachine {
    /// A fetch returned a credential.
    mutating func fetchSucceeded(_ id: FetchID, credential: IdentityCredential, at now: SessionInstant) -> [Action] {
        guard var session = activeSession, case .inFlight(id, let reason) = session.fetch else {
            // A result of a cancelled fetch or an earlier epoch: it must not change anything.
            return []
        }
        if let refusal = refusal(of: credential, for: session, at: now) {
            var actions: [Action] = []
            if refusal.code != .identityMismatch {
                let report = ClockSkewReport(
                    account: session.account,
                    localTime: Int64(now.wall.timeIntervalSince1970.rounded(.down)),
                    expiresAt: credential.expiresAt
                )
                actions.append(.emit(.clockSkewSuspected(report), epoch: session.epoch))
            }
            return actions + fail(&session, reason: reason, error: refusal, at: now)
        }
        let fetch = FetchAttempt(number: session.failures + 1, duration: fetchDuration(session, at: now))
        session.credential = credential
        session.pinnedEmail = session.pinnedEmail ?? credential.email
        session.fetch = .idle
        session.failures = 0
        session.expiredReason = nil
        session.rejectedSignature = nil
        session.renewedAfterRejection = reason == .rejection || reason == .retryAfterRejection
        if !session.renewedAfterRejection { session.rejectionStreak = 0 }
        session.renewAt = renewalTime(for: credential, at: now)
        state = .identified(session)
        let identity = SessionIdentity(account: session.account, credential: credential, epoch: session.epoch)
        return [
            .scheduleTimer(arm(wall: min(session.renewAt!, credential.expirationDate), uptime: nil)),
            .emit(.renewed(identity, fetch), epoch: session.epoch),
            .resolveWaiters(epoch: session.epoch, kinds: [.identity, .nextOutcome], .installed(credential)),
        ]
    }

    /// A fetch failed.
    mutating func fetchFailed(_ id: FetchID, error: SessionError, at now: SessionInstant) -> [Action] {
        guard var session = activeSession, case .inFlight(id, let reason) = session.fetch else {
            // A failure of a cancelled fetch or an earlier epoch: it must not change anything.
            return []
        }
        return fail(&session, reason: reason, error: error, at: now)
    }

    /// Why a fetched credential must not be installed, if it must not.
    func refusal(
        of credential: IdentityCredential,
        for session: AccountSession,
        at now: SessionInstant
    ) -> SessionError? {
        if let pinned = session.pinnedEmail, !pinned.utf8.elementsEqual(credential.email.utf8) {
            return SessionError(
                .identityMismatch,
                reason: "the backend returned a credential for a different user than the account's first credential",
                isTransient: true
            )
        }
        if !credential.isValid(at: now.wall) {
            return SessionError(
                .credentialExpiredOnArrival,
                reason: "the fetched credential had already expired by the local clock; the clocks may disagree",
                isTransient: true
            )
        }
        let maximum = IdentitySigner.maximumLifetime.timeInterval + configuration.clockSkewTolerance.timeInterval
        if credential.expirationDate.timeIntervalSince(now.wall) > maximum {
            return SessionError(
                .lifetimeTooLong,
                reason: "the fetched credential lives longer than the 24-hour maximum",
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
        at now: SessionInstant
    ) -> [Action] {
        session.failures += 1
        let fetch = FetchAttempt(number: session.failures, duration: fetchDuration(session, at: now))
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
        let delay = backoff(failures: session.failures, session: session, at: now)
        session.fetch = .waiting(until: now.uptime + delay, reason)
        if session.credential == nil {
            // The first fetch of the account failed: no credential is available yet.
            session.expiredReason = .unavailable
            state = .expired(session)
        } else {
            replace(session)
        }
        let failure = FetchFailure(account: session.account, error: error, fetch: fetch, retryIn: delay)
        return [
            .emit(.fetchFailed(failure), epoch: session.epoch),
            .resolveWaiters(epoch: session.epoch, kinds: [.nextOutcome], .failed(error)),
        ] + rearm(session)
    }
}
