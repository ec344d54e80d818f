/// A command line split into options with values, flags and positional arguments.
///
/// Both `--name value` and `--name=value` are accepted. Only names listed as taking a value consume the next
/// argument; every other `--name` is a flag.
struct Options {
    /// A usage error, printed with the command's usage text.
    struct UsageError: Error, CustomStringConvertible {
        let description: String
    }

    private(set) var values: [String: String] = [:]
    private(set) var flags: Set<String> = []
    private(set) var positional: [String] = []
    /// The 1-based position of each positional argument on the command line, so errors can name it without its
    /// text (a stray argument is often a secret pasted in the wrong place).
    private(set) var positionalIndices: [Int] = []

    /// A usage error for the first positional argument, naming its position and never its text.
    var strayArgumentError: UsageError? {
        positionalIndices.first.map {
            UsageError(description: "unexpected argument at position \($0) (its text is not shown)")
        }
    }

    /// Parses `arguments`.
    ///
    /// - Parameters:
    ///   - arguments: The arguments after the command's name.
    ///   - valued: The option names (without `--`) that take a value.
    ///   - known: The flag names (without `--`) the command knows.
    init(_ arguments: [String], valued: Set<String>, flags known: Set<String>) throws(UsageError) {
        var index = 0
        while index < arguments.count {
            let argument = arguments[index]
            index += 1
            guard argument.hasPrefix("--"), argument.count > 2 else {
                if argument == "-h" {
                    flags.insert("help")
                } else {
                    positional.append(argument)
                    positionalIndices.append(index)
                }
                continue
            }
            var name = String(argument.dropFirst(2))
            var value: String?
            if let equals = name.firstIndex(of: "=") {
                value = String(name[name.index(after: equals)...])
                name = String(name[..<equals])
            }
            if valued.contains(name) {
                if value == nil {
                    guard index < arguments.count else { throw UsageError(description: "--\(name) needs a value") }
                    value = arguments[index]
                    index += 1
                }
                values[name] = value
            } else if known.contains(name) {
                guard value == nil else { throw UsageError(description: "--\(name) takes no value") }
                flags.insert(name)
            } else {
                throw UsageError(description: "unknown option at position \(index) (its text is not shown)")
            }
        }
    }

    /// Parses the arguments of a command that takes no positional arguments; `--help` is always a known flag.
    ///
    /// - Parameters:
    ///   - arguments: The arguments after the command's name.
    ///   - valued: The option names (without `--`) that take a value.
    ///   - known: The command's other flag names (without `--`).
    init(command arguments: [String], valued: Set<String>, flags known: Set<String>) throws(UsageError) {
        try self.init(arguments, valued: valued, flags: known.union(["help"]))
        // A stray argument is often a secret pasted in the wrong place: name its position, never its text.
        if let stray = strayArgumentError { throw stray }
    }

    /// The value of `--name`, if given.
    subscript(name: String) -> String? { values[name] }

    /// Whether the flag `--name` was given.
    func has(_ name: String) -> Bool { flags.contains(name) }

    /// The value of `--name` as an integer in `range`, or `fallback` when absent.
    func integer<T: FixedWidthInteger>(_ name: String, in range: ClosedRange<T>, default fallback: T) throws(UsageError)
        -> T
    {
        guard let text = values[name] else { return fallback }
        guard let value = T(text), range.contains(value) else {
            throw UsageError(
                description: "--\(name) must be a whole number from \(range.lowerBound) to \(range.upperBound)")
        }
        return value
    }
}
