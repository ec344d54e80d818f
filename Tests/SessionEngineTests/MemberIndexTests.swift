import SessionEngineTestKit
import Testing

@testable import SessionEngine

/// The pool's member index: its open-addressed table in front of the dictionary must answer exactly as the
/// dictionary would, whichever accounts share a slot.
@Suite struct MemberIndexTests {
    /// Members share one engine: the index looks only at their accounts and identities.
    private let engine = SessionEngine(fetcher: ScriptedCredentialFetcher())

    /// Where the members' engines would report to; the index never uses it.
    private let outlets = SessionPool.Outlets(
        broadcaster: PoolEventBroadcaster(bufferLimit: 1), observer: nil, table: MemberTable(count: 16))

    private func member(_ account: AccountID) -> SessionPool.Member {
        let link = SessionPool.MemberLink(account: account, serial: 1, hash: 0, outlets: outlets)
        return SessionPool.Member(link: link, engine: engine, use: 0)
    }

    private func index(seed: UInt64 = 0x5EED) -> MemberIndex {
        MemberIndex(hasher: MemberIndex.Hasher(seed: seed))
    }

    @Test func everyAccountFindsItsOwnMemberThroughGrowthAndSharedSlots() {
        var index = index()
        let members = (0..<5_000).map { member(AccountID("account-\($0)")) }
        for member in members { index.insert(member) }
        #expect(index.count == members.count)
        for member in members {
            #expect(index.member(member.account) === member)
            // A caller's own AccountID value, not the member's, finds it too.
            #expect(index.member(AccountID(String(member.account.rawValue))) === member)
        }
        #expect(index.member("account-5000") == nil)
        #expect(index.member("") == nil)
    }

    @Test(arguments: ["reader-", "user-00000000", "tenant-0123456789/agent-", "", "é"])
    func accountsThatDifferOnlyInTheirLastBytesSpreadOverTheSlots(prefix: String) {
        // Names a daemon makes: a fixed prefix and a counter, so that only the last bytes differ. Every byte must
        // reach the bits that choose the slot, or such names pile up in a few slots and their reads go to the
        // dictionary.
        var index = index(seed: 7)
        for member in (0..<20_000).map({ member(AccountID(prefix + String($0))) }) { index.insert(member) }
        #expect(index.withoutSlot <= 60, "at most 0.3 % of the members without a slot")
        for member in Array(index.members).prefix(19_000) { index.remove(member) }
        #expect(index.withoutSlot >= 0 && index.withoutSlot <= 10, "removals and shrinking keep the count")
    }

