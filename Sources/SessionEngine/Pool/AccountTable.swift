import Foundation
import Synchronization

/// The pool's accounts: each account's member with a copy of its read, in the rows of sixteen shards, each shard
/// behind a lock of its own. The one place the read every identified request makes goes, and the one place the pool
/// finds a member.
///
/// An account's hash (``Hasher``) chooses its shard (its top four bits) and its home row in the shard's
/// open-addressed table (its low 32 bits, scaled to the shard's rows); the account sits in the first free row from
/// there on (linear probing), and a row a member leaves is filled by moving the rows after it back, so no row is ever a
/// tombstone. A row holds the account, the low 32 bits of its hash (compared first), the member, a copy of what the
/// member's store reads (``SessionStore/Reading``, kept current by the engine's step,
/// ``mirror(_:keepsHeaders:of:account:)``) and the serial of the account's last use. A read therefore takes one
/// shard's lock and touches one row and the headers it hands out (the credential, the first time, to build them
/// from): not the member's engine, not its store, which at 100,000 accounts are each a cache miss; and two threads
/// reading two accounts take the same lock once in sixteen times.
///
/// Each shard keeps its rows at most two thirds full, in sizes a quarter of a power of two apart
/// (``Rows/size(holding:)``): it grows to the next size when it would be fuller, and shrinks to half full when it is
/// less than an eighth full.
///
/// The rows hold their members. Each member's engine holds the pool's outlets, and so this table, through its
/// ``AccountShard/Shared``: the pool empties the table when it goes (``removeAll()``), which lets the engines go, and
/// an engine that outlives the pool (a fetch in flight) finds no row to write its read into.
///
/// **Locks.** A shard's lock is a leaf: nothing is locked while it is held but the store's lock of a member being
/// inserted, a store no one else reaches yet and under whose lock no shard's lock is ever taken; never on the read or
/// the install path. The pool's members' lock is taken before a shard's (joins and removals) and never under one. An
/// engine's step takes its store's lock as it installs, and then its shard's alone
/// (``mirror(_:keepsHeaders:of:account:)``), so no lock is held across another when a credential lands; a read's keep
/// of the headers it built takes the shard's alone as well.
///
/// **Uses.** Every join, every call that names an account and every checkpoint of the idle sweeper takes the next
/// serial of one counter (``nextUse()``); a read only loads the counter (``readStamp()``), so it writes nothing shared.
/// Stamps, not a clock, order the accounts for eviction, and a read reads no clock for them: the order is exact
/// between reads and every other use, and two reads with no other use between them share a stamp. The idle sweep ties
/// stamps to time by taking one itself, with the time, at every sweep.
///
/// Unchecked: the shards sit in one allocation the table makes once, fills once and frees in its `deinit`, and each
/// shard's rows are touched only under the shard's lock.
final class AccountTable: @unchecked Sendable {
    /// The table's hash of an account: its UTF-8 bytes in Unicode's canonical composition, seeded once per pool.
    ///
    /// A `Set` or `Dictionary` lookup hashes the account's `String` with the standard library's seeded SipHash, which
    /// costs more than the engine's whole read; this hash takes the bytes eight at a time. `AccountID` compares as
    /// `String` does, by canonical equivalence, so every spelling of one account must hash alike: ASCII, which is
    /// its own composition, is hashed as it is, and any other account through its composed bytes
    /// (`String._withNFCCodeUnits`, the bytes the standard library's own hashing and comparison use).
    ///
    /// The seed is random for each pool, so no one can choose accounts that share a shard's rows without knowing it.
    /// Unlike the standard library's SipHash, this hash is not built to keep the seed secret from someone who sees
    /// where accounts land; nothing outside the process does, and keys that did collide would lengthen probe runs in
    /// their own shard, slowing the reads of its accounts, not lock any account out.
    struct Hasher: Sendable {
        let seed: UInt64

        /// A hash of `account`'s bytes in canonical composition.
        @inline(__always)
        func hash(_ account: AccountID) -> UInt64 {
            let hashed = account.rawValue.utf8.withContiguousStorageIfAvailable {
                Self.mixIfASCII(UnsafeRawBufferPointer($0), seed)
            }
            if let hashed, let hash = hashed { return hash }
            return composedHash(account)
        }

