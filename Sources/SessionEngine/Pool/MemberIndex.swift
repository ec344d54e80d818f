/// The pool's members by account: a dictionary, and in front of it a direct-mapped table that finds most accounts
/// with one cheap hash and one comparison, for the read every identified request makes.
///
/// A `Dictionary` lookup hashes the account's `String` with the standard library's seeded SipHash, which costs more
/// than the engine's whole read. The table hashes the account's UTF-8 bytes eight at a time with a per-pool random
/// seed and keeps at most one member per slot, so a lookup is that hash, one load and one comparison of the account.
/// Accounts whose slot another account took, and every account a caller spells with other bytes than the member's
/// (`AccountID` compares as `String` does, by canonical equivalence), are found in the dictionary. The table only
/// ever answers with a member whose account equals the one asked for, so it cannot hand out another account's
/// member, and keys crafted to collide only send their lookups to the dictionary: the worst case is the
/// dictionary's.
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
            var tail: UInt64 = 0
            var shift: UInt64 = 0
            while offset < bytes.count {
                tail |= UInt64(bytes[offset]) << shift
                shift += 8
                offset += 1
            }
            state = (state ^ tail) &* 0x94D0_49BB_1331_11EB
            return state ^ (state >> 29)
        }
    }

    let hasher: Hasher
    private var byAccount: [AccountID: SessionPool.Member] = [:]
    /// A power of two of slots, at least four per member, so that most members own their slot.
    ///
    /// The slots do not retain their members: a slot names only a member that `byAccount` of the same index value
    /// holds (every change to the index keeps it so), so it lives at least as long as the index value that names it,
    /// and a read through a slot costs no reference counting.
    private var slots: [Unmanaged<SessionPool.Member>?] = Array(repeating: nil, count: Self.minimumSlots)

    private static let minimumSlots = 16

    init(hasher: Hasher) {
        self.hasher = hasher
    }

    /// How many members the index holds.
    var count: Int { byAccount.count }

    /// Every member.
    var members: Dictionary<AccountID, SessionPool.Member>.Values { byAccount.values }

    /// Every member's account.
    var accounts: Dictionary<AccountID, SessionPool.Member>.Keys { byAccount.keys }

    /// The member for `account`, whose table hash is `hash` (``Hasher/hash(_:)``).
    @inline(__always)
    func member(_ account: AccountID, hash: UInt64) -> SessionPool.Member? {
        withMember(account, hash: hash) { $0 }
    }

    /// `body` applied to the member for `account`, whose table hash is `hash` (``Hasher/hash(_:)``); `nil` when the
    /// index holds no member for `account`.
    ///
    /// A member found in the table is lent to `body` without a retain: `body` runs while this index value holds it,
    /// and must not keep it beyond the call unless it retains it (returning it does).
    @inline(__always)
    func withMember<Result>(
        _ account: AccountID, hash: UInt64, _ body: (SessionPool.Member) -> Result
    ) -> Result? {
        if let slot = slots[Int(truncatingIfNeeded: hash) & (slots.count - 1)] {
            let found = slot._withUnsafeGuaranteedRef { member in
                member.account == account ? Optional(body(member)) : nil
            }
            if let found { return found }
        }
        guard let member = byAccount[account] else { return nil }
        return body(member)
    }

    /// The member for `account`.
    func member(_ account: AccountID) -> SessionPool.Member? {
        member(account, hash: hasher.hash(account))
    }

    /// Adds `member`, replacing any member of its account.
    mutating func insert(_ member: SessionPool.Member) {
        // A replaced member of the account had the account's slot, which the new member takes below.
        byAccount[member.account] = member
        if byAccount.count * 4 > slots.count {
            rebuild(slotCount: slots.count * 2)
        } else {
            slots[slot(of: member)] = .passUnretained(member)
        }
    }

    /// Removes `member` if it is still its account's member; returns whether it was.
    @discardableResult
    mutating func remove(_ member: SessionPool.Member) -> Bool {
        guard byAccount[member.account] === member else { return false }
        let slot = slot(of: member)
        if slots[slot]?.toOpaque() == Unmanaged.passUnretained(member).toOpaque() { slots[slot] = nil }
        byAccount[member.account] = nil
        if slots.count > Self.minimumSlots && byAccount.count * 32 < slots.count {
            rebuild(slotCount: slots.count / 2)
        }
        return true
    }

    /// Removes every member and returns them.
    mutating func removeAll() -> [SessionPool.Member] {
        slots = Array(repeating: nil, count: Self.minimumSlots)
        defer { byAccount.removeAll() }
        return Array(byAccount.values)
    }

    private func slot(of member: SessionPool.Member) -> Int {
        Int(truncatingIfNeeded: hasher.hash(member.account)) & (slots.count - 1)
    }

    private mutating func rebuild(slotCount: Int) {
        slots = Array(repeating: nil, count: slotCount)
        for member in byAccount.values { slots[slot(of: member)] = .passUnretained(member) }
    }
}
