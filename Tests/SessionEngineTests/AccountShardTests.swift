import Foundation
import SessionEngineTestKit
import Testing

@testable import SessionEngine

/// A shard of many accounts (Design/pool.md, *The way to the shard*): how a pool places its accounts in its shards,
/// hands out and takes back the numbers of their lives, and what a slot whose account has left can still do.
@Suite struct AccountShardTests {
    @Test func numbersAreHandedOutLowestFirstAndTakenBackOnce() {
        var numbers = AccountShard.Numbers()
        let first: [Int] = [numbers.reserve(for: 1), numbers.reserve(for: 2), numbers.reserve(for: 3)]
        #expect(first == [0, 1, 2])
        numbers.release(2)
        numbers.release(0)
        numbers.release(0)
        #expect(numbers.holder(of: 0) == nil)
        #expect(numbers.holder(of: 1) == 2)
        #expect(numbers.holder(of: 7) == nil)
        // The lowest free number first, then the next never handed out; a number given back twice is handed out once.
        let again: [Int] = [numbers.reserve(for: 4), numbers.reserve(for: 5), numbers.reserve(for: 6)]
        #expect(again == [0, 2, 3])
        #expect(numbers.holder(of: 2) == 5)
    }

    @Test func aPoolPlacesItsAccountsInItsShardsInTurnAndEndsTheirLivesAtShutdown() async throws {
        let harness = PoolHarness()
        let accounts = PoolHarness.accounts(40)
        for account in accounts { try await harness.pool.signIn(account) }
        let members = try accounts.map { try #require(harness.pool.member($0)) }
        // Members are placed by their serial, in turn: the nth member made lives in shard n mod 16.
        for member in members {
            #expect(member.shard === harness.pool.shards[Int(member.serial) % SessionPool.shardCount])
        }
        var held = 0
        for shard in harness.pool.shards {
            let lives = await shard.lives
            // 40 accounts over 16 shards, each shard's lives dense from number 0.
            let count = lives.all.count
            #expect(count == 2 || count == 3)
            #expect((0..<count).allSatisfy { lives[$0] != nil })
            held += count
        }
        #expect(held == accounts.count)
        await harness.pool.shutdown()
        for shard in harness.pool.shards {
            #expect(await shard.lives.all.isEmpty, "every account's life ended with its shutdown")
            #expect(shard.numbers.withLock { number in (0..<3).allSatisfy { number.holder(of: $0) == nil } })
        }
    }

    @Test func aSlotWhoseAccountLeftDecidesAsShutDownAndLeavesTheNextAccountAtItsNumberAlone() async throws {
        let harness = PoolHarness()
        // Sixteen members take number 0 of each shard; the first (serial 1) lives in shard 1.
        let accounts = PoolHarness.accounts(16)
        for account in accounts { try await harness.pool.signIn(account) }
        let left = try #require(harness.pool.member(accounts[0]))
        await harness.pool.signOut(accounts[0])
        #expect(await left.shard.lives.all.isEmpty, "the account's life, the only one of its shard, ended as it left")
        // The seventeenth member lives in shard 1 as well, and takes the number the first gave back.
        try await harness.pool.signIn("newcomer")
        let newcomer = try #require(harness.pool.member("newcomer"))
        #expect(newcomer.shard === left.shard)
        #expect(newcomer.slot.index == left.slot.index)
        let identified = harness.pool.state(of: "newcomer")
        #expect(identified.isIdentified)

        // Calls that reached the left member late: each decides as a shut-down account, and none touches the life
        // now at its number.
        #expect(harness.pool.shared.ended.isShutDown)
        let signIn = await #expect(throws: SessionError.self) {
            try await left.shard.signIn(left.slot, accounts[0])
        }
        #expect(signIn?.code == .shutDown)
        let renewal = await #expect(throws: SessionError.self) { try await left.shard.renew(left.slot) }
        #expect(renewal?.code == .shutDown)
        await left.shard.signOutAndShutDown(left.slot)
        await left.shard.credentialRejected(left.slot, harness.credential(for: "newcomer"))
        left.shard.fireTimer(1, for: left.slot)
        await harness.pool.waitUntilIdle()

        #expect(harness.pool.state(of: "newcomer") == identified)
        #expect(try harness.pool.identityHeaders(for: "newcomer").credential().email == "newcomer@example.com")
        #expect(left.slot.state == .signedOut)
        #expect(harness.pool.member(accounts[0]) == nil)
        await harness.pool.shutdown()
    }
}
