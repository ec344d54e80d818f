import Foundation

/// Identifies one fetch; unique over the engine's life, so a late result can be recognised as stale.
typealias FetchID = UInt64

/// Identifies one timer; unique over the engine's life, so a late firing can be recognised as stale.
typealias TimerID = UInt64

/// When a timer fires: at a wall-clock time, after a monotonic deadline, or whichever comes first.
struct TimerSpec: Sendable, Hashable {
    /// The timer's identity.
    var id: TimerID
    /// Fire once the wall clock reaches this time.
    var wallDeadline: Date?
    /// Fire once the monotonic clock reaches this time.
    var uptimeDeadline: Duration?

    /// Whether the timer is due at `now`.
    func isDue(at now: SessionInstant) -> Bool {
        if let wallDeadline, now.wall >= wallDeadline { return true }
        if let uptimeDeadline, now.uptime >= uptimeDeadline { return true }
        return false
    }
}

/// The pure decision-maker of ``SessionEngine``.
///
/// It holds the state and data valid in each state, takes one input per method, and returns the actions its owner
/// must perform. It reads no clock (time arrives as ``SessionInstant`` values), starts no task, takes no lock and
/// never suspends, so every transition can be tested as a value. Random numbers for jitter come from its own seeded
/// generator, so a run is reproducible from its seed.
///
/// `Design/state-machine.md` holds the transition table this type implements.
struct SessionStateMachine: Sendable {
    /// Why a fetch was started; a fetch started because the service rejected a credential makes the credential it
    /// installs "renewed after rejection", whose own rejection is not renewed again at once.
    enum FetchReason: Sendable, Hashable {
        /// The first credential of an account session.
        case firstCredential
        /// A proactive renewal, a renewal after expiry, or one a caller asked for.
        case renewal
        /// The service rejected the installed credential: renew once, at once.
        case rejection
        /// The credential renewed after a rejection was rejected too: retry only after backoff.
        case retryAfterRejection
    }

    /// Where an account session's fetching stands.
    enum FetchPhase: Sendable, Hashable {
        /// No fetch is running or planned.
        case idle
        /// A fetch is running.
        case inFlight(FetchID, FetchReason)
        /// A fetch starts when the monotonic clock reaches `until`.
        case waiting(until: Duration, FetchReason)
    }

    /// The data of an account session: valid in `identified`, `renewing`, `expired` and a prepared `switching`.
    struct AccountSession: Sendable, Hashable {
        let account: AccountID
        let epoch: UInt64
        /// The installed credential; `nil` until the first one is installed.
        var credential: IdentityCredential?
        /// The normalized email of the account's first credential: every renewal must name the same user.
        var pinnedEmail: String?
        /// When the installed credential is renewed.
        var renewAt: Date?
        var fetch: FetchPhase = .idle
        /// Consecutive failed fetches, for the backoff ceiling.
        var failures = 0
        /// Consecutive rejections of credentials renewed because of a rejection, for their backoff ceiling.
        var rejectionStreak = 0
        /// The monotonic time the last fetch started, for the minimum interval.
        var lastFetchStart: Duration?
        /// The credential the service last rejected, so one credential is renewed at most once.
        var rejectedSignature: String?
        /// Whether the installed credential was fetched because its predecessor was rejected.
        var renewedAfterRejection = false
        /// Why the session is `expired`, when it is.
        var expiredReason: ExpiredIdentity.Reason?

        init(account: AccountID, epoch: UInt64) {
            self.account = account
            self.epoch = epoch
        }

        var identity: SessionIdentity? {
            credential.map { SessionIdentity(account: account, credential: $0, epoch: epoch) }
        }
    }

    /// An account change under way.
    struct Change: Sendable, Hashable {
        /// The account being left, for display.
        let from: AccountID?
        /// The account being switched to; `nil` when signing out.
        var target: AccountSession?
        let epoch: UInt64
        /// Whether work is drained and hooks have run, so the first fetch may start.
        var prepared = false
        /// Whether the engine shuts down once the change is prepared.
        var shutsDown = false
        /// Whether the change runs the account-change hooks; a shutdown that begins a change of its own does not.
        var runsHooks = true
    }

    enum State: Sendable, Hashable {
        /// No account.
        case signedOut
        /// An account change is under way.
        case switching(Change)
        /// A valid credential and nothing to do until its renewal time.
        case identified(AccountSession)
        /// A valid credential and a renewal under way.
        case renewing(AccountSession)
        /// No usable credential; renewal continues in the background.
        case expired(AccountSession)
        /// The engine has shut down; every input is refused or ignored.
        case shutDown
    }