        /// The hash of an account that is not all ASCII, or whose bytes are not contiguous: through its composed bytes,
        /// taken one at a time as the standard library composes them, with no copy. The same function as
        /// ``mix(_:_:)``: whole words first, then the last bytes, then the length.
        @inline(never)
        func composedHash(_ account: AccountID) -> UInt64 {
            var state = seed
            var pending: UInt64 = 0
            var shift: UInt64 = 0
            var count = 0
            account.rawValue._withNFCCodeUnits { byte in
                pending |= UInt64(byte) << shift
                shift += 8
                count += 1
                if shift == 64 {
                    state = Self.round(state, pending)
                    (pending, shift) = (0, 0)
                }
            }
            return Self.finish(state, tail: pending, count: count)
        }

        /// The hash of `bytes`, or `nil` when a byte is not ASCII.
        @inline(__always)
        private static func mixIfASCII(_ bytes: UnsafeRawBufferPointer, _ seed: UInt64) -> UInt64? {
            let (hash, seen) = mix(bytes, seed)
            return seen & 0x8080_8080_8080_8080 == 0 ? hash : nil
        }

        /// The hash of `bytes`, and every byte's bits or-ed together in its lane, which says whether one is not ASCII.
        @inline(__always)
        private static func mix(_ bytes: UnsafeRawBufferPointer, _ seed: UInt64) -> (hash: UInt64, seen: UInt64) {
            var state = seed
            var seen: UInt64 = 0
            var offset = 0
            while offset + 8 <= bytes.count {
                let word = bytes.loadUnaligned(fromByteOffset: offset, as: UInt64.self)
                seen |= word
                state = round(state, word)
                offset += 8
            }
            // The last bytes, as one little-endian word: four at once and then one by one, never in a load that
            // overlaps bytes already mixed. A small string's bytes are a copy on the stack written as two words, and a
            // load across the two cannot take its bytes from the pending writes (store-to-load forwarding fails, a
            // stall of a dozen cycles).
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
            seen |= tail
            return (finish(state, tail: tail, count: bytes.count), seen)
        }

        /// Mixes one whole word of bytes into the state.
        @inline(__always)
        private static func round(_ state: UInt64, _ word: UInt64) -> UInt64 {
            let mixed = (state ^ word) &* 0xBF58_476D_1CE4_E5B9
            return mixed ^ (mixed >> 31)
        }

        /// Mixes the last bytes and the length in, then SplitMix64's finalizer: every input bit reaches the low bits,
        /// which choose the row, and the top ones, which choose the shard.
        @inline(__always)
        private static func finish(_ state: UInt64, tail: UInt64, count: Int) -> UInt64 {
            var state = state ^ tail ^ (UInt64(count) &* 0x9E37_79B9_7F4A_7C15)
            state = (state ^ (state >> 30)) &* 0xBF58_476D_1CE4_E5B9
            state = (state ^ (state >> 27)) &* 0x94D0_49BB_1331_11EB
            return state ^ (state >> 31)
        }
    }

    /// A row: an account's member and a copy of its read, or nothing.
    struct Row {
        /// The hash's low 32 bits: compared before the account, and the home row of any shard up to 2^32 rows.
        var tag: UInt32 = 0
        var unavailable: SessionStore.Unavailability = .signedOut
        var account: AccountID?
        var member: SessionPool.Member?
        var headers: SessionStore.Headers?
        var expiresAt: TimeInterval = 0
        /// The serial of the account's last use.
        var lastUse: Int64 = .min

        /// Whether the row holds a member.
        var taken: Bool { member != nil }
    }

    /// One shard's rows and how many hold a member. The rows number a power of two times 1, 1¼, 1½ or 1¾
    /// (``size(holding:)``), at least ``AccountTable/minimumRows``, and an account's home row is its tag scaled to
    /// them (``home(_:)``).
    struct Rows {
        var rows = [Row](repeating: Row(), count: AccountTable.minimumRows)
        var count = 0

