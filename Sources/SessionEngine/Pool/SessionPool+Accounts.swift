import Foundation
import Synchronization

/// Accounts joining and leaving the pool: sign-in, sign-out, eviction, hooks and shutdown.
extension SessionPool {
    /// Signs an account in and waits for its first credential, as ``SessionEngine/signIn(_:)`` does for its account.
    ///
    /// Signing in an account the pool already holds returns once it is identified. When the pool is at
    /// ``SessionPoolConfiguration/maximumAccounts``, the least recently used account (as that property says) with no
    /// scoped work running, no caller waiting and no sign-in under way is signed out first (its hooks run, and the
    /// pool's events report the eviction); while every account is busy, the pool holds more than the cap until the
    /// next sign-in finds accounts that can go.
    ///
    /// - Parameter account: The account to sign in.
    /// - Throws: As ``SessionEngine/signIn(_:)``; ``SessionError/Code/shutDown`` after the pool shut down.
    public func signIn(_ account: AccountID) async throws {
        try await withMember(account) { try await $0.shard.signIn($0.slot, account) }
    }

    /// Signs an account in and waits for its first credential for at most `timeout`, as
    /// ``SessionEngine/signIn(_:timeout:)`` does: past the deadline the call throws `SIGN_IN_TIMED_OUT` and the
    /// account stays in the pool, still fetching.
    ///
    /// - Parameters:
    ///   - account: The account to sign in.
    ///   - timeout: How long to wait, on the pool's clock.
    /// - Throws: As ``SessionEngine/signIn(_:timeout:)``.
    public func signIn(_ account: AccountID, timeout: Duration) async throws {
        try await withMember(account) { try await $0.shard.signIn($0.slot, account, timeout: timeout) }
    }

    /// Signs an account in that the host knows to be a given user, as ``SessionEngine/signIn(_:expecting:timeout:)``
    /// does: a first credential for another user is refused, not pinned.
    ///
    /// - Parameters:
    ///   - account: The account to sign in.
    ///   - email: The user the host's backend session is for.
    ///   - timeout: How long to wait, on the pool's clock; `nil` waits as long as it takes.
    /// - Throws: As ``SessionEngine/signIn(_:expecting:timeout:)``.
    public func signIn(_ account: AccountID, expecting email: String, timeout: Duration? = nil) async throws {
        let expected = try AccountShard.expectedEmail(email)
        try await withMember(account) {
            try await $0.shard.signIn($0.slot, account, expecting: expected, timeout: timeout)
        }
    }

    /// Signs an account in with a credential the host already holds, as ``SessionEngine/signIn(_:with:)`` does.
    ///
    /// - Parameters:
    ///   - account: The account to sign in.
    ///   - credential: Its credential, as the host's backend issued it.
    /// - Throws: As ``SessionEngine/signIn(_:with:)``.
    public func signIn(_ account: AccountID, with credential: IdentityCredential) async throws {
        try await withMember(account) { try await $0.shard.signIn($0.slot, account, with: credential) }
    }

    /// Installs a credential the host's backend pushed for an account the pool holds, as
    /// ``SessionEngine/setIdentityCredential(_:for:)`` does.
    ///
    /// - Parameters:
    ///   - credential: The credential.
    ///   - account: The account it belongs to.
    /// - Throws: As ``SessionEngine/setIdentityCredential(_:for:)``; ``SessionError/Code/accountChanged`` for an
    ///   account the pool does not hold.
    public func setIdentityCredential(_ credential: IdentityCredential, for account: AccountID) async throws {
        guard let member = member(account, using: true) else {
            throw SessionError(.accountChanged, reason: "\(account) is not signed in to the pool")
        }
        try await member.shard.setIdentityCredential(member.slot, credential, for: account)
    }

    /// Signs an account out of the pool: cancels and drains its scoped work, clears its credential, runs the hooks
    /// and removes it. Other accounts are not touched. Returns once the account has left; an account already
    /// leaving (evicted, or signed out by another call) is waited for as it leaves. The account's hooks and scoped
    /// work must not call it for their own account: the sign-out waits for them. Once ``shutdown()`` has begun, the
    /// shutdown takes the account out, and this returns at once.
    ///
    /// - Parameter account: The account to sign out; nothing happens for one the pool does not hold.
    public func signOut(_ account: AccountID) async {
        // Found and taken out in one lock step, as an eviction chooses and takes out its member: a member looked up
        // in one step could be taken out by an eviction before the next, and leave twice.
        let found = members.withLock { members -> (leaving: Member?, removed: [OneShot<Void>]) in
            if let member = table.member(account) {
                members.leave(member, from: table)
                return (member, [])
            }
            // Every earlier member of the account still leaving (evicted, then signed in again and signed out).
            return (nil, members.leaving.values.filter { $0.member.account == account }.map(\.removed))
        }
        if let member = found.leaving {
            await remove(member, because: nil)
        } else {
            for removed in found.removed { await removed.value() }
        }
    }