    /// The outcome of a fetch that the owner hands to the callers waiting for it.
    enum Outcome: Sendable {
        case installed(IdentityCredential)
        case failed(SessionError)
    }

    /// Which callers an outcome resolves.
    enum WaiterKind: Sendable, Hashable {
        /// Callers that want the next credential installed in the epoch (sign-in, switch); a transient failure does
        /// not resolve them.
        case identity
        /// Callers that want the next fetch's outcome, success or failure (`renew()`, a retry after rejection).
        case nextOutcome
    }

    /// A side effect for the owner to perform, in order, after the state has been updated.
    enum Action: Sendable {
        /// Start the fetch.
        case startFetch(FetchRequest)
        /// Cancel the running fetch task.
        case cancelFetch
        /// Replace the timer with this one.
        case scheduleTimer(TimerSpec)
        /// Cancel the timer.
        case cancelTimer
        /// Cancel every piece of scoped work of epochs before this one.
        case cancelWork(before: UInt64, account: AccountID?)
        /// Publish an event other than a state change.
        case emit(SessionEvent.Kind, epoch: UInt64)
        /// Resolve the waiting callers of an epoch.
        case resolveWaiters(epoch: UInt64, kinds: Set<WaiterKind>, Outcome)
        /// Prepare the change that began `epoch`, after the changes before it: drain the previous epochs' scoped
        /// work, run the account-change hooks (see ``hooksDue(epoch:)``), then report ``changePrepared(epoch:at:)``.
        case prepareChange(epoch: UInt64)
        /// Fail every waiting caller, of any epoch.
        case failAllWaiters(SessionError)
        /// The engine has shut down: finish the event streams and wake everyone waiting for the shutdown.
        case finishShutdown
    }

    /// What ``changeAccount(to:at:)`` and ``shutdownRequested(at:)`` decided.
    enum ChangeDecision: Sendable {
        /// The target is already the current account (or the one being switched to): nothing changes.
        case alreadyCurrent(epoch: UInt64)
        /// A change began with a new epoch.
        case began(epoch: UInt64, [Action])
        /// The engine has shut down, or is shutting down.
        case shutDown
    }

    /// What ``renewRequested(at:)`` decided.
    enum RenewDecision: Sendable {
        /// Return this credential: a fetch started less than the minimum interval ago installed it.
        case current(IdentityCredential)
        /// Wait for the epoch's next fetch outcome, after performing the actions.
        case wait(epoch: UInt64, [Action])
        /// Fail at once.
        case fail(SessionError)
    }

    struct Configuration: Sendable {
        var renewal: RenewalPolicy
        var retry: RetryPolicy
        var minimumFetchInterval: Duration
        var clockSkewTolerance: Duration

        init(_ configuration: SessionConfiguration) {
            renewal = configuration.renewal
            retry = configuration.retry
            minimumFetchInterval = configuration.minimumFetchInterval
            clockSkewTolerance = configuration.clockSkewTolerance
        }
    }

    private(set) var state: State = .signedOut
    /// The current epoch; it grows with every account change.
    private(set) var epoch: UInt64 = 0
    private var lastID: UInt64 = 0
    /// The timer the owner should have running, if any.
    private(set) var timer: TimerSpec?
    /// The account the last account-change hooks entered: the next hooks leave it.
    private var hookedAccount: AccountID?
    private var random: SplitMix64
    let configuration: Configuration

    init(configuration: SessionConfiguration, seed: UInt64) {
        self.configuration = Configuration(configuration)
        self.random = SplitMix64(seed: seed)
    }

    // MARK: - Observed state

    /// The state as hosts see it.
    var publicState: SessionState {
        switch state {
        case .signedOut, .shutDown:
            return .signedOut
        case .switching(let change):
            if change.shutsDown && change.from == nil { return .signedOut }
            return .switching(from: change.from, to: change.target?.account)
        case .identified(let session):
            return session.identity.map(SessionState.identified) ?? .signedOut
        case .renewing(let session):
            return session.identity.map(SessionState.renewing) ?? .signedOut
        case .expired(let session):
            return .expired(
                ExpiredIdentity(
                    account: session.account,
                    reason: session.expiredReason ?? .expired,
                    lastExpiresAt: session.credential?.expiresAt,
                    epoch: session.epoch
                )
            )
        }
    }