        /// The fewest rows, a power of two times 1, 1¼, 1½ or 1¾ and at least ``AccountTable/minimumRows``, that hold
        /// `count` accounts at most two thirds full.
        ///
        /// Two thirds keeps a probe run short (a read that finds its account looks at two rows on average, linear
        /// probing's ½ × (1 + 1 / (1 − ⅔))), and steps of a quarter keep a shard at least ⅔ × ⅘ full after it
        /// grows: about 1.6 rows an account, where a power of two at most half full kept 2.1 to 2.6 in the
        /// benchmark's pools.
        static func size(holding count: Int) -> Int {
            let needed = max(AccountTable.minimumRows, (count * 3 + 1) / 2)
            let quarter = (1 << (Int.bitWidth - 1 - needed.leadingZeroBitCount)) / 4
            return (needed + quarter - 1) / quarter * quarter
        }

        /// The home row of `tag` among `rows` rows: the tag's place as a fraction of 2^32, so that any number of rows
        /// takes the tag's top bits, with one multiplication and no division.
        @inline(__always)
        static func home(_ tag: UInt32, among rows: Int) -> Int {
            Int(truncatingIfNeeded: (UInt64(tag) &* UInt64(rows)) >> 32)
        }

        /// The home row of `tag` in these rows.
        @inline(__always)
        func home(_ tag: UInt32) -> Int { Self.home(tag, among: rows.count) }

        /// The row after `position`, the first after the last.
        @inline(__always)
        func after(_ position: Int) -> Int {
            position &+ 1 == rows.count ? 0 : position &+ 1
        }

        /// The position of the row `matches` picks among the rows of `tag`'s probe run; `nil` when none does.
        @inline(__always)
        func find(tag: UInt32, _ matches: (borrowing Row) -> Bool) -> Int? {
            var position = home(tag)
            while rows[position].taken {
                if rows[position].tag == tag && matches(rows[position]) { return position }
                position = after(position)
            }
            return nil
        }

        /// The position of `account`'s row.
        @inline(__always)
        func find(_ account: AccountID, tag: UInt32) -> Int? {
            find(tag: tag) { $0.account == account }
        }

        /// Puts `row` in the first free row of its probe run, growing first, to the next size, if the shard would be
        /// more than two thirds full.
        mutating func insert(_ row: Row) {
            if (count + 1) * 3 > rows.count * 2 { resize(to: Self.size(holding: count + 1)) }
            place(row)
            count += 1
        }

        private mutating func place(_ row: Row) {
            var position = home(row.tag)
            while rows[position].taken { position = after(position) }
            rows[position] = row
        }

        /// Empties the row at `position` and moves back the rows after it that may sit there, so that every probe run
        /// stays unbroken; once the shard is less than an eighth full, shrinks it to the size that holds its accounts
        /// at most half full. Returns the emptied row.
        mutating func remove(at position: Int) -> Row {
            let removed = rows[position]
            var hole = position
            var next = after(hole)
            while rows[next].taken {
                // A row may move back into the hole if the hole lies between its home and where it sits.
                if distance(from: home(rows[next].tag), to: next) >= distance(from: hole, to: next) {
                    rows[hole] = rows[next]
                    hole = next
                }
                next = after(next)
            }
            rows[hole] = Row()
            count -= 1
            if rows.count > AccountTable.minimumRows && count * 8 < rows.count {
                resize(to: Self.size(holding: (count * 4 + 2) / 3))
            }
            return removed
        }

        /// How many rows on from `start` `end` lies, going round past the last row.
        private func distance(from start: Int, to end: Int) -> Int {
            end >= start ? end - start : end + rows.count - start
        }

        private mutating func resize(to size: Int) {
            let old = rows
            rows = [Row](repeating: Row(), count: size)
            for row in old where row.taken { place(row) }
        }
    }

    /// A shard: its rows behind its lock, 128 bytes from the next shard's, so that readers of two shards share no cache
    /// line (nor a pair of lines, which some processors fetch together).
    ///
    /// A value in the table's one allocation of shards, not an object: a read borrows it where it lies, where an
    /// object taken out of an array would be retained and released, two atomic writes to a line every reader of the
    /// shard shares.
    private struct Shard: ~Copyable {
        let rows = SanitizedMutex(Rows())
        /// Fills the shard to 128 bytes (its lock and rows take 24), the alignment ``init(hasher:)`` gives the shards.
        private let padding:
            (UInt64, UInt64, UInt64, UInt64, UInt64, UInt64, UInt64, UInt64, UInt64, UInt64, UInt64, UInt64, UInt64) =
                (0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0)
    }

