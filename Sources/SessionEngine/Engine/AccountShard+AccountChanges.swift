import Foundation

/// Account changes: signing in, switching and signing out, handed-over credentials, and the hooks that run between
/// two accounts.
extension AccountShard {
    /// ``SessionEngine/signIn(_:)``, for the shard's account: the engine's, or a pool's member's.
    func signIn(_ slot: Slot, _ account: AccountID) async throws {
        try await changeAccount(slot, to: account)
    }

    /// ``SessionEngine/signIn(_:timeout:)``, for the shard's account: the engine's, or a pool's member's.
    func signIn(_ slot: Slot, _ account: AccountID, timeout: Duration) async throws {
        try await changeAccount(slot, to: account, timeout: max(.zero, timeout))
    }

    /// ``SessionEngine/signIn(_:expecting:timeout:)``, for the shard's account: the engine's, or a pool's member's.
    func signIn(_ slot: Slot, _ account: AccountID, expecting email: String, timeout: Duration? = nil) async throws {
        try await changeAccount(
            slot, to: account, expecting: try Self.expectedEmail(email), timeout: timeout.map { max(.zero, $0) })
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

    /// ``SessionEngine/signIn(_:with:)``, for the shard's account: the engine's, or a pool's member's.
    func signIn(_ slot: Slot, _ account: AccountID, with credential: IdentityCredential) async throws {
        try await changeAccount(slot, to: account, pushing: credential)
    }

    /// ``SessionEngine/setIdentityCredential(_:for:)``, for the shard's account: the engine's, or a pool's member's.
    func setIdentityCredential(_ slot: Slot, _ credential: IdentityCredential, for account: AccountID) async throws {
        try push(slot, credential, for: account)
    }

    private func push(_ slot: Slot, _ credential: IdentityCredential, for account: AccountID) throws {
        if case .refused(let error, _) = step(slot, { $0.credentialPushed(credential, for: account, at: $1) }) {
            throw error
        }
    }

    /// ``SessionEngine/switchAccount(to:)``, for the shard's account: the engine's, or a pool's member's.
    func switchAccount(_ slot: Slot, to account: AccountID) async throws {
        try await changeAccount(slot, to: account)
    }

    /// ``SessionEngine/switchAccount(to:timeout:)``, for the shard's account: the engine's, or a pool's member's.
    func switchAccount(_ slot: Slot, to account: AccountID, timeout: Duration) async throws {
        try await changeAccount(slot, to: account, timeout: max(.zero, timeout))
    }

    /// ``SessionEngine/signOut()``, for the shard's account: the engine's, or a pool's member's.
    func signOut(_ slot: Slot) async {
        try? await changeAccount(slot, to: nil)
    }

    /// ``SessionEngine/addAccountChangeHook(_:)``, for the shard's account: the engine's, or a pool's member's.
    func addAccountChangeHook(_ slot: Slot, _ hook: @escaping @Sendable (AccountChange) async -> Void) {
        if let index = lifeIndex(of: slot) { lives[index]!.hooks.append(hook) }
    }

    private func changeAccount(
        _ slot: Slot,
        to target: AccountID?,
        pushing credential: IdentityCredential? = nil,
        expecting expected: String? = nil,
        timeout: Duration? = nil
    ) async throws {
        try target?.validate()
        switch requestAccountChange(slot, to: target, pushing: credential, expecting: expected) {
        case .shutDown:
            throw SessionStateMachine.shutDownError
        case .refused(let error, _):
            throw error
        case .alreadyCurrent(let epoch):
            guard let target else {
                // A sign-out may still be draining its work: return once it is done, as the first caller does.
                await life(of: slot)?.preparation?.value()
                return
            }
            if let credential { try push(slot, credential, for: target) }
            // Joined to a change still being prepared, the caller returns only once it is, as the first caller does:
            // even when a later change fails it first, no work of the previous account still runs then.
            try await waitForIdentity(
                slot, identityWait(slot, epoch: epoch, of: target, within: timeout),
                preparedBy: life(of: slot)?.preparation)
        case .began(let epoch, _):
            // The actions started this change's preparation; a caller returns only once it is done, even when a
            // later change superseded it, so no work of the previous account still runs.
            guard let target else {
                await life(of: slot)?.preparation?.value()
                return
            }
            // The caller registers for the epoch's outcome in this step, before the preparation ends: a first fetch
            // that ends the backend session while the caller is still waking from the preparation then reaches it as
            // BACKEND_SESSION_ENDED, not as a superseded change.
            try await waitForIdentity(
                slot, identityWait(slot, epoch: epoch, of: target, within: timeout, preparing: true),
                preparedBy: life(of: slot)?.preparation)
        }
    }

    /// Hands an account change to the machine, logging it when it begins, without waiting for it, as
    /// ``requestShutdown(_:)`` does for a shutdown; returns the machine's decision.
    @discardableResult
    func requestAccountChange(
        _ slot: Slot, to target: AccountID?, pushing credential: IdentityCredential? = nil,
        expecting expected: String? = nil
    ) -> SessionStateMachine.ChangeDecision {
        step(
            slot,
            announcing: { decision in
                guard case .began(let epoch, _) = decision else { return }
                self.log(.info, "account change began", ["to": target?.rawValue ?? "none", "epoch": "\(epoch)"])
            },
            { $0.changeAccount(to: target, pushing: credential, expecting: expected, at: $1) }
        )
    }

    /// Drains the previous epochs' work, runs the hooks the machine says are due and reports the change prepared.
    ///
    /// The shard then forgets the preparation's one-shot signal, unless a later change has replaced it: the
    /// preparation is done but for opening that signal, so a caller that comes later has nothing to wait for, and an
    /// idle account keeps none.
    ///
    /// - Parameters:
    ///   - slot: The account.
    ///   - epoch: The epoch of the change being prepared.
    ///   - prepared: The signal that opens once the preparation is done.
    func prepare(_ slot: Slot, epoch: UInt64, signalledBy prepared: OneShot<Void>) async {
        await slot.store.drain(before: epoch)
        // Every await is a place where the world may have changed: the machine checks the epoch.
        if let index = lifeIndex(of: slot), let change = lives[index]!.machine.hooksDue(epoch: epoch) {
            for hook in lives[index]!.hooks { await hook(change) }
        }
        step(slot) { $0.changePrepared(epoch: epoch, at: $1) }
        if let index = lifeIndex(of: slot), lives[index]!.preparation === prepared { lives[index]!.preparation = nil }
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
    ///   - slot: The account.
    ///   - epoch: The account session the caller waits for.
    ///   - account: Its account, for the deadline's reason.
    ///   - timeout: The caller's deadline on the engine's clock, if any.
    ///   - preparing: Whether the change's preparation is still to come, so an installed credential cannot be this
    ///     epoch's.
    private func identityWait(
        _ slot: Slot, epoch: UInt64, of account: AccountID, within timeout: Duration?, preparing: Bool = false
    ) -> IdentityWait {
        let machine = life(of: slot)?.machine ?? shared.ended
        if !preparing, machine.epoch == epoch, machine.usableCredential != nil { return .identified }
        guard machine.epoch == epoch, machine.currentAccount != nil else {
            if machine.isShutDown { return .superseded(SessionStateMachine.shutDownError) }
            return .superseded(SessionError(.accountChanged, reason: "another account change superseded this one"))
        }
        let ticket = registerWaiter(slot, epoch: epoch, kind: .identity)
        let deadline = timeout.map { timeout in
            setDeadline(after: timeout) { [weak slot] in
                // Fired: a task of the account's own holds its slot until the caller is failed, as a timer's firing
                // does.
                guard let slot else { return }
                _ = slot.shard.startTask(slot) {
                    await slot.shard.signInDeadlinePassed(
                        slot, ticket, epoch: epoch, account: account, timeout: timeout)
                }
            }
        }
        return .registered(ticket, deadline: deadline)
    }

    /// Waits for the identity `wait` registered for and, whatever the outcome but the caller's own deadline, for the
    /// change's preparation (`prepared`), so the call returns only once the previous account's work has drained.
    private func waitForIdentity(
        _ slot: Slot, _ wait: IdentityWait, preparedBy prepared: OneShot<Void>?
    ) async throws {
        switch wait {
        case .identified:
            await prepared?.value()
        case .superseded(let error):
            await prepared?.value()
            throw error
        case .registered(let ticket, let deadline):
            defer { if let deadline { timers.release(deadline) } }
            do {
                _ = try await waitForOutcome(slot, ticket)
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
        _ slot: Slot,
        _ ticket: OutcomeWaiters.Ticket,
        epoch: UInt64,
        account: AccountID,
        timeout: Duration
    ) {
        var reason = "\(account) was not identified within \(timeout.readable); the engine keeps trying"
        let machine = life(of: slot)?.machine ?? shared.ended
        if machine.epoch == epoch, let failure = machine.activeSession?.lastFailure {
            reason += " (the last fetch failed: \(failure))"
        } else if machine.epoch == epoch, machine.activeSession == nil {
            reason += " (the previous account's work is still draining)"
        }
        log(.info, "sign-in timed out", ["account": account.rawValue, "timeout": timeout.readable])
        let failureClass = machine.epoch == epoch ? machine.activeSession?.lastFailure?.failureClass : nil
        ticket.waiters.fail(
            ticket, with: SessionError(.signInTimedOut, reason: reason, isTransient: true, failureClass: failureClass))
    }
}
