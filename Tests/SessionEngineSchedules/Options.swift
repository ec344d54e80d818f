import Foundation

/// The command line.
struct Options {
    /// What a `--replay` names: a generated engine program by its seed, a generated pool program by `pool-` and its
    /// seed, or a race or regression program by name.
    enum Replay {
        case program(seed: UInt64, schedule: String)
        case poolProgram(seed: UInt64, schedule: String)
        case named(String, schedule: String)
    }

    /// The budget in seconds of real time for the whole run.
    var budget: Double = Self.ciBudget
    var seed: UInt64 = Self.defaultSeed
    var replay: Replay?
    var race: String?
    /// Only generated programs, no races or regression programs.
    var programsOnly = false
    /// Overrides every exhaustive exploration's delay bound.
    var bound: Int?
    var list = false
    /// The symbol graph to check the public calls against (``PublicCalls``), instead of exploring.
    var publicCalls: String?
    var quiet = false
    var help = false

    /// The CI budget: well inside the 4 minutes CI allows, with room for a slower machine.
    static let ciBudget = 170.0
    static let defaultSeed: UInt64 = 20_261_201

    static let usage = """
        usage: SessionEngineSchedules [options]

        Runs the session engine on a controlled executor and explores its interleavings: the named races and the
        model's regression programs exhaustively (delay-bounded, with partial-order reduction), then generated engine
        and pool model programs under random and PCT schedules until the budget is spent. Exits non-zero on any
        failure.

        With no arguments it spends the CI budget (about 3 minutes).

          --minutes N            spend N minutes instead (the races and regressions run first, then programs)
          --seed S               the run's seed for generated programs and random schedules (decimal or 0x hex)
          --replay SEED:SCHEDULE replay one generated program with one schedule and print its outcome
          --replay pool-SEED:SCHEDULE  the same for a generated pool program
          --replay NAME:SCHEDULE replay one race or regression program (see --list) with one schedule
          --race NAME            explore only this race or regression program, exhaustively
          --programs             only generated programs (random and PCT), no races or regression programs
          --bound N              explore the races and regression programs with delay bound N instead of theirs
          --list                 list the races and regression programs
          --public-calls GRAPH   check that every public awaited method of SessionEngine and SessionPool is an
                                 operation of the generated programs and of a named race, against the module's
                                 symbol graph (.build/docs/symbol-graphs/SessionEngine/SessionEngine.symbols.json
                                 after Scripts/build-docs.sh); run from the package's root
          --quiet                print only failures and the summary line
          --help                 this text
        """

    /// Parses the arguments; throws a message for a usage error.
    static func parse(_ arguments: [String]) throws(UsageError) -> Options {
        var options = Options()
        var rest = arguments[...]
        func value(_ flag: String) throws(UsageError) -> String {
            guard let value = rest.popFirst() else { throw UsageError("\(flag) needs a value") }
            return value
        }
        while let argument = rest.popFirst() {
            switch argument {
            case "--minutes":
                let text = try value(argument)
                guard let minutes = Double(text), minutes > 0 else { throw UsageError("bad --minutes \(text)") }
                options.budget = minutes * 60
            case "--seed":
                let text = try value(argument)
                guard let seed = parseSeed(text) else { throw UsageError("bad --seed \(text)") }
                options.seed = seed
            case "--replay":
                let text = try value(argument)
                guard let colon = text.firstIndex(of: ":") else {
                    throw UsageError("--replay wants SEED:SCHEDULE or NAME:SCHEDULE")
                }
                let head = String(text[..<colon])
                let schedule = String(text[text.index(after: colon)...])
                if let seed = parseSeed(head) {
                    options.replay = .program(seed: seed, schedule: schedule)
                } else if head.hasPrefix("pool-"), let seed = parseSeed(String(head.dropFirst("pool-".count))) {
                    options.replay = .poolProgram(seed: seed, schedule: schedule)
                } else {
                    options.replay = .named(head, schedule: schedule)
                }
            case "--bound":
                let text = try value(argument)
                guard let bound = Int(text), bound >= 0 else { throw UsageError("bad --bound \(text)") }
                options.bound = bound
            case "--race":
                options.race = try value(argument)
            case "--programs":
                options.programsOnly = true
            case "--list":
                options.list = true
            case "--public-calls":
                options.publicCalls = try value(argument)
            case "--quiet":
                options.quiet = true
            case "--help", "-h":
                options.help = true
            default:
                throw UsageError("unknown argument \(argument)")
            }
        }
        return options
    }

    static func parseSeed(_ text: String) -> UInt64? {
        if text.lowercased().hasPrefix("0x") { return UInt64(text.dropFirst(2), radix: 16) }
        return UInt64(text)
    }
}

/// A command line the executable does not understand.
struct UsageError: Error, CustomStringConvertible {
    let description: String

    init(_ description: String) {
        self.description = description
    }
}
