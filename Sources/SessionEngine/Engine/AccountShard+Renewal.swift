import Foundation

/// Renewal on request and after the service rejected a credential.
extension AccountShard {
    /// ``SessionEngine/renew()``, for the shard's account: the engine's, or a pool's member's.
    nonisolated func renew(_ slot: Slot) async throws -> IdentityCredential {
        // Only the decision and the registration run on the actor, in the order the calls arrive; the wait does not,
        // so callers woken together resume on their own executors instead of queueing on the actor to return.
        let answer = await requestRenewal(slot)
        switch answer {
        case .now(let credential): return credential
        case .wait(let ticket): return try await ticket.waiters.wait(ticket)
        case .failed(let error): throw error
        }
    }

    /// Decides the call: the credential to return at once, the caller's registered wait, or a failure.
    private func requestRenewal(_ slot: Slot) -> OutcomeWaiters.Answer {
        switch step(slot, { $0.renewRequested(at: $1) }) {
        case .current(let credential):
            return .now(credential)
        case .fail(let error):
            return .failed(error)
        case .wait(let epoch, _):
            // A caller now waits for the fetch: the pool's budget lets it go before proactive renewals.
            // Read in place: every caller that joins the fetch comes through here.
            if let index = lifeIndex(of: slot), let ticket = lives[index]?.fetch?.value.ticket {
                budget?.promote(ticket)
            }
            // Registered in the step that started the fetch, so no outcome of it can slip by.
            return .wait(registerWaiter(slot, epoch: epoch, kind: .nextOutcome))
        }
    }

    /// ``SessionEngine/credentialRejected(_:)``, for the shard's account: the engine's, or a pool's member's.
    func credentialRejected(_ slot: Slot, _ credential: IdentityCredential) async {
        reportRejection(slot, of: credential)
    }

    func reportRejection(_ slot: Slot, of credential: IdentityCredential) {
        step(slot) { $0.credentialRejected(credential, at: $1) }
    }

    /// Reports a rejection and waits for the renewal it causes, for ``withIdentity(_:_:)``'s one retry.
    ///
    /// - Parameters:
    ///   - slot: The account.
    ///   - credential: The credential the work sent and the service rejected.
    ///   - epoch: The account session the work ran in.
    /// Returns once the account session holds a credential other than the rejected one; the retry takes whichever
    /// the session holds when it starts (``SessionStore/startWork(at:requiring:_:)``).
    ///
    /// - Throws: ``SessionError/Code/accountChanged`` when that account session is no longer the current one (the
    ///   work must not run again as another account); ``SessionError/Code/invalidIdentity`` when no renewal follows.
    func renewAfterRejection(_ slot: Slot, of credential: IdentityCredential, epoch: UInt64) async throws {
        guard let machine = life(of: slot)?.machine, !machine.isShutDown else {
            throw SessionStateMachine.shutDownError
        }
        // The work belongs to its account session: after an account change it fails, and never runs again with the
        // next account's credential.
        guard machine.currentSession?.epoch == epoch else { throw SessionStore.accountChangedError }
        reportRejection(slot, of: credential)
        let renewing = life(of: slot)?.machine
        if let current = renewing?.usableCredential, current.signatureBytes != credential.signatureBytes {
            // Another caller's report already renewed it.
            return
        }
        guard let epoch = renewing?.rejectionRenewalEpoch else {
            throw SessionError(.invalidIdentity, reason: "the service rejected the renewed credential as well")
        }
        _ = try await waitForOutcome(slot, registerWaiter(slot, epoch: epoch, kind: .nextOutcome))
    }
}
