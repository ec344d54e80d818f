import Foundation
import SessionEngine
import SessionEngineBackend
import SessionEngineTestKit

/// The operations that hand the engine a credential, cancel a waiting caller or shut the engine down gracefully.
extension EngineModelDriver {
    /// Hands the engine a credential the host got elsewhere and checks that it is installed exactly when the
    /// contract says: for the current account, by the same rules as a fetched one, at once or (while the account's
    /// change is still prepared) once the change is prepared; anything else is refused and changes nothing.
    func push(_ kind: PushKind) async throws {
        let current = model.account
        let target =
            kind == .otherAccount || current == nil ? EngineOperation.accounts.first { $0 != current }! : current!
        let ownEmail = model.pinnedEmail ?? exampleEmail(for: target)
        let credential: IdentityCredential
        switch kind {
        case .valid(let lifetime): credential = backend.credential(for: ownEmail, lifetime: lifetime)
        case .expired: credential = backend.credential(for: ownEmail, lifetime: -30)
        case .tooLong: credential = backend.credential(for: ownEmail, lifetime: 86_400 + 7200)
        case .otherUser:
            let other = EngineOperation.accounts.map(exampleEmail(for:)).first { $0 != ownEmail }!
            credential = backend.credential(for: other, lifetime: 300)
        case .otherAccount: credential = backend.credential(for: exampleEmail(for: target), lifetime: 300)
        }
        probe.noteOrigin(of: credential, epoch: model.epoch)
        let accepted = target == current && model.acceptsPush(credential, pinned: model.pinnedEmail, at: clock.now)
        let deferred = model.phase == .awaitingFirst && probe.heldEpochs.contains(model.epoch)
        let before = engine.state
        do {
            try await engine.setIdentityCredential(credential, for: target)
            guard accepted else {
                throw Violation("setIdentityCredential(\(kind)) installed what the contract refuses, in \(before)")
            }
            if deferred {
                model.deferredPush = credential
            } else {
                install(credential)
            }
        } catch let error as SessionError {
            if accepted {
                throw Violation("setIdentityCredential(\(kind)) refused a valid credential in \(before): \(error)")
            }
            let allowed: Set<SessionError.Code> = [
                .accountChanged, .identityMismatch, .credentialExpiredOnArrival, .lifetimeTooLong,
            ]
            if !allowed.contains(error.code) {
                throw Violation("setIdentityCredential(\(kind)) failed with \(error.code)")
            }
            // A refusal reports itself (clock skew) at most; the state stays.
            if engine.state != before {
                throw Violation("a refused credential changed \(before) to \(engine.state)")
            }
        }
    }

    /// Signs in with a credential the host holds (`pushing`), or with a call the program cancels once it waits for
    /// the account's first credential (`cancelled`): the sign-in goes on, the caller fails with cancellation and
    /// nothing else changes.
    func signIn(_ account: AccountID, pushing: Bool = false, cancelled: Bool = false) async throws {
        if pushing {
            guard account != model.account else { return try await push(.valid(lifetime: 300)) }
            let credential = backend.credential(for: exampleEmail(for: account), lifetime: 300)
            probe.noteOrigin(of: credential, epoch: model.epoch + 1)
            guard model.acceptsPush(credential, pinned: nil, at: clock.now) else {
                // Refused as the new account's first credential: nothing changes, and the call says why.
                let before = engine.state
                do {
                    try await engine.signIn(account, with: credential)
                    throw Violation("signIn(with:) accepted a credential the contract refuses")
                } catch let error as SessionError {
                    if ![.credentialExpiredOnArrival, .lifetimeTooLong].contains(error.code) {
                        throw Violation("signIn(with:) failed with \(error.code)")
                    }
                }
                if engine.state != before { throw Violation("a refused sign-in changed \(before) to \(engine.state)") }
                return
            }
            await beginChange(to: account, pushing: credential)
            return
        }
        let flag = Locked(false)
        let task = await beginChange(to: account, cancelled: flag)
        await owner.waitUntilIdle()
        // Still waiting when nothing can run: it waits for the first credential (or for work to drain).
        guard probe.calls.inProgress.contains("switchAccount(to: \(account))"), cancelled else { return }
        try await cancelWhileWaiting(task, flag: flag, name: "switchAccount(to: \(account))")
    }

