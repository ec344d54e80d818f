import SessionEngineTestKit
import Synchronization
import Testing

@testable import SessionEngine

/// The pool's accounts' table: its shards of open-addressed rows must answer exactly as a dictionary from account to
/// member would, whichever accounts share a home row, however the account is spelled, through growth and removals.
@Suite struct AccountTableTests {
    /// What the members' engines share: no pool's outlets, so they report nothing but to their own store.
    private let shared = AccountShard.Shared(
        SessionConfiguration(), fetcher: ScriptedCredentialFetcher(), clock: SystemClock(), budget: nil, timers: nil)

    private func table(seed: UInt64 = 0x5EED) -> AccountTable {
        AccountTable(hasher: AccountTable.Hasher(seed: seed))
    }

    /// A member of `table`'s pool, in a shard of its own.
    private func member(_ account: AccountID) -> SessionPool.Member {
        let membership = AccountShard.Membership(account: account, serial: 1)
        return SessionPool.Member(
            slot: AccountShard(shared: shared).reserve(latencyWindow: 1, membership: membership))
    }

    /// The first `count` accounts `prefix-0`, `prefix-1`… whose hashes put them in the table's first shard with the
    /// home row `row` of a shard of twelve rows: accounts that share a probe run, found by trying names.
    private func accounts(_ prefix: String, homeRow row: Int, count: Int, in table: AccountTable) -> [AccountID] {
        var found: [AccountID] = []
        var number = 0
        while found.count < count {
            let account = AccountID("\(prefix)-\(number)")
            let hash = table.hasher.hash(account)
            let home = AccountTable.Rows.home(UInt32(truncatingIfNeeded: hash), among: 12)
            if hash >> AccountTable.shardShift == 0 && home == row { found.append(account) }
            number += 1
        }
        return found
    }

    @Test func everyAccountFindsItsOwnMemberThroughGrowthAndSharedRows() {
        let table = table()
        let members = (0..<5_000).map { member(AccountID("account-\($0)")) }
        for member in members { table.insert(member, use: 0) }
        #expect(table.count == members.count)
        for member in members {
            #expect(table.member(member.account)?.is(member) == true)
            // A caller's own AccountID value, not the member's, finds it too.
            #expect(table.member(AccountID(String(member.account.rawValue)))?.is(member) == true)
        }
        #expect(table.member("account-5000") == nil)
        #expect(table.member("") == nil)
    }

    @Test(arguments: ["reader-", "user-00000000", "tenant-0123456789/agent-", "", "é"])
    func accountsThatDifferOnlyInTheirLastBytesSpreadOverShardsAndRows(prefix: String) {
        // Names a daemon makes: a fixed prefix and a counter, so that only the last bytes differ. Every byte must
        // reach the top bits, which choose the shard, and the low ones, which choose the row, or such names pile up in
        // a few shards and long probe runs.
        let hasher = AccountTable.Hasher(seed: 7)
        let hashes = (0..<20_000).map { hasher.hash(AccountID(prefix + String($0))) }
        var perShard = [Int](repeating: 0, count: AccountTable.shardCount)
        for hash in hashes { perShard[Int(hash >> 60)] += 1 }
        #expect(perShard.min()! >= 1_000 && perShard.max()! <= 1_500, "\(perShard)")
        // 20,000 random draws of 2^16 rows leave about 17,240 distinct; a hash that lost bits of its tag leaves far
        // fewer. A shard of 2^16 rows takes the home row from the tag's top sixteen bits.
        let rows = Set(hashes.map { AccountTable.Rows.home(UInt32(truncatingIfNeeded: $0), among: 1 << 16) })
        #expect(rows.count >= 16_800, "\(rows.count) distinct home rows of 65,536")
    }

