import Foundation
import Synchronization

/// Work bound to the current account session, cancelled and drained when it ends.
extension AccountShard {
    /// ``SessionEngine/withIdentity(_:)``, for the shard's account: the engine's, or a pool's member's.
    // Inlined into the engine's and the pool's calls: one async frame a piece of work, not two.
    @inline(__always)
    nonisolated func withIdentity<T: Sendable>(
        _ slot: Slot, _ body: @escaping @Sendable (IdentityCredential) async throws -> T
    ) async throws -> T {
        switch try await runScoped(slot, body, requiring: nil) {
        case .finished(let value):
            return value
        case .rejected(let credential, let epoch):
            // The renewal checked the account session and installed a credential; the retry is registered in the
            // store's lock that checks the session again and hands out its credential, which may be a later one of
            // the session than the renewal's (pushed, or renewed again) but never the rejected one.
            try await renewAfterRejection(slot, of: credential, epoch: epoch)
            switch try await runScoped(slot, body, requiring: (epoch, rejected: credential)) {
            case .finished(let value):
                return value
            case .rejected(let again, _):
                await reportRejection(slot, of: again)
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
        _ slot: Slot,
        _ body: @escaping @Sendable (IdentityCredential) async throws -> T,
        requiring required: (epoch: UInt64, rejected: IdentityCredential)?
    ) async throws -> ScopedOutcome<T> {
        let executor = shared.taskExecutor
        // The work's task holds the account's slot, whose store it reports its end to; the caller holds it too until
        // then.
        let now = clock.now.timeIntervalSince1970
        let (credential, task, ticket) = try slot.store.startWork(at: now, requiring: required) { credential, id in
            return Task.start(preferring: executor) {
                defer { slot.store.finishWork(id) }
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
