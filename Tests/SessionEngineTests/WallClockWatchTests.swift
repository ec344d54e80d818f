import Foundation
import Testing

@testable import SessionEngine

/// The wall-clock watch the timers of engines on the system clock share.
@Suite struct WallClockWatchTests {
    @Test func waitersReturnOnlyOnceTheWallClockReachesTheirDeadlines() async throws {
        let watch = WallClockWatch()
        let now = Date()
        let deadlines = [0.2, 0.05, 0.1, -1].map { now.addingTimeInterval($0) }
        try await withThrowingTaskGroup(of: Void.self) { group in
            for deadline in deadlines {
                group.addTask {
                    try await watch.wait(until: deadline)
                    #expect(Date() >= deadline)
                }
            }
            try await group.waitForAll()
        }
    }

    @Test func aCancelledWaiterThrowsAndOthersStillReturn() async throws {
        let watch = WallClockWatch()
        let far = Task { try await watch.wait(until: Date().addingTimeInterval(3600)) }
        let near = Date().addingTimeInterval(0.05)
        far.cancel()
        await #expect(throws: CancellationError.self) { try await far.value }
        try await watch.wait(until: near)
        #expect(Date() >= near)
    }
}