    /// Registers a hook that runs during every account change of every account, as
    /// ``SessionEngine/addAccountChangeHook(_:)`` does for one engine: after the account's work has drained and its
    /// credential was cleared, before the next credential is installed. A hook must not wait for the change it runs
    /// in (nor sign its account out, which is that change) or for the pool's shutdown: both wait for the hook.
    ///
    /// - Parameter hook: Receives the account being left and the account being entered.
    public func addAccountChangeHook(_ hook: @escaping @Sendable (AccountChange) async -> Void) async {
        let current = members.withLock { members in
            members.hooks.append(hook)
            return table.members
        }
        for member in Self.oldestFirst(current) { await member.shard.addAccountChangeHook(member.slot, hook) }
    }

    /// Shuts every account down gracefully, as ``SessionEngine/shutdown(gracePeriod:)`` does for its account: lets
    /// running scoped work finish within `gracePeriod`, then signs every account out with its account-change hooks
    /// (so account caches are cleared) and shuts it down; refuses new sign-ins from the moment it is called and ends
    /// the pool's event stream. Returns once every account has shut down.
    ///
    /// During the grace period the accounts stay in the pool: their running work keeps its identity, still renewed,
    /// and ``identityHeaders(for:)`` still answers, while new work fails with ``SessionError/Code/shutDown``. A later
    /// ``shutdown()`` ends the grace period at once.
    ///
    /// - Parameter gracePeriod: How long running work may take to finish before it is cancelled, on the pool's clock.
    public func shutdown(gracePeriod: Duration) async {
        let all = Self.oldestFirst(
            members.withLock { members -> [Member] in
                members.shutDown = true
                return table.members
            })
        // Every account's grace period begins now; then the pool waits for each.
        await Self.forEach(all) { await $0.shard.requestShutdown($0.slot, gracePeriod: gracePeriod) }
        await Self.forEach(all) { await $0.shard.waitUntilStopped($0.slot) }
        await shutdown()
    }

    /// Shuts every account down as ``SessionEngine/shutdown()`` does, refuses new sign-ins and ends the pool's event
    /// stream. Returns once every account has shut down, those already leaving (signed out, evicted) included.
    ///
    /// As with an engine, account-change hooks do not run: a host whose hooks must see every account leave shuts
    /// down with ``shutdown(gracePeriod:)``. An account already leaving when the shutdown begins leaves as it began
    /// to, with its hooks, and its eviction is reported before the pool's events end. Concurrent calls all return
    /// once the pool has shut down. A hook, or scoped work, must not wait for the pool's shutdown: the shutdown waits
    /// for them.
    public func shutdown() async {
        let (held, leaving, first) = members.withLock {
            members -> ([Member], [(member: Member, removed: OneShot<Void>)], Bool) in
            members.shutDown = true
            guard !members.closing else { return ([], [], false) }
            members.closing = true
            return (table.removeAll(), Array(members.leaving.values), true)
        }
        guard first else {
            // Another call shuts the pool down: this one returns when it has.
            await stopped.value()
            return
        }
        if let sweeperSlot { timers.cancel(for: sweeperSlot) }
        let all = Self.oldestFirst(held)
        await Self.forEach(all) { await $0.shard.requestShutdown($0.slot) }
        await Self.forEach(all) { await $0.shard.waitUntilStopped($0.slot) }
        for (_, removed) in leaving.sorted(by: { $0.member.serial < $1.member.serial }) { await removed.value() }
        broadcaster.finish()
        stopped.open()
    }

