import Foundation
import Synchronization
import Testing

@testable import SessionEngine

/// The meeting point of one HTTP fetch's transfer, deadline and cancellation (``TransferControl``), raced on real
/// threads.
@Suite struct TransferControlTests {
    private struct Deadline: Error {}
    private struct Cancelled: Error {}

    /// A transfer, its deadline or a cancellation (one in turn) decides while the caller comes to wait, the two
    /// released together on two threads, round after round: the caller returns what was decided. A caller that checked
    /// for an outcome and parked in two lock steps could park after the decision and never return.
    @Test func realThreadsRacingADecisionAndTheCallerWakeTheCaller() async {
        let wrong = Atomic<Int>(0)
        let stuck = await RealThreadRounds.run(RealThreadRounds.scaled(2_000)) { round in
            let control = TransferControl()
            let start = RealThreadRounds.StartLine(parties: 2)
            let head = HTTPResponseHead(status: 200, fields: [])
            let decider = ["transfer", "deadline", "cancelled"][round % 3]
            async let caller: String = Task.detached(executorPreference: RealThreadRounds.threads) {
                start.arriveAndWait()
                do {
                    let result = try await control.outcome(startingWith: {})
                    return result.body.count == 16 ? "transfer" : "a body of \(result.body.count) bytes"
                } catch is Deadline {
                    return "deadline"
                } catch {
                    return "cancelled"
                }
            }.value
            async let decided: Bool = Task.detached(executorPreference: RealThreadRounds.threads) {
                if decider == "transfer" {
                    control.receive(head: head)
                    _ = control.receive([UInt8](repeating: 0x61, count: 16), limit: 1_024)
                }
                start.arriveAndWait()
                switch decider {
                case "transfer":
                    let body = control.received()?.body ?? []
                    return control.finish(.success(HTTPTransferResult(head: head, body: body)))
                case "deadline": return control.finish(.failure(Deadline()))
                default: return control.finish(.failure(Cancelled()))
                }
            }.value
            let (returned, didDecide) = await (caller, decided)
            if !didDecide || returned != decider { wrong.add(1, ordering: .relaxed) }
        }
        #expect(stuck == nil, "a fetch's caller was never woken in round \(stuck ?? -1)")
        #expect(wrong.load(ordering: .relaxed) == 0, "rounds whose caller returned other than what was decided")
    }
}
