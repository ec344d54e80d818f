import Foundation

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
    ///
    /// Its stored fields are in an order where each small one sits in the room the one before it leaves, and its
    /// optional times and counters are packed (``PackedDate``, ``PackedDuration``, ``PackedCount``), so that a session,
    /// which every account of a pool keeps, is 96 bytes.
    struct AccountSession: Sendable, Hashable {
        let account: AccountID
        let epoch: UInt64
        /// The installed credential; `nil` until the first one is installed (``setCredential(_:)``).
        private(set) var credential: IdentityCredential?
        var fetch: FetchPhase = .idle
        /// Whether the installed credential was fetched because its predecessor was rejected.
        var renewedAfterRejection = false
        /// Why the session is `expired`, when it is.
        var expiredReason: ExpiredIdentity.Reason?
        /// When the installed credential is renewed.
        @PackedDate var renewAt: Date? = nil
        /// The monotonic time the last fetch started, for the minimum interval.
        @PackedDuration var lastFetchStart: Duration? = nil
        /// Consecutive failed fetches, for the backoff ceiling.
        @PackedCount var failures = 0
        /// Consecutive rejections of credentials renewed because of a rejection, for their backoff ceiling.
        @PackedCount var rejectionStreak = 0
        /// The normalized email every credential of the session must name: the installed credential's, which was
        /// checked against it, and before the first one the user the host said the account is (``pin(_:)``), if it did.
        var pinnedEmail: String? { credential?.email ?? rare?.value.expectedEmail }
        /// Whether `credential` names the pinned user, byte for byte, or the session is pinned to none yet.
        func admits(_ credential: IdentityCredential) -> Bool {
            admits(email: credential.email)
        }
        /// Whether `email` is the pinned user's, byte for byte (the bytes the backend signs), or the session is pinned
        /// to none yet.
        func admits(email: String) -> Bool {
            pinnedEmail.map { $0.utf8.elementsEqual(email.utf8) } ?? true
        }
        /// The credential the service last rejected, so one credential is renewed at most once.
        var rejectedSignature: IdentityCredential.Signature? {
            get { rare?.value.rejectedSignature }
            set { updateRare { $0.rejectedSignature = newValue } }
        }
        /// The monotonic time before which no fetch may start, because the backend asked for a delay (`Retry-After`).
        var retryNotBefore: Duration? {
            get { rare?.value.retryNotBefore }
            set { updateRare { $0.retryNotBefore = newValue } }
        }
        /// Why the last fetch failed, while no fetch has succeeded since: what a sign-in that runs out of time reports.
        var lastFailure: SessionError? {
            get { rare?.value.lastFailure }
            set { updateRare { $0.lastFailure = newValue } }
        }

        /// What a session holds only after a rejection, a `Retry-After` or a failure, or before its first credential
        /// when the host named the user, out of line: together they are eighteen words, and an identified session, a
        /// pool's one per account, usually holds none of them.
        private var rare: OutOfLine<Rare>?

        private struct Rare: Sendable, Hashable {
            var rejectedSignature: IdentityCredential.Signature?
            var retryNotBefore: Duration?
            var lastFailure: SessionError?
            var expectedEmail: String?

            var isEmpty: Bool {
                rejectedSignature == nil && retryNotBefore == nil && lastFailure == nil && expectedEmail == nil
            }
        }

        /// Pins the session, before its first credential, to the user the host said the account is: a credential
        /// naming another is refused, not installed.
        mutating func pin(_ email: String?) {
            updateRare { $0.expectedEmail = email }
        }

        /// Installs `credential`, which names the pinned user if there is one (every path that installs checks it,
        /// byte for byte, first): from now on it pins the session.
        mutating func setCredential(_ credential: IdentityCredential) {
            assert(admits(credential), "a credential installed without the check of the pinned email")
            self.credential = credential
            if rare?.value.expectedEmail != nil { pin(nil) }
        }

        /// Changes the out-of-line fields, keeping no box when all of them are `nil`, so that equal sessions compare
        /// equal however they got there.
        private mutating func updateRare(_ change: (inout Rare) -> Void) {
            var value = rare?.value ?? Rare()
            change(&value)
            rare = value.isEmpty ? nil : OutOfLine(value)
        }

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
        /// A credential the host handed over with the sign-in: installed instead of the first fetch once the
        /// change is prepared, if it is still valid then.
        var pushed: IdentityCredential?
    }

    enum State: Sendable, Hashable {
        /// No account.
        case signedOut
        /// An account change is under way. Stored out of line: a change holds two sessions' worth of data, and
        /// inline it would widen every machine, a pool's one per account, for a state each passes through briefly.
        indirect case switching(Change)
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
        /// A graceful shutdown began: refuse new scoped work from now on; running work goes on.
        case refuseNewWork
        /// A graceful shutdown began: report ``gracePeriodEnded(at:)`` once the running scoped work has finished or
        /// this much monotonic time has passed, whichever comes first.
        case startGracePeriod(Duration)
    }

    /// What ``changeAccount(to:at:)`` and ``shutdownRequested(at:)`` decided.
    enum ChangeDecision: Sendable {
        /// The target is already the current account (or the one being switched to): no change begins, though a
        /// session not pinned yet may have been pinned to the user the caller expects.
        case alreadyCurrent(epoch: UInt64)
        /// A change began with a new epoch.
        case began(epoch: UInt64, [Action])
        /// The engine has shut down, or is shutting down.
        case shutDown
        /// The credential handed over with the sign-in was refused, or the user the caller expects is not the one
        /// the account session is pinned to; nothing changed except the reported events.
        case refused(SessionError, [Action])
    }

    /// What ``credentialPushed(_:for:at:)`` decided.
    enum PushDecision: Sendable {
        /// The credential was installed, after performing the actions.
        case installed([Action])
        /// The account's change is still being prepared: the credential is kept and installed (if still valid)
        /// instead of the first fetch.
        case deferred
        /// The credential was refused and not installed; the actions report it.
        case refused(SessionError, [Action])
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

    /// What the owner installs in its store after every step: all its readers see, read out of the machine once.
    var snapshot: SessionStore.Snapshot {
        SessionStore.Snapshot(
            state: publicState,
            epoch: epoch,
            credential: usableCredential,
            shutDown: isShutDown,
            clockOffset: serverClockOffset
        )
    }

    /// The policies the machine decides by, taken from a ``SessionConfiguration``. Immutable and held by reference,
    /// so that the engines of a pool share one.
    final class Configuration: Sendable {
        let renewal: RenewalPolicy
        let retry: RetryPolicy
        let misconfigurationRetry: RetryPolicy
        let minimumFetchInterval: Duration
        let clockSkewTolerance: Duration
        let maximumRetryAfter: Duration
        /// Whether a renewal's jitter is drawn from the credential, so that the replicas of a fleet that hold the
        /// same credential renew it together: only under a fleet's coordinator, which then lets one of them fetch.
        /// Without one, each process draws its own, and replicas of one user spread their renewals.
        let drawsRenewalFromCredential: Bool

        init(_ configuration: SessionConfiguration, coordinated: Bool = false) {
            drawsRenewalFromCredential = coordinated
            renewal = configuration.renewal
            retry = configuration.retry
            misconfigurationRetry = configuration.misconfigurationRetry
            minimumFetchInterval = configuration.minimumFetchInterval
            clockSkewTolerance = configuration.clockSkewTolerance
            maximumRetryAfter = configuration.maximumRetryAfter
        }
    }

    /// The state; only the machine's inputs change it.
    var state: State = .signedOut
    /// The current epoch; it grows with every account change.
    var epoch: UInt64 = 0
    /// The last fetch or timer identity handed out.
    var lastID: UInt64 = 0
    /// The account the last account-change hooks entered: the next hooks leave it.
    var hookedAccount: AccountID?
    /// The backend's clock minus the local wall clock that expiry and renewal decisions apply: zero until a fetcher
    /// reports an offset larger than the clock-skew tolerance.
    var serverClockOffset: Duration = .zero
    /// The seeded generator behind every jitter.
    var random: SplitMix64
    let configuration: Configuration
    /// The timer the owner should have running, if any.
    var timer: TimerSpec?
    // Stored after the timer, in the room it leaves.
    /// Whether a graceful shutdown has begun: no account change is accepted any more.
    var gracefulShutdown = false

    init(configuration: SessionConfiguration, seed: UInt64) {
        self.init(configuration: Configuration(configuration), seed: seed)
    }

    /// Creates a machine that decides by `configuration`, which it may share with other machines.
    init(configuration: Configuration, seed: UInt64) {
        self.configuration = configuration
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

    /// The epoch whose renewal, started because the session's installed credential was rejected, callers may wait for;
    /// `nil` when no such renewal is running or planned.
    ///
    /// Work rejected with that credential waits for it, and so does work rejected with an earlier credential of the
    /// session (one a renewal replaced while the work ran), whose report changes nothing: the renewal under way is
    /// its one renewal too.
    var rejectionRenewalEpoch: UInt64? {
        guard let session = currentSession, session.rejectedSignature != nil else { return nil }
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
    var activeSession: AccountSession? {
        switch state {
        case .signedOut, .shutDown: nil
        case .switching(let change): change.prepared ? change.target : nil
        case .identified(let session), .renewing(let session), .expired(let session): session
        }
    }

    static let accountChanged = SessionError(.accountChanged, reason: "the account changed")
    static let signedOut = SessionError(.signedOut, reason: "no account is signed in")
    static let shutDownError = SessionError(.shutDown, reason: "the session engine has shut down")
    /// The refusal of a sign-in to the current account that expects another user than the one it is pinned to.
    static let expectationMismatch = SessionError(
        .identityMismatch, reason: "the account is signed in as another user than the one expected")

    /// The backend's time at `now`: the local wall clock plus the applied offset.
    func backendTime(_ now: SessionInstant) -> Date {
        now.wall.addingTimeInterval(serverClockOffset.timeInterval)
    }

    /// The local wall-clock time at which the backend's clock reads `date`.
    func localTime(ofBackend date: Date) -> Date {
        date.addingTimeInterval(-serverClockOffset.timeInterval)
    }

    /// Whether `credential` has not expired at `now` on the backend's time (the local time while no offset applies).
    func isValid(_ credential: IdentityCredential, at now: SessionInstant) -> Bool {
        credential.isValid(at: backendTime(now))
    }

    /// The current account session outside a switch.
    var currentSession: AccountSession? {
        switch state {
        case .signedOut, .switching, .shutDown: nil
        case .identified(let session), .renewing(let session), .expired(let session): session
        }
    }
}

/// A decision of ``SessionStateMachine`` whose actions its owner performs in the same step.
protocol SessionDecision {
    /// The actions to perform, in order.
    var actions: [SessionStateMachine.Action] { get }
}

extension Array: SessionDecision where Element == SessionStateMachine.Action {
    var actions: [SessionStateMachine.Action] { self }
}

extension SessionStateMachine.ChangeDecision: SessionDecision {
    var actions: [SessionStateMachine.Action] {
        switch self {
        case .began(_, let actions), .refused(_, let actions): actions
        case .alreadyCurrent, .shutDown: []
        }
    }
}

extension SessionStateMachine.PushDecision: SessionDecision {
    var actions: [SessionStateMachine.Action] {
        switch self {
        case .installed(let actions), .refused(_, let actions): actions
        case .deferred: []
        }
    }
}

extension SessionStateMachine.RenewDecision: SessionDecision {
    var actions: [SessionStateMachine.Action] {
        switch self {
        case .wait(_, let actions): actions
        case .current, .fail: []
        }
    }
}