    @Test func removalLeavesTheOthersAndShrinkingKeepsThem() {
        let table = table(seed: 1)
        let members = (0..<2_000).map { member(AccountID("user-\($0)")) }
        for member in members { table.insert(member, use: 0) }
        for member in members.dropFirst(10) {
            let removed = table.remove(member)
            #expect(removed)
        }
        #expect(table.count == 10)
        for member in members.prefix(10) { #expect(table.member(member.account)?.is(member) == true) }
        for member in members.dropFirst(10) { #expect(table.member(member.account) == nil) }
        let removedAgain = table.remove(members[500])
        #expect(!removedAgain, "a member already removed")
    }

    @Test func aShardGrowsInQuartersOfAPowerOfTwoAndStaysAtMostTwoThirdsFull() {
        // The sizes, a power of two times 1, 1¼, 1½ or 1¾ from eight rows on.
        let sizes = Set((0...100_000).map { AccountTable.Rows.size(holding: $0) })
        for size in sizes {
            let power = 1 << (Int.bitWidth - 1 - size.leadingZeroBitCount)
            #expect(
                size >= AccountTable.minimumRows && [4, 5, 6, 7].contains(size * 4 / power) && size % (power / 4) == 0)
        }
        for count in 0...100_000 {
            let size = AccountTable.Rows.size(holding: count)
            // At most two thirds full, and the size below would be fuller.
            #expect(count * 3 <= size * 2)
            if size > AccountTable.minimumRows, let smaller = sizes.filter({ $0 < size }).max() {
                #expect(count * 3 > smaller * 2, "\(count) accounts fit \(smaller) rows")
            }
        }
        // A shard that grows one account at a time, and then loses all but one in thirty, finds every account it
        // holds and keeps to its sizes.
        var rows = AccountTable.Rows()
        var grownThrough: Set<Int> = []
        let accounts = (0..<3_000).map { AccountID("grow-\($0)") }
        let hasher = AccountTable.Hasher(seed: 3)
        let tag = { (account: AccountID) in UInt32(truncatingIfNeeded: hasher.hash(account)) }
        for account in accounts {
            rows.insert(AccountTable.Row(tag: tag(account), account: account, member: member(account)))
            #expect(rows.count * 3 <= rows.rows.count * 2)
            grownThrough.insert(rows.rows.count)
        }
        #expect(grownThrough.isSuperset(of: [8, 10, 12, 14, 16, 20, 24, 28, 32, 40, 48, 56, 64]))
        #expect(rows.rows.count == AccountTable.Rows.size(holding: 3_000))
        var shrunkThrough: Set<Int> = []
        for (index, account) in accounts.enumerated() where index % 30 != 0 {
            guard let position = rows.find(account, tag: tag(account)) else {
                Issue.record("\(account) not found")
                continue
            }
            _ = rows.remove(at: position)
            shrunkThrough.insert(rows.rows.count)
            // Below an eighth full, a shard shrinks to half full at most.
            #expect(rows.count * 8 >= rows.rows.count && rows.count * 3 <= rows.rows.count * 2)
        }
        #expect(rows.count == 100 && shrunkThrough.count > 1, "\(shrunkThrough.sorted())")
        for (index, account) in accounts.enumerated() {
            #expect((rows.find(account, tag: tag(account)) != nil) == (index % 30 == 0))
        }
    }

    @Test(arguments: [[0], [2, 5], [6, 0], [7, 3, 1], [5, 0, 6]])
    func aRemovalKeepsEveryProbeRunUnbroken(removing order: [Int]) {
        // Eight accounts fill two thirds of a shard's twelve rows. Six share the home row 11, the shard's last, so
        // their run wraps around to rows 0 to 4; two more have the home row 1, inside that run, and sit after it, in
        // rows 5 and 6. Whichever are removed, every other account is still found.
        #expect(AccountTable.Rows.size(holding: 8) == 12)
        let table = table()
        let crowded = accounts("crowded", homeRow: 11, count: 6, in: table).map { member($0) }
        let inside = accounts("inside", homeRow: 1, count: 2, in: table).map { member($0) }
        let all = crowded + inside
        for member in all { table.insert(member, use: 0) }
        for index in order { table.remove(all[index]) }
        for (index, member) in all.enumerated() {
            let found =
                table.reading(member.account, hash: table.hasher.hash(member.account), stampingUse: false) != nil
            #expect(found == !order.contains(index), "\(member.account) after removing \(order)")
        }
        #expect(table.count == all.count - order.count)
    }

    @Test(arguments: ["", "a", "abcd", "abcdefg", "abcdefgh", "abcdefghi", "tenant-0123456789/agent-42"])
    func theComposedPathHashesAsTheBytesDo(account: String) {
        // An account that is not ASCII is hashed byte by byte as the standard library composes it: the same function
        // as the hash of contiguous bytes, which ASCII takes.
        let hasher = AccountTable.Hasher(seed: 0x5EED)
        #expect(hasher.composedHash(AccountID(account)) == hasher.hash(AccountID(account)))
    }

    @Test func accountsWhoseRowsShareATagAreToldApartByTheirNames() throws {
        // Under this seed the two accounts' hashes share their top four bits and their low 32 (found by trying
        // names): one shard, one home row, one tag, so only the account tells their rows apart.
        let table = table()
        let (one, two): (AccountID, AccountID) = ("twin-28953", "twin-194004")
        let (hashOne, hashTwo) = (table.hasher.hash(one), table.hasher.hash(two))
        #expect(hashOne != hashTwo)
        #expect(hashOne >> AccountTable.shardShift == hashTwo >> AccountTable.shardShift)
        #expect(UInt32(truncatingIfNeeded: hashOne) == UInt32(truncatingIfNeeded: hashTwo))
        let first = member(one)
        let second = member(two)
        table.insert(first, use: 0)
        table.insert(second, use: 0)
        #expect(table.count == 2)
        #expect(table.member(one)?.is(first) == true)
        #expect(table.member(two)?.is(second) == true)
        table.mirror(try usable("two@example.com"), keepsHeaders: false, of: second.slot, account: two)
        #expect(email(table.reading(one, hash: hashOne, stampingUse: false)) == nil)
        #expect(email(table.reading(two, hash: hashTwo, stampingUse: false)) == "two@example.com")
        #expect(table.remove(first))
        #expect(table.member(one) == nil)
        #expect(table.member(two)?.is(second) == true)
    }

    @Test func aReplacedMemberCannotRemoveItsSuccessor() {
        let table = table()
        let first = member("alice")
        let second = member("alice")
        table.insert(first, use: 0)
        let replaced = table.insert(second, use: 0)
        #expect(replaced?.is(first) == true)
        #expect(table.count == 1)
        let removedFirst = table.remove(first)
        #expect(!removedFirst)
        #expect(table.member("alice")?.is(second) == true)
        let removed = table.remove(second)
        #expect(removed)
        #expect(table.member("alice") == nil)
    }

    @Test(arguments: [
        ("Ren\u{E9}", "Rene\u{301}"),  // é precomposed and as e with a combining accent
        ("K", "\u{212A}"),  // the Kelvin sign is the letter K, which is ASCII
        ("a\u{323}\u{302}", "a\u{302}\u{323}"),  // combining marks in either order
        ("\u{AC00}", "\u{1100}\u{1161}"),  // a Hangul syllable and its letters
    ])
    func everySpellingOfAnAccountFindsItsMember(spelling: (String, String)) {
        // Each pair is one AccountID, as it is one String: both spellings hash alike.
        #expect(AccountID(spelling.0) == AccountID(spelling.1))
        let table = table()
        let joined = member(AccountID(spelling.0))
        table.insert(joined, use: 0)
        #expect(table.hasher.hash(AccountID(spelling.0)) == table.hasher.hash(AccountID(spelling.1)))
        #expect(table.member(AccountID(spelling.1))?.is(joined) == true)
        #expect(table.member(AccountID(spelling.0 + "x")) == nil)
    }

    @Test func longAndNonASCIIAccountsHashAllTheirBytes() {
        let hasher = AccountTable.Hasher(seed: 9)
        let long = String(repeating: "tenant-0123456789/", count: 8)
        #expect(hasher.hash(AccountID(long + "a")) != hasher.hash(AccountID(long + "b")))
        #expect(hasher.hash("αβγδεζηθ") != hasher.hash("αβγδεζηι"))
        #expect(hasher.hash("abcdefgh") != hasher.hash("abcdefgh\u{0}"), "the length is part of the hash")
        #expect(AccountTable.Hasher(seed: 1).hash("alice") != AccountTable.Hasher(seed: 2).hash("alice"))
    }

    @Test func theTableLetsGoOfEveryMemberItRemoves() {
        // The rows hold their members' engines: a member replaced, removed or emptied out is not kept.
        let table = table()
        weak var replaced: AccountShard.Slot?
        weak var removed: AccountShard.Slot?
        weak var emptied: AccountShard.Slot?
        do {
            let first = member("alice")
            let gone = member("bob")
            let last = member("carol")
            (replaced, removed, emptied) = (first.slot, gone.slot, last.slot)
            table.insert(first, use: 0)
            table.insert(gone, use: 0)
            table.insert(last, use: 0)
            table.insert(member("alice"), use: 0)
            table.remove(gone)
        }
        #expect(replaced == nil && removed == nil, "the table holds neither any longer")
        #expect(emptied != nil)
        #expect(table.member("alice") != nil)
        #expect(table.member("bob") == nil)
        _ = table.removeAll()
        #expect(emptied == nil)
    }

    // MARK: - The table's copy of each member's read

    private func usable(_ email: String) throws -> SessionStore.Reading {
        let signature = String(repeating: "a", count: 64)
        let credential = try IdentityCredential(email: email, expiresAt: 2_000_000_000, signature: signature)
        return (.unbuilt(credential), 2_000_000_000, .expired)
    }

    /// The email of the credential a read of a row found, its headers built or not.
    private func email(_ copy: SessionStore.Copy?) -> String? {
        copy?.headers.flatMap { try? $0.credential().email } ?? copy?.unbuilt?.email
    }

    /// A row's read holds its credential until a read of the row builds the headers; the row keeps that build
    /// through a step that kept the credential, and drops it for one that did not. A build of a credential the row no
    /// longer holds is never kept.
    @Test func aRowKeepsTheHeadersAReadBuiltWhileItsCredentialStays() throws {
        let table = table()
        let alice = member("alice")
        let hash = table.hasher.hash("alice")
        table.insert(alice, use: 0)
        let (first, second) = (try usable("first@example.com"), try usable("second@example.com"))
        guard case .unbuilt(let credential) = first.headers else { throw Unexpected() }
        func built() -> Bool {
            table.reading("alice", hash: hash, stampingUse: false)?.headers != nil
        }
        table.mirror(first, keepsHeaders: false, of: alice.slot, account: "alice")
        #expect(!built())
        table.keep(IdentityHeaders(credential), of: credential, account: "alice", hash: hash)
        #expect(built())
        table.mirror(first, keepsHeaders: true, of: alice.slot, account: "alice")
        #expect(built(), "a step that kept the credential")
        table.mirror(first, keepsHeaders: false, of: alice.slot, account: "alice")
        #expect(!built(), "a step that did not")
        table.mirror(second, keepsHeaders: false, of: alice.slot, account: "alice")
        table.keep(IdentityHeaders(credential), of: credential, account: "alice", hash: hash)
        #expect(!built(), "a late build of the credential before")
        #expect(email(table.reading("alice", hash: hash, stampingUse: false)) == "second@example.com")
    }

    private struct Unexpected: Error {}

    @Test func aMemberThatLeftTheTableCannotChangeItsSuccessorsRead() throws {
        let table = table()
        let first = member("alice")
        let second = member("alice")
        let hash = table.hasher.hash("alice")
        table.insert(first, use: 0)
        table.insert(second, use: 0)
        table.mirror(try usable("second@example.com"), keepsHeaders: false, of: second.slot, account: "alice")
        // The replaced member's shard still publishes (its sign-out and shutdown): none of it reaches the row.
        table.mirror((nil, 0, .shutDown), keepsHeaders: false, of: first.slot, account: "alice")
        table.mirror(try usable("first@example.com"), keepsHeaders: false, of: first.slot, account: "alice")
        #expect(email(table.reading("alice", hash: hash, stampingUse: false)) == "second@example.com")
        table.remove(second)
        #expect(table.reading("alice", hash: hash, stampingUse: false) == nil)
    }

    /// A member that left publishes on one thread (its sign-out, its shutdown) while its account's next member takes
    /// the row on another, round after round: the leaving member's reads never land in its successor's row. A mirror
    /// that found the row in one lock step and wrote it in a second could write the leaving member's read over the
    /// row its successor had just taken.
    @Test func realThreadsMirroringALeavingMemberNeverWriteItsSuccessorsRow() async throws {
        let stale = try usable("first@example.com")
        let overwritten = RealThreadRounds.Count()
        let stuck = await RealThreadRounds.run(RealThreadRounds.scaled(2_000)) { round in
            let table = table()
            let hash = table.hasher.hash("alice")
            let first = member("alice")
            let second = member("alice")
            table.insert(first, use: 0)
            let line = RealThreadRounds.StartLine(parties: 2)
            await withTaskGroup(of: Void.self) { group in
                group.addTask(executorPreference: RealThreadRounds.threads) {
                    line.arriveAndWait()
                    for _ in 0..<64 { table.mirror(stale, keepsHeaders: false, of: first.slot, account: "alice") }
                }
                group.addTask(executorPreference: RealThreadRounds.threads) {
                    line.arriveAndWait()
                    // Somewhere inside the leaving member's publishing, by the round.
                    for _ in 0..<(round % 64) * 8 where !Task.isCancelled {}
                    table.insert(second, use: 0)
                }
            }
            if email(table.reading("alice", hash: hash, stampingUse: false)) == "first@example.com" {
                overwritten.value.add(1, ordering: .relaxed)
            }
        }
        #expect(stuck == nil, "a round never ended: \(stuck ?? -1)")
        #expect(
            overwritten.value.load(ordering: .relaxed) == 0,
            "rounds in which the successor's row held the leaver's read")
    }

