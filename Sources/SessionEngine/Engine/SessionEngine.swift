public import Foundation
import Synchronization

/// Owns one verified identity's whole life inside a long-running process.
///
/// The engine signs an account in, renews its credential from a ``CredentialFetcher`` before it expires, blocks
/// identified work with `INVALID_IDENTITY` once the credential has expired (never downgrading it to anonymous),
/// cancels the account's in-flight work on sign-out or an account switch, recovers when the service rejects a
/// credential, and publishes all of it through ``events(bufferLimit:)``.
///
/// A pure state machine decides every transition; this actor only performs the actions the machine returns. Every
/// account session has an epoch, and a fetch result, timer or rejection from an earlier epoch is discarded, so a
/// renewal that lands after a sign-out can never install the previous user's credential.
///
/// Requests read the credential without an actor hop through ``identityHeaders()``, which is safe to call on every
/// request. Work that should end with the account runs through ``withIdentity(_:)``.
///
/// ```swift
/// let engine = SessionEngine(fetcher: backend)
/// try await engine.signIn("user-42")
/// let headers = try engine.identityHeaders()   // on every identified request
/// ```
///
/// Run ``run()`` in a service group, or call ``shutdown()``, to stop cleanly.
public actor SessionEngine {
    private let fetcher: any CredentialFetcher
    private let clock: any SessionClock
    private let configuration: SessionConfiguration
    private var machine: SessionStateMachine
    private let store: SessionStore
    private let broadcaster: EventBroadcaster
    private let waiters: OutcomeWaiters
    private let recorder = MetricsRecorder()
    /// Counts runnable engine work for tests driven by a manual clock; `nil` on other clocks.
    package nonisolated let ledger: ActivityLedger?
    /// Receives every event in the step that publishes it, for tests, demos and benchmarks.
    private let observer: (@Sendable (SessionEvent) -> Void)?
    /// Opens once the engine has shut down.
    private let stopped: Latch
    private var fetchTask: (id: FetchID, task: Task<Void, Never>)?
    private var timerTask: Task<Void, Never>?
    /// A graceful shutdown's two watchers: the grace period's sleep and the wait for running work to finish.
    private var graceTasks: [Task<Void, Never>] = []
    private var hooks: [@Sendable (AccountChange) async -> Void] = []
    /// The latest account change's preparation: the next one runs after it.
    private var preparation: Latch?
    private var publishedState: SessionState = .signedOut
    private var sequence: UInt64 = 0

    /// Creates an engine, signed out.
    ///
    /// - Parameters:
    ///   - fetcher: Gets credentials from the host's backend.
    ///   - configuration: Renewal, retry and buffering policies.
    ///   - clock: The source of wall time and sleep; a manual clock in tests.
    public init(
        fetcher: some CredentialFetcher,
        configuration: SessionConfiguration = SessionConfiguration(),
        clock: some SessionClock = SystemClock()
    ) {
        self.init(fetcher: fetcher, configuration: configuration, clock: clock, observer: nil)
    }

    /// Creates an engine whose every event also goes to `observer`, synchronously, in the step that publishes it.
    ///
    /// - Parameters:
    ///   - fetcher: Gets credentials from the host's backend.
    ///   - configuration: Renewal, retry and buffering policies.
    ///   - clock: The source of wall time and sleep.
    ///   - observer: Receives each event before any subscriber does; it must return quickly and not call the engine.
    package init(
        fetcher: some CredentialFetcher,
        configuration: SessionConfiguration = SessionConfiguration(),
        clock: some SessionClock = SystemClock(),
        observer: (@Sendable (SessionEvent) -> Void)?
    ) {
        self.fetcher = fetcher
        self.clock = clock
        self.configuration = configuration
        self.observer = observer
        var seed = configuration.randomSeed ?? 0
        if configuration.randomSeed == nil {
            var system = SystemRandomNumberGenerator()
            seed = system.next()
        }
        let ledger = (clock as? any ActivityLedgerClock)?.activityLedger
        if let ledger { (fetcher as? any ActivityLedgerFetcher)?.attach(ledger) }
        self.ledger = ledger
        self.machine = SessionStateMachine(configuration: configuration, seed: seed)
        self.store = SessionStore(clock: clock, ledger: ledger)
        self.waiters = OutcomeWaiters(ledger: ledger)
        self.stopped = Latch(ledger: ledger)
        let start = SessionInstant(wall: clock.now, uptime: clock.uptime)
        self.broadcaster = EventBroadcaster(
            initial: SessionEvent(.stateChanged(.signedOut), time: start, epoch: 0, sequence: 0),
            bufferLimit: configuration.eventBufferLimit
        )
    }

    // MARK: - Reading without an actor hop

    /// The current state, read without an actor hop.
    public nonisolated var state: SessionState { store.sessionState }

    /// The identity headers for an identified request, read without an actor hop.
    ///
    /// The headers are computed once when a credential is installed; this call takes one uncontended lock and
    /// reads the wall clock, so it is safe on every request.
    ///
    /// - Returns: The `X-AppNorth-Identity-*` headers of the installed credential.
    /// - Throws: ``SessionError`` with ``SessionError/Code/invalidIdentity`` (`INVALID_IDENTITY`) when the
    ///   credential has expired by the local clock or was rejected; ``SessionError/Code/signedOut`` when no account
    ///   is signed in; ``SessionError/Code/switching`` during an account change; ``SessionError/Code/shutDown`` after
    ///   shutdown. Never falls back to anonymous.
    public nonisolated func identityHeaders() throws(SessionError) -> IdentityHeaders {
        try store.headers()
    }

    /// Whether the installed credential is usable and has not expired at `date`.
    ///
    /// Like the credential's own ``IdentityCredential/isValid(at:)``, this checks expiry only, never the signature.
    /// `date` is a time on this process's wall clock. While the engine runs on the backend's time (a fetcher
    /// reported a clock offset beyond ``SessionConfiguration/clockSkewTolerance``), `date` is moved by that offset
    /// before it is compared with `expiresAt`, so the answer is the one the service would give at that moment and
    /// agrees with ``identityHeaders()``. The credential's own ``IdentityCredential/isValid(at:)`` stays a pure
    /// comparison with the date it is given.
    ///
    /// - Parameter date: The moment to check, on the local wall clock.
    /// - Returns: `false` when signed out, switching, expired or rejected, or when `date` (moved by the applied
    ///   offset) is at or past `expiresAt`.
    public nonisolated func hasValidIdentity(at date: Date) -> Bool {
        guard let expiry = store.localExpiry() else { return false }
        return date.timeIntervalSince1970 < expiry
    }

    /// The engine's events, starting with the current state.
    ///
    /// - Parameter bufferLimit: How many undelivered events this subscriber may hold before the oldest are dropped;
    ///   `nil` uses ``SessionConfiguration/eventBufferLimit``, `Int.max` never drops.
    /// - Returns: A sequence that ends when the engine shuts down. See ``SessionEvents``.
    public nonisolated func events(bufferLimit: Int? = nil) -> SessionEvents {
        SessionEvents(broadcaster: broadcaster, limit: bufferLimit.map { max(1, $0) })
    }

    /// What the engine has done and holds: counters, fetch latency, the credential's remaining lifetime, tasks,
    /// subscribers, waiters and scoped work. Read without an actor hop.
    public nonisolated var metrics: SessionMetrics {
        var metrics = recorder.snapshot
        metrics.eventsDropped = broadcaster.droppedCount
        metrics.subscribers = broadcaster.subscriberCount
        metrics.waiters = waiters.count
        metrics.scopedWork = store.runningWorkCount
        // Scoped work's tasks are engine tasks as well; the store counts them.
        metrics.liveTasks += metrics.scopedWork
        if let expiry = store.localExpiry() {
            let remaining = expiry - clock.now.timeIntervalSince1970
            metrics.credentialRemainingLifetime = .seconds(max(0, remaining))
        }
        return metrics
    }

    // MARK: - Account changes

    /// Signs an account in and waits for its first credential.
    ///
    /// Signing in is an account change: the state passes through ``SessionState/switching(from:to:)``. The call
    /// returns once the previous account's work has drained, the hooks have run and the account's first credential is
    /// installed. Transient fetch failures are retried with backoff while this call waits (the state is then
    /// ``SessionState/expired(_:)`` with reason ``ExpiredIdentity/Reason/unavailable``), for as long as it takes:
    /// through a backend outage or a misconfiguration that is until shutdown. A host whose loop must run whatever
    /// the backend does signs in with ``signIn(_:timeout:)``. Cancelling the calling task stops the wait, not the
    /// sign-in. Signing in to the account that is already current returns once it is identified.
    ///
    /// - Parameter account: The account to sign in.
    /// - Throws: ``SessionError`` with ``SessionError/Code/backendSessionEnded`` when the backend refuses the account
    ///   (the engine is then signed out), ``SessionError/Code/accountChanged`` when another change superseded this
    ///   one, ``SessionError/Code/shutDown`` after shutdown; `CancellationError` when the caller was cancelled.
    public func signIn(_ account: AccountID) async throws {
        ledger?.enter()
        defer { ledger?.leave() }
        try await changeAccount(to: account)
    }

    /// Signs an account in and waits for its first credential, for at most `timeout` on the engine's clock.
    ///
    /// This is ``signIn(_:)`` with a deadline. When the first credential is installed in time the call returns as
    /// ``signIn(_:)`` does. When the deadline passes first (the backend is down, refuses every credential, or is
    /// misconfigured), the call throws ``SessionError/Code/signInTimedOut`` and the sign-in goes on: the account stays
    /// signed in (``SessionState/expired(_:)`` with reason ``ExpiredIdentity/Reason/unavailable`` once the first fetch
    /// failed, ``SessionState/switching(from:to:)`` while the previous account's work still drains), identified work
    /// fails with `INVALID_IDENTITY`, and the engine keeps fetching with backoff and becomes
    /// ``SessionState/identified(_:)`` as soon as the backend answers, which ``events(bufferLimit:)`` reports. The
    /// error's reason says why the last fetch failed, when one did. Cancelling the calling task stops the wait as
    /// with ``signIn(_:)``.
    ///
    /// - Parameters:
    ///   - account: The account to sign in.
    ///   - timeout: How long to wait for the first credential, on the engine's clock; from the call.
    /// - Throws: ``SessionError`` with ``SessionError/Code/signInTimedOut`` when the deadline passed first; otherwise
    ///   as ``signIn(_:)``.
    public func signIn(_ account: AccountID, timeout: Duration) async throws {
        ledger?.enter()
        defer { ledger?.leave() }
        try await changeAccount(to: account, timeout: max(.zero, timeout))
    }

    /// Signs an account in with a credential the host already holds, such as one its login response carried.
    ///
    /// The credential is validated exactly like a fetched one, as the account session's first: not expired on
    /// arrival, at most 24 hours of lifetime (plus ``SessionConfiguration/clockSkewTolerance``). A refused credential
    /// changes nothing and the call throws. An accepted one starts an account change like ``signIn(_:)``; once the
    /// previous account's work has drained and the hooks have run, the credential is installed instead of the first
    /// fetch (if it expired meanwhile, the engine fetches one). Renewal then goes through the fetcher, or through
    /// ``setIdentityCredential(_:for:)``. Signing in to the account that is already current hands the credential over
    /// as ``setIdentityCredential(_:for:)`` does.
    ///
    /// This is the seed's `setIdentityCredential(credential)` after sign-in.
    ///
    /// - Parameters:
    ///   - account: The account to sign in.
    ///   - credential: The account's credential, as the host's backend issued it.
    /// - Throws: ``SessionError`` with ``SessionError/Code/credentialExpiredOnArrival`` or
    ///   ``SessionError/Code/lifetimeTooLong`` for a refused credential, ``SessionError/Code/identityMismatch`` when
    ///   the account is current and the credential names another user; otherwise as ``signIn(_:)``.
    public func signIn(_ account: AccountID, with credential: IdentityCredential) async throws {
        ledger?.enter()
        defer { ledger?.leave() }
        try await changeAccount(to: account, pushing: credential)
    }

    /// Installs a credential the host already holds for the current account, such as a renewal its backend pushed.
    ///
    /// The credential is validated exactly like a fetched one: it must name the same user as the account session's
    /// first credential, must not have expired on arrival and must live at most 24 hours (plus
    /// ``SessionConfiguration/clockSkewTolerance``). It is subject to the same epoch rule: a credential for an
    /// account the engine is not signed in to, has left or is leaving is refused and never installed. An accepted
    /// credential replaces the installed one at once (a fetch running for the account is cancelled and its result
    /// discarded), the renewal timer restarts from it, and callers waiting for a renewal receive it. During the
    /// account's sign-in, before its first credential is installed, the credential is kept and installed once the
    /// previous account's work has drained.
    ///
    /// This is the seed's `setIdentityCredential(credential)` "whenever your backend renews it".
    ///
    /// - Parameters:
    ///   - credential: The credential the host's backend issued.
    ///   - account: The account it belongs to.
    /// - Throws: ``SessionError``: ``SessionError/Code/identityMismatch``,
    ///   ``SessionError/Code/credentialExpiredOnArrival`` or ``SessionError/Code/lifetimeTooLong`` for a refused
    ///   credential; ``SessionError/Code/accountChanged`` when the engine is not signed in to `account`;
    ///   ``SessionError/Code/shutDown`` after shutdown. Nothing is installed when it throws.
    public func setIdentityCredential(_ credential: IdentityCredential, for account: AccountID) async throws {
        ledger?.enter()
        defer { ledger?.leave() }
        try push(credential, for: account)
    }

    private func push(_ credential: IdentityCredential, for account: AccountID) throws {
        let now = instant()
        switch machine.credentialPushed(credential, for: account, at: now) {
        case .installed(let actions):
            apply(actions, at: now)
        case .deferred:
            break
        case .refused(let error, let actions):
            apply(actions, at: now)
            throw error
        }
    }

    /// Switches to another account and waits for its first credential.
    ///
    /// The seed's order is followed: the previous account's scoped work is cancelled and drained, its credential is
    /// cleared, the account-change hooks run, the next account's credential is fetched and installed, and then the
    /// new state is published. From the moment the switch begins, no credential of the previous account is handed
    /// out, and any fetch still running for it is cancelled and its result discarded.
    ///
    /// - Parameter account: The account to switch to.
    /// - Throws: As ``signIn(_:)``.
    public func switchAccount(to account: AccountID) async throws {
        ledger?.enter()
        defer { ledger?.leave() }
        try await changeAccount(to: account)
    }

    /// Signs out: cancels and drains the account's scoped work, clears the credential and runs the hooks.
    ///
    /// Any fetch in flight is cancelled and its result discarded. Returns once the state is
    /// ``SessionState/signedOut`` (or a later change superseded the sign-out).
    public func signOut() async {
        ledger?.enter()
        defer { ledger?.leave() }
        try? await changeAccount(to: nil)
    }

    /// Registers a hook that runs during every account change, after the previous account's work has drained and
    /// its credential was cleared, and before the next account's credential is installed.
    ///
    /// Hosts discard account-specific view models, read caches and offline storage here. Hooks run one at a time,
    /// in registration order, once per change.
    ///
    /// - Parameter hook: Receives the account being left and the account being entered.
    public func addAccountChangeHook(_ hook: @escaping @Sendable (AccountChange) async -> Void) {
        hooks.append(hook)
    }

    private func changeAccount(
        to target: AccountID?,
        pushing credential: IdentityCredential? = nil,
        timeout: Duration? = nil
    ) async throws {
        let now = instant()
        switch machine.changeAccount(to: target, pushing: credential, at: now) {
        case .shutDown:
            throw SessionStateMachine.shutDownError
        case .refused(let error, let actions):
            apply(actions, at: now)
            throw error
        case .alreadyCurrent(let epoch):
            guard let target else {
                // A sign-out may still be draining its work: return once it is done, as the first caller does.
                await preparation?.wait()
                return
            }
            if let credential { try push(credential, for: target) }
            if let timeout {
                try await waitForIdentity(epoch: epoch, of: target, preparedBy: nil, within: timeout)
                return
            }
            try await waitForIdentity(epoch: epoch)
        case .began(let epoch, let actions):
            log(.info, "account change began", ["to": target?.rawValue ?? "none", "epoch": "\(epoch)"])
            apply(actions, at: now)
            // The actions started this change's preparation; a caller returns only once it is done, even when a
            // later change superseded it, so no work of the previous account still runs.
            guard let target else {
                await preparation?.wait()
                return
            }
            // The caller registers for the epoch's outcome in this step, before the preparation ends: a first fetch
            // that ends the backend session while the caller is still waking from the preparation then reaches it as
            // BACKEND_SESSION_ENDED, not as a superseded change.
            try await waitForIdentity(epoch: epoch, of: target, preparedBy: preparation, within: timeout)
        }
    }

    /// Drains the previous epochs' work, runs the hooks the machine says are due and reports the change prepared.
    private func prepare(epoch: UInt64) async {
        await store.drain(before: epoch)
        // Every await is a place where the world may have changed: the machine checks the epoch.
        if let change = machine.hooksDue(epoch: epoch) {
            for hook in hooks { await hook(change) }
        }
        let now = instant()
        apply(machine.changePrepared(epoch: epoch, at: now), at: now)
    }

    private func waitForIdentity(epoch: UInt64) async throws {
        if machine.epoch == epoch, machine.usableCredential != nil { return }
        guard machine.epoch == epoch, machine.currentAccount != nil else {
            if machine.isShutDown { throw SessionStateMachine.shutDownError }
            throw SessionError(.accountChanged, reason: "another account change superseded this one")
        }
        _ = try await waiters.wait(epoch: epoch, kind: .identity)
    }

    /// Waits for the identity of `epoch`, and for at most `timeout` when one is given, the change's preparation
    /// (`latch`) included.
    ///
    /// The caller registers for the epoch's identity at once, in the step that began the change, so no outcome of
    /// the epoch can slip in while it waits for the preparation, and a deadline covers the preparation too: an
    /// engine task sleeping on the engine's clock fails that one registration when the deadline passes. Every other
    /// outcome, a superseding change's included, returns only once the change's preparation is done.
    private func waitForIdentity(
        epoch: UInt64,
        of account: AccountID,
        preparedBy latch: Latch?,
        within timeout: Duration?
    ) async throws {
        if latch == nil, machine.epoch == epoch, machine.usableCredential != nil { return }
        guard machine.epoch == epoch, machine.currentAccount != nil else {
            if machine.isShutDown { throw SessionStateMachine.shutDownError }
            throw SessionError(.accountChanged, reason: "another account change superseded this one")
        }
        let ticket = waiters.register(epoch: epoch, kind: .identity)
        let clock = self.clock
        let deadline = timeout.map { timeout in
            startTask { [weak self] in
                do {
                    try await clock.sleep(for: timeout)
                } catch {
                    return
                }
                await self?.signInDeadlinePassed(ticket, epoch: epoch, account: account, timeout: timeout)
            }
        }
        defer { deadline?.cancel() }
        do {
            _ = try await waiters.wait(ticket)
        } catch let error as SessionError where error.code == .signInTimedOut {
            throw error
        } catch {
            await latch?.wait()
            throw error
        }
        await latch?.wait()
    }

    /// A sign-in's deadline passed: its caller fails with `SIGN_IN_TIMED_OUT` unless it was resolved already, and
    /// the sign-in goes on.
    private func signInDeadlinePassed(
        _ ticket: OutcomeWaiters.Ticket,
        epoch: UInt64,
        account: AccountID,
        timeout: Duration
    ) {
        var reason = "\(account) was not identified within \(timeout.readable); the engine keeps trying"
        if machine.epoch == epoch, let failure = machine.activeSession?.lastFailure {
            reason += " (the last fetch failed: \(failure))"
        } else if machine.epoch == epoch, machine.activeSession == nil {
            reason += " (the previous account's work is still draining)"
        }
        log(.info, "sign-in timed out", ["account": account.rawValue, "timeout": timeout.readable])
        let failureClass = machine.epoch == epoch ? machine.activeSession?.lastFailure?.failureClass : nil
        waiters.fail(
            ticket, with: SessionError(.signInTimedOut, reason: reason, isTransient: true, failureClass: failureClass))
    }

    // MARK: - Renewal and rejection

    /// Renews the credential now and returns the new one.
    ///
    /// Concurrent callers share one fetch. If a fetch started less than
    /// ``SessionConfiguration/minimumFetchInterval`` ago and its credential is still valid, that credential is
    /// returned without fetching again. A cancelled caller stops waiting; the fetch goes on for the others.
    ///
    /// - Returns: The credential installed by the renewal.
    /// - Throws: ``SessionError``: the fetch's failure (the engine keeps retrying in the background),
    ///   ``SessionError/Code/signedOut``, ``SessionError/Code/accountChanged``, ``SessionError/Code/shutDown``; or
    ///   `CancellationError`.
    public nonisolated func renew() async throws -> IdentityCredential {
        // Only the decision and the registration run on the actor, where the call enters the ledger in order; the
        // wait does not, so callers woken together resume on their own executors instead of queueing on the actor
        // to return.
        let answer = await requestRenewal()
        defer { ledger?.leave() }
        switch answer {
        case .now(let credential): return credential
        case .wait(let ticket): return try await waiters.wait(ticket)
        case .failed(let error): throw error
        }
    }

    /// Enters the call and decides it: the credential to return at once, the caller's registered wait, or a failure.
    private func requestRenewal() -> OutcomeWaiters.Answer {
        ledger?.enter()
        let now = instant()
        switch machine.renewRequested(at: now) {
        case .current(let credential):
            return .now(credential)
        case .fail(let error):
            return .failed(error)
        case .wait(let epoch, let actions):
            apply(actions, at: now)
            return .wait(waiters.register(epoch: epoch, kind: .nextOutcome))
        }
    }

    /// Reports that the service answered `INVALID_IDENTITY` for a credential, for example after a secret rotation.
    ///
    /// The first report of the installed credential renews it once; concurrent reports of the same credential share
    /// that renewal. If the renewed credential is rejected too, the state stays ``SessionState/expired(_:)`` with
    /// reason ``ExpiredIdentity/Reason/rejected`` and the engine retries only after backoff, so a misconfigured
    /// backend cannot cause a loop. Reports of older credentials, or from an earlier epoch, are ignored.
    ///
    /// - Parameter credential: The credential the service rejected.
    public func credentialRejected(_ credential: IdentityCredential) async {
        ledger?.enter()
        defer { ledger?.leave() }
        reportRejection(of: credential)
    }

    private func reportRejection(of credential: IdentityCredential) {
        let now = instant()
        apply(machine.credentialRejected(credential, at: now), at: now)
    }

    /// Reports a rejection and waits for the renewal it causes, for ``withIdentity(_:)``'s one retry.
    ///
    /// - Parameters:
    ///   - credential: The credential the work sent and the service rejected.
    ///   - epoch: The account session the work ran in.
    /// - Returns: The credential to retry with, of the same account session.
    /// - Throws: ``SessionError/Code/accountChanged`` when that account session is no longer the current one (the
    ///   work must not run again as another account); ``SessionError/Code/invalidIdentity`` when no renewal follows.
    package func renewAfterRejection(of credential: IdentityCredential, epoch: UInt64) async throws
        -> IdentityCredential
    {
        guard !machine.isShutDown else { throw SessionStateMachine.shutDownError }
        // The work belongs to its account session: after an account change it fails, and never runs again with the
        // next account's credential.
        guard machine.currentSession?.epoch == epoch else { throw SessionStore.accountChangedError }
        reportRejection(of: credential)
        if let current = machine.usableCredential, current.signature != credential.signature {
            // Another caller's report already renewed it.
            return current
        }
        guard let epoch = machine.rejectionRenewalEpoch(for: credential) else {
            throw SessionError(.invalidIdentity, reason: "the service rejected the renewed credential as well")
        }
        return try await waiters.wait(epoch: epoch, kind: .nextOutcome)
    }

    // MARK: - Scoped work

    /// Runs work bound to the current account and credential.
    ///
    /// The work runs in its own task, registered with the account session. An account change or sign-out cancels
    /// it and waits for it to end before the next account's credential is installed, so work of a previous account
    /// never overlaps the next one. Work should honour cancellation promptly, since a change waits for it.
    ///
    /// If the work throws ``SessionError/credentialRejected`` (the service answered `INVALID_IDENTITY`), the engine
    /// renews the credential once and runs the work once more with the new credential; a second rejection fails
    /// with `INVALID_IDENTITY` and leaves the state ``SessionState/expired(_:)``.
    ///
    /// This call does not hop onto the actor unless the credential is rejected.
    ///
    /// - Parameter body: The work; it receives the credential to send.
    /// - Returns: What the work returns.
    /// - Throws: ``SessionError`` with ``SessionError/Code/invalidIdentity`` when the credential has expired or was
    ///   rejected twice, ``SessionError/Code/signedOut`` or ``SessionError/Code/switching`` when no identity is
    ///   available, ``SessionError/Code/accountChanged`` when an account change cancelled the work; otherwise what the
    ///   work throws.
    public nonisolated func withIdentity<T: Sendable>(
        _ body: @escaping @Sendable (IdentityCredential) async throws -> T
    ) async throws -> T {
        ledger?.enter()
        defer { ledger?.leave() }
        switch try await runScoped(body, requiring: nil) {
        case .finished(let value):
            return value
        case .rejected(let credential, let epoch):
            let renewed = try await renewAfterRejection(of: credential, epoch: epoch)
            switch try await runScoped(body, requiring: (renewed, epoch)) {
            case .finished(let value):
                return value
            case .rejected(let again, _):
                await reportRejection(of: again)
                throw SessionError(.invalidIdentity, reason: "the service rejected the renewed credential as well")
            }
        }
    }

    /// How one run of scoped work ended, when it did not fail otherwise.
    private enum ScopedOutcome<T> {
        /// The work returned this value.
        case finished(T)
        /// The work threw ``SessionError/credentialRejected`` with this credential, of this account session, and
        /// the engine had not cancelled it.
        case rejected(IdentityCredential, epoch: UInt64)
    }

    private nonisolated func runScoped<T: Sendable>(
        _ body: @escaping @Sendable (IdentityCredential) async throws -> T,
        requiring required: (credential: IdentityCredential, epoch: UInt64)?
    ) async throws -> ScopedOutcome<T> {
        let store = self.store
        let ledger = self.ledger
        let executor = configuration.taskExecutor
        let (credential, task, ticket) = try store.startWork(requiring: required) { credential, id in
            ledger?.begin()
            return Task(executorPreference: executor) {
                // The caller, parked while it waits for the work, becomes runnable as the work ends: one activity
                // takes the other's place, so the ledger's count does not change.
                defer { store.finishWork(id) }
                return try await body(credential)
            }
        }
        ledger?.park()
        do {
            return .finished(
                try await withTaskCancellationHandler {
                    try await task.value
                } onCancel: {
                    task.cancel()
                })
        } catch {
            // An account change that cancelled the work decides, whatever the work threw as it ended: a rejection
            // then belongs to the account that was left.
            if ticket.cancelledByEngine.load(ordering: .relaxed) { throw SessionStore.accountChangedError }
            if let error = error as? SessionError, error.code == .credentialRejected {
                return .rejected(credential, epoch: ticket.epoch)
            }
            throw error
        }
    }

    // MARK: - Life cycle

    /// Keeps the engine running until the calling task is cancelled, then shuts it down cleanly.
    ///
    /// Renewal does not depend on this call: the engine renews from the moment an account signs in. `run()` gives a
    /// daemon's service group one place to own the engine's lifetime: when its task is cancelled, the scoped work is
    /// cancelled and drained, the fetch and timers stop, the credential is cleared, waiting callers fail with
    /// ``SessionError/Code/shutDown`` and every event stream finishes. It also returns if ``shutdown()`` is called
    /// elsewhere.
    ///
    /// - Throws: Never at present; the signature leaves room for start-up failures.
    public func run() async throws {
        ledger?.enter()
        defer { ledger?.leave() }
        await stopped.wait(stopsOnCancellation: true)
        await beginShutdown()
    }

    /// Shuts the engine down: cancels and drains scoped work, stops the fetch and timers, clears the credential,
    /// fails waiting callers with ``SessionError/Code/shutDown`` and finishes every event stream.
    ///
    /// Account-change hooks do not run, except those of a sign-out already under way, which becomes the shutdown.
    /// Calls after shutdown fail with ``SessionError/Code/shutDown``. Concurrent calls all return once the engine
    /// has shut down.
    public func shutdown() async {
        ledger?.enter()
        defer { ledger?.leave() }
        await beginShutdown()
    }

    /// Shuts the engine down gracefully: lets running scoped work finish within `gracePeriod`, then signs out and
    /// shuts down.
    ///
    /// From the moment it is called, new work run through ``withIdentity(_:)`` fails with
    /// ``SessionError/Code/shutDown`` and no account change begins, while work already running keeps its identity
    /// (still renewed, and ``identityHeaders()`` still answers). Once that work has finished, or `gracePeriod` has
    /// passed on the engine's clock, whichever comes first, the work still running is cancelled and drained, the
    /// account is signed out with its account-change hooks (so account caches are cleared), waiting callers fail
    /// with ``SessionError/Code/shutDown``, ``run()`` returns and every event stream finishes. Returns once the
    /// engine has shut down.
    ///
    /// This is the handler for a service group's graceful shutdown, which signals rather than cancels: see the
    /// README for a `ServiceGroup` adapter. A later ``shutdown()``, or cancelling ``run()``, ends the grace period
    /// at once (without hooks, as ``shutdown()`` does).
    ///
    /// - Parameter gracePeriod: How long running work may take to finish before it is cancelled.
    public func shutdown(gracePeriod: Duration) async {
        ledger?.enter()
        defer { ledger?.leave() }
        let now = instant()
        let actions = machine.gracefulShutdownRequested(grace: gracePeriod, at: now)
        if !actions.isEmpty { log(.info, "graceful shutdown began", ["gracePeriod": gracePeriod.readable]) }
        apply(actions, at: now)
        await stopped.wait()
    }

    private func gracePeriodEnded() {
        let now = instant()
        apply(machine.gracePeriodEnded(at: now), at: now)
    }

    private func beginShutdown() async {
        let now = instant()
        if case .began(_, let actions) = machine.shutdownRequested(at: now) {
            log(.info, "shutting down", [:])
            apply(actions, at: now)
        }
        await stopped.wait()
    }

    // MARK: - Performing the machine's actions

    private func instant() -> SessionInstant {
        SessionInstant(wall: clock.now, uptime: clock.uptime)
    }

    /// Installs the machine's state in the snapshot, performs its actions in order, then publishes the events.
    ///
    /// Events go out last, so a subscriber that sees an event knows the engine has already done everything the event
    /// implies: the credential is installed, waiters are resolved, the next timer and fetch are set. Finishing the
    /// event streams at shutdown comes after the step's events, so every subscriber receives the final state.
    ///
    /// - Parameters:
    ///   - actions: What the machine decided.
    ///   - now: The instant the machine decided at; every event of the step carries it.
    private func apply(_ actions: [SessionStateMachine.Action], at now: SessionInstant) {
        let newState = machine.publicState
        store.update(
            sessionState: newState,
            credential: machine.usableCredential.map { ($0, machine.epoch) },
            shutDown: machine.isShutDown,
            clockOffset: machine.serverClockOffset
        )
        var events: [(SessionEvent.Kind, UInt64)] = []
        if newState != publishedState {
            publishedState = newState
            events.append((.stateChanged(newState), machine.epoch))
            log(.debug, "state changed", ["state": newState.name, "account": newState.account?.rawValue ?? "none"])
        }
        var finishesShutdown = false
        for action in actions {
            switch action {
            case .emit(let kind, let epoch):
                logEvent(kind)
                events.append((kind, epoch))
            case .cancelWork(let epoch, let account):
                let count = store.cancelWork(before: epoch)
                // An account change that cancelled nothing reports nothing.
                if count > 0 {
                    events.append((.workCancelled(account: account, count: count), epoch))
                }
            case .finishShutdown:
                finishesShutdown = true
                for task in graceTasks { task.cancel() }
                graceTasks = []
            default:
                perform(action)
            }
        }
        for (kind, epoch) in events { publish(kind, epoch: epoch, at: now) }
        if finishesShutdown {
            broadcaster.finish()
            stopped.open()
        }
    }

    private func publish(_ kind: SessionEvent.Kind, epoch: UInt64, at now: SessionInstant) {
        sequence += 1
        let event = SessionEvent(kind, time: now, epoch: epoch, sequence: sequence)
        recorder.record(event)
        observer?(event)
        broadcaster.publish(event)
    }

    /// Performs one action that reports no event.
    private func perform(_ action: SessionStateMachine.Action) {
        switch action {
        case .startFetch(let request):
            startFetch(request)
        case .cancelFetch:
            fetchTask?.task.cancel()
            fetchTask = nil
        case .scheduleTimer(let spec):
            startTimer(spec)
        case .cancelTimer:
            timerTask?.cancel()
            timerTask = nil
        case .resolveWaiters(let epoch, let kinds, let outcome):
            waiters.resolve(epoch: epoch, kinds: kinds, outcome: outcome)
        case .failAllWaiters(let error):
            waiters.failAll(error)
        case .prepareChange(let epoch):
            let previous = preparation
            let done = Latch(ledger: ledger)
            preparation = done
            _ = startTask { [weak self] in
                await previous?.wait()
                await self?.prepare(epoch: epoch)
                done.open()
            }
        case .refuseNewWork:
            store.refuseNewWork()
        case .startGracePeriod(let grace):
            startGracePeriod(grace)
        case .emit, .cancelWork, .finishShutdown:
            // Performed by `apply`, which publishes their events.
            break
        }
    }

    /// Watches a graceful shutdown's grace period: the first of the running work finishing and the grace period
    /// passing on the engine's clock reports its end to the machine.
    private func startGracePeriod(_ grace: Duration) {
        let clock = self.clock
        let store = self.store
        graceTasks.append(
            startTask { [weak self] in
                do {
                    try await clock.sleep(for: grace)
                } catch {
                    return
                }
                await self?.gracePeriodEnded()
            }
        )
        graceTasks.append(
            startTask { [weak self] in
                // New work is refused, so this only waits for the work that was running.
                await store.drain(before: .max)
                await self?.gracePeriodEnded()
            }
        )
    }

    /// Starts one of the engine's own tasks, counted until it ends.
    private func startTask(_ body: @escaping @Sendable () async -> Void) -> Task<Void, Never> {
        let recorder = self.recorder
        let ledger = self.ledger
        ledger?.begin()
        recorder.tasks(1)
        return Task(executorPreference: configuration.taskExecutor) {
            defer {
                recorder.tasks(-1)
                ledger?.end()
            }
            await body()
        }
    }

    private func startFetch(_ request: FetchRequest) {
        fetchTask?.task.cancel()
        let fetcher = self.fetcher
        let recorder = self.recorder
        let task = startTask { [weak self] in
            let result: Result<FetchedCredential, any Error>
            if Task.isCancelled {
                // The account session ended (a change, a sign-out, shutdown) before this task first ran: its request
                // never reaches the backend, which by now may be serving the next account's hooks.
                result = .failure(CancellationError())
            } else {
                // Counted here, in the step that calls the fetcher, so the count is of requests the backend can see.
                recorder.fetchStarted()
                do {
                    result = .success(try await fetcher.fetch(request))
                } catch {
                    result = .failure(error)
                }
            }
            await self?.fetchCompleted(request.id, result)
        }
        fetchTask = (request.id, task)
        log(.debug, "fetch started", ["account": request.account.rawValue, "fetch": "\(request.id)"])
    }

    private func fetchCompleted(_ id: FetchID, _ result: Result<FetchedCredential, any Error>) {
        if fetchTask?.id == id { fetchTask = nil }
        let now = instant()
        switch result {
        case .success(let fetched):
            let actions = machine.fetchSucceeded(
                id,
                credential: fetched.credential,
                serverClockOffset: fetched.serverClockOffset,
                at: now
            )
            apply(actions, at: now)
        case .failure(let error):
            apply(machine.fetchFailed(id, error: Self.classify(error), at: now), at: now)
        }
    }

    private func startTimer(_ spec: TimerSpec) {
        timerTask?.cancel()
        let clock = self.clock
        timerTask = startTask { [weak self] in
            // On the system clock, a wall-clock deadline alone waits on the process's one wall-clock watch.
            if clock is SystemClock, let wall = spec.wallDeadline, spec.uptimeDeadline == nil {
                guard (try? await WallClockWatch.system.wait(until: wall)) != nil else { return }
                await self?.timerFired(spec.id)
                return
            }
            while !Task.isCancelled {
                let now = SessionInstant(wall: clock.now, uptime: clock.uptime)
                if spec.isDue(at: now) {
                    await self?.timerFired(spec.id)
                    return
                }
                // Sleep on the monotonic clock, but never longer than 30 s, so wall-clock jumps are noticed.
                var slice = Duration.seconds(30)
                if let wall = spec.wallDeadline {
                    slice = min(slice, .seconds(max(0.001, wall.timeIntervalSince(now.wall))))
                }
                if let uptime = spec.uptimeDeadline {
                    slice = min(slice, max(.milliseconds(1), uptime - now.uptime))
                }
                do {
                    try await clock.sleep(for: slice)
                } catch {
                    return
                }
                if self == nil { return }
            }
        }
    }

    private func timerFired(_ id: TimerID) {
        let now = instant()
        apply(machine.timerFired(id, at: now), at: now)
    }

    /// Maps what a fetcher threw to the engine's error.
    ///
    /// Terminal, ending the session: ``SessionError/Code/backendSessionEnded``, and a credential refused for good
    /// (``SessionError/Code/invalidCredential`` marked not transient, or a ``CredentialError`` with
    /// ``CredentialError/Code/unpairedSurrogate``), since fetching again would return the same one. A
    /// ``SessionError/Code/fetchFailed`` the fetcher marked not transient (it refused the endpoint or the request)
    /// becomes ``SessionError/Code/backendMisconfigured``. Everything else is transient and retried with backoff, a
    /// misconfiguration on its slower schedule.
    static func classify(_ error: any Error) -> SessionError {
        switch error {
        case let error as SessionError:
            // Terminal: the backend ended the session, or said its credential can never verify.
            let terminal =
                error.code == .backendSessionEnded || (error.code == .invalidCredential && !error.isTransient)
            if error.code == .fetchFailed && !error.isTransient {
                // The fetcher refused to fetch (an endpoint it must not use, a request it cannot send): fetching
                // again fails the same way until someone changes the setup.
                return SessionError(
                    .backendMisconfigured, reason: error.reason, isTransient: true, retryAfter: error.retryAfter)
            }
            return SessionError(
                error.code, reason: error.reason, isTransient: !terminal, retryAfter: error.retryAfter,
                failureClass: error.failureClass)
        case let error as CredentialError:
            // A credential the reference backend signs but no verifier can check is refused for good: retrying
            // would fetch the same one for ever.
            return SessionError(
                .invalidCredential,
                reason: "the fetched credential is invalid: \(error.reason)",
                isTransient: error.code != .unpairedSurrogate
            )
        case is CancellationError:
            return .fetchFailed("the fetch was cancelled")
        default:
            return .fetchFailed("the fetcher failed with \(type(of: error))")
        }
    }

    // MARK: - Logging

    private func log(_ level: SessionLogRecord.Level, _ message: String, _ metadata: [String: String]) {
        configuration.log?(SessionLogRecord(level: level, message: message, metadata: metadata))
    }

    /// Logs an event at the level a library should: routine work at `debug`, what a daemon expects now and then
    /// (a failed fetch that will be retried, a rejection, a clock offset) at `info`, and `error` only where the host
    /// must act because the engine cannot recover by itself (``logLevel(for:)``).
    private func logEvent(_ event: SessionEvent.Kind) {
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
            // No clock that makes the credential plausible is a misconfiguration someone must fix.
            log(
                report.finding == .noClockPlausible ? .error : .info,
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
