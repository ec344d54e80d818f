import SessionEngineTestKit
import Testing

@testable import SessionEngine

/// The pool's member index: its direct-mapped table in front of the dictionary must answer exactly as the dictionary
/// would, whichever accounts share a slot.
@Suite struct MemberIndexTests {
    /// Members share one engine: the index looks only at their accounts and identities.
    private let engine = SessionEngine(fetcher: ScriptedCredentialFetcher())

    private func member(_ account: AccountID) -> SessionPool.Member {
        SessionPool.Member(account: account, engine: engine, serial: 1, now: 0)
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
        let readThroughTheTable = index.withMember("alice", hash: index.hasher.hash("alice")) { $0.account }
        #expect(readThroughTheTable == "alice")
        for account in (0..<1_000).map({ AccountID("grow-\($0)") }) { index.insert(member(account)) }
        #expect(index.member("alice")?.account == "alice", "after the table grew")
        #expect(index.member("bob") == nil)
    }
}
