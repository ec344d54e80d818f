import Synchronization

/// The pool's members by account: a set of the members, each found by its account (``SessionPool/AccountKey``), and in
/// front of it an open-addressed table (``MemberTable``) that finds nearly every account with one cheap hash and one
/// comparison, for the read every identified request makes.
///
/// A `Set` or `Dictionary` lookup hashes the account's `String` with the standard library's seeded SipHash, which
/// costs more than the engine's whole read. The table hashes the account's UTF-8 bytes eight at a time with a
/// per-pool random seed and keeps at most one member per slot, in one of ``MemberTable/probes`` slots from its hash's,
/// so a lookup is that hash, a comparison of the hashes in those slots and one comparison of the account. Accounts
/// crowded out of their slots, and every account a caller spells with other bytes than the member's (`AccountID`
/// compares as `String` does, by canonical equivalence), are found in the set. The table only ever answers with a
/// member whose account equals the one asked for, so it cannot hand out another account's member, and keys crafted to
/// collide only send their lookups to the set: the worst case is the set's.
struct MemberIndex {
    /// The table's hash of an account's bytes, seeded once per pool.
    struct Hasher: Sendable {
        let seed: UInt64

        /// A hash of `account`'s UTF-8 bytes.
        @inline(__always)
        func hash(_ account: AccountID) -> UInt64 {
            let utf8 = account.rawValue.utf8
            if let hash = utf8.withContiguousStorageIfAvailable({ Self.mix(UnsafeRawBufferPointer($0), seed) }) {
                return hash
            }
            return Array(utf8).withUnsafeBytes { Self.mix($0, seed) }
        }

        @inline(__always)
        private static func mix(_ bytes: UnsafeRawBufferPointer, _ seed: UInt64) -> UInt64 {
            var state = seed ^ (UInt64(bytes.count) &* 0x9E37_79B9_7F4A_7C15)
            var offset = 0
            while offset + 8 <= bytes.count {
                state = (state ^ bytes.loadUnaligned(fromByteOffset: offset, as: UInt64.self)) &* 0xBF58_476D_1CE4_E5B9
                state ^= state >> 31
                offset += 8
            }
            // The last bytes, four at once and then one by one, never in a load that overlaps bytes already mixed: a
            // small string's bytes are a copy on the stack written as two words, and a load across the two cannot
            // take its bytes from the pending writes (store-to-load forwarding fails, a stall of a dozen cycles).
            var tail: UInt64 = 0
            var shift: UInt64 = 0
            if bytes.count - offset >= 4 {
                tail = UInt64(bytes.loadUnaligned(fromByteOffset: offset, as: UInt32.self))
                shift = 32
                offset += 4
            }
            while offset < bytes.count {
                tail |= UInt64(bytes[offset]) << shift
                shift += 8
                offset += 1
            }
            // SplitMix64's finalizer: every input bit reaches the low bits, which choose the slot.
            state ^= tail
            state = (state ^ (state >> 30)) &* 0xBF58_476D_1CE4_E5B9
            state = (state ^ (state >> 27)) &* 0x94D0_49BB_1331_11EB
            return state ^ (state >> 31)
        }
    }

    let hasher: Hasher
    /// Every member, found by its account (``SessionPool/AccountKey``).
    private var byAccount = Set<SessionPool.AccountKey>()
    /// The members' table: at least two slots per member, a power of two. It has a lock of its own, so that a read
    /// takes that lock alone (``MemberTable``). The index owns it: a copy of the index would share it.
    let table: MemberTable
    private var slotCount = Self.minimumSlots
    /// How many members have no slot in the table, crowded out of all their slots' probes.
    private(set) var withoutSlot = 0

    private static let minimumSlots = 16

    init(hasher: Hasher) {
        self.hasher = hasher
        self.table = MemberTable(count: Self.minimumSlots)
    }

    /// How many members the index holds.
    var count: Int { byAccount.count }

    /// Every member.
    var members: LazyMapSequence<Set<SessionPool.AccountKey>, SessionPool.Member> {
        // The set holds members only: probes look members up and are never inserted.
        byAccount.lazy.map { unsafeDowncast($0, to: SessionPool.Member.self) }
    }

    /// Every member's account.
    var accounts: LazyMapSequence<Set<SessionPool.AccountKey>, AccountID> { byAccount.lazy.map(\.account) }

    /// The member for `account`, whose table hash is `hash` (``Hasher/hash(_:)``).
    func member(_ account: AccountID, hash: UInt64) -> SessionPool.Member? {
        table.member(account, hash: hash) ?? memberWithoutTable(account)
    }

    /// The member for `account`, found without the table: for an account the table does not hold.
    func memberWithoutTable(_ account: AccountID) -> SessionPool.Member? {
        guard let found = byAccount.firstIndex(of: SessionPool.AccountProbe(account)) else { return nil }
        return unsafeDowncast(byAccount[found], to: SessionPool.Member.self)
    }

    /// The member for `account`.
    func member(_ account: AccountID) -> SessionPool.Member? {
        member(account, hash: hasher.hash(account))
    }

    /// Every member with its last use: the later of its own stamp (``SessionPool/Member/lastUsed``: joins, and reads
    /// of a member without a slot) and the last read through its slot.
    func lastUses() -> [(member: SessionPool.Member, used: Int64)] {
        table.withLastReads { lastRead in
            members.map { member in
                (member, max(member.lastUsed.load(ordering: .relaxed), lastRead(member, hasher.hash(member.account))))
            }
        }
    }

    /// Adds `member`, replacing any member of its account.
    mutating func insert(_ member: SessionPool.Member) {
        if let replaced = byAccount.update(with: member).map({ unsafeDowncast($0, to: SessionPool.Member.self) }),
            !table.clear(replaced, hash: hasher.hash(replaced.account))
        {
            withoutSlot -= 1
        }
        if byAccount.count * 2 > slotCount {
            rebuild(slotCount: slotCount * 2)
        } else if !table.place(member, hash: hasher.hash(member.account)) {
            withoutSlot += 1
        }
    }

    /// Removes `member` if it is still its account's member; returns whether it was.
    @discardableResult
    mutating func remove(_ member: SessionPool.Member) -> Bool {
        guard let found = byAccount.firstIndex(of: member), byAccount[found] === member else { return false }
        if !table.clear(member, hash: hasher.hash(member.account)) { withoutSlot -= 1 }
        byAccount.remove(at: found)
        if slotCount > Self.minimumSlots && byAccount.count * 16 < slotCount {
            rebuild(slotCount: slotCount / 2)
        }
        return true
    }

    /// Removes every member and returns them.
    mutating func removeAll() -> [SessionPool.Member] {
        rebuild(slotCount: Self.minimumSlots, members: [])
        defer { byAccount.removeAll() }
        return Array(members)
    }

    private mutating func rebuild(slotCount: Int) {
        rebuild(slotCount: slotCount, members: members)
    }

    private mutating func rebuild(slotCount: Int, members: some Sequence<SessionPool.Member>) {
        self.slotCount = slotCount
        let hasher = self.hasher
        withoutSlot = table.rebuild(count: slotCount, members: members) { hasher.hash($0.account) }
    }
}