    let hasher: Hasher
    /// The shards, ``shardCount`` of them.
    private let shards: UnsafeMutablePointer<Shard>
    /// How many uses that are not reads there have been (``nextUse()``). Reads only load it (``readStamp()``), so it
    /// may share a line with what they load: it is written once per join or call, not per read.
    private let uses = Atomic<Int64>(0)

    /// How many shards: enough that two threads seldom read the same one, few enough that an empty pool's rows
    /// (``minimumRows`` in each) cost little. A power of two; the hash's top bits choose one.
    static let shardCount = 16
    /// How far the hash moves right to name its shard.
    static let shardShift = UInt64(64 - shardCount.trailingZeroBitCount)
    /// A shard's fewest rows.
    static let minimumRows = 8

    init(hasher: Hasher) {
        self.hasher = hasher
        shards = UnsafeMutableRawPointer.allocate(
            byteCount: Self.shardCount * MemoryLayout<Shard>.stride, alignment: 128
        )
        .bindMemory(to: Shard.self, capacity: Self.shardCount)
        for index in 0..<Self.shardCount { (shards + index).initialize(to: Shard()) }
    }

    deinit {
        shards.deinitialize(count: Self.shardCount)
        UnsafeMutableRawPointer(shards).deallocate()
    }

    /// The shard of `hash`, borrowed where it lies.
    @inline(__always)
    private func shard(_ hash: UInt64) -> UnsafeMutablePointer<Shard> {
        shards + Int(truncatingIfNeeded: hash >> Self.shardShift)
    }

    /// Every shard, in turn.
    private var allShards: some Sequence<UnsafeMutablePointer<Shard>> {
        (0..<Self.shardCount).lazy.map { self.shards + $0 }
    }

    /// The stamp of a new use that is not a read (a join, a call that names an account, the idle sweeper's
    /// checkpoint): later than every use before it, read or not. An even number.
    func nextUse() -> Int64 {
        uses.wrappingAdd(1, ordering: .relaxed).newValue &* 2
    }

    /// The stamp of a read: later than every use before it that was not a read, and equal to the reads' since then. An
    /// odd number. It writes nothing shared, so reads on two threads do not pass the counter's line between them.
    @inline(__always)
    func readStamp() -> Int64 {
        uses.load(ordering: .relaxed) &* 2 &+ 1
    }

    /// What `account`'s member reads, stamping its row with a new use when `stampingUse`; `nil` when the table does not
    /// hold the account.
    ///
    /// Inlined into the pool's reads alone, functions that are never inlined, so its lock is inlined
    /// (``SanitizedMutex/withLockInlined(_:)``) and never lands in an `async` function.
    @inline(__always)
    func reading(_ account: AccountID, hash: UInt64, stampingUse: Bool) -> SessionStore.Copy? {
        let use = stampingUse ? readStamp() : .min
        let tag = UInt32(truncatingIfNeeded: hash)
        return shard(hash).pointee.rows.withLockInlined { shard -> SessionStore.Copy? in
            guard let position = shard.find(account, tag: tag) else { return nil }
            if use > shard.rows[position].lastUse { shard.rows[position].lastUse = use }
            // Field by field: a copy of the whole row would retain the member's references too.
            return SessionStore.Headers.copy(
                shard.rows[position].headers, shard.rows[position].expiresAt, shard.rows[position].unavailable)
        }
    }

    /// The member of `account`, its row stamped with `use` if that is later than its last; `nil` when the table does
    /// not hold the account.
    func member(_ account: AccountID, stamping use: Int64 = .min) -> SessionPool.Member? {
        let hash = hasher.hash(account)
        let tag = UInt32(truncatingIfNeeded: hash)
        return shard(hash).pointee.rows.withLock { shard -> SessionPool.Member? in
            guard let position = shard.find(account, tag: tag) else { return nil }
            if use > shard.rows[position].lastUse { shard.rows[position].lastUse = use }
            return shard.rows[position].member
        }
    }

