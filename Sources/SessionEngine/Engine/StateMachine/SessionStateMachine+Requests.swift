import Foundation

/// Timers, renewals callers ask for, and rejections the host reports.
extension SessionStateMachine {
    /// A timer fired.
    mutating func timerFired(_ id: TimerID, at now: SessionInstant) -> [Action] {
        guard let timer, timer.id == id else {
            // A timer that was replaced or cancelled: ignore it.
            return []
        }
        self.timer = nil
        switch state {
        case .signedOut, .switching, .shutDown:
            // Account changes and shutdown cancel timers; a firing here is stale.
            return []
        case .identified(var session):
            guard let credential = session.credential, let renewAt = session.renewAt else { return [] }
            var actions: [Action] = []
            if !isValid(credential, at: now) {
                // The wall clock passed expiry before renewal began (a jump or a suspended machine).
                session.expiredReason = .expired
                startFetch(&session, reason: .renewal, at: now, actions: &actions)
                state = .expired(session)
            } else if now.wall >= renewAt {
                // Proactive renewal.
                startFetch(&session, reason: .renewal, at: now, actions: &actions)
                state = .renewing(session)
            } else {
                // Not due yet (the wall clock went back): sleep again.
                state = .identified(session)
            }
            return actions + rearm(session)
        case .renewing(var session):
            var actions: [Action] = []
            if let credential = session.credential, !isValid(credential, at: now) {
                // Expired while renewing: identified work is blocked from now on.
                session.expiredReason = .expired
                state = .expired(session)
            }
            resumeWaitingFetch(&session, at: now, actions: &actions)
            replace(session)
            return actions + rearm(session)
        case .expired(var session):
            var actions: [Action] = []
            resumeWaitingFetch(&session, at: now, actions: &actions)
            state = .expired(session)
            return actions + rearm(session)
        }
    }

    /// A caller asked for a fresh credential.
    mutating func renewRequested(at now: SessionInstant) -> RenewDecision {
        switch state {
        case .signedOut:
            return .fail(Self.signedOut)
        case .shutDown:
            return .fail(Self.shutDownError)
        case .switching(let change) where change.shutsDown:
            // No fetch will ever resolve a caller during a shutdown.
            return .fail(Self.shutDownError)
        case .switching:
            // The first fetch of the new account will resolve the caller.
            return .wait(epoch: epoch, [])
        case .identified(var session):
            // Renew now, unless a fetch started within the minimum interval already installed this credential.
            if let credential = session.credential, isValid(credential, at: now),
                let last = session.lastFetchStart, now.uptime - last < configuration.minimumFetchInterval
            {
                return .current(credential)
            }
            var actions: [Action] = []
            startFetch(&session, reason: .renewal, at: now, actions: &actions)
            state = .renewing(session)
            return .wait(epoch: session.epoch, actions + rearm(session))
        case .renewing(let session):
            // A fetch is running or scheduled: share it.
            return .wait(epoch: session.epoch, [])
        case .expired(var session):
            // Share the running or scheduled fetch; start one if none is planned.
            var actions: [Action] = []
            if session.fetch == .idle {
                startFetch(&session, reason: .renewal, at: now, actions: &actions)
                state = .expired(session)
                actions += rearm(session)
            }
            return .wait(epoch: session.epoch, actions)
        }
    }

    /// The host reported that the service rejected `credential`.
    ///
    /// The first rejection of the installed credential renews it once (concurrent reports of the same credential
    /// share that renewal). A rejection of a credential that was itself renewed because of a rejection leaves the
    /// state `expired` and retries only after backoff, so a misconfigured backend cannot cause a loop; a fetch already
    /// under way then is the retry, and no backoff is announced.
    mutating func credentialRejected(_ credential: IdentityCredential, at now: SessionInstant) -> [Action] {
        guard var session = currentSession, let installed = session.credential,
            installed.signatureBytes == credential.signatureBytes,
            session.rejectedSignature != credential.signatureBytes
        else {
            // Not the installed credential (an older one, another epoch's) or already reported: nothing to do.
            return []
        }
        var actions: [Action] = []
        session.rejectedSignature = credential.signatureBytes
        if case .expired = state {
            // The identity is already blocked (it expired first): the rejection changes what is renewed, not what
            // hosts see, so the published state keeps its reason instead of republishing `expired` as `expired`.
        } else {
            session.expiredReason = .rejected
        }
        // A credential itself renewed after a rejection, rejected again, is retried only after a backoff that grows
        // with each such round; any other is renewed at once.
        let reason: FetchReason = session.renewedAfterRejection ? .retryAfterRejection : .rejection
        var backoff: Duration?
        if session.renewedAfterRejection {
            session.rejectionStreak += 1
            backoff = self.backoff(failures: session.rejectionStreak, session: session, at: now)
        }
        func report(renewing: Bool, retryIn: Duration?) -> Action {
            let report = RejectionReport(
                account: session.account, expiresAt: credential.expiresAt, renewing: renewing, retryIn: retryIn)
            return .emit(.credentialRejected(report), epoch: session.epoch)
        }
        switch session.fetch {
        case .inFlight(let id, _):
            // A fetch is already under way (a renewal that began first, or a pool's fetch still waiting for its
            // budget): it is the next attempt and counts as the renewal. No wait applies, so none is announced: a host
            // told "retry in 5 s" would then see the fetch reach the backend sooner.
            session.fetch = .inFlight(id, reason)
            actions.append(report(renewing: true, retryIn: nil))
        case .waiting, .idle:
            if let backoff {
                session.fetch = .waiting(until: now.uptime + backoff, reason)
                actions.append(report(renewing: false, retryIn: backoff))
            } else {
                actions.append(report(renewing: true, retryIn: nil))
                startFetch(&session, reason: reason, at: now, actions: &actions)
            }
        }
        state = .expired(session)
        return actions + rearm(session)
    }
}
