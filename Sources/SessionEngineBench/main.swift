import Foundation

let usage = """
    Usage: swift run -c release SessionEngineBench [--quick] [--json] [--filter NAME] [--soak-cycles N]
                                                   [--day-accounts N] [--pool-accounts N] [--soak-minutes N]

    Runs the SessionEngine benchmarks. Every figure is compared with a baseline measured in the same run: the
    report gives the median of the rounds, their spread and the ratio to the baseline. See BENCHMARKS.md.

      --quick          a smoke run: fewer, shorter rounds and smaller workloads
      --json           print one JSON document instead of a Markdown table
      --filter NAME    run only the benchmarks whose name contains NAME
      --soak-cycles N  renewal cycles of the soak benchmark
      --day-accounts N accounts of pool-day's 24-hour days (default 10,000: each day takes about a minute per
                       10,000 accounts)
      --pool-accounts N
                       accounts the pool benchmark signs in and reads (default 100,000; about 2 KB of memory each)
      --soak-minutes N minutes of fault-soak (default 4), which runs only when named: --filter fault-soak
      --help           show this help

    Benchmarks:
    """

let benchmarks: [any Benchmark] = [
    HotPathBenchmark(),
    SigningBenchmark(),
    // Fan-out measures memory per subscriber as a rise in resident memory, so it runs before the benchmarks that
    // start tens of thousands of tasks: memory they freed but the allocator kept would absorb that rise.
    FanOutBenchmark(),
    CoalescingBenchmark(),
    SwitchingBenchmark(),
    SoakBenchmark(),
    FleetBenchmark(),
    IdleEnginesBenchmark(),
    PoolBenchmark(),
    PoolDayBenchmark(),
    FaultSoakBenchmark(),
    RedisCoordinatorBenchmark(),
    FleetReplicasBenchmark(),
]

func parseOptions(_ arguments: [String]) -> Options? {
    var options = Options()
    var remaining = arguments[...]
    while let argument = remaining.popFirst() {
        switch argument {
        case "--quick": options.quick = true
        case "--json": options.json = true
        case "--filter":
            guard let name = remaining.popFirst() else { return nil }
            options.filter = name
        case "--soak-cycles":
            guard let text = remaining.popFirst(), let cycles = Int(text), cycles > 0 else { return nil }
            options.soakCycles = cycles
        case "--day-accounts":
            guard let text = remaining.popFirst(), let accounts = Int(text), accounts > 0 else { return nil }
            options.dayAccounts = accounts
        case "--pool-accounts":
            guard let text = remaining.popFirst(), let accounts = Int(text), accounts > 0 else { return nil }
            options.poolAccounts = accounts
        case "--soak-minutes":
            guard let text = remaining.popFirst(), let minutes = Double(text), minutes >= 1, minutes <= 120 else {
                return nil
            }
            options.soakMinutes = minutes
        default: return nil
        }
    }
    return options
}

/// The usage text followed by the list of benchmarks.
func help() -> String {
    let list = benchmarks.map { "  \($0.name.padding(toLength: 12, withPad: " ", startingAt: 0)) \($0.summary)" }
    return ([usage] + list).joined(separator: "\n")
}

let arguments = Array(CommandLine.arguments.dropFirst())
if arguments.contains("--help") {
    print(help())
    exit(0)
}
guard let options = parseOptions(arguments) else {
    progress(help())
    exit(64)
}

// A peer process that exits early must not end the benchmark with SIGPIPE when it is written to.
signal(SIGPIPE, SIG_IGN)

// A benchmark that does not run by default (it takes minutes of real time) runs only when the filter names it.
let selected = benchmarks.filter { benchmark in
    guard let filter = options.filter else { return benchmark.runsByDefault }
    return benchmark.runsByDefault ? benchmark.name.contains(filter) : benchmark.name == filter
}
guard !selected.isEmpty else {
    progress("no benchmark matches \(options.filter ?? "")")
    exit(64)
}
// The main thread runs the main run loop, which serves the main actor, instead of an async main: valgrind 3.19
// crashes when an async main hands the main thread over to dispatch_main, and BENCHMARKS.md relies on callgrind.
Task { @MainActor in
    let started = ContinuousClock.now
    var figures: [Figure] = []
    var missed = false
    for benchmark in selected {
        progress("\(benchmark.name): \(benchmark.summary)")
        let measured = try await benchmark.run(options)
        if benchmark.failsOnMissedGoal, measured.contains(where: { $0.goal?.met == false }) { missed = true }
        figures += measured
    }
    let wallTime = started.duration(to: .now)
    if options.json {
        try printJSON(figures, options: options, wallTime: wallTime)
    } else {
        print("SessionEngineBench \(options.quick ? "--quick " : "")on \(machineDescription()), \(Date())")
        print("")
        printTable(figures)
        print("")
        print(String(format: "Wall time: %.1f s", wallTime.seconds))
    }
    exit(missed ? 1 : 0)
}
RunLoop.main.run()
