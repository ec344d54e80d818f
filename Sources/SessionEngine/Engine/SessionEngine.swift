public import Foundation
import Synchronization

/// Owns one verified identity's whole life inside a long-running process.
///
/// The engine signs an account in, renews its credential from a ``CredentialFetcher`` before it expires, blocks
/// identified work with `INVALID_IDENTITY` once the credential has expired (never downgrading it to anonymous),
/// cancels the account's in-flight work on sign-out or an account switch, recovers when the service rejects a
/// credential, and publishes all of it through ``events()``.
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
    private let waiters = OutcomeWaiters()
    private let shutdownSignal = ShutdownSignal()
    private let tasks = TaskCounter()
    private var fetchTask: (id: FetchID, task: Task<Void, Never>)?
    private var timerTask: Task<Void, Never>?
    private var hooks: [@Sendable (AccountChange) async -> Void] = []
    private var hookAccount: AccountID?
    private var changeChain: Task<Void, Never>?
    private var publishedState: SessionState = .signedOut
    private var isShutDown = false

    /// Creates an engine, signed out.
    ///
    /// - Parameters:
    ///   - fetcher: Gets credentials from the host's backend.
    ///   - configuration: Renewal, retry and buffering policies.
    ///   - clock: The source of wall time and sleep; ``ManualClock`` in tests.
    public init(
        fetcher: some CredentialFetcher,
        configuration: SessionConfiguration = SessionConfiguration(),
        clock: some SessionClock = SystemClock()
    ) {
        self.fetcher = fetcher
        self.clock = clock
        self.configuration = configuration
        var seed = configuration.randomSeed ?? 0
        if configuration.randomSeed == nil {
            var system = SystemRandomNumberGenerator()
            seed = system.next()
        }
        self.machine = SessionStateMachine(configuration: configuration, seed: seed)
        self.store = SessionStore(clock: clock)
        self.broadcaster = EventBroadcaster(initial: .signedOut, bufferLimit: configuration.eventBufferLimit)
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
    /// Like the credential's own ``IdentityCredential/isValid(at:)``, this checks local expiry only, never the
    /// signature.
    ///
    /// - Parameter date: The moment to check.
    /// - Returns: `false` when signed out, switching, expired or rejected, or when `date` is at or past `expiresAt`.
    public nonisolated func hasValidIdentity(at date: Date) -> Bool {
        guard let credential = try? store.credential() else { return false }
        return credential.isValid(at: date)
    }

    /// The engine's events, starting with the current state.
    ///
    /// - Parameter bufferLimit: How many undelivered events this subscriber may hold before the oldest are dropped;
    ///   `nil` uses ``SessionConfiguration/eventBufferLimit``, `Int.max` never drops.
    /// - Returns: A sequence that ends when the engine shuts down. See ``SessionEvents``.
    public nonisolated func events(bufferLimit: Int? = nil) -> SessionEvents {
        SessionEvents(broadcaster: broadcaster, limit: bufferLimit.map { max(1, $0) })
    }

    // MARK: - Account changes

    /// Signs an account in and waits for its first credential.
    ///
    /// Signing in is an account change: the state passes through ``SessionState/switching(from:to:)``. Transient
    /// fetch failures are retried with backoff while this call waits (the state is then
    /// ``SessionState/expired(_:)`` with reason ``ExpiredIdentity/Reason/unavailable``). Cancelling the calling task
    /// stops the wait, not the sign-in. Signing in to the account that is already current returns at once.
    ///
    /// - Parameter account: The account to sign in.
    /// - Throws: ``SessionError`` with ``SessionError/Code/backendSessionEnded`` when the backend refuses the account
    ///   (the engine is then signed out), ``SessionError/Code/accountChanged`` when another change superseded this
    ///   one, ``SessionError/Code/shutDown`` after shutdown; `CancellationError` when the caller was cancelled.
    public func signIn(_ account: AccountID) async throws {
        try await changeAccount(to: account)
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
        try await changeAccount(to: account)
    }

    /// Signs out: cancels and drains the account's scoped work, clears the credential and runs the hooks.
    ///
    /// Any fetch in flight is cancelled and its result discarded. Returns once the state is
    /// ``SessionState/signedOut`` (or a later change superseded the sign-out).
    public func signOut() async {
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

    private func changeAccount(to target: AccountID?) async throws {
        guard !isShutDown else { throw Self.shutDownError }
        switch machine.changeAccount(to: target, at: instant()) {
        case .alreadyCurrent(let epoch):
            guard target != nil else {
                // A sign-out may still be draining its work: return once it is done, as the first caller does.
                await changeChain?.value
                return
            }
            try await waitForIdentity(epoch: epoch)
        case .began(let epoch, let actions):
            log(.info, "account change began", ["to": target?.rawValue ?? "none", "epoch": "\(epoch)"])
            apply(actions)
            await prepareChange(epoch: epoch, target: target, runHooks: true)
            guard target != nil else { return }
            try await waitForIdentity(epoch: epoch)
        }
    }

    /// Drains the previous work, runs the hooks and lets the machine start the first fetch, one change at a time.
    ///
    /// The preparation runs in its own task so that a cancelled caller cannot leave a change half done; changes are
    /// chained so hooks never overlap.
    private func prepareChange(epoch: UInt64, target: AccountID?, runHooks: Bool) async {
        let previous = changeChain
        let preparation = Task {
            await previous?.value
            await self.runPreparation(epoch: epoch, target: target, runHooks: runHooks)
        }
        changeChain = preparation
        await preparation.value
    }

    private func runPreparation(epoch: UInt64, target: AccountID?, runHooks: Bool) async {
        // Drain even when a later change superseded this one before it started: its caller must not return while
        // the previous account's work still runs. The later change waits for the same work, so this costs nothing.
        await store.drain(before: epoch)
        // Every await is a place where the world may have changed.
        guard machine.epoch == epoch else { return }
        if runHooks {
            let change = AccountChange(from: hookAccount, to: target)
            hookAccount = target
            for hook in hooks { await hook(change) }
        }
        guard machine.epoch == epoch else { return }
        apply(machine.changePrepared(epoch: epoch, at: instant()))
    }

    private func waitForIdentity(epoch: UInt64) async throws {
        if machine.epoch == epoch, machine.usableCredential != nil { return }
        guard machine.epoch == epoch, machine.currentAccount != nil else {
            throw SessionError(.accountChanged, reason: "another account change superseded this one")
        }
        _ = try await waiters.wait(epoch: epoch, kind: .identity)
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
    public func renew() async throws -> IdentityCredential {
        guard !isShutDown else { throw Self.shutDownError }
        switch machine.renewRequested(at: instant()) {
        case .current(let credential):
            return credential
        case .fail(let error):
            throw error
        case .wait(let epoch, let actions):
            apply(actions)
            return try await waiters.wait(epoch: epoch, kind: .nextOutcome)
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
        guard !isShutDown else { return }
        apply(machine.credentialRejected(credential, at: instant()))
    }

    /// Reports a rejection and waits for the renewal it causes, for ``withIdentity(_:)``'s one retry.
    private func renewAfterRejection(of credential: IdentityCredential) async throws -> IdentityCredential {
        guard !isShutDown else { throw Self.shutDownError }
        apply(machine.credentialRejected(credential, at: instant()))
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
        do {
            return try await runScoped(body, requiring: nil)
        } catch let rejection as Rejection {
            let renewed = try await renewAfterRejection(of: rejection.credential)
            do {
                return try await runScoped(body, requiring: renewed)
            } catch let again as Rejection {
                await credentialRejected(again.credential)
                throw SessionError(.invalidIdentity, reason: "the service rejected the renewed credential as well")
            }
        }
    }

    /// The work rejected this credential.
    private struct Rejection: Error {
        let credential: IdentityCredential
    }

    private nonisolated func runScoped<T: Sendable>(
        _ body: @escaping @Sendable (IdentityCredential) async throws -> T,
        requiring required: IdentityCredential?
    ) async throws -> T {
        let store = self.store
        let tasks = self.tasks
        let (credential, task, ticket) = try store.startWork(requiring: required) { credential, id in
            tasks.started()
            return Task {
                defer {
                    store.finishWork(id)
                    tasks.finished()
                }
                return try await body(credential)
            }
        }
        do {
            return try await withTaskCancellationHandler {
                try await task.value
            } onCancel: {
                task.cancel()
            }
        } catch let error as SessionError where error.code == .credentialRejected {
            throw Rejection(credential: credential)
        } catch {
            if ticket.cancelledByEngine.load(ordering: .relaxed) {
                throw SessionError(.accountChanged, reason: "the account changed; the work was cancelled")
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
        await shutdownSignal.wait()
        await shutdown()
    }

    /// Shuts the engine down: cancels and drains scoped work, stops the fetch and timers, clears the credential,
    /// fails waiting callers with ``SessionError/Code/shutDown`` and finishes every event stream.
    ///
    /// Account-change hooks do not run. Calls after shutdown fail with ``SessionError/Code/shutDown``.
    public func shutdown() async {
        guard !isShutDown else { return }
        isShutDown = true
        log(.info, "shutting down", [:])
        switch machine.changeAccount(to: nil, at: instant()) {
        case .began(let epoch, let actions):
            apply(actions)
            await prepareChange(epoch: epoch, target: nil, runHooks: false)
        case .alreadyCurrent:
            // A sign-out may still be draining its work: wait for it, so no scoped work outlives the shutdown.
            await changeChain?.value
        }
        fetchTask?.task.cancel()
        fetchTask = nil
        timerTask?.cancel()
        timerTask = nil
        waiters.failAll(Self.shutDownError)
        store.update(sessionState: machine.publicState, credential: nil, shutDown: true)
        broadcaster.finish()
        shutdownSignal.fire()
    }

    /// Counts of what the engine holds, for leak checks in tests and benchmarks.
    package nonisolated var diagnostics: SessionDiagnostics {
        SessionDiagnostics(
            liveTasks: tasks.count,
            subscribers: broadcaster.subscriberCount,
            waiters: waiters.count,
            scopedWork: store.runningWorkCount,
            fetchesStarted: tasks.fetchesStarted,
            fetchesCompleted: tasks.fetchesCompleted
        )
    }

    // MARK: - Performing the machine's actions

    private func instant() -> SessionInstant {
        SessionInstant(wall: clock.now, uptime: clock.uptime)
    }

    /// Installs the machine's state in the snapshot, performs its actions in order, then publishes the events.
    ///
    /// Events go out last, so a subscriber that sees an event knows the engine has already done everything the event
    /// implies: the credential is installed, waiters are resolved, the next timer and fetch are set.
    private func apply(_ actions: [SessionStateMachine.Action]) {
        let newState = machine.publicState
        store.update(
            sessionState: newState,
            credential: machine.usableCredential.map { ($0, machine.epoch) }
        )
        var events: [SessionEvent] = []
        if newState != publishedState {
            publishedState = newState
            events.append(.stateChanged(newState))
            log(.info, "state changed", ["state": newState.name, "account": newState.account?.rawValue ?? "none"])
        }
        var endsSession = false
        for action in actions {
            if case .endSession(let error) = action {
                log(.error, "the backend ended the session; signing out", ["code": error.code.rawValue])
                endsSession = true
            } else if let event = perform(action) {
                events.append(event)
            }
        }
        for event in events { broadcaster.publish(event) }
        if endsSession { beginEndingSession() }
    }

    /// Signs out because the backend ended the session, beginning in the same step as the failure that said so: the
    /// ended session's credential is never handed out again, and its work is cancelled at once.
    private func beginEndingSession() {
        guard !isShutDown, case .began(let epoch, let actions) = machine.changeAccount(to: nil, at: instant()) else {
            return
        }
        log(.info, "account change began", ["to": "none", "epoch": "\(epoch)"])
        apply(actions)
        tasks.started()
        Task {
            defer { tasks.finished() }
            await self.prepareChange(epoch: epoch, target: nil, runHooks: true)
        }
    }

    /// Performs one action; returns the event it reports, if any.
    private func perform(_ action: SessionStateMachine.Action) -> SessionEvent? {
        switch action {
        case .startFetch(let id, let account):
            startFetch(id, account: account)
        case .cancelFetch:
            fetchTask?.task.cancel()
            fetchTask = nil
        case .scheduleTimer(let spec):
            startTimer(spec)
        case .cancelTimer:
            timerTask?.cancel()
            timerTask = nil
        case .cancelWork(let epoch, let account):
            let count = store.cancelWork(before: epoch)
            if account != nil || count > 0 {
                return .workCancelled(account: account, count: count)
            }
        case .emit(let event):
            logEvent(event)
            return event
        case .resolveWaiters(let epoch, let kinds, let outcome):
            waiters.resolve(epoch: epoch, kinds: kinds, outcome: outcome)
        case .endSession:
            // Performed by `apply` once the step's other actions and events are done.
            break
        }
        return nil
    }

    private func startFetch(_ id: FetchID, account: AccountID) {
        fetchTask?.task.cancel()
        let fetcher = self.fetcher
        let tasks = self.tasks
        let epoch = machine.epoch
        tasks.started()
        tasks.fetchStarted()
        let task = Task { [weak self] in
            defer { tasks.finished() }
            let result: Result<IdentityCredential, any Error>
            do {
                let credential = try await FetchContext.$epoch.withValue(epoch) {
                    try await fetcher.fetchCredential(for: account)
                }
                result = .success(credential)
            } catch {
                result = .failure(error)
            }
            await self?.fetchCompleted(id, result)
        }
        fetchTask = (id, task)
        log(.debug, "fetch started", ["account": account.rawValue, "fetch": "\(id)"])
    }

    private func fetchCompleted(_ id: FetchID, _ result: Result<IdentityCredential, any Error>) {
        defer { tasks.fetchCompleted() }
        if fetchTask?.id == id { fetchTask = nil }
        guard !isShutDown else { return }
        let now = instant()
        switch result {
        case .success(let credential):
            apply(machine.fetchSucceeded(id, credential: credential, at: now))
        case .failure(let error):
            apply(machine.fetchFailed(id, error: Self.classify(error), at: now))
        }
    }

    private func startTimer(_ spec: TimerSpec) {
        timerTask?.cancel()
        let clock = self.clock
        let tasks = self.tasks
        tasks.started()
        timerTask = Task { [weak self] in
            defer { tasks.finished() }
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
        guard !isShutDown else { return }
        apply(machine.timerFired(id, at: instant()))
    }

    /// Maps what a fetcher threw to the engine's error: only ``SessionError/Code/backendSessionEnded`` is terminal.
    static func classify(_ error: any Error) -> SessionError {
        switch error {
        case let error as SessionError:
            return SessionError(error.code, reason: error.reason, isTransient: error.code != .backendSessionEnded)
        case let error as CredentialError:
            return SessionError(
                .invalidCredential,
                reason: "the fetched credential is invalid: \(error.reason)",
                isTransient: true
            )
        case is CancellationError:
            return .fetchFailed("the fetch was cancelled")
        default:
            return .fetchFailed("the fetcher failed with \(type(of: error))")
        }
    }

    private static let shutDownError = SessionError(.shutDown, reason: "the session engine has shut down")

    // MARK: - Logging

    private func log(_ level: SessionLogRecord.Level, _ message: String, _ metadata: [String: String]) {
        configuration.log?(SessionLogRecord(level: level, message: message, metadata: metadata))
    }

    private func logEvent(_ event: SessionEvent) {
        switch event {
        case .renewed(let identity):
            log(
                .info, "credential installed",
                ["account": identity.account.rawValue, "expiresAt": "\(identity.expiresAt)"])
        case .fetchFailed(let failure):
            log(
                failure.retryIn == nil ? .error : .warning,
                "fetch failed",
                [
                    "account": failure.account.rawValue, "code": failure.error.code.rawValue,
                    "retryIn": failure.retryIn.map { "\($0)" } ?? "never",
                ]
            )
        case .credentialRejected(let report):
            log(
                .warning, "credential rejected", ["account": report.account.rawValue, "renewing": "\(report.renewing)"])
        case .clockSkewSuspected(let report):
            log(
                .warning,
                "clock skew suspected",
                [
                    "account": report.account.rawValue, "localTime": "\(report.localTime)",
                    "expiresAt": "\(report.expiresAt)",
                ]
            )
        case .stateChanged, .workCancelled, .eventsDropped:
            break
        }
    }
}

/// What a fetch belongs to, visible to the fetcher's task, so test fetchers can attribute each fetch to the epoch
/// the engine started it in rather than to whatever epoch is current when the fetch task first runs.
package enum FetchContext {
    /// The epoch of the account session the running fetch belongs to.
    @TaskLocal package static var epoch: UInt64?
}

/// An account change, as account-change hooks see it.
public struct AccountChange: Sendable, Hashable {
    /// The account being left; `nil` when signing in from signed out.
    public let from: AccountID?
    /// The account being entered; `nil` when signing out.
    public let to: AccountID?

    /// Creates an account change.
    ///
    /// - Parameters:
    ///   - from: The account being left.
    ///   - to: The account being entered.
    public init(from: AccountID?, to: AccountID?) {
        self.from = from
        self.to = to
    }
}

/// Counts of what an engine holds, for leak checks.
package struct SessionDiagnostics: Sendable, Hashable {
    /// Fetch, timer and internal tasks still running, and scoped work tasks.
    package var liveTasks: Int
    /// Live event subscribers.
    package var subscribers: Int
    /// Callers waiting for a fetch outcome.
    package var waiters: Int
    /// Scoped work registered and not yet finished.
    package var scopedWork: Int
    /// Fetches started over the engine's life, counted when the engine decides to start them.
    package var fetchesStarted: Int
    /// Fetch outcomes the engine has finished handling, stale ones included: a fetch answered but not yet handled is
    /// the difference between the backend's count and this one.
    package var fetchesCompleted: Int

    /// Creates a set of counts.
    package init(
        liveTasks: Int,
        subscribers: Int,
        waiters: Int,
        scopedWork: Int,
        fetchesStarted: Int = 0,
        fetchesCompleted: Int = 0
    ) {
        self.liveTasks = liveTasks
        self.subscribers = subscribers
        self.waiters = waiters
        self.scopedWork = scopedWork
        self.fetchesStarted = fetchesStarted
        self.fetchesCompleted = fetchesCompleted
    }
}
