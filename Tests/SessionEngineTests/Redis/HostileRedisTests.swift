import Foundation
import SessionEngine
import SessionEngineRedis
import Testing

/// Why the hostile server cannot run here, or `nil` when it can.
private var hostileUnavailableReason: String? {
    do {
        _ = try RedisFleetCoordinator(configuration: .init())
    } catch {
        return "\(error)"
    }
    return PythonServer.python == nil ? "python3 is not on PATH" : nil
}

/// The coordinator against a server that answers to hold it (`Fixtures/backend/hostile_redis.py`): a reply larger
/// than any decision, bytes that are not the protocol, a reply trickled for ever, nesting deeper than a script's,
/// and silence. Each fails the call with a typed error within the command's timeout, far sooner than the attack
/// lasts, and the next call connects again.
@Suite(.enabled(if: hostileUnavailableReason == nil, Comment(rawValue: hostileUnavailableReason ?? "")))
struct HostileRedisTests {
    @Test(arguments: [
        ("huge", RedisCoordinatorError.Code.unexpectedReply, "larger than a decision"),
        ("garbage", .unexpectedReply, "not the Redis protocol"),
        ("trickle", .connectionLost, "within the command timeout"),
        ("deep", .unexpectedReply, "larger than a decision"),
        ("silent", .connectionLost, "within the command timeout"),
    ])
    func aReplyBuiltToHoldTheCoordinatorFailsTypedWithinTheCommandsTimeout(
        mode: String, code: RedisCoordinatorError.Code, reason: String
    ) async throws {
        let server = try await PythonServer.start("hostile_redis.py")
        defer { Task { await server.stop() } }
        let coordinator = try RedisFleetCoordinator(
            configuration: .init(
                port: server.port, keyPrefix: mode, connectTimeout: .milliseconds(500),
                commandTimeout: .milliseconds(250)))
        for _ in 0..<2 {
            let start = ContinuousClock.now
            do {
                _ = try await coordinator.decide(FleetFetch(account: "alice", isNeeded: true, heldExpiry: nil))
                Issue.record("\(mode): the call was answered")
            } catch let error as RedisCoordinatorError {
                #expect(error.code == code && error.reason.contains(reason), "\(mode): \(error)")
            }
            // The attacks last a minute; the command's timeout is 250 ms. The bound leaves room for a busy machine: beside
            // the suite's CPU-bound tests the call's resumption has waited almost 6 s for a thread of the pool.
            #expect(ContinuousClock.now - start < .seconds(30), "\(mode)")
        }
    }
}
