import Foundation

/// Account changes and shutdown: each begins an epoch; the owner prepares it and reports it prepared.
extension SessionStateMachine {
    /// An account change was requested: sign-in (`target` non-nil from `signedOut`), switch, or sign-out (`nil`).
    ///
    /// A new epoch begins at once: the running fetch and timer are cancelled and the previous epochs' scoped work is
    /// cancelled, so nothing of the previous account is handed out from here on. The owner then drains the work,
    /// runs the account-change hooks and calls ``changePrepared(epoch:at:)``.
    ///
    /// A credential `pushed` with a sign-in is validated first, for the new account session: a refused one changes
    /// nothing. An accepted one is installed instead of the first fetch once the change is prepared.
    ///
    /// A sign-in to the account that is current, or being signed in to, begins nothing; with an `expected` user it is
    /// refused (`IDENTITY_MISMATCH`) when the account session is pinned to another user, or a credential kept for it
    /// names another, and otherwise pins a session not pinned yet to that user.
    mutating func changeAccount(
        to target: AccountID?,
        pushing pushed: IdentityCredential? = nil,
        expecting expected: String? = nil,
        at now: SessionInstant
    ) -> ChangeDecision {
        if gracefulShutdown, !isShutDown {
            // A graceful shutdown is under way: no account change begins any more.
            return .shutDown
        }
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
            guard change.target?.account == target else { break }
            return join(change.target, expecting: expected, kept: change.pushed)
        case .identified(let session), .renewing(let session), .expired(let session):
            // Leaving an account: its fetch, timer and work are cancelled.
            guard session.account == target else { break }
            return join(session, expecting: expected, kept: nil)
        }
        if let pushed, let target {
            // Validate the handed-over credential as the new account session's first: a refusal changes nothing.
            var fresh = AccountSession(account: target, epoch: epoch)
            fresh.pin(expected)
            if let refusal = refusal(of: pushed, for: fresh, at: now) {
                return .refused(refusal, skewReport(of: pushed, refusal: refusal, for: fresh, at: now))
            }
        }
        let actions = beginChange(to: target, shutsDown: false, waitersFail: Self.accountChanged)
        if pushed != nil || expected != nil, case .switching(var change) = state {
            change.pushed = pushed
            // The host said which user the account is: the account session is pinned to it before its first
            // credential, which is refused, not pinned, when it names another user.
            change.target?.pin(expected)
            state = .switching(change)
        }
        return .began(epoch: epoch, actions)
    }

    /// A sign-in to the account that is current, or being signed in to (`session`), joins it. With an `expected`
    /// user, the account session must be pinned to that user, byte for byte, and one not pinned yet (no credential has
    /// been installed, and no user was expected before) is pinned to it, so that its first credential must name it;
    /// a credential handed over with the sign-in and `kept` for the prepared change is that first credential, and
    /// must name it too.
    ///
    /// - Returns: `alreadyCurrent`, or `refused` with `IDENTITY_MISMATCH`, changing nothing, when another user is
    ///   pinned or kept.
    private mutating func join(
        _ session: AccountSession?, expecting expected: String?, kept: IdentityCredential?
    ) -> ChangeDecision {
        if let expected, var session {
            guard session.admits(email: expected) else { return .refused(Self.expectationMismatch, []) }
            if session.pinnedEmail == nil { session.pin(expected) }
            // Pinned to the expected user now: the kept credential is checked against it.
            guard kept.map(session.admits) ?? true else { return .refused(Self.expectationMismatch, []) }
            replace(session)
        }
        return .alreadyCurrent(epoch: epoch)
    }

    /// The host asked for a graceful shutdown with a grace period.
    ///
    /// From now on no account change begins and no new scoped work receives an identity, while running work goes
    /// on with the credential, which is still renewed. The owner reports ``gracePeriodEnded(at:)`` once that work
    /// has finished or the grace period has passed; the machine then signs out, with hooks, and shuts down.
    mutating func gracefulShutdownRequested(grace: Duration, at now: SessionInstant) -> [Action] {
        switch state {
        case .shutDown:
            // Already shut down.
            return []
        case .switching(let change) where change.shutsDown:
            // A shutdown is already under way; it decides.
            return []
        case .signedOut, .switching, .identified, .renewing, .expired:
            // Begin the grace period, once.
            guard !gracefulShutdown else { return [] }
            gracefulShutdown = true
            return [.refuseNewWork, .startGracePeriod(max(.zero, grace))]
        }
    }

    /// The grace period of a graceful shutdown ended: the running work finished, or the time ran out.
    ///
    /// Work still running is cancelled and drained, the account is signed out with its hooks (so account caches
    /// are cleared), and once that change is prepared the engine shuts down. Reported twice (work finished, then
    /// time ran out), the second report changes nothing.
    mutating func gracePeriodEnded(at now: SessionInstant) -> [Action] {
        guard gracefulShutdown else {
            // No graceful shutdown: nothing ends.
            return []
        }
        switch state {
        case .shutDown:
            // Already shut down.
            return []
        case .switching(var change) where change.target == nil:
            // A sign-out or shutdown is under way: it shuts the engine down once prepared, with its hooks.
            if change.shutsDown { return [] }
            change.shutsDown = true
            state = .switching(change)
            return [.failAllWaiters(Self.shutDownError)]
        case .signedOut, .switching, .identified, .renewing, .expired:
            // Leave whatever is current, with hooks when an account was entered.
            let actions = beginChange(
                to: nil,
                shutsDown: true,
                waitersFail: Self.shutDownError,
                runsHooks: hookedAccount != nil
            )
            return actions + [.failAllWaiters(Self.shutDownError)]
        }
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
    mutating func beginChange(
        to target: AccountID?,
        shutsDown: Bool,
        waitersFail error: SessionError,
        runsHooks: Bool? = nil
    ) -> [Action] {
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
        change.runsHooks = runsHooks ?? !shutsDown
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
        if let pushed = change.pushed {
            change.pushed = nil
            if let refusal = refusal(of: pushed, for: target, at: now) {
                // It expired while the change was prepared: report it and fetch as usual.
                actions += skewReport(of: pushed, refusal: refusal, for: target, at: now)
            } else {
                // The credential the host handed over with the sign-in is the account's first.
                let fetch = FetchAttempt(number: 1, duration: .zero, pushed: true)
                return install(pushed, into: &target, reason: .firstCredential, fetch: fetch, at: now)
            }
        }
        startFetch(&target, reason: .firstCredential, at: now, actions: &actions)
        change.target = target
        state = .switching(change)
        return actions
    }
}
