import Foundation
import Synchronization

/// The pool's open-addressed table of members, behind a lock of its own, with a copy of each member's read: the one
/// place the read every identified request makes goes.
///
/// A slot holds its member's account, its hash, the member (unretained), a copy of what the member's store reads
/// (``SessionStore/Reading``, kept current by the store's ``SessionStore/Mirror``) and the use serial of the account's
/// last read. A read therefore touches one slot and the headers it hands out: not the member, not its engine, not its store,
/// which at 100,000 accounts are each a cache miss.
///
/// A member sits in one of ``probes`` slots from its hash's slot on. A member crowded out of all of them has no slot;
/// `MemberIndex` finds it in its set and reads its store.
///
/// The table's lock is a leaf: nothing is locked while it is held but a store's lock of its read, which is a leaf too,
/// and only when a member is placed (a join, a rebuild), never on the read or the install path. The pool's members'
/// lock is taken before it (changes to the index) and never under it. A store's install takes its own locks one after
/// the other and then the table's alone (the mirror), so no lock is held across another when a credential lands.
///
/// The table also counts the pool's uses (``nextUse()``): every read that stamps its account, every join and every call
/// that names an account, in the order they took the table's lock. A use's serial, not a clock, orders the accounts
/// for eviction, so the least recently used account is exact and a read costs no clock read; the idle sweep ties
/// serials to time by taking one itself, with the time, at every sweep.
///
/// The slots do not retain their members: a slot names only a member that the `MemberIndex` holding this table holds
/// (every change to the index keeps it so), so a member named by a slot is alive while the table's lock is held.
final class MemberTable: Sendable {
    /// A member, its account's hash and a copy of its read.
    struct Slot {
        /// The hash's high half, compared before the account.
        var tag: UInt32 = 0
        var unavailable: SessionStore.Unavailability = .signedOut
        var account: AccountID?
        var member: Unmanaged<SessionPool.Member>?
        var headers: IdentityHeaders?
        var expiresAt: TimeInterval = 0
        /// The use serial of the last read through this slot.
        var lastRead: Int64 = .min
    }

    /// The slots and the count of uses.
    private struct State {
        var slots: [Slot]
        /// The serial of the latest use.
        var uses: Int64 = 0
    }

    /// How many slots from its hash's slot on may hold a member. With at most half the slots taken, about one member in
    /// two hundred is crowded out of all eight (one in a thousand at 100,000 members), and a read looks at 1.3 to 1.5
    /// slots on average.
    static let probes = 8

    private let state: SanitizedMutex<State>

    /// Creates a table of `count` empty slots, a power of two.
    init(count: Int) {
        state = SanitizedMutex(State(slots: Array(repeating: Slot(), count: count)))
    }

    /// The serial of a new use, later than every use before it.
    func nextUse() -> Int64 {
        state.withLock { state in
            state.uses += 1
            return state.uses
        }
    }

    /// `body` applied to the slot of `account`, found by its `hash`, whose member `matches`; `nil` if no slot of the
    /// account's probes holds such a member. Called under the table's lock.
    @inline(__always)
    private static func withSlot<Result>(
        in slots: inout [Slot], account: AccountID, hash: UInt64,
        where matches: (Unmanaged<SessionPool.Member>) -> Bool,
        _ body: (inout Slot) -> Result
    ) -> Result? {
        let mask = slots.count - 1
        let tag = UInt32(truncatingIfNeeded: hash >> 32)
        var position = Int(truncatingIfNeeded: hash) & mask
        for _ in 0..<probes {
            if slots[position].tag == tag, let member = slots[position].member, slots[position].account == account,
                matches(member)
            {
                return body(&slots[position])
            }
            position = (position &+ 1) & mask
        }
        return nil
    }

    /// What `account`'s member reads, stamping the slot with a new use when `stampingUse`; `nil` when no slot holds
    /// the account.
    ///
    /// Inlined into the pool's reads alone, functions that are never inlined, so its lock is inlined
    /// (``SanitizedMutex/withLockInlined(_:)``) and never lands in an `async` function.
    @inline(__always)
    func reading(_ account: AccountID, hash: UInt64, stampingUse: Bool) -> SessionStore.Reading? {
        state.withLockInlined { state in
            var use = Int64.min
            if stampingUse {
                state.uses += 1
                use = state.uses
            }
            return Self.withSlot(in: &state.slots, account: account, hash: hash, where: { _ in true }) {
                slot -> SessionStore.Reading in
                if stampingUse { slot.lastRead = use }
                return (slot.headers, slot.expiresAt, slot.unavailable)
            }
        }
    }

