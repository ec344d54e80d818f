// Explores the session engine's interleavings on a controlled executor: every job of a program runs on this thread,
// in an order a strategy picks. The top level is synchronous: the explorer's hooks must be installed before any task
// exists, and every run happens on this thread.

import Foundation
import SessionEngineExplorer

#if canImport(Glibc)
    import Glibc
#endif

// Swift seeds its hashing per process; a printed schedule replays only if dictionaries iterate in the same order in
// the replaying process, so the executable re-executes itself with deterministic hashing.
if getenv("SWIFT_DETERMINISTIC_HASHING") == nil {
    setenv("SWIFT_DETERMINISTIC_HASHING", "1", 1)
    execv("/proc/self/exe", CommandLine.unsafeArgv)
    print("schedules: cannot re-execute with SWIFT_DETERMINISTIC_HASHING set: errno \(errno)")
    exit(2)
}

let options: Options
do {
    options = try Options.parse(Array(CommandLine.arguments.dropFirst()))
} catch {
    print("SessionEngineSchedules: \(error)\n\n\(Options.usage)")
    exit(64)
}
if options.help {
    print(Options.usage)
    exit(0)
}
if options.list {
    for program in Runner.named {
        print("\(program.name) (bound \(program.bound)): \(program.summary)")
    }
    exit(0)
}
if let symbolGraph = options.publicCalls {
    exit(PublicCalls.check(symbolGraph: symbolGraph, races: Runner.named.map(\.name)) ? 0 : 1)
}

do {
    try Explorer.install()
} catch {
    print("schedules: the explorer cannot capture this runtime: \(error.reason)")
    exit(2)
}
do {
    let selfTest = try SelfCheck.run()
    if !options.quiet { print("self-test:\n\(selfTest)") }
} catch {
    print("schedules: the explorer's self-test failed: \(error.reason)")
    exit(2)
}

let runner = Runner(options: options)
if let replay = options.replay {
    do {
        let passed = try runner.replay(replay)
        print(runner.summary)
        exit(passed ? 0 : 1)
    } catch {
        print("SessionEngineSchedules: \(error)")
        exit(64)
    }
}
if let name = options.race {
    guard let program = Runner.named.first(where: { $0.name == name }) else {
        print("SessionEngineSchedules: no race or regression program is called \(name) (see --list)")
        exit(64)
    }
    runner.explore(program)
} else {
    for program in Runner.named where runner.timeLeft && !options.programsOnly {
        runner.explore(program)
    }
    runner.sample()
}
print(runner.summary)
exit(runner.failures == 0 ? 0 : 1)