    /// Signs in expecting the account's user, spelled as a host might: a change pins the new account session to the
    /// user at once; the account that is current checks it against the user it is pinned to, or else against the
    /// credential handed over and kept for its first (refused with `IDENTITY_MISMATCH`, nothing changing, when
    /// another), or pins it when none is pinned yet.
    func signIn(_ account: AccountID, expectingItsUserWithin timeout: Duration?) async throws {
        let spelled = "  \(exampleEmail(for: account).uppercased()) "
        if account == model.account, let pinned = model.pinnedEmail ?? model.deferredPush?.email,
            pinned != IdentityEmail.normalize(spelled)
        {
            // Through a task of its own, so that a call that waits instead of refusing fails the program rather than
            // hanging it.
            let (engine, before, refused) = (self.engine, engine.state, Locked<String?>(nil))
            await enter {
                do {
                    try await engine.signIn(account, expecting: spelled, timeout: timeout)
                    refused.withLock { $0 = "returned" }
                } catch {
                    refused.withLock { $0 = (error as? SessionError)?.code.rawValue ?? "\(error)" }
                }
            }
            let outcome = refused.value
            if outcome != SessionError.Code.identityMismatch.rawValue {
                throw Violation(
                    "signIn(expecting:) of \(account), pinned to \(pinned), was not refused: \(outcome ?? "it waits")")
            }
            if engine.state != before { throw Violation("a refused expectation changed \(before) to \(engine.state)") }
            return
        }
        await beginChange(to: account, via: .signInExpecting(spelled, timeout: timeout))
    }

    /// Registers one more account-change hook. The hooks of one change run one at a time in registration order, so
    /// each entry of a later hook follows the previous hook's entry for the same change (checked with the hooks).
    func addHook() async {
        let probe = self.probe
        let index = probe.hookRegistered()
        await engine.addAccountChangeHook { change in probe.hookRan(index, change) }
    }

    /// Calls `renew()` and cancels it once it waits for the fetch: it fails with cancellation and nothing else
    /// changes; the fetch goes on.
    func cancelledRenew() async throws {
        let flag = Locked(false)
        let engine = self.engine
        let probe = self.probe
        let call = probe.calls.started("cancelled renew()")
        let task = await enter {
            defer { probe.calls.finished(call) }
            do {
                _ = try await engine.renew()
                if flag.withLock({ $0 }) {
                    probe.violation("renew(), cancelled while it waited, returned a credential")
                }
            } catch is CancellationError where flag.withLock({ $0 }) {
            } catch {
                if flag.withLock({ $0 }) { probe.violation("renew(), cancelled while it waited, failed with \(error)") }
                probe.callFailed(
                    "renew()", error,
                    allowed: [
                        .signedOut, .accountChanged, .fetchFailed, .identityMismatch, .credentialExpiredOnArrival,
                        .lifetimeTooLong, .invalidCredential, .backendSessionEnded,
                    ])
            }
        }
        await owner.waitUntilIdle()
        // A call that has left the engine finishes first; one still in progress then waits inside it.
        guard probe.calls.inProgress.contains("cancelled renew()") else { return }
        try await cancelWhileWaiting(task, flag: flag, name: "renew()")
    }

    /// Runs work through `withIdentity` whose first run the service rejects, and cancels the call once it waits for
    /// the renewal the rejection asked for: it fails with cancellation and nothing else changes; the renewal goes on.
    func cancelledRejectedWork() async throws {
        guard let installed = model.installed, engine.state.isIdentified || engine.state.isRenewing else { return }
        let flag = Locked(false)
        let runs = Locked(0)
        let engine = self.engine
        let probe = self.probe
        let call = probe.calls.started("cancelled withIdentity")
        let task = await enter {
            defer { probe.calls.finished(call) }
            do {
                _ = try await engine.withIdentity { _ -> Bool in
                    let first = runs.withLock { runs in
                        runs += 1
                        return runs == 1
                    }
                    if first { throw SessionError.credentialRejected }
                    return true
                }
                if flag.withLock({ $0 }) { probe.violation("withIdentity, cancelled while it waited, returned") }
            } catch is CancellationError where flag.withLock({ $0 }) {
            } catch {
                if flag.withLock({ $0 }) {
                    probe.violation("withIdentity, cancelled while it waited, failed with \(error)")
                }
                probe.callFailed(
                    "withIdentity", error,
                    allowed: [
                        .signedOut, .switching, .invalidIdentity, .accountChanged, .fetchFailed, .identityMismatch,
                        .credentialExpiredOnArrival, .lifetimeTooLong, .invalidCredential, .backendSessionEnded,
                    ])
            }
        }
        await owner.waitUntilIdle()
        // The work ran, so its rejection was reported with the credential it received, the installed one.
        if runs.withLock({ $0 }) > 0, model.installed == installed { model.rejected = installed.signature }
        guard probe.calls.inProgress.contains("cancelled withIdentity") else { return }
        try await cancelWhileWaiting(task, flag: flag, name: "withIdentity")
    }

