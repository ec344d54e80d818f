import Foundation

/// Account changes: signing in, switching and signing out, handed-over credentials, and the hooks that run between
/// two accounts.
extension AccountShard {
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
    func signIn(_ account: AccountID) async throws {
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
    func signIn(_ account: AccountID, timeout: Duration) async throws {
        try await changeAccount(to: account, timeout: max(.zero, timeout))
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
    func signIn(_ account: AccountID, expecting email: String, timeout: Duration? = nil) async throws {
        try await changeAccount(
            to: account, expecting: try Self.expectedEmail(email), timeout: timeout.map { max(.zero, $0) })
    }

    /// The email a host expects, normalized as the backend signs it, or an error for one no credential can carry.
    static func expectedEmail(_ email: String) throws(SessionError) -> String {
        let normalized = IdentityEmail.normalize(email)
        do {
            try IdentityEmail.validateNormalized(normalized)
        } catch {
            throw SessionError(.invalidAccount, reason: "the expected user's email is unusable: \(error.reason)")
        }
        return normalized
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
    func signIn(_ account: AccountID, with credential: IdentityCredential) async throws {
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
    func setIdentityCredential(_ credential: IdentityCredential, for account: AccountID) async throws {
        try push(credential, for: account)
    }

    private func push(_ credential: IdentityCredential, for account: AccountID) throws {
        if case .refused(let error, _) = step({ $0.credentialPushed(credential, for: account, at: $1) }) {
            throw error
        }
    }

    /// Switches to another account and waits for its first credential.
    ///
    /// The verified-identity contract's order is followed: the previous account's scoped work is cancelled and
    /// drained, its credential is cleared, the account-change hooks run, the next account's credential is fetched and
    /// installed, and then the new state is published. From the moment the switch begins, no credential of the previous account is handed
    /// out, and any fetch still running for it is cancelled and its result discarded.
    ///
    /// - Parameter account: The account to switch to.
    /// - Throws: As ``signIn(_:)``.
    func switchAccount(to account: AccountID) async throws {
        try await changeAccount(to: account)
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
    func switchAccount(to account: AccountID, timeout: Duration) async throws {
        try await changeAccount(to: account, timeout: max(.zero, timeout))
    }

    /// Signs out: cancels and drains the account's scoped work, clears the credential and runs the hooks.
    ///
    /// Any fetch in flight is cancelled and its result discarded. Returns once the state is
    /// ``SessionState/signedOut`` (or a later change superseded the sign-out).
    func signOut() async {
        try? await changeAccount(to: nil)
    }

    /// Registers a hook that runs during every account change, after the previous account's work has drained and
    /// its credential was cleared, and before the next account's credential is installed.
    ///
    /// Hosts discard account-specific view models, read caches and offline storage here. Hooks run one at a time,
    /// in registration order, once per change. A hook must not wait for the change it runs in, or for the engine's
    /// shutdown: both wait for the hook.
    ///
    /// - Parameter hook: Receives the account being left and the account being entered.
    func addAccountChangeHook(_ hook: @escaping @Sendable (AccountChange) async -> Void) {
        life.hooks.append(hook)
    }

    private func changeAccount(
        to target: AccountID?,
        pushing credential: IdentityCredential? = nil,
        expecting expected: String? = nil,
        timeout: Duration? = nil
    ) async throws {
        try target?.validate()
        switch requestAccountChange(to: target, pushing: credential, expecting: expected) {
        case .shutDown:
            throw SessionStateMachine.shutDownError
        case .refused(let error, _):
            throw error
        case .alreadyCurrent(let epoch):
            guard let target else {
                // A sign-out may still be draining its work: return once it is done, as the first caller does.
                await life.preparation?.value()
                return
            }
            if let credential { try push(credential, for: target) }
            // Joined to a change still being prepared, the caller returns only once it is, as the first caller does:
            // even when a later change fails it first, no work of the previous account still runs then.
            try await waitForIdentity(
                identityWait(epoch: epoch, of: target, within: timeout), preparedBy: life.preparation)
        case .began(let epoch, _):
            // The actions started this change's preparation; a caller returns only once it is done, even when a
            // later change superseded it, so no work of the previous account still runs.
            guard let target else {
                await life.preparation?.value()
                return
            }
            // The caller registers for the epoch's outcome in this step, before the preparation ends: a first fetch
            // that ends the backend session while the caller is still waking from the preparation then reaches it as
            // BACKEND_SESSION_ENDED, not as a superseded change.
            try await waitForIdentity(
                identityWait(epoch: epoch, of: target, within: timeout, preparing: true), preparedBy: life.preparation)
        }
    }

    /// Hands an account change to the machine, logging it when it begins, without waiting for it, as
    /// ``requestShutdown()`` does for a shutdown; returns the machine's decision.
    @discardableResult
    func requestAccountChange(
        to target: AccountID?, pushing credential: IdentityCredential? = nil, expecting expected: String? = nil
    ) -> SessionStateMachine.ChangeDecision {
        step(
            announcing: { decision in
                guard case .began(let epoch, _) = decision else { return }
                self.log(.info, "account change began", ["to": target?.rawValue ?? "none", "epoch": "\(epoch)"])
            },
            { $0.changeAccount(to: target, pushing: credential, expecting: expected, at: $1) }
        )
    }

    /// Drains the previous epochs' work, runs the hooks the machine says are due and reports the change prepared.
    ///
    /// The engine then forgets the preparation's one-shot signal, unless a later change has replaced it: the preparation is
    /// done but for opening that signal, so a caller that comes later has nothing to wait for, and an idle engine, one
    /// per account in a pool, keeps none.
    ///
    /// - Parameters:
    ///   - epoch: The epoch of the change being prepared.
    ///   - prepared: The signal that opens once the preparation is done.
    func prepare(epoch: UInt64, signalledBy prepared: OneShot<Void>) async {
        await store.drain(before: epoch)
        // Every await is a place where the world may have changed: the machine checks the epoch.
        if let change = life.machine.hooksDue(epoch: epoch) {
            for hook in life.hooks { await hook(change) }
        }
        step { $0.changePrepared(epoch: epoch, at: $1) }
        if life.preparation === prepared { life.preparation = nil }
    }

    /// How a caller of an account change waits for the identity of `epoch`.
    private enum IdentityWait {
        /// The epoch is identified already.
        case identified
        /// The epoch is no longer the current one, or the engine has shut down.
        case superseded(SessionError)
        /// Registered for the epoch's identity, with the caller's deadline's slot in the deadline queue, if any.
        case registered(OutcomeWaiters.Ticket, deadline: DeadlineQueue<TimerTarget>.Token?)
    }

    /// Decides and registers the caller's wait for the identity of `epoch`, in the caller's step: nothing is awaited
    /// between the step that began or joined the change and this registration, so no outcome of the epoch can slip
    /// by, and a deadline covers the preparation too.
    ///
    /// - Parameters:
    ///   - epoch: The account session the caller waits for.
    ///   - account: Its account, for the deadline's reason.
    ///   - timeout: The caller's deadline on the engine's clock, if any.
    ///   - preparing: Whether the change's preparation is still to come, so an installed credential cannot be this
    ///     epoch's.
    private func identityWait(
        epoch: UInt64, of account: AccountID, within timeout: Duration?, preparing: Bool = false
    ) -> IdentityWait {
        if !preparing, life.machine.epoch == epoch, life.machine.usableCredential != nil { return .identified }
        guard life.machine.epoch == epoch, life.machine.currentAccount != nil else {
            if life.machine.isShutDown { return .superseded(SessionStateMachine.shutDownError) }
            return .superseded(SessionError(.accountChanged, reason: "another account change superseded this one"))
        }
        let ticket = registerWaiter(epoch: epoch, kind: .identity)
        let deadline = timeout.map { timeout in
            setDeadline(after: timeout) { [weak self] in
                // Fired: a task of the engine's own holds it until the caller is failed, as a timer's firing does.
                guard let self else { return }
                _ = startTask {
                    await self.signInDeadlinePassed(ticket, epoch: epoch, account: account, timeout: timeout)
                }
            }
        }
        return .registered(ticket, deadline: deadline)
    }

    /// Waits for the identity `wait` registered for and, whatever the outcome but the caller's own deadline, for the
    /// change's preparation (`prepared`), so the call returns only once the previous account's work has drained.
    private func waitForIdentity(_ wait: IdentityWait, preparedBy prepared: OneShot<Void>?) async throws {
        switch wait {
        case .identified:
            await prepared?.value()
        case .superseded(let error):
            await prepared?.value()
            throw error
        case .registered(let ticket, let deadline):
            defer { if let deadline { timers.release(deadline) } }
            do {
                _ = try await waitForOutcome(ticket)
            } catch let error as SessionError where error.code == .signInTimedOut {
                throw error
            } catch {
                // A cancelled caller too: no caller returns while the previous account's work runs.
                await prepared?.value()
                throw error
            }
            await prepared?.value()
        }
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
        if life.machine.epoch == epoch, let failure = life.machine.activeSession?.lastFailure {
            reason += " (the last fetch failed: \(failure))"
        } else if life.machine.epoch == epoch, life.machine.activeSession == nil {
            reason += " (the previous account's work is still draining)"
        }
        log(.info, "sign-in timed out", ["account": account.rawValue, "timeout": timeout.readable])
        let failureClass = life.machine.epoch == epoch ? life.machine.activeSession?.lastFailure?.failureClass : nil
        ticket.waiters.fail(
            ticket, with: SessionError(.signInTimedOut, reason: reason, isTransient: true, failureClass: failureClass))
    }
}