    /// The credential identified work may use, if the state allows any (still subject to the expiry check).
    var usableCredential: IdentityCredential? {
        switch state {
        case .identified(let session), .renewing(let session): session.credential
        case .signedOut, .switching, .expired, .shutDown: nil
        }
    }

    /// Whether the engine has shut down.
    var isShutDown: Bool {
        if case .shutDown = state { return true }
        return false
    }

    /// The account the engine is signed in to or switching to.
    var currentAccount: AccountID? {
        switch state {
        case .signedOut, .shutDown: nil
        case .switching(let change): change.target?.account
        case .identified(let session), .renewing(let session), .expired(let session): session.account
        }
    }

    /// The epoch whose renewal, started because `credential` was rejected, callers may wait for; `nil` when no such
    /// renewal is running or planned.
    func rejectionRenewalEpoch(for credential: IdentityCredential) -> UInt64? {
        guard let session = currentSession, session.rejectedSignature == credential.signature else { return nil }
        switch session.fetch {
        case .inFlight(_, .rejection), .waiting(_, .rejection): return session.epoch
        default: return nil
        }
    }

    /// Whether a fetch is running.
    var fetchInFlight: FetchID? {
        guard let session = activeSession, case .inFlight(let id, _) = session.fetch else { return nil }
        return id
    }

    /// The account session that can fetch: the current one, or a prepared switch's target.
    private var activeSession: AccountSession? {
        switch state {
        case .signedOut, .shutDown: nil
        case .switching(let change): change.prepared ? change.target : nil
        case .identified(let session), .renewing(let session), .expired(let session): session
        }
    }

    // MARK: - Inputs

    /// An account change was requested: sign-in (`target` non-nil from `signedOut`), switch, or sign-out (`nil`).
    ///
    /// A new epoch begins at once: the running fetch and timer are cancelled and the previous epochs' scoped work is
    /// cancelled, so nothing of the previous account is handed out from here on. The owner then drains the work,
    /// runs the account-change hooks and calls ``changePrepared(epoch:at:)``.
    mutating func changeAccount(to target: AccountID?, at now: SessionInstant) -> ChangeDecision {
        switch state {
        case .shutDown:
            // Nothing changes after shutdown.
            return .shutDown
        case .signedOut:
            // Signing out when signed out changes nothing; signing in begins the first epoch of an account.
            guard target != nil else { return .alreadyCurrent(epoch: epoch) }
        case .switching(let change):
            // A shutdown under way refuses changes; a second change supersedes the first.
            if change.shutsDown { return .shutDown }
            guard change.target?.account != target else { return .alreadyCurrent(epoch: epoch) }
        case .identified(let session), .renewing(let session), .expired(let session):
            // Leaving an account: its fetch, timer and work are cancelled.
            guard session.account != target else { return .alreadyCurrent(epoch: epoch) }
        }
        let actions = beginChange(to: target, shutsDown: false, waitersFail: Self.accountChanged)
        return .began(epoch: epoch, actions)
    }

    /// The host asked the engine to shut down.
    ///
    /// A shutdown is an account change to no account that runs no hooks: the running fetch, the timer and every
    /// piece of scoped work are cancelled at once, waiting callers fail with `SHUT_DOWN`, and once the work has
    /// drained the machine reaches `shutDown` and returns ``Action/finishShutdown``. A sign-out under way becomes
    /// the shutdown, so its hooks still run.
    mutating func shutdownRequested(at now: SessionInstant) -> ChangeDecision {
        switch state {
        case .shutDown:
            // Already shut down.
            return .shutDown
        case .switching(var change) where change.target == nil:
            // A sign-out (or a shutdown) is under way: it shuts the engine down once it is prepared.
            if change.shutsDown { return .shutDown }
            change.shutsDown = true
            state = .switching(change)
            return .began(epoch: epoch, [.failAllWaiters(Self.shutDownError)])
        case .signedOut, .switching, .identified, .renewing, .expired:
            // Leave whatever is current, without hooks.
            let actions = beginChange(to: nil, shutsDown: true, waitersFail: Self.shutDownError)
            return .began(epoch: epoch, actions + [.failAllWaiters(Self.shutDownError)])
        }
    }