    /// Cancels a call that waits while the engine is idle, and checks that the engine did nothing because of it.
    private func cancelWhileWaiting(_ task: Task<Void, Never>, flag: Locked<Bool>, name: String) async throws {
        let state = engine.state
        let events = probe.eventCount
        let fetches = fetcher.total
        let pending = fetcher.pendingCount
        let waiters = engine.metrics.waiters
        flag.withLock { $0 = true }
        task.cancel()
        await owner.waitUntilIdle()
        if engine.state != state || probe.eventCount != events || fetcher.total != fetches
            || fetcher.pendingCount != pending
        {
            throw Violation(
                "cancelling a waiting \(name) changed the engine: \(state) → \(engine.state), events \(events) → "
                    + "\(probe.eventCount), fetches \(fetches) → \(fetcher.total), pending \(pending) → "
                    + "\(fetcher.pendingCount)"
            )
        }
        if engine.metrics.waiters != waiters - 1 {
            throw Violation("cancelling a waiting \(name) left \(engine.metrics.waiters) of \(waiters) waiters")
        }
    }

    /// Starts long scoped work, then shuts down gracefully: during the grace period the identity stays valid and
    /// renewed, new work and account changes fail with `SHUT_DOWN`; once the work finishes or the grace period
    /// passes, the work is cancelled and drained, the account is signed out with its hooks (when an account was
    /// entered) and the engine shuts down. The program ends here.
    func shutDownGracefully(grace: Duration) async throws {
        // A change still held by work could be prepared before or after the grace period ends: keep it simple.
        guard probe.heldEpochs.isEmpty, probe.stubbornWork == 0 else { return }
        if engine.state.isIdentified || engine.state.isRenewing {
            await launchWork(.long(seconds: 600))
            try await settle()
            try check()
        }
        let hookedAccount = probe.hooks.last?.to
        let epoch = model.epoch
        probe.gracefulShutdown = true
        shutDownGracefully = true
        let engine = self.engine
        let probe = self.probe
        let done = Gate()
        let call = probe.calls.started("shutdown(gracePeriod:)")
        await enter {
            await engine.shutdown(gracePeriod: grace)
            if probe.runningWork > 0 || engine.metrics.scopedWork > 0 {
                probe.violation("invariant 8: shutdown(gracePeriod:) returned while scoped work ran")
            }
            done.open()
            probe.calls.finished(call)
        }
        try await settle()
        let ended = { done.isOpen || probe.recentEpoch > epoch }
        if !ended() {
            // The grace period runs: the identity holds, nothing new may start.
            try check()
            do {
                _ = try await engine.withIdentity { _ in true }
                throw Violation("new work received an identity during the grace period")
            } catch let error as SessionError where error.code == .shutDown {}
            let other = EngineOperation.accounts.first { $0 != model.account }!
            do {
                try await engine.switchAccount(to: other)
                throw Violation("an account change began during the grace period")
            } catch let error as SessionError where error.code == .shutDown {}
        }
        var steps = 0
        while !done.isOpen {
            try await settle()
            if done.isOpen { break }
            guard let deadline = clock.nextDeadline else {
                throw Violation("the graceful shutdown never ended: \(activity)")
            }
            clock.advance(by: max(.zero, deadline - clock.uptime))
            steps += 1
            if steps > Self.teardownSteps { throw Violation("the graceful shutdown never ended: \(activity)") }
        }
        probe.shuttingDown = true
        try await settle()
        // The final change signs out with hooks when an account was entered.
        if model.account != nil, let began = model.beginChange(to: nil) {
            if hookedAccount == nil { model.hookPlan[model.hookPlan.count - 1].status = .mustNotRun }
            _ = began
        }
        try checkStates()
        try checkHooks(final: true)
        if engine.state != .signedOut { throw Violation("after a graceful shutdown the engine is \(engine.state)") }
        do {
            _ = try engine.identityHeaders()
            throw Violation("the fast path answered after a graceful shutdown")
        } catch let error as SessionError where error.code == .shutDown {}
    }
}