    /// Installs a change of a member's read in its row, found by the member's slot under its account's hash; a member
    /// that has left the table changes nothing.
    ///
    /// The engine's step calls it after its store's install, with the store's lock released and in the order of the
    /// installs (the engine's actor alone installs), so a row's read changes as the store's does. When the install
    /// kept the credential (`keepsHeaders`), headers a read of the row has built stay.
    func mirror(
        _ reading: SessionStore.Reading, keepsHeaders: Bool, of slot: AccountShard.Slot, account: AccountID
    ) {
        let hash = hasher.hash(account)
        let tag = UInt32(truncatingIfNeeded: hash)
        shard(hash).pointee.rows.withLock { shard in
            guard let position = shard.find(tag: tag, { $0.member?.slot === slot }) else { return }
            var reading = reading
            reading.headers = SessionStore.Headers.installed(
                reading.headers, over: shard.rows[position].headers, keepsHeaders: keepsHeaders)
            (shard.rows[position].headers, shard.rows[position].expiresAt, shard.rows[position].unavailable) = reading
        }
    }

    /// Keeps headers a read of `account`'s row built for `credential`, if the row still holds that credential
    /// unbuilt (``SessionStore/Headers``).
    func keep(_ headers: IdentityHeaders, of credential: IdentityCredential, account: AccountID, hash: UInt64) {
        let tag = UInt32(truncatingIfNeeded: hash)
        shard(hash).pointee.rows.withLock { shard in
            guard let position = shard.find(account, tag: tag) else { return }
            shard.rows[position].headers?.keep(headers, of: credential)
        }
    }

    /// Adds `member`, last used at `use`, with its store's read; returns the member of its account it replaced.
    @discardableResult
    func insert(_ member: SessionPool.Member, use: Int64) -> SessionPool.Member? {
        let hash = hasher.hash(member.account)
        let tag = UInt32(truncatingIfNeeded: hash)
        return shard(hash).pointee.rows.withLock { shard -> SessionPool.Member? in
            let replaced = shard.find(member.account, tag: tag).map { shard.remove(at: $0).member } ?? nil
            // Read under the shard's lock: a change of the read that the engine's step installs meanwhile waits for
            // the lock to copy it into the row, and lands after this one. The store holds the credential, not headers
            // a read built: the row's first read builds them.
            let reading = member.slot.store.reading()
            shard.insert(
                Row(
                    tag: tag, unavailable: reading.unavailable, account: member.account, member: member,
                    headers: reading.headers, expiresAt: reading.expiresAt, lastUse: use))
            return replaced
        }
    }

    /// Removes `member` if it is still its account's member; returns whether it was.
    @discardableResult
    func remove(_ member: SessionPool.Member) -> Bool {
        let hash = hasher.hash(member.account)
        let tag = UInt32(truncatingIfNeeded: hash)
        // The row comes out of the lock to be released after it.
        let removed = shard(hash).pointee.rows.withLock { shard -> Row? in
            guard let position = shard.find(tag: tag, { $0.member?.slot === member.slot }) else { return nil }
            return shard.remove(at: position)
        }
        return removed != nil
    }

    /// Removes every member and returns them, in the order of their rows.
    func removeAll() -> [SessionPool.Member] {
        allShards.flatMap { shard in
            shard.pointee.rows.withLock { shard -> [SessionPool.Member] in
                let members = shard.rows.compactMap(\.member)
                shard = Rows()
                return members
            }
        }
    }

    /// How many members the table holds.
    var count: Int {
        allShards.reduce(0) { total, shard in total + shard.pointee.rows.withLock { $0.count } }
    }

    /// Every member with its last use, shard by shard, each under its shard's lock.
    func lastUses() -> [(member: SessionPool.Member, used: Int64)] {
        allShards.flatMap { shard in
            shard.pointee.rows.withLock { shard in
                shard.rows.compactMap { row in row.member.map { ($0, row.lastUse) } }
            }
        }
    }

    /// Every member, in the order of their rows (``SessionPool/oldestFirst(_:)`` puts them in an order the pool's
    /// calls decide).
    var members: [SessionPool.Member] { lastUses().map(\.member) }
}