    /// Runs `body` for every member, at most `width` at a time, and returns once all have returned.
    ///
    /// Not one task per member at once: the runtime keeps a task group's children in a list that it walks to remove
    /// each finished child, so a group of every member costs time quadratic in the members, and holds every finished
    /// child until then (a shutdown of 1,000,000 accounts ran for more than 9 minutes and held 12 GB). A few dozen at a
    /// time keep every executor of the pool busy.
    static func forEach(
        _ members: [Member], atMost width: Int = 64, _ body: @escaping @Sendable (Member) async -> Void
    ) async {
        await withTaskGroup(of: Void.self) { group in
            var next = members.makeIterator()
            for _ in 0..<max(1, width) {
                guard let member = next.next() else { break }
                group.addTask { await body(member) }
            }
            while await group.next() != nil {
                if let member = next.next() { group.addTask { await body(member) } }
            }
        }
    }

    /// `members` oldest first, by serial: the order a pool visits its members in wherever it visits them all, so
    /// that its calls decide it, not its table's rows, whose hash seed each pool draws at random. Sorted after the
    /// lock step that took them, never inside it.
    static func oldestFirst(_ members: [Member]) -> [Member] {
        members.sorted { $0.serial < $1.serial }
    }

    // MARK: - Joining and leaving

    /// Runs `call` on the account's member, making the member first (and evicting one over the cap). A sign-out or
    /// eviction that shut the member down under the call is retried once on a fresh member.
    private func withMember(_ account: AccountID, _ call: (Member) async throws -> Void) async throws {
        // Checked before the pool makes a member, so an ID that cannot name an account takes no place in the pool.
        try account.validate()
        for attempt in 0..<2 {
            let (member, evicted) = try join(account)
            // The join counted this sign-in on the member, which no eviction takes until the call has returned.
            defer { members.withLock { $0.signInEnded(member) } }
            for member in evicted { await remove(member, because: .capacity) }
            do {
                try await call(member)
                return
            } catch let error as SessionError where error.code == .shutDown && attempt == 0 {
                // The member left the pool under the call; a pool that has not shut down makes a new one.
                if isShutDown { throw Self.shutDownError }
                continue
            }
        }
    }

    /// The account's member, made if the pool has none, and the members to evict to come back within the cap, which
    /// have left the table; the member is counted as signing in until the caller says the call has ended
    /// (``Members/signInEnded(_:)``).
    ///
    /// While every member is busy the pool holds more than the cap rather than cancel work; a later join that finds
    /// some idle again evicts as many as bring it back within the cap, not only one.
    private func join(_ account: AccountID) throws(SessionError) -> (Member, evicted: [Member]) {
        let (joined, evicted, startSweeper) = try members.withLock {
            members throws(SessionError) -> (Member, [Member], Bool) in
            guard !members.shutDown else { throw Self.shutDownError }
            let use = table.nextUse()
            if let member = table.member(account, stamping: use) {
                members.signingIn[member.id, default: 0] += 1
                return (member, [], false)
            }
            members.made += 1
            let serial = members.made
            let membership = AccountShard.Membership(account: account, serial: serial)
            // Spread over the shards in the order members are made, so the same program places them the same way.
            let shard = shards[Int(truncatingIfNeeded: serial) & (shards.count - 1)]
            let member = Member(
                slot: shard.reserve(
                    latencyWindow: Self.accountLatencyWindow, hooks: members.hooks, membership: membership))
            var evicted: [Member] = []
            if let cap = configuration.maximumAccounts {
                while table.count >= cap,
                    let idle = Self.closeLeastRecentlyUsedIdle(table.lastUses(), sparing: members)
                {
                    members.evict(idle, from: table)
                    evicted.append(idle)
                }
            }
            table.insert(member, use: use)
            members.signingIn[member.id] = 1
            let startSweeper = configuration.idleTimeout != nil && !members.sweeping
            if startSweeper { members.sweeping = true }
            return (member, evicted, startSweeper)
        }
        if startSweeper { startIdleSweeper() }
        return (joined, evicted)
    }

    /// The least recently used member with no sign-in under way (``Members/signingIn``), no scoped work running and
    /// no caller waiting, closed to new work in the step that checked it (``AccountShard/Slot/closeToWorkIfIdle()``), so
    /// that no work starts on it before it leaves.
    static func closeLeastRecentlyUsedIdle(
        _ candidates: [(member: Member, used: Int64)], sparing members: Members
    ) -> Member? {
        // One scan finds the oldest; a busy one is skipped and the scan repeated, which is rare. Of members last used
        // together (two reads with no other use between share a stamp) the one made first goes, whatever the order
        // of the table's rows, whose hash seed differs between pools.
        var busy: Set<AccountID> = []
        while true {
            var oldest: (member: Member, used: Int64)?
            for (member, used) in candidates where !busy.contains(member.account) {
                if let current = oldest,
                    current.used < used || (current.used == used && current.member.serial < member.serial)
                {
                    continue
                }
                oldest = (member, used)
            }
            guard let candidate = oldest?.member else { return nil }
            if !members.isSigningIn(candidate) && candidate.slot.closeToWorkIfIdle() { return candidate }
            busy.insert(candidate.account)
        }
    }

