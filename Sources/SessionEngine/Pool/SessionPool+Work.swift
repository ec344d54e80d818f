/// Work, renewal and rejections for one account of the pool, and the pool's life cycle.
extension SessionPool {
    /// Runs work bound to `account`'s current credential, as ``SessionEngine/withIdentity(_:)`` does: cancelled and
    /// drained when that account signs out or leaves the pool, renewed and retried once after a rejection.
    ///
    /// - Parameters:
    ///   - account: The account the work acts for.
    ///   - body: The work; it receives the account's credential.
    /// - Returns: What the work returns.
    /// - Throws: As ``SessionEngine/withIdentity(_:)``; ``SessionError/Code/signedOut`` for an account the pool does
    ///   not hold.
    public func withIdentity<T: Sendable>(
        for account: AccountID,
        _ body: @escaping @Sendable (IdentityCredential) async throws -> T
    ) async throws -> T {
        guard let member = member(account, using: true) else { throw Self.notHeld(account) }
        do {
            return try await member.shard.withIdentity(member.slot, body)
        } catch let error as SessionError where error.code == .shutDown && hasLeftRunningPool(member) {
            // The account left the pool (evicted or signed out) before the work started.
            throw Self.notHeld(account)
        }
    }

    /// Renews `account`'s credential now, as ``SessionEngine/renew()`` does; the fetch goes through the pool's budget
    /// as a needed one.
    ///
    /// - Parameter account: The account.
    /// - Returns: The credential installed by the renewal.
    /// - Throws: As ``SessionEngine/renew()``; ``SessionError/Code/signedOut`` for an account the pool does not hold.
    public func renew(for account: AccountID) async throws -> IdentityCredential {
        guard let member = member(account, using: true) else { throw Self.notHeld(account) }
        return try await member.shard.renew(member.slot)
    }

    /// Reports that the service rejected `credential` of `account`, as ``SessionEngine/credentialRejected(_:)``
    /// does; a report for an account the pool does not hold, or of another account's credential, changes nothing.
    ///
    /// - Parameters:
    ///   - credential: The credential the service rejected.
    ///   - account: The account it was sent for.
    public func credentialRejected(_ credential: IdentityCredential, for account: AccountID) async {
        guard let member = member(account) else { return }
        await member.shard.credentialRejected(member.slot, credential)
    }

    /// Keeps the pool running until ``shutdown()`` is called or the calling task is cancelled, and returns once every
    /// account has shut down.
    ///
    /// Own the pool's lifetime with it in your service: a ``shutdown()`` from anywhere (a signal handler, a service
    /// group's graceful shutdown) makes it return, and cancelling the task that runs it shuts the pool down as
    /// ``shutdown()`` does.
    ///
    /// - Throws: Nothing today: it returns when the pool has shut down. The signature is `throws` so that a
    ///   start-up failure can be reported later without breaking callers.
    public func run() async throws {
        _ = await stopped.valueUnlessCancelled()
        await shutdown()
    }
}
