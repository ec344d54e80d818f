import Foundation
import SessionEngine
import SessionEngineTestKit

/// The scenario's verdicts, its closing summary and its progress reports, with figures from the engine's metrics.
extension Scenario {
    private static let titles = [
        1: "an identified action with a real backend-issued credential is accepted",
        2: "a changed signed field and an expired credential are refused; the engine blocks expiry locally",
        3: "after a switch the other account cannot see the previous account's private report or chat",
        4: "after rotating the secret old credentials are refused and the engine recovers by renewing once",
    ]

    /// Prints the four verdicts and a summary.
    ///
    /// - Parameters:
    ///   - elapsed: The real time the run took.
    ///   - metrics: The engine's metrics at the end.
    /// - Returns: Whether every check passed.
    func printVerdicts(elapsed: Duration, metrics: SessionMetrics) -> Bool {
        let results = verdicts.results
        let seconds = (elapsed.seconds * 100).rounded() / 100
        if options.json {
            for number in 1...4 {
                var object = JSONObject()
                object.add("kind", "verify")
                object.add("check", number)
                object.add("result", results[number] == true ? "PASS" : "FAIL")
                object.add("title", Self.titles[number]!)
                timeline.object(object)
            }
            var object = JSONObject()
            object.add("kind", "summary")
            object.add("simulatedHours", clock.uptime.seconds / 3600)
            object.add("seconds", seconds)
            object.add("credentialsInstalled", metrics.credentialsInstalled)
            object.add("fetchFailures", metrics.fetchesFailedTotal)
            object.add("serviceRequests", service.requestCount)
            object.add("tasksLeft", metrics.liveTasks)
            object.add("passed", results.count == 4 && results.values.allSatisfy { $0 })
            timeline.object(object)
        } else {
            timeline.plain("")
            for number in 1...4 {
                timeline.plain("VERIFY \(number) \(results[number] == true ? "PASS" : "FAIL")  \(Self.titles[number]!)")
            }
            let hours = (clock.uptime.seconds / 36).rounded() / 100
            timeline.plain(
                "Simulated \(ECMAScript.numberToString(hours)) h in \(seconds) s: \(metrics.credentialsInstalled) "
                    + "credentials installed, \(metrics.fetchesFailedTotal) failed fetches, "
                    + "\(service.requestCount) service requests, \(metrics.liveTasks) tasks left running."
            )
        }
        return results.count == 4 && results.values.allSatisfy { $0 }
    }

    /// Reports a simulated day on standard error.
    static func reportProgress(at uptime: Duration, of plan: ScenarioPlan, engine: SessionEngine) {
        let days = Int(uptime.seconds / 86_400)
        let total = Double(plan.end.seconds) / 86_400
        let installed = engine.metrics.credentialsInstalled
        let line = "progress: day \(days) of \(Int(total.rounded(.up))), \(installed) credentials installed so far\n"
        FileHandle.standardError.write(Data(line.utf8))
    }
}
