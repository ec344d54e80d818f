import Foundation
import SessionEngineTestKit
import Testing

@testable import SessionEngine

#if canImport(Glibc)
    import Glibc
#endif

/// The packed fields of the state machine (`Support/Packed.swift`) read back what was stored, compare and hash as the
/// optionals they stand for, and keep the machine at the size Design/pool.md, *Costs*, counts.
@Suite struct PackedFieldsTests {
    private struct Times: Hashable {
        @PackedDate var date: Date?
        @PackedDuration var duration: Duration?
        @PackedCount var count = 0
    }

    @Test func absentAndPresentValuesReadBackAsStored() {
        var times = Times(date: nil, duration: nil)
        #expect(times.date == nil && times.duration == nil && times.count == 0)
        let dates = [
            Date(timeIntervalSince1970: 0), Date(timeIntervalSince1970: 1_764_000_000.25), .distantPast, .distantFuture,
        ]
        for date in dates {
            times.date = date
            #expect(times.date == date)
        }
        for duration: Duration in [.zero, .nanoseconds(-1), .seconds(Int64.max), .seconds(-86_400) + .nanoseconds(7)] {
            times.duration = duration
            #expect(times.duration == duration)
        }
        times.date = nil
        times.duration = nil
        #expect(times.date == nil && times.duration == nil)
    }

    @Test func noDateOrDurationAClockCanReadIsTakenForAnAbsentOne() {
        var times = Times(date: Date(timeIntervalSinceReferenceDate: .nan), duration: nil)
        #expect(times.date?.timeIntervalSinceReferenceDate.isNaN == true)
        times.date = Date(timeIntervalSinceReferenceDate: -.nan)
        #expect(times.date != nil)
        // What the packed values keep for "absent", given as values.
        times.date = Date(timeIntervalSinceReferenceDate: Double(bitPattern: PackedDate.absent))
        #expect(times.date?.timeIntervalSinceReferenceDate.isNaN == true)
        times.duration = PackedDuration.absent
        #expect(times.duration == PackedDuration.absent + .init(secondsComponent: 0, attosecondsComponent: 1))
    }

    @Test func countsStopAtTheirCeilingInsteadOfWrapping() {
        var times = Times(date: nil, duration: nil)
        times.count = Int(UInt32.max) - 1
        times.count += 1
        #expect(times.count == Int(UInt32.max))
        times.count += 1
        #expect(times.count == Int(UInt32.max))
        times.count = -5
        #expect(times.count == 0)
    }

    @Test func equalityAndHashingAreThoseOfTheOptionals() {
        let instant = Date(timeIntervalSince1970: 1_764_000_000)
        let values: [(Date?, Duration?)] = [
            (nil, nil), (instant, nil), (nil, .seconds(3)), (instant, .seconds(3)),
            (instant.addingTimeInterval(1), nil),
        ]
        for (leftDate, leftDuration) in values {
            for (rightDate, rightDuration) in values {
                let left = Times(date: leftDate, duration: leftDuration)
                let right = Times(date: rightDate, duration: rightDuration)
                let same = leftDate == rightDate && leftDuration == rightDuration
                #expect((left == right) == same)
                if same { #expect(left.hashValue == right.hashValue) }
            }
        }
        #expect(
            Times(date: Date(timeIntervalSince1970: 0), duration: nil)
                == Times(date: Date(timeIntervalSince1970: -0.0), duration: nil))
    }

    /// Each byte here is a byte of every account of a pool: a change of these sizes is a change of Design/pool.md's
    /// *Costs* table and of the memory figures in BENCHMARKS.md.
    @Test func theMachineKeepsItsCountedSize() {
        #expect(MemoryLayout<SessionStateMachine.AccountSession>.size == 96)
        #expect(MemoryLayout<SessionStateMachine>.stride == 200)
        // The store's state, with the waiters' reference: an engine's readers' copy is an object of its shard's (a
        // pool's member has none).
        #expect(MemoryLayout<SessionStore>.size == 96)
        #expect(MemoryLayout<BroadcasterSlot>.size == 83)
        // An identity is its account, its epoch and its credential's reference (``SessionIdentity``).
        #expect(MemoryLayout<SessionIdentity>.size == 32)
        #expect(MemoryLayout<SessionState>.size == 34)
        #expect(MemoryLayout<SessionEvent>.size == 74)
        // The counters every identified account moves, in four bytes each, and its ring of fetch durations; the
        // failed fetches' ring waits out of line with the rare counters.
        #expect(MemoryLayout<MetricsRecorder.State>.size == 72)
        #expect(MemoryLayout<MetricsRecorder>.size == 80)
        // The life in the shard's chunks: the machine and what carries out its decisions.
        #expect(MemoryLayout<AccountShard.AccountLife?>.stride == 256)
        // A member's account and serial; the table hashes the account again when it needs the row.
        #expect(MemoryLayout<AccountShard.Membership?>.size == 24)
        // About 1.6 rows an account, a shard at most two thirds full.
        #expect(MemoryLayout<AccountTable.Row>.stride == 56)
        // The credential's signature, in its shared object in place of a 128-byte string.
        #expect(MemoryLayout<IdentityCredential.Signature>.size == 32)
    }

    #if canImport(Glibc)
        /// A pool's account is one slot, one allocation of the allocator's: what it costs is the size class it lands
        /// in, 16 bytes apart, so a field added to the slot may cost 16 bytes or nothing (Design/pool.md, *Costs*,
        /// counts the slot at 336).
        @Test func aMembersSlotTakesItsCountedAllocation() {
            let shared = AccountShard.Shared(
                SessionConfiguration(), fetcher: ScriptedCredentialFetcher(), clock: SystemClock(), budget: nil,
                timers: nil)
            let slot = AccountShard(shared: shared).reserve(
                latencyWindow: 1, membership: AccountShard.Membership(account: "alice", serial: 1))
            // glibc's `malloc_usable_size`, which its Swift module does not import (it is declared in `malloc.h`).
            typealias UsableSize = @convention(c) (UnsafeMutableRawPointer?) -> Int
            guard let symbol = dlsym(nil, "malloc_usable_size") else {
                Issue.record("glibc has no malloc_usable_size")
                return
            }
            let usableSize = unsafeBitCast(symbol, to: UsableSize.self)
            // glibc's allocator gives the whole class's 328 usable bytes of the 336; the thread sanitizer's gives what
            // was asked for. Either way no more than 328, and no less than the class below holds.
            let usable = usableSize(Unmanaged.passUnretained(slot).toOpaque())
            #expect(usable > 312 && usable <= 328, "\(usable) usable bytes")
        }
    #endif

    @Test func aHostsExpectedEmailPinsTheSessionUntilItsFirstCredentialDoes() throws {
        var session = SessionStateMachine.AccountSession(account: "alice", epoch: 1)
        #expect(session.pinnedEmail == nil)
        session.pin("alice@example.com")
        #expect(session.pinnedEmail == "alice@example.com")
        let credential = try IdentityCredential(
            email: "alice@example.com", expiresAt: 2_000_000_000, signature: String(repeating: "ab", count: 32))
        session.setCredential(credential)
        #expect(session.pinnedEmail == "alice@example.com")
        var unpinned = SessionStateMachine.AccountSession(account: "alice", epoch: 1)
        unpinned.setCredential(credential)
        #expect(session == unpinned, "the expected email leaves no trace once a credential pins the session")
    }
}
