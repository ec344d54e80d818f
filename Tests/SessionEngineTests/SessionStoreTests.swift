import Foundation
import SessionEngineTestKit
import Synchronization
import Testing

@testable import SessionEngine

/// The store that hands out an account's credential to scoped work (``SessionStore``), raced on real threads as an
/// account change races the work: the work it cancels and the drain that waits for it.
@Suite struct SessionStoreTests {
    /// Scoped work starts and ends on real threads while an account change installs the next session, cancels the
    /// earlier session's work and drains it, round after round: the drain returns (no wake-up is lost between its
    /// check and its parking, or between a piece of work's end and the drain it ends), and when it returns no work of
    /// the earlier session runs, none having started after the cancellation.
    @Test func realThreadsRacingWorkAndAnAccountChangeDrainEveryPieceOfTheEarlierSession() async {
        let harness = EngineHarness()
        let first = harness.credential(for: "alice")
        let second = harness.credential(for: "bob")
        let leftRunning = RealThreadRounds.Count()
        let stuck = await RealThreadRounds.run(RealThreadRounds.scaled(3_000)) { round in
            let store = Box(SessionStore(), clock: harness.clock)
            store.install(first, of: "alice", epoch: 1)
            let earlierRunning = RealThreadRounds.Count()
            // Every piece but the last starts before the change and ends as it drains, at an offset that moves with
            // the round, so that an end falls between the drain's check and its parking in some rounds; the first
            // piece and the change start together.
            let line = RealThreadRounds.StartLine(parties: 2)
            await withTaskGroup(of: Void.self) { group in
                for piece in 0..<4 {
                    let started = piece < 3 ? Self.start(in: store, counting: earlierRunning) : nil
                    group.addTask(executorPreference: RealThreadRounds.threads) {
                        if piece == 0 { line.arriveAndWait() }
                        // The work's task only hands back its slot; the test plays the work's body here.
                        guard let (task, epoch) = started ?? Self.start(in: store, counting: earlierRunning) else {
                            return
                        }
                        for _ in 0..<(round % 32) * (piece + 1) * 4 where !Task.isCancelled {}
                        if piece == 3 { await Task.yield() }
                        if epoch == 1 { earlierRunning.value.subtract(1, ordering: .relaxed) }
                        store.value.finishWork(try! await task.value)
                    }
                }
                group.addTask(executorPreference: RealThreadRounds.threads) {
                    line.arriveAndWait()
                    store.install(second, of: "bob", epoch: 2)
                    store.value.cancelWork(before: 2)
                    await store.value.drain(before: 2)
                    if earlierRunning.value.load(ordering: .relaxed) != 0 {
                        leftRunning.value.add(1, ordering: .relaxed)
                    }
                }
            }
        }
        #expect(stuck == nil, "a drain was never woken in round \(stuck ?? -1)")
        #expect(leftRunning.value.load(ordering: .relaxed) == 0, "rounds whose drain returned while earlier work ran")
    }

    /// An install hands readers the credential, not its headers: the first read that finds it unexpired builds them and
    /// keeps them for the reads after it; an install of the same credential in the same session keeps them, and
    /// anything else (another session, another credential) starts unbuilt again. A build of a credential the store no
    /// longer holds is never kept.
    @Test func theFirstReadBuildsTheHeadersAndOnlyTheSameCredentialKeepsThem() throws {
        let harness = EngineHarness()
        let store = Box(SessionStore(), clock: harness.clock)
        let first = harness.credential(for: "alice", lifetime: 900)
        let second = harness.credential(for: "alice", lifetime: 1200)
        store.install(first, of: "alice", epoch: 1)
        #expect(store.holds(first, built: false))
        #expect(try store.headers() == IdentityHeaders(first))
        #expect(store.holds(first, built: true))
        store.install(first, of: "alice", epoch: 1)
        #expect(store.holds(first, built: true), "the same credential in the same session")
        store.install(first, of: "alice", epoch: 2)
        #expect(store.holds(first, built: false), "another session")
        #expect(try store.headers() == IdentityHeaders(first))
        store.install(second, of: "alice", epoch: 2)
        #expect(store.holds(second, built: false), "another credential")
        store.readers.keep(IdentityHeaders(first), of: first)
        #expect(store.holds(second, built: false), "a late build of the credential before")
        harness.clock.advance(by: .seconds(1200))
        #expect(throws: SessionError.self) { try store.headers() }
        #expect(store.holds(second, built: false), "an expired credential's read builds nothing")
    }