    /// Signs out and shuts down a member that has left the table (``Members/leave(_:from:)``, or
    /// ``Members/evict(_:from:)``, which counts the eviction, in the lock step that chose it), which ends its life in
    /// its shard, reporting an eviction's reason; then ends its leaving.
    ///
    /// From the removal on, reads for the account fail with `SIGNED_OUT` and a sign-in makes a new member; a call
    /// that reached the old member first fails with `SHUT_DOWN` and ``withMember(_:_:)`` retries it on the new one.
    func remove(_ member: Member, because reason: SessionPoolEvent.EvictionReason?) async {
        await member.shard.signOutAndShutDown(member.slot)
        if let reason {
            let event = SessionPoolEvent(account: member.account, kind: .evicted(reason))
            outlets.publish(event, member: member.serial)
        }
        members.withLock { $0.leaving.removeValue(forKey: member.id) }?.removed.open()
    }

    // MARK: - Idle accounts

    /// Starts the idle sweeper, which signs out accounts unused for the idle timeout, sweeping once per half timeout
    /// while the pool holds accounts; the joining call that set `sweeping` starts it.
    ///
    /// The sweeper is a deadline in the pool's deadline queue (``sweeperSlot``), set again after each sweep, so no
    /// task sleeps for it. Uses are counted, not timed (``AccountTable/nextUse()``), so the sweeper ties the count to
    /// its clock: it takes a checkpoint, a use serial and then the clock's time, when it starts and at every sweep. A
    /// member whose last use comes before the latest checkpoint at least the timeout old was unused for at least the
    /// timeout; with a checkpoint every half timeout, a member goes within one and a half timeouts of its last use.
    private func startIdleSweeper() {
        guard let timeout = configuration.idleTimeout, let sweeperSlot else { return }
        members.withLock { $0.checkpoints = [Self.checkpoint(table, clock)] }
        AccountShard.scheduleDeadline(sweeperSlot, in: timers, on: clock, after: timeout / 2)
    }

    /// A use serial, then the clock's time: the sweeper's checkpoint.
    private static func checkpoint(_ table: AccountTable, _ clock: any SessionClock) -> (use: Int64, at: Duration) {
        (table.nextUse(), clock.uptime)
    }

    /// The sweeper's deadline passed: a task of the pool's sweeps, since a firing must return at once.
    func sweepDue() {
        Task.start(preferring: shared.taskExecutor) { [weak self] in await self?.sweep() }
    }

    /// Signs out the members unused since the latest checkpoint at least the timeout old, takes a checkpoint, and
    /// sets the next deadline; stops, clearing `sweeping`, once the pool has shut down or holds no account.
    private func sweep() async {
        guard let timeout = configuration.idleTimeout, let sweeperSlot else { return }
        let now = clock.uptime
        let idle = members.withLock { members -> [Member]? in
            guard !members.shutDown, table.count > 0 else {
                members.sweeping = false
                return nil
            }
            // Oldest first; only the latest checkpoint at least the timeout old, and later ones, are kept.
            let old = members.checkpoints.lastIndex { now - $0.at >= timeout }
            let horizon = old.map { members.checkpoints[$0].use }
            if let old { members.checkpoints.removeFirst(old) }
            members.checkpoints.append(Self.checkpoint(table, clock))
            guard let horizon else { return [] }
            let idle = table.lastUses().compactMap { member, used in
                used < horizon && !members.isSigningIn(member) && member.slot.closeToWorkIfIdle() ? member : nil
            }
            for member in idle { members.evict(member, from: table) }
            return idle
        }
        guard let idle else { return }
        for member in Self.oldestFirst(idle) { await remove(member, because: .idle) }
        // A shutdown meanwhile cancelled the deadline; the sweep that would follow would only stop.
        guard !isShutDown else { return }
        AccountShard.scheduleDeadline(sweeperSlot, in: timers, on: clock, after: timeout / 2)
    }
}