    /// Begins a new epoch for a change to `target`: the running fetch, the timer and the previous epochs' work are
    /// cancelled and the previous epoch's callers fail, so nothing of the account being left is handed out from here.
    private mutating func beginChange(to target: AccountID?, shutsDown: Bool, waitersFail error: SessionError)
        -> [Action]
    {
        var actions: [Action] = []
        if fetchInFlight != nil { actions.append(.cancelFetch) }
        let from = currentAccount
        epoch += 1
        timer = nil
        actions.append(.cancelTimer)
        actions.append(.cancelWork(before: epoch, account: from))
        actions.append(.resolveWaiters(epoch: epoch - 1, kinds: [.identity, .nextOutcome], .failed(error)))
        actions.append(.prepareChange(epoch: epoch))
        var change = Change(from: from, target: target.map { AccountSession(account: $0, epoch: epoch) }, epoch: epoch)
        change.shutsDown = shutsDown
        change.runsHooks = !shutsDown
        state = .switching(change)
        return actions
    }

    /// The owner drained the previous work of the change that began `epoch` and asks which hooks to run.
    ///
    /// - Returns: The change the hooks report, from the account the previous hooks entered; `nil` when a later
    ///   change superseded this one (its hooks will report the whole change) or the change is a shutdown that
    ///   began a change of its own.
    mutating func hooksDue(epoch changeEpoch: UInt64) -> AccountChange? {
        guard case .switching(let change) = state, change.epoch == changeEpoch, !change.prepared, change.runsHooks
        else {
            // Superseded, already prepared, or a shutdown of its own: no hooks.
            return nil
        }
        let hooks = AccountChange(from: hookedAccount, to: change.target?.account)
        hookedAccount = change.target?.account
        return hooks
    }

