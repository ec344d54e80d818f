import Foundation
import Synchronization

/// Work bound to the current account session, cancelled and drained when it ends.
extension AccountShard {
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
    // Inlined into the engine's and the pool's calls: one async frame a piece of work, not two.
    @inline(__always)
    nonisolated func withIdentity<T: Sendable>(
        _ body: @escaping @Sendable (IdentityCredential) async throws -> T
    ) async throws -> T {
        switch try await runScoped(body, requiring: nil) {
        case .finished(let value):
            return value
        case .rejected(let credential, let epoch):
            // The renewal checked the account session and installed a credential; the retry is registered in the
            // store's lock that checks the session again and hands out its credential, which may be a later one of
            // the session than the renewal's (pushed, or renewed again) but never the rejected one.
            _ = try await renewAfterRejection(of: credential, epoch: epoch)
            switch try await runScoped(body, requiring: (epoch, rejected: credential)) {
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
        requiring required: (epoch: UInt64, rejected: IdentityCredential)?
    ) async throws -> ScopedOutcome<T> {
        let executor = shared.taskExecutor
        // The work's task holds the engine, whose store it reports its end to; the caller holds it too until then.
        let (credential, task, ticket) = try store.startWork(requiring: required) { credential, id in
            return Task.start(preferring: executor) {
                defer { self.store.finishWork(id) }
                return try await body(credential)
            }
        }
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
            if ticket.cancelledByEngine.load(ordering: .relaxed) { throw SessionStore.accountChangedFailure }
            if let error = error as? SessionError, error.code == .credentialRejected {
                return .rejected(credential, epoch: ticket.epoch)
            }
            throw error
        }
    }
}