    /// The member of `account`, retained; `nil` when no slot holds the account.
    func member(_ account: AccountID, hash: UInt64) -> SessionPool.Member? {
        state.withLock { state in
            Self.withSlot(in: &state.slots, account: account, hash: hash, where: { _ in true }) { slot in
                slot.member!.takeUnretainedValue()
            }
        }
    }

    /// Installs a change of `store`'s read in the slot of the member whose store it is; a store whose member has no
    /// slot, or has left the table, changes nothing.
    func mirror(_ store: SessionStore, of account: AccountID, hash: UInt64, _ reading: SessionStore.Reading) {
        state.withLock { state in
            _ = Self.withSlot(
                in: &state.slots, account: account, hash: hash,
                where: { $0._withUnsafeGuaranteedRef { $0.store === store } }
            ) { slot in
                (slot.headers, slot.expiresAt, slot.unavailable) = reading
            }
        }
    }

    /// Puts `member` in the first free slot of its probes, with its store's read; returns whether it found one.
    @discardableResult
    func place(_ member: SessionPool.Member, hash: UInt64) -> Bool {
        state.withLock { Self.place(member, hash: hash, in: &$0.slots) != nil }
    }

    /// Puts `member` in the first free slot of its probes; returns the slot's position, `nil` when all are taken.
    private static func place(_ member: SessionPool.Member, hash: UInt64, in slots: inout [Slot]) -> Int? {
        let mask = slots.count - 1
        var position = Int(truncatingIfNeeded: hash) & mask
        for _ in 0..<probes {
            if slots[position].member == nil {
                // Read under the table's lock: a change of the read that the store makes meanwhile waits for the lock
                // and lands after this one.
                let reading = member.store.reading()
                slots[position] = Slot(
                    tag: UInt32(truncatingIfNeeded: hash >> 32), unavailable: reading.unavailable,
                    account: member.account, member: .passUnretained(member), headers: reading.headers,
                    expiresAt: reading.expiresAt)
                return position
            }
            position = (position &+ 1) & mask
        }
        return nil
    }

    /// Whether a slot's member is `member` itself, not only a member of its account.
    private static func named(_ member: SessionPool.Member) -> (Unmanaged<SessionPool.Member>) -> Bool {
        let named = Unmanaged.passUnretained(member).toOpaque()
        return { $0.toOpaque() == named }
    }

    /// Empties the slot of `member`; returns whether it had one.
    @discardableResult
    func clear(_ member: SessionPool.Member, hash: UInt64) -> Bool {
        state.withLock { state in
            Self.withSlot(
                in: &state.slots, account: member.account, hash: hash,
                where: Self.named(member)
            ) { slot in
                slot = Slot()
            } != nil
        }
    }

    /// Empties every slot, for a pool that is going: its index, which held the members the slots name, goes with it,
    /// while an engine that outlives it may still write its read here (``mirror(_:of:hash:_:)`` then finds no slot).
    func clearAll() {
        state.withLock { state in
            for index in state.slots.indices { state.slots[index] = Slot() }
        }
    }

    /// Replaces every slot with `count` empty ones, a power of two, and places `members` in them, each with the hash
    /// `hash` gives it; last reads carry over. Returns how many members found no slot.
    func rebuild(count: Int, members: some Sequence<SessionPool.Member>, hash: (SessionPool.Member) -> UInt64) -> Int {
        state.withLock { state in
            var withoutSlot = 0
            var lastRead: [ObjectIdentifier: Int64] = [:]
            for slot in state.slots where slot.lastRead != .min {
                if let member = slot.member { lastRead[ObjectIdentifier(member.takeUnretainedValue())] = slot.lastRead }
            }
            state.slots = Array(repeating: Slot(), count: count)
            for member in members {
                guard let position = Self.place(member, hash: hash(member), in: &state.slots) else {
                    withoutSlot += 1
                    continue
                }
                if let read = lastRead[ObjectIdentifier(member)] { state.slots[position].lastRead = read }
            }
            return withoutSlot
        }
    }

    /// `body` given the last read through a member's slot (`Int64.min` for a member without one, found by its
    /// account's hash), under the table's lock, so that a scan of many members takes it once.
    func withLastReads<Result>(
        _ body: (_ lastRead: (SessionPool.Member, UInt64) -> Int64) -> Result
    ) -> Result {
        state.withLock { state in
            body { member, hash in
                Self.withSlot(
                    in: &state.slots, account: member.account, hash: hash,
                    where: Self.named(member)
                ) { $0.lastRead } ?? .min
            }
        }
    }
}