    /// The owner drained the previous work and ran the hooks for the change that began `epoch`.
    mutating func changePrepared(epoch preparedEpoch: UInt64, at now: SessionInstant) -> [Action] {
        guard case .switching(var change) = state, change.epoch == preparedEpoch, !change.prepared else {
            // A later change superseded this one, or it was already prepared: nothing to do.
            return []
        }
        if change.shutsDown {
            // Every piece of work has drained: the engine is shut down.
            state = .shutDown
            return [.failAllWaiters(Self.shutDownError), .finishShutdown]
        }
        guard var target = change.target else {
            // Sign-out complete. A caller that asked for a renewal while the sign-out was under way waits on this
            // epoch, and no fetch will ever resolve it: tell it the engine is signed out.
            state = .signedOut
            return [.resolveWaiters(epoch: preparedEpoch, kinds: [.identity, .nextOutcome], .failed(Self.signedOut))]
        }
        change.prepared = true
        var actions: [Action] = []
        startFetch(&target, reason: .firstCredential, at: now, actions: &actions)
        change.target = target
        state = .switching(change)
        return actions
    }

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
            if !credential.isValid(at: now.wall) {
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
            if let credential = session.credential, !credential.isValid(at: now.wall) {
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
            if let credential = session.credential, credential.isValid(at: now.wall),
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
    /// state `expired` and retries only after backoff, so a misconfigured backend cannot cause a loop.
    mutating func credentialRejected(_ credential: IdentityCredential, at now: SessionInstant) -> [Action] {
        guard var session = currentSession, let installed = session.credential,
            installed.signature == credential.signature, session.rejectedSignature != credential.signature
        else {
            // Not the installed credential (an older one, another epoch's) or already reported: nothing to do.
            return []
        }
        var actions: [Action] = []
        session.rejectedSignature = credential.signature
        if case .expired = state {
            // The identity is already blocked (it expired first): the rejection changes what is renewed, not what
            // hosts see, so the published state keeps its reason instead of republishing `expired` as `expired`.
        } else {
            session.expiredReason = .rejected
        }
        if session.renewedAfterRejection {
            session.rejectionStreak += 1
            let delay = backoff(failures: session.rejectionStreak, session: session, at: now)
            if case .inFlight = session.fetch {
            } else {
                session.fetch = .waiting(until: now.uptime + delay, .retryAfterRejection)
            }
            let report = RejectionReport(
                account: session.account,
                expiresAt: credential.expiresAt,
                renewing: false,
                retryIn: delay
            )
            actions.append(.emit(.credentialRejected(report), epoch: session.epoch))
        } else {
            let report = RejectionReport(
                account: session.account,
                expiresAt: credential.expiresAt,
                renewing: true,
                retryIn: nil
            )
            actions.append(.emit(.credentialRejected(report), epoch: session.epoch))
            switch session.fetch {
            case .inFlight(let id, _):
                // A renewal is already running: its credential counts as the renewal after rejection.
                session.fetch = .inFlight(id, .rejection)
            case .waiting, .idle:
                startFetch(&session, reason: .rejection, at: now, actions: &actions)
            }
        }
        state = .expired(session)
        return actions + rearm(session)
    }

    // MARK: - Helpers

    private static let accountChanged = SessionError(.accountChanged, reason: "the account changed")
    private static let signedOut = SessionError(.signedOut, reason: "no account is signed in")
    static let shutDownError = SessionError(.shutDown, reason: "the session engine has shut down")

    /// The current account session outside a switch.
    private var currentSession: AccountSession? {
        switch state {
        case .signedOut, .switching, .shutDown: nil
        case .identified(let session), .renewing(let session), .expired(let session): session
        }
    }

    /// Why a fetched credential must not be installed, if it must not.
    private func refusal(
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
    private mutating func fail(
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

    /// How long the running fetch has taken by `now`.
    private func fetchDuration(_ session: AccountSession, at now: SessionInstant) -> Duration {
        session.lastFetchStart.map { max(.zero, now.uptime - $0) } ?? .zero
    }

    /// Starts a fetch now, or plans it for when the minimum interval since the last start has passed.
    private mutating func startFetch(
        _ session: inout AccountSession,
        reason: FetchReason,
        at now: SessionInstant,
        actions: inout [Action]
    ) {
        if case .inFlight = session.fetch { return }
        if let last = session.lastFetchStart, now.uptime - last < configuration.minimumFetchInterval {
            session.fetch = .waiting(until: last + configuration.minimumFetchInterval, reason)
            return
        }
        lastID += 1
        session.fetch = .inFlight(lastID, reason)
        session.lastFetchStart = now.uptime
        actions.append(
            .startFetch(
                FetchRequest(id: lastID, account: session.account, epoch: session.epoch, attempt: session.failures + 1)
            )
        )
    }

    /// Starts the planned fetch if its time has come.
    private mutating func resumeWaitingFetch(
        _ session: inout AccountSession,
        at now: SessionInstant,
        actions: inout [Action]
    ) {
        guard case .waiting(let until, let reason) = session.fetch, now.uptime >= until else { return }
        session.fetch = .idle
        startFetch(&session, reason: reason, at: now, actions: &actions)
    }

    /// Arms the timer the session needs in its current state: renewal or expiry time, and a planned fetch's time.
    private mutating func rearm(_ session: AccountSession) -> [Action] {
        var wall: Date?
        var uptime: Duration?
        switch state {
        case .identified:
            if let credential = session.credential, let renewAt = session.renewAt {
                wall = min(renewAt, credential.expirationDate)
            }
        case .renewing:
            wall = session.credential?.expirationDate
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

    private mutating func arm(wall: Date?, uptime: Duration?) -> TimerSpec {
        lastID += 1
        let spec = TimerSpec(id: lastID, wallDeadline: wall, uptimeDeadline: uptime)
        timer = spec
        return spec
    }

    /// Writes the session back into the state it is in.
    private mutating func replace(_ session: AccountSession) {
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
    private mutating func renewalTime(for credential: IdentityCredential, at now: SessionInstant) -> Date {
        let lifetime = max(0, credential.expirationDate.timeIntervalSince(now.wall))
        let policy = configuration.renewal
        let offset = (random.nextUnit() * 2 - 1) * policy.jitter
        var delay = lifetime * (policy.fraction + offset)
        delay = min(delay, lifetime - policy.minimumLead.timeInterval)
        delay = max(delay, configuration.minimumFetchInterval.timeInterval)
        return now.wall.addingTimeInterval(delay)
    }

    /// Full-jitter exponential backoff, never shorter than what the minimum fetch interval still requires.
    private mutating func backoff(failures: Int, session: AccountSession, at now: SessionInstant) -> Duration {
        let ceiling = configuration.retry.ceiling(afterFailures: failures)
        var delay = Duration.seconds(ceiling.timeInterval * random.nextUnit())
        if let last = session.lastFetchStart {
            delay = max(delay, last + configuration.minimumFetchInterval - now.uptime)
        }
        return max(delay, .milliseconds(1))
    }
}