    @Test func removalLeavesTheOthersAndShrinkingKeepsThem() {
        var index = index(seed: 1)
        let members = (0..<2_000).map { member(AccountID("user-\($0)")) }
        for member in members { index.insert(member) }
        for member in members.dropFirst(10) {
            let removed = index.remove(member)
            #expect(removed)
        }
        #expect(index.count == 10)
        for member in members.prefix(10) { #expect(index.member(member.account) === member) }
        for member in members.dropFirst(10) { #expect(index.member(member.account) == nil) }
        let removedAgain = index.remove(members[500])
        #expect(!removedAgain, "a member already removed")
    }

    @Test func aReplacedMemberCannotRemoveItsSuccessor() {
        var index = index()
        let first = member("alice")
        let second = member("alice")
        index.insert(first)
        index.insert(second)
        #expect(index.count == 1)
        let removedFirst = index.remove(first)
        #expect(!removedFirst)
        #expect(index.member("alice") === second)
        let removed = index.remove(second)
        #expect(removed)
        #expect(index.member("alice") == nil)
    }

    @Test func anAccountSpelledWithOtherBytesFindsTheSameMember() {
        // "é" precomposed and as "e" with a combining accent are one AccountID, as they are one String; the table
        // hashes bytes, so the second spelling is found through the dictionary.
        var index = index()
        let composed = member(AccountID("Ren\u{E9}"))
        index.insert(composed)
        #expect(index.member(AccountID("Rene\u{301}")) === composed)
        #expect(index.member(AccountID("Rene")) == nil)
    }

    @Test func longAndNonASCIIAccountsHashAllTheirBytes() {
        let hasher = MemberIndex.Hasher(seed: 9)
        let long = String(repeating: "tenant-0123456789/", count: 8)
        #expect(hasher.hash(AccountID(long + "a")) != hasher.hash(AccountID(long + "b")))
        #expect(hasher.hash("αβγδεζηθ") != hasher.hash("αβγδεζηι"))
        #expect(hasher.hash("abcdefgh") != hasher.hash("abcdefgh\u{0}"), "the length is part of the hash")
        #expect(MemberIndex.Hasher(seed: 1).hash("alice") != MemberIndex.Hasher(seed: 2).hash("alice"))
    }

    @Test func theTableNeverOutlivesTheMembersItNames() {
        // The table does not retain its members: once the index lets a member go, no slot may still name it.
        var index = index()
        weak var replaced: SessionPool.Member?
        weak var removed: SessionPool.Member?
        do {
            let first = member("alice")
            let gone = member("bob")
            replaced = first
            removed = gone
            index.insert(first)
            index.insert(gone)
            index.insert(member("alice"))
            index.remove(gone)
        }
        #expect(replaced == nil && removed == nil, "the index holds neither any longer")
        #expect(index.member("alice") != nil)
        #expect(index.member("bob") == nil)
        let readThroughTheTable = index.table.member("alice", hash: index.hasher.hash("alice"))
        #expect(readThroughTheTable?.account == "alice")
        for account in (0..<1_000).map({ AccountID("grow-\($0)") }) { index.insert(member(account)) }
        #expect(index.member("alice")?.account == "alice", "after the table grew")
        #expect(index.member("bob") == nil)
    }

    // MARK: - The table's copy of each member's read

    /// A member with an engine, and so a store, of its own.
    private func memberOfItsOwn(_ account: AccountID) -> SessionPool.Member {
        let link = SessionPool.MemberLink(account: account, serial: 1, hash: 0, outlets: outlets)
        return SessionPool.Member(link: link, engine: SessionEngine(fetcher: ScriptedCredentialFetcher()), use: 0)
    }

    private func usable(_ email: String) throws -> SessionStore.Reading {
        let signature = String(repeating: "a", count: 64)
        let credential = try IdentityCredential(email: email, expiresAt: 2_000_000_000, signature: signature)
        return (IdentityHeaders(credential), 2_000_000_000, .expired)
    }

    @Test func aStoreThatLeftTheTableCannotChangeItsSuccessorsRead() throws {
        var index = index()
        let first = memberOfItsOwn("alice")
        let second = memberOfItsOwn("alice")
        let hash = index.hasher.hash("alice")
        index.insert(first)
        index.insert(second)
        index.table.mirror(second.store, of: "alice", hash: hash, try usable("second@example.com"))
        // The replaced member's engine still publishes (its sign-out and shutdown): none of it reaches the slot.
        index.table.mirror(first.store, of: "alice", hash: hash, (nil, 0, .shutDown))
        index.table.mirror(first.store, of: "alice", hash: hash, try usable("first@example.com"))
        let reading = index.table.reading("alice", hash: hash, stampingUse: false)
        #expect(try reading?.headers?.credential().email == "second@example.com")
        index.remove(second)
        #expect(index.table.reading("alice", hash: hash, stampingUse: false) == nil)
    }

    @Test func aMemberCrowdedOutOfItsSlotsIsLeftToTheDictionary() {
        let table = MemberTable(count: 16)
        let members = (0...MemberTable.probes).map { memberOfItsOwn(AccountID("crowded-\($0)")) }
        // One hash for all: the first `probes` take the slots from the hash's on, the next finds none.
        let placed = members.map { table.place($0, hash: 3) }
        #expect(placed == Array(repeating: true, count: MemberTable.probes) + [false])
        for member in members.prefix(MemberTable.probes) {
            #expect(table.member(member.account, hash: 3) === member)
        }
        #expect(table.member(members.last!.account, hash: 3) == nil)
        #expect(table.reading(members.last!.account, hash: 3, stampingUse: false) == nil)
        // Slots 3 to 10 are taken; slot 2 is free, and a slot answers only for its own account.
        let other = memberOfItsOwn("other")
        #expect(table.place(other, hash: 2))
        #expect(table.member("other", hash: 2) === other)
        #expect(table.member("other", hash: 3) == nil)
        table.clear(members[0], hash: 3)
        #expect(table.member(members[0].account, hash: 3) == nil)
        #expect(table.member(members[1].account, hash: 3) === members[1], "a cleared slot does not end the probes")
    }

    @Test func readsStampTheSlotWithLaterUsesAndTheStampsOutliveAGrowth() throws {
        var index = index()
        let alice = memberOfItsOwn("alice")
        index.insert(alice)
        let hash = index.hasher.hash("alice")
        _ = index.table.reading("alice", hash: hash, stampingUse: true)
        let firstRead = try #require(index.lastUses().first?.used)
        #expect(firstRead > 0, "a read is a use after the member's own stamp")
        _ = index.table.reading("alice", hash: hash, stampingUse: false)
        #expect(index.lastUses().first?.used == firstRead, "a read that does not stamp leaves the use")
        _ = index.table.reading("alice", hash: hash, stampingUse: true)
        let secondRead = try #require(index.lastUses().first?.used)
        #expect(secondRead > firstRead)
        for account in (0..<100).map({ AccountID("grow-\($0)") }) { index.insert(member(account)) }
        #expect(index.lastUses().first { $0.member === alice }?.used == secondRead, "after the table grew")
        let later = index.table.nextUse()
        alice.markUsed(later)
        #expect(
            index.lastUses().first { $0.member === alice }?.used == later, "the later of the member's and the slot's")
        alice.markUsed(firstRead)
        #expect(index.lastUses().first { $0.member === alice }?.used == later, "an earlier use does not move it back")
    }
}
