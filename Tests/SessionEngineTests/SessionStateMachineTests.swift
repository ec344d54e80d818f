import Foundation
import SessionEngineModel
import Testing

@testable import SessionEngine

@Suite struct SessionStateMachineTests {
    /// Every reachable shape of state, with every input, makes a legal transition or a defined no-op, and returns
    /// legal actions.
    @Test func everyStateWithEveryInputIsLegal() {
        var queue = [MachineHarness(seed: 1)]
        var seen: Set<MachineHarness.Shape> = [queue[0].shape]
        var checked = 0
        var violations: [String] = []
        while !queue.isEmpty && violations.isEmpty {
            let representative = queue.removeFirst()
            for input in MachineInput.alphabet {
                var harness = representative
                guard let problems = harness.apply(input) else { continue }
                checked += 1
                if !problems.isEmpty {
                    violations.append(
                        "from \(representative.shape) with \(input): \(problems.joined(separator: "; "))"
                    )
                    break
                }
                if seen.insert(harness.shape).inserted { queue.append(harness) }
            }
        }
        #expect(violations.isEmpty, "\(violations.joined(separator: "\n"))")
        let covered = Set(seen.map(\.coverageKey))
        let required: Set<String> = [
            "signedOut idle",
            "switching(unprepared) idle",
            "switching(unprepared, signing out) idle",
            "switching(prepared) inFlight(firstCredential)",
            "identified idle",
            "renewing inFlight(renewal)",
            "renewing waiting(renewal)",
            "expired inFlight(renewal)",
            "expired waiting(renewal)",
            "expired inFlight(rejection)",
            "expired waiting(rejection)",
            "expired waiting(retryAfterRejection)",
            "expired inFlight(retryAfterRejection)",
            "expired inFlight(firstCredential)",
            "expired waiting(firstCredential)",
            "switching(unprepared, shutting down) idle",
            "shutDown idle",
        ]
        #expect(required.subtracting(covered).isEmpty, "not reached: \(required.subtracting(covered).sorted())")
        // The daemon inputs reach their own shapes: a backend clock offset applied, a graceful shutdown under way, a
        // handed-over credential kept for a change, a fetch held back by the backend's Retry-After.
        #expect(seen.contains { $0.skewed && $0.name == "identified" })
        #expect(seen.contains { $0.graceful && $0.name == "identified" })
        #expect(seen.contains { $0.pushedPending })
        #expect(seen.contains { $0.heldByServer && $0.phase.hasPrefix("waiting") })
        print(
            "state machine (exhaustive): \(seen.count) state shapes, \(checked) transitions checked, \(covered.count) phases"
        )
    }

    /// Random input orders, each step checked as above, and at the end: when fetches succeed from then on, the
    /// machine reaches `identified` within the backoff cap of monotonic time.
    @Test func randomInputOrdersStayLegalAndRecover() async {
        let settings = PropertySettings.current(defaultSeed: 0x5E55_1011, defaultIterations: 4000)
        let report = await PropertyRunner.check(
            "state machine",
            settings: settings,
            program: MachineInput.generator.array(count: 40)
        ) { inputs, seed in
            var harness = MachineHarness(seed: seed)
            for (index, input) in inputs.enumerated() {
                guard let problems = harness.apply(input), !problems.isEmpty else { continue }
                return Violation("step \(index + 1) \(input): \(problems.joined(separator: "; "))")
            }
            if let problem = harness.recover() { return Violation("liveness: \(problem)") }
            return nil
        }
        #expect(report.failures == 0)
    }
}
