import Foundation
package import SessionEngine
package import SessionEngineTestKit
import Synchronization

/// A scripted fetcher that also records when, on the pool's clock, each fetch reached it, and from which member.
/// Kept apart from the kit's fetcher: it tracks the pool model's per-member starts on the monotonic clock, which no
/// host needs.
package final class PoolModelFetcher: CredentialFetcher {
    package struct Start {
        /// When, on the monotonic clock, the member's engine started the fetch: its request's `startedAt`. The
        /// request may then wait for the pool's budget before it reaches the backend.
        package let time: Duration
        package let account: AccountID
        /// The serial of the account's member when the fetch reached the backend.
        package let member: UInt64?
        package let epoch: UInt64
    }

    package let script = ScriptedCredentialFetcher()
    package let clock: ManualClock
    /// Names the account's member when a fetch arrives; set once the pool exists.
    private let memberOf = SanitizedMutex<(@Sendable (AccountID) -> UInt64?)?>(nil)
    private let starts = SanitizedMutex<(all: [Duration], unchecked: [Start])>(([], []))
    /// From which monotonic time on the wall clock stood how far from it, oldest first: one entry per jump.
    private let wallOffsets = SanitizedMutex<[(from: Duration, offset: TimeInterval)]>([])
    private let outstanding = SanitizedMutex<[AccountID: Int]>([:])

    package init(clock: ManualClock) {
        self.clock = clock
        noteWallClock()
    }

    /// Records where the wall clock stands against the monotonic clock, after a jump.
    package func noteWallClock() {
        let (uptime, wall) = (clock.uptime, clock.now.timeIntervalSince1970)
        wallOffsets.withLock { $0.append((uptime, wall - uptime.timeInterval)) }
    }

    /// The monotonic time at which the wall clock read `wall`, no later than now: the latest stretch between two
    /// jumps in which it did.
    private func uptime(atWall wall: Date) -> Duration {
        let now = clock.uptime
        return wallOffsets.withLock { offsets in
            for (index, entry) in offsets.enumerated().reversed() {
                let uptime = Duration.seconds(wall.timeIntervalSince1970 - entry.offset)
                let end = index + 1 < offsets.count ? offsets[index + 1].from : now
                // Wall times are `Date`s: a millisecond either side is their rounding.
                if uptime >= entry.from - .milliseconds(1), uptime <= end + .milliseconds(1) {
                    return min(max(uptime, entry.from), end)
                }
            }
            return now
        }
    }

    /// Sets how a fetch finds its account's member, or clears it.
    package func lookUpMembers(with lookup: (@Sendable (AccountID) -> UInt64?)?) {
        memberOf.withLock { $0 = lookup }
    }

    package var startTimes: [Duration] { starts.withLock { $0.all } }

    /// The starts since the last call.
    package func takeStarts() -> [Start] {
        starts.withLock { starts in
            defer { starts.unchecked.removeAll() }
            return starts.unchecked
        }
    }

    /// The accounts with a fetch that reached this fetcher and has not returned.
    package var accountsFetching: [AccountID] { outstanding.withLock { Array($0.filter { $0.value > 0 }.keys) } }

    /// How many fetches of each account reached this fetcher and have not returned.
    package var outstandingByAccount: [AccountID: Int] { outstanding.withLock { $0 } }

    package func fetchCredential(for account: AccountID) async throws -> IdentityCredential {
        try await script.fetchCredential(for: account)
    }

    /// Measures the backend's clock offset as ``HTTPCredentialFetcher`` does, on a backend whose clock agrees with
    /// the pool's: its `Date` at the answer minus the request's `startedAt` plus the time that passed since the call.
    /// A request that says when it was asked instead of when it left reports the budget's wait as an offset, which the
    /// pool's invariants catch. No offset is reported across a jump of the wall clock, which is a real disagreement.
    package func fetch(_ request: FetchRequest) async throws -> FetchedCredential {
        let (calledAt, jumps) = (clock.uptime, wallOffsets.withLock { $0.count })
        let credential = try await fetchCredential(request)
        guard let startedAt = request.startedAt, wallOffsets.withLock({ $0.count }) == jumps else {
            return FetchedCredential(credential)
        }
        let sentAt = startedAt.addingTimeInterval((clock.uptime - calledAt).timeInterval)
        return FetchedCredential(credential, serverClockOffset: .seconds(clock.now.timeIntervalSince(sentAt)))
    }

    package func fetchCredential(_ request: FetchRequest) async throws -> IdentityCredential {
        let member = memberOf.withLock { $0 }?(request.account)
        let arrival = clock.uptime
        var decided = request.startedAt.map { uptime(atWall: $0) } ?? arrival
        // A request that did not wait for the budget reached the backend in the step that started it.
        if arrival - decided < .milliseconds(1) { decided = arrival }
        let start = Start(time: decided, account: request.account, member: member, epoch: request.epoch)
        starts.withLock {
            $0.all.append(arrival)
            $0.unchecked.append(start)
        }
        outstanding.withLock { $0[request.account, default: 0] += 1 }
        defer { outstanding.withLock { $0[request.account, default: 0] -= 1 } }
        return try await script.fetchCredential(request)
    }
}
