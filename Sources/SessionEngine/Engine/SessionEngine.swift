public import Foundation
import Synchronization

/// Owns one verified identity's whole life inside a long-running process.
///
/// The engine signs an account in, renews its credential from a ``CredentialFetcher`` before it expires, blocks
/// identified work with `INVALID_IDENTITY` once the credential has expired (never downgrading it to anonymous),
/// cancels the account's in-flight work on sign-out or an account switch, recovers when the service rejects a
/// credential, and publishes all of it through ``events(bufferLimit:)``.
///
/// A pure state machine decides every transition; the engine only performs the actions the machine returns. Every
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
    /// The shard of one account that keeps the engine's account: its machine and what performs its decisions. A
    /// ``SessionPool`` keeps its accounts in shards of the same kind, so the engine and the pool's accounts follow one
    /// rule book (Design/engine.md, *One input, one step*).
    ///
    /// The engine runs on the shard's executor, so a call passes from the engine to the shard without waiting in a
    /// queue.
    nonisolated let shard: AccountShard
    /// The engine's account in its shard: what every call names, and the store and events its readers take without a
    /// hop.
    nonisolated let slot: AccountShard.Slot
    /// The check of the clock that decides local expiry, which the read passes to the readers' copy: the shard's,
    /// held here so that the read reaches it in one step.
    nonisolated let wallClock: SharedWallClockCheck
    /// The copy of the store's read that ``identityHeaders()`` takes (its shard's), held here so that the read reaches
    /// its lock in one step, as a read of the store did.
    nonisolated let readers: SessionStore.ReadersCopy

    /// The serial executor the engine runs on: its shard's.
    public nonisolated var unownedExecutor: UnownedSerialExecutor { shard.unownedExecutor }

    /// The clock's executor that runs this engine's actor (``ExecutingClock``); `nil` on other clocks or when the
    /// configuration names a task executor.
    package nonisolated var clockExecutor: (any SerialExecutor)? { shard.shared.actorExecutor }

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

    /// Creates an engine, signed out, that coordinates its fetches with other replicas of the process through a
    /// fleet's coordinator: it asks the coordinator before each fetch and tells it how each ended, and decides
    /// locally whenever the coordinator fails or is slow (``FleetCoordinator``).
    ///
    /// - Parameters:
    ///   - fetcher: Gets credentials from the host's backend.
    ///   - configuration: Renewal, retry and buffering policies.
    ///   - clock: The source of wall time and sleep; a manual clock in tests.
    ///   - coordination: The fleet's coordinator and the bounds the engine keeps on it.
    public init(
        fetcher: some CredentialFetcher,
        configuration: SessionConfiguration = SessionConfiguration(),
        clock: some SessionClock = SystemClock(),
        coordination: FleetCoordination
    ) {
        self.init(
            fetcher: fetcher, configuration: configuration, clock: clock, observer: nil, coordination: coordination)
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
        self.init(fetcher: fetcher, configuration: configuration, clock: clock, observer: observer, coordination: nil)
    }

    /// Creates an engine with an observer of its events and a fleet's coordinator, either of them optional.
    private init(
        fetcher: some CredentialFetcher,
        configuration: SessionConfiguration,
        clock: some SessionClock,
        observer: (@Sendable (SessionEvent) -> Void)?,
        coordination: FleetCoordination?
    ) {
        let readers = SessionStore.ReadersCopy()
        shard = AccountShard(
            shared: AccountShard.Shared(
                configuration, fetcher: fetcher, clock: clock, budget: nil, timers: nil, observer: observer,
                coordination: coordination),
            readers: readers)
        slot = shard.reserve(latencyWindow: LatencySummary.window, membership: nil)
        wallClock = shard.shared.wallClock
        self.readers = readers
    }

    // MARK: - Reading without an actor hop

    /// The current state, read without an actor hop.
    public nonisolated var state: SessionState { slot.store.sessionState }

    /// The identity headers for an identified request, read without an actor hop.
    ///
    /// The first read of each installed credential builds its headers and keeps them; every later read takes one
    /// uncontended lock and reads the wall clock, so it is safe on every request.
    ///
    /// - Returns: The `X-AppNorth-Identity-*` headers of the installed credential.
    /// - Throws: ``SessionError`` with ``SessionError/Code/invalidIdentity`` (`INVALID_IDENTITY`) when the
    ///   credential has expired by the local clock or was rejected; ``SessionError/Code/signedOut`` when no account
    ///   is signed in; ``SessionError/Code/switching`` during an account change; ``SessionError/Code/shutDown`` after
    ///   shutdown. Never falls back to anonymous.
    @inline(never)
    public nonisolated func identityHeaders() throws(SessionError) -> IdentityHeaders {
        // Never inlined: the readers' copy inlines its lock here (`SanitizedMutex.withLockInlined`).
        try readers.headers(checkedBy: wallClock)
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
        slot.hasValidIdentity(at: date)
    }

    /// The engine's events, starting with the current state.
    ///
    /// - Parameter bufferLimit: How many undelivered events this subscriber may hold before the oldest are dropped;
    ///   `nil` uses ``SessionConfiguration/eventBufferLimit``, `Int.max` never drops.
    /// - Returns: A sequence that ends when the engine shuts down. See ``SessionEvents``.
    public nonisolated func events(bufferLimit: Int? = nil) -> SessionEvents {
        slot.events(bufferLimit: bufferLimit)
    }

    /// What the engine has done and holds: counters, fetch latency, the credential's remaining lifetime, tasks,
    /// subscribers, waiters and scoped work. Read without an actor hop.
    public nonisolated var metrics: SessionMetrics {
        var metrics = slot.metrics
        metrics.fleet = shard.shared.fleet?.metrics
        return metrics
    }

    /// How many times the process's deadline queue on the ``SystemClock`` has woken, for benchmarks.
    package static var systemTimerWakeUps: Int { AccountShard.systemTimers.wakeUps }

    // MARK: - Account changes, renewal, work and shutdown, performed by the shard

    /// Signs an account in and waits for its first credential.
    ///
    /// Signing in is an account change: the state passes through ``SessionState/switching(from:to:)``. The call
    /// returns once the previous account's work has drained, the hooks have run and the account's first credential is
    /// installed. Transient fetch failures are retried with backoff while this call waits (the state is then
    /// ``SessionState/expired(_:)`` with reason ``ExpiredIdentity/Reason/unavailable``), for as long as it takes:
    /// through a backend outage or a misconfiguration that is until shutdown. A host whose loop must run whatever
    /// the backend does signs in with ``signIn(_:timeout:)``. Cancelling the calling task stops the wait for the
    /// credential, not the sign-in; the call still returns only once the previous account's work has drained.
    /// Signing in to the account that is already current returns once it is identified.
    ///
    /// - Parameter account: The account to sign in.
    /// - Throws: ``SessionError`` with ``SessionError/Code/invalidAccount`` for an ID that fails
    ///   ``AccountID/validate()`` (nothing changes), ``SessionError/Code/backendSessionEnded`` when the backend
    ///   refuses the account (the engine is then signed out), ``SessionError/Code/accountChanged`` when another change
    ///   superseded this one, ``SessionError/Code/shutDown`` after shutdown; `CancellationError` when the caller was
    ///   cancelled.
    public func signIn(_ account: AccountID) async throws {
        try await shard.signIn(slot, account)
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
        try await shard.signIn(slot, account, timeout: timeout)
    }

    /// Signs an account in that the host knows to be a given user, and waits for its first credential.
    ///
    /// This is ``signIn(_:)`` or, with a `timeout`, ``signIn(_:timeout:)``, with the account session pinned to
    /// `email` from the start: a first credential that names another user is refused with
    /// ``SessionError/Code/identityMismatch`` (a misconfiguration, retried on the slow schedule) instead of pinning
    /// the account to that user until it signs out. Without an expectation the first credential's user is the one
    /// every later credential must name. Signing in again to the account that is current, or being signed in to,
    /// checks the expectation against the user the account session is pinned to, byte for byte as the backend signs
    /// it (two spellings that Unicode counts as equal are two users here), and pins one not pinned yet.
    ///
    /// - Parameters:
    ///   - account: The account to sign in.
    ///   - email: The user the host's backend session is for; normalized as the backend signs it (trimmed,
    ///     lowercased).
    ///   - timeout: How long to wait for the first credential, on the engine's clock; `nil` waits as long as it takes.
    /// - Throws: ``SessionError`` with ``SessionError/Code/invalidAccount`` for an ID that fails
    ///   ``AccountID/validate()`` or an email that is empty or has a control character,
    ///   ``SessionError/Code/identityMismatch`` when the current account is pinned to another user; otherwise as
    ///   ``signIn(_:)`` and ``signIn(_:timeout:)``.
    public func signIn(_ account: AccountID, expecting email: String, timeout: Duration? = nil) async throws {
        try await shard.signIn(slot, account, expecting: email, timeout: timeout)
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
    /// This is the verified-identity contract's `setIdentityCredential(credential)` after sign-in.
    ///
    /// - Parameters:
    ///   - account: The account to sign in.
    ///   - credential: The account's credential, as the host's backend issued it.
    /// - Throws: ``SessionError`` with ``SessionError/Code/credentialExpiredOnArrival`` or
    ///   ``SessionError/Code/lifetimeTooLong`` for a refused credential, ``SessionError/Code/identityMismatch`` when
    ///   the account is current and the credential names another user; otherwise as ``signIn(_:)``.
    public func signIn(_ account: AccountID, with credential: IdentityCredential) async throws {
        try await shard.signIn(slot, account, with: credential)
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
    /// This is the verified-identity contract's `setIdentityCredential(credential)` "whenever your backend renews
    /// it".
    ///
    /// - Parameters:
    ///   - credential: The credential the host's backend issued.
    ///   - account: The account it belongs to.
    /// - Throws: ``SessionError``: ``SessionError/Code/identityMismatch``,
    ///   ``SessionError/Code/credentialExpiredOnArrival`` or ``SessionError/Code/lifetimeTooLong`` for a refused
    ///   credential; ``SessionError/Code/accountChanged`` when the engine is not signed in to `account`;
    ///   ``SessionError/Code/shutDown`` after shutdown. Nothing is installed when it throws.
    public func setIdentityCredential(_ credential: IdentityCredential, for account: AccountID) async throws {
        try await shard.setIdentityCredential(slot, credential, for: account)
    }

    /// Switches to another account and waits for its first credential.
    ///
    /// The verified-identity contract's order is followed: the previous account's scoped work is cancelled and
    /// drained, its credential is cleared, the account-change hooks run, the next account's credential is fetched and
    /// installed, and then the new state is published. From the moment the switch begins, no credential of the previous
    /// account is handed out, and any fetch still running for it is cancelled and its result discarded.
    ///
    /// - Parameter account: The account to switch to.
    /// - Throws: As ``signIn(_:)``.
    public func switchAccount(to account: AccountID) async throws {
        try await shard.switchAccount(slot, to: account)
    }

    /// Switches to another account and waits for its first credential, for at most `timeout` on the engine's clock.
    ///
    /// This is ``switchAccount(to:)`` with the deadline of ``signIn(_:timeout:)``: when the deadline passes first
    /// (the previous account's work is still draining, or the backend does not answer for the next account), the
    /// call throws ``SessionError/Code/signInTimedOut`` and the switch goes on. From the moment the switch begins no
    /// credential of the previous account is handed out, whether or not the call has returned.
    ///
    /// - Parameters:
    ///   - account: The account to switch to.
    ///   - timeout: How long to wait for the next account's first credential, on the engine's clock; from the call.
    /// - Throws: As ``signIn(_:timeout:)``.
    public func switchAccount(to account: AccountID, timeout: Duration) async throws {
        try await shard.switchAccount(slot, to: account, timeout: timeout)
    }

    /// Signs out: cancels and drains the account's scoped work, clears the credential and runs the hooks.
    ///
    /// Any fetch in flight is cancelled and its result discarded. Returns once the state is
    /// ``SessionState/signedOut`` (or a later change superseded the sign-out).
    public func signOut() async {
        await shard.signOut(slot)
    }

    /// Registers a hook that runs during every account change, after the previous account's work has drained and
    /// its credential was cleared, and before the next account's credential is installed.
    ///
    /// Hosts discard account-specific view models, read caches and offline storage here. Hooks run one at a time,
    /// in registration order, once per change. A hook must not wait for the change it runs in, or for the engine's
    /// shutdown: both wait for the hook.
    ///
    /// - Parameter hook: Receives the account being left and the account being entered.
    public func addAccountChangeHook(_ hook: @escaping @Sendable (AccountChange) async -> Void) {
        shard.assumeIsolated { $0.addAccountChangeHook(slot, hook) }
    }

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
        try await shard.renew(slot)
    }

    /// Reports that the service answered `INVALID_IDENTITY` for a credential, for example after a secret rotation.
    ///
    /// The first report of the installed credential renews it once; concurrent reports of the same credential share
    /// that renewal. If the renewed credential is rejected too, the state stays ``SessionState/expired(_:)`` with
    /// reason ``ExpiredIdentity/Reason/rejected`` and the engine retries only after backoff, so a misconfigured
    /// backend cannot cause a loop. Reports of older credentials, or from an earlier epoch, are ignored.
    ///
    /// Work run through ``withIdentity(_:)`` reports a rejection by throwing ``SessionError/credentialRejected``
    /// instead; either way the engine publishes ``SessionEvent/Kind/credentialRejected(_:)`` once it has acted.
    ///
    /// - Parameter credential: The credential the service rejected.
    public func credentialRejected(_ credential: IdentityCredential) async {
        await shard.credentialRejected(slot, credential)
    }

    /// Runs work bound to the current account and credential.
    ///
    /// The work runs in its own task, registered with the account session. An account change or sign-out cancels
    /// it and waits for it to end before the next account's credential is installed, so work of a previous account
    /// never overlaps the next one. Work should honour cancellation promptly, since a change waits for it; and it
    /// must not itself change the account, sign out or shut the engine down and wait for that: the change it would
    /// wait for waits for the work.
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
        try await shard.withIdentity(slot, body)
    }

    /// Keeps the engine running until the calling task is cancelled, then shuts it down cleanly.
    ///
    /// Renewal does not depend on this call: the engine renews from the moment an account signs in. `run()` gives a
    /// daemon's service group one place to own the engine's lifetime: when its task is cancelled, the scoped work is
    /// cancelled and drained, the fetch and timers stop, the credential is cleared, waiting callers fail with
    /// ``SessionError/Code/shutDown`` and every event stream finishes. It also returns if ``shutdown()`` is called
    /// elsewhere.
    ///
    /// - Throws: Nothing today: it returns when the engine has shut down. The signature is `throws` so that a
    ///   start-up failure can be reported later without breaking callers.
    public func run() async throws {
        try await shard.run(slot)
    }

    /// Shuts the engine down: cancels and drains scoped work, stops the fetch and timers, clears the credential,
    /// fails waiting callers with ``SessionError/Code/shutDown`` and finishes every event stream.
    ///
    /// Account-change hooks do not run, except those of a sign-out already under way, which becomes the shutdown.
    /// Calls after shutdown fail with ``SessionError/Code/shutDown``. Concurrent calls all return once the engine
    /// has shut down.
    public func shutdown() async {
        await shard.shutdown(slot)
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
        await shard.shutdown(slot, gracePeriod: gracePeriod)
    }
}
