import Foundation

/// `SessionEngineDemo` without a subcommand: the daemon scenario.
enum ScenarioCommand {
    static func run(_ arguments: [String]) async -> Int32 {
        let options: ScenarioOptions
        do {
            options = try ScenarioOptions(arguments)
        } catch {
            FileHandle.standardError.write(Data("error: \(error)\nRun SessionEngineDemo --help for usage.\n".utf8))
            return 2
        }
        if options.help {
            print(ScenarioOptions.usage)
            return 0
        }
        let projectID: String
        let secret: String
        if options.backend != nil {
            do {
                secret = try IdentityEnvironment.secret()
                guard let configured = options.projectID else {
                    throw Options.UsageError(
                        description: "pass --project-id or set \(IdentityEnvironment.projectVariable) for --backend"
                    )
                }
                projectID = configured
            } catch {
                FileHandle.standardError.write(Data("error: \(error)\n".utf8))
                return 2
            }
        } else {
            projectID = "proj_demo"
            secret = DemoSecrets.random()
        }
        var poolPassed = true
        if options.pool != nil || options.fleet != nil {
            let people = options.pool ?? (options.fleet == nil ? 1000 : 200)
            var day = PoolDay(people: people, seed: options.seed, secret: DemoSecrets.random())
            let json = options.json
            let print = { (line: String) in
                guard json else { return Swift.print(line) }
                var object = JSONObject()
                object.add("kind", options.fleet == nil ? "pool" : "fleet")
                object.add("text", line)
                Swift.print(object.json)
            }
            if let replicas = options.fleet {
                day.replicas = replicas
                day.redis = options.redis
                poolPassed = await day.runFleet(print: print)
            } else {
                poolPassed = await day.run(print: print)
            }
            if !json { Swift.print("") }
        }
        do {
            let scenario = try Scenario(options: options, projectID: projectID, secret: secret)
            if !poolPassed {
                _ = await scenario.run()
                return 1
            }
            return await scenario.run() ? 0 : 1
        } catch {
            FileHandle.standardError.write(Data("error: \(error)\n".utf8))
            return 2
        }
    }
}