    /// Reads build the headers on real threads while an install replaces the credential they are building for, round
    /// after round: once the install is done, every read hands out the new credential's headers, and the store never
    /// keeps a build of the credential it replaced.
    @Test func realThreadsBuildingHeadersAsACredentialIsReplacedNeverKeepTheOldOnes() async {
        let harness = EngineHarness()
        let first = harness.credential(for: "alice", lifetime: 900)
        let second = harness.credential(for: "alice", lifetime: 1200)
        let stale = RealThreadRounds.Count()
        let stuck = await RealThreadRounds.run(RealThreadRounds.scaled(3_000)) { round in
            let store = Box(SessionStore(), clock: harness.clock)
            store.install(first, of: "alice", epoch: 1)
            let line = RealThreadRounds.StartLine(parties: 2)
            await withTaskGroup(of: Void.self) { group in
                group.addTask(executorPreference: RealThreadRounds.threads) {
                    line.arriveAndWait()
                    for _ in 0..<4 { _ = try? store.headers() }
                }
                group.addTask(executorPreference: RealThreadRounds.threads) {
                    line.arriveAndWait()
                    // Somewhere inside the reads' builds, by the round.
                    for _ in 0..<(round % 64) * 8 where !Task.isCancelled {}
                    store.install(second, of: "alice", epoch: 1)
                }
            }
            if !store.holds(second, built: false) && !store.holds(second, built: true)
                || (try? store.headers()) != IdentityHeaders(second)
            {
                stale.value.add(1, ordering: .relaxed)
            }
        }
        #expect(stuck == nil, "a round never ended: \(stuck ?? -1)")
        #expect(stale.value.load(ordering: .relaxed) == 0, "rounds whose store kept the replaced credential's headers")
    }

    /// Starts a piece of scoped work, counted while it runs in the first session; `nil` when the store refuses it.
    private static func start(
        in store: Box, counting earlierRunning: RealThreadRounds.Count
    ) -> (task: Task<Int, any Error>, epoch: UInt64)? {
        guard
            let (_, task, ticket) = try? store.value.startWork(
                at: store.now,
                { _, slot in
                    Task(executorPreference: RealThreadRounds.threads) { () throws -> Int in slot }
                })
        else { return nil }
        if ticket.epoch == 1 { earlierRunning.value.add(1, ordering: .relaxed) }
        return (task, ticket.epoch)
    }

    /// Holds the store, which cannot be copied, and an engine's readers' copy of it, for the round's threads.
    private final class Box: Sendable {
        let value: SessionStore
        let readers = SessionStore.ReadersCopy()
        /// The check of the clock that decides the store's local expiry.
        let wallClock: SharedWallClockCheck

        init(_ value: consuming SessionStore, clock: any SessionClock) {
            self.value = value
            wallClock = SharedWallClockCheck(clock)
        }

        /// The local wall clock's time, in Unix seconds.
        var now: TimeInterval { wallClock.clock.now.timeIntervalSince1970 }

        /// The store's headers, read as the engine reads them.
        func headers() throws(SessionError) -> IdentityHeaders {
            try readers.headers(checkedBy: wallClock)
        }

        /// Whether the store's readers hold `credential`, with its headers built (`built`) or not yet.
        func holds(_ credential: IdentityCredential, built: Bool) -> Bool {
            switch readers.readable.withLock({ $0.reading }).headers {
            case .unbuilt(let held): !built && held == credential
            case .built(let headers): built && headers == IdentityHeaders(credential)
            case nil: false
            }
        }

        /// Installs `credential` as the identified credential of `account` in account session `epoch`.
        func install(_ credential: IdentityCredential, of account: AccountID, epoch: UInt64) {
            let identity = SessionIdentity(account: account, credential: credential, epoch: epoch)
            let installed = value.install(
                SessionStore.Snapshot(
                    state: .identified(identity), epoch: epoch, credential: credential, shutDown: false,
                    clockOffset: .zero))
            // As the engine's step does: the store's lock, then the readers' copy's.
            readers.install(installed.reading, keepsHeaders: installed.keepsHeaders)
        }
    }
}
