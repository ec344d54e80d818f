import Foundation

/// Scheduling: when fetches start, the timer the state needs, renewal times and backoff.
extension SessionStateMachine {
    /// How long the running fetch has taken by `now` since it left, after waiting `waited` for a pool's budget: the
    /// wait is the budget's, not the backend's latency.
    func fetchDuration(_ session: AccountSession, waited: Duration = .zero, at now: SessionInstant) -> Duration {
        session.lastFetchStart.map { max(.zero, now.uptime - $0 - waited) } ?? .zero
    }

    /// Starts a fetch now, or plans it for when the minimum interval since the last start, and any delay the backend
    /// asked for, have passed.
    mutating func startFetch(
        _ session: inout AccountSession,
        reason: FetchReason,
        at now: SessionInstant,
        actions: inout [Action]
    ) {
        if case .inFlight = session.fetch { return }
        var earliest: Duration?
        if let last = session.lastFetchStart, now.uptime - last < configuration.minimumFetchInterval {
            earliest = last + configuration.minimumFetchInterval
        }
        if let notBefore = session.retryNotBefore, now.uptime < notBefore {
            earliest = max(earliest ?? notBefore, notBefore)
        }
        if let earliest {
            session.fetch = .waiting(until: earliest, reason)
            return
        }
        lastID += 1
        session.fetch = .inFlight(lastID, reason)
        session.lastFetchStart = now.uptime
        actions.append(
            .startFetch(
                FetchRequest(
                    id: lastID, account: session.account, epoch: session.epoch, attempt: session.failures + 1,
                    startedAt: now.wall)
            )
        )
    }

    /// How urgently the running fetch is needed, and by when on the monotonic clock, for a budget the engine shares
    /// with other accounts: a proactive renewal while the credential is usable is needed by the credential's expiry;
    /// anything else (a first credential, an expired or rejected one, a caller waiting) is needed now.
    func fetchUrgency(at now: SessionInstant, callersWaiting: Bool) -> (urgency: FetchUrgency, deadline: Duration) {
        guard !callersWaiting, let credential = usableCredential, isValid(credential, at: now),
            case .inFlight(_, .renewal) = activeSession?.fetch
        else {
            return (.needed, now.uptime)
        }
        let left = localTime(ofBackend: credential.expirationDate).timeIntervalSince(now.wall)
        return (.proactive, now.uptime + .seconds(max(0, left)))
    }

    /// Starts the planned fetch if its time has come.
    mutating func resumeWaitingFetch(
        _ session: inout AccountSession,
        at now: SessionInstant,
        actions: inout [Action]
    ) {
        guard case .waiting(let until, let reason) = session.fetch, now.uptime >= until else { return }
        session.fetch = .idle
        startFetch(&session, reason: reason, at: now, actions: &actions)
    }

    /// Arms the timer the session needs in its current state: renewal or expiry time, and a planned fetch's time.
    mutating func rearm(_ session: AccountSession) -> [Action] {
        var wall: Date?
        var uptime: Duration?
        switch state {
        case .identified:
            if let credential = session.credential, let renewAt = session.renewAt {
                wall = min(renewAt, localTime(ofBackend: credential.expirationDate))
            }
        case .renewing:
            wall = session.credential.map { localTime(ofBackend: $0.expirationDate) }
        case .expired, .switching, .signedOut, .shutDown:
            break
        }
        if case .waiting(let until, _) = session.fetch { uptime = until }
        guard wall != nil || uptime != nil else {
            guard timer != nil else { return [] }
            timer = nil
            return [.cancelTimer]
        }
        return [.scheduleTimer(arm(wall: wall, uptime: uptime))]
    }

    mutating func arm(wall: Date?, uptime: Duration?) -> TimerSpec {
        lastID += 1
        let spec = TimerSpec(id: lastID, wallDeadline: wall, uptimeDeadline: uptime)
        timer = spec
        return spec
    }

    /// Writes the session back into the state it is in.
    mutating func replace(_ session: AccountSession) {
        switch state {
        case .identified: state = .identified(session)
        case .renewing: state = .renewing(session)
        case .expired: state = .expired(session)
        case .switching(var change):
            change.target = session
            state = .switching(change)
        case .signedOut, .shutDown: break
        }
    }

    /// When to renew a credential installed at `now`: after `fraction ± jitter` of its lifetime, leaving at least
    /// the minimum lead before expiry and waiting at least the minimum fetch interval.
    ///
    /// Under a fleet's coordinator the jitter is drawn from the credential itself (``renewalDraw(for:)``): every
    /// replica that holds the same credential renews it at the same moment, so one fetch serves them all, and
    /// different credentials still spread as independent draws do. Without one it comes from the machine's
    /// generator, so that replicas of one user, which hold credentials issued in the same second, renew apart.
    mutating func renewalTime(for credential: IdentityCredential, at now: SessionInstant) -> Date {
        let lifetime = max(0, credential.expirationDate.timeIntervalSince(now.wall))
        let policy = configuration.renewal
        let draw = configuration.drawsRenewalFromCredential ? Self.renewalDraw(for: credential) : random.nextUnit()
        let offset = (draw * 2 - 1) * policy.jitter
        var delay = lifetime * (policy.fraction + offset)
        delay = min(delay, lifetime - policy.minimumLead.timeInterval)
        delay = max(delay, configuration.minimumFetchInterval.timeInterval)
        return now.wall.addingTimeInterval(delay)
    }

    /// A uniform draw in `0 ..< 1` that is the same for the same credential in every process: FNV-1a over its user
    /// and its expiry, mixed by SplitMix64. The signature takes no part, so the renewal time tells nothing of it.
    static func renewalDraw(for credential: IdentityCredential) -> Double {
        let user = SplitMix64.seed(from: credential.email)
        var generator = SplitMix64(seed: user ^ UInt64(bitPattern: credential.expiresAt))
        return generator.nextUnit()
    }

    /// Full-jitter exponential backoff above what the minimum fetch interval still requires: the delay is that floor
    /// plus a uniform draw in `0 ..< ceiling`, so callers that failed together never retry together, even while the
    /// floor is longer than the ceiling.
    mutating func backoff(failures: Int, session: AccountSession, at now: SessionInstant) -> Duration {
        let ceiling = configuration.retry.ceiling(afterFailures: failures)
        var floor = Duration.zero
        if let last = session.lastFetchStart {
            floor = max(.zero, last + configuration.minimumFetchInterval - now.uptime)
        }
        let delay = floor + .seconds(ceiling.timeInterval * random.nextUnit())
        return max(delay, .milliseconds(1))
    }

    /// The backoff after a misconfiguration: above the same floor, a uniform draw in the upper half of the
    /// misconfiguration policy's ceiling, so the retry is never soon and a fleet still spreads out.
    mutating func slowBackoff(failures: Int, session: AccountSession, at now: SessionInstant) -> Duration {
        let ceiling = configuration.misconfigurationRetry.ceiling(afterFailures: failures).timeInterval
        var floor = Duration.zero
        if let last = session.lastFetchStart {
            floor = max(.zero, last + configuration.minimumFetchInterval - now.uptime)
        }
        let delay = floor + .seconds(ceiling / 2 + ceiling / 2 * random.nextUnit())
        return max(delay, .milliseconds(1))
    }
}
