// SessionEngineDemo: the daemon scenario, the `sign` and `verify` tools for backend operators, and `replica`, one
// process of a fleet.
import Foundation

let arguments = Array(CommandLine.arguments.dropFirst())
let status: Int32
switch arguments.first {
case "sign":
    status = SignCommand.run(Array(arguments.dropFirst()))
case "verify":
    status = VerifyCommand.run(Array(arguments.dropFirst()))
case "replica":
    status = await ReplicaCommand.run(Array(arguments.dropFirst()))
case "help":
    print(ScenarioOptions.usage)
    status = 0
default:
    status = await ScenarioCommand.run(arguments)
}
exit(status)