    @Test func readsStampTheRowAfterTheLatestCallAndTheStampsOutliveAGrowth() throws {
        let table = table()
        let alice = member("alice")
        table.insert(alice, use: table.nextUse())
        let joined = try #require(table.lastUses().first?.used)
        let hash = table.hasher.hash("alice")
        _ = table.reading("alice", hash: hash, stampingUse: true)
        let firstRead = try #require(table.lastUses().first?.used)
        #expect(firstRead > joined, "a read is a use after the join")
        _ = table.reading("alice", hash: hash, stampingUse: false)
        #expect(table.lastUses().first?.used == firstRead, "a read that does not stamp leaves the use")
        _ = table.reading("alice", hash: hash, stampingUse: true)
        #expect(table.lastUses().first?.used == firstRead, "reads with no other use between them share a stamp")
        let call = table.nextUse()
        #expect(call > firstRead, "a call is later than the reads before it")
        _ = table.reading("alice", hash: hash, stampingUse: true)
        let secondRead = try #require(table.lastUses().first?.used)
        #expect(secondRead > call, "a read is later than the call before it")
        for account in (0..<100).map({ AccountID("grow-\($0)") }) { table.insert(member(account), use: 0) }
        #expect(table.lastUses().first { $0.member.is(alice) }?.used == secondRead, "after the table grew")
        _ = table.member("alice", stamping: firstRead)
        #expect(
            table.lastUses().first { $0.member.is(alice) }?.used == secondRead, "an earlier use does not move it back")
    }
}
