import Testing

@testable import SessionEngine

/// The waiters give their storage back once no caller is registered: an engine waits for its first credential
/// once, and a pool keeps one engine per account for as long as the account is signed in.
@Suite struct OutcomeWaitersTests {
    private static let failure = SessionError(.signedOut, reason: "resolved")

    @Test func storageIsReleasedOnceTheLastCallerIsResolved() async {
        let waiters = OutcomeWaiters()
        #expect(!waiters.holdsStorage)
        // Resolved before it suspends: the outcome waits in the slot, and the wait takes it.
        let early = waiters.register(epoch: 1, kind: .identity)
        let late = waiters.register(epoch: 1, kind: .identity)
        waiters.resolve(epoch: 1, kinds: [.identity], outcome: .failed(Self.failure))
        #expect(waiters.holdsStorage)
        await #expect(throws: SessionError.self) { try await waiters.wait(early) }
        #expect(waiters.holdsStorage)
        await #expect(throws: SessionError.self) { try await waiters.wait(late) }
        #expect(!waiters.holdsStorage)
        #expect(waiters.count == 0)
    }

    @Test func storageIsReleasedWhenTheLastCallerSuspendedIsResolvedOrFailed() async {
        let waiters = OutcomeWaiters()
        let resolved = waiters.register(epoch: 1, kind: .identity)
        let failed = waiters.register(epoch: 2, kind: .identity)
        let first = Task { try await waiters.wait(resolved) }
        let second = Task { try await waiters.wait(failed) }
        waiters.resolve(epoch: 1, kinds: [.identity], outcome: .failed(Self.failure))
        await #expect(throws: SessionError.self) { try await first.value }
        #expect(waiters.holdsStorage)
        waiters.fail(failed, with: Self.failure)
        await #expect(throws: SessionError.self) { try await second.value }
        #expect(!waiters.holdsStorage)
        #expect(waiters.count == 0)
        // A waiter registered after the release works as before.
        let again = waiters.register(epoch: 3, kind: .identity)
        #expect(waiters.count == 1)
        waiters.failAll(Self.failure)
        await #expect(throws: SessionError.self) { try await waiters.wait(again) }
        #expect(!waiters.holdsStorage)
    }
}
