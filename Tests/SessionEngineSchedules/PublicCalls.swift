import Foundation
import SessionEngineModel

/// Every public asynchronous method of `SessionEngine` and `SessionPool`, with the operation of the generated
/// programs and the named races that call it, and the check that keeps the list whole (`--public-calls`).
///
/// The check reads the module's public symbol graph, the one `Scripts/build-docs.sh` extracts, and fails when:
/// - a public method that a caller awaits (declared `async`, or isolated to the `SessionEngine` actor) has no entry
///   here, or an entry names no such method;
/// - an entry's operation is not among the operations of 4,000 generated programs (the model test's and the
///   explorer's generators), or its races are not races of the explorer;
/// - the method is called nowhere in the model's driver for its type, or a race its entry names does not call it,
///   itself or through a helper function of the races' sources that does (a textual check of the call's receiver,
///   base name and argument labels).
enum PublicCalls {
    /// Where a generated program calls a method.
    enum Operation {
        /// An operation of the generated programs, by its case name.
        case generated(String)
        /// Every generated program calls it, outside its operations (what a program ends with).
        case everyProgram(String)
    }

    /// One public method and what calls it.
    struct Entry {
        /// The method as the symbol graph names it: its type, then its name with its argument labels.
        let method: String
        let operation: Operation
        /// Named races that call it.
        let races: [String]

        init(_ method: String, _ operation: Operation, _ races: [String]) {
            self.method = method
            self.operation = operation
            self.races = races
        }

        /// The type: `SessionEngine` or `SessionPool`.
        var type: String { String(method.prefix { $0 != "." }) }
    }

    static let all: [Entry] = [
        Entry("SessionEngine.signIn(_:)", .generated("signIn"), ["joined-sign-in-deadline", "many-callers-at-expiry"]),
        Entry("SessionEngine.signIn(_:timeout:)", .generated("signInWithin"), ["joined-sign-in-deadline"]),
        Entry(
            "SessionEngine.signIn(_:expecting:timeout:)", .generated("signInExpecting"),
            ["graceful-shutdown-races-calls"]),
        Entry("SessionEngine.signIn(_:with:)", .generated("signInWith"), ["pushes-race-renewal"]),
        Entry("SessionEngine.setIdentityCredential(_:for:)", .generated("push"), ["pushes-race-renewal"]),
        Entry(
            "SessionEngine.switchAccount(to:)", .generated("switchAccount"), ["switch-during-fetch", "two-switches"]),
        Entry("SessionEngine.switchAccount(to:timeout:)", .generated("switchWithin"), ["joined-switch-deadline"]),
        Entry("SessionEngine.signOut()", .generated("signOut"), ["sign-out-during-renewal"]),
        Entry(
            "SessionEngine.addAccountChangeHook(_:)", .generated("addHook"),
            ["two-switches", "graceful-shutdown-races-calls"]),
        Entry("SessionEngine.renew()", .generated("renew"), ["renew-answered-at-once", "cancelled-waiter"]),
        Entry("SessionEngine.credentialRejected(_:)", .generated("reportRejection"), ["rejection-during-switch"]),
        Entry(
            "SessionEngine.withIdentity(_:)", .generated("work"), ["rejection-during-switch", "shutdown-during-fetch"]),
        Entry("SessionEngine.run()", .generated("stopRunning"), ["graceful-shutdown-races-calls"]),
        Entry(
            "SessionEngine.shutdown()", .everyProgram("the end of every program that no shutdown of its own ended"),
            ["shutdown-during-fetch", "late-result-then-shutdown"]),
        Entry(
            "SessionEngine.shutdown(gracePeriod:)", .generated("gracefulShutdown"), ["graceful-shutdown-races-calls"]),
        Entry("SessionPool.signIn(_:)", .generated("signIn"), ["pool-sign-ins", "pool-calls-race-shutdown"]),
        Entry("SessionPool.signIn(_:timeout:)", .generated("signInWithin"), ["pool-sign-ins-race-graceful-shutdown"]),
        Entry(
            "SessionPool.signIn(_:expecting:timeout:)", .generated("signInExpecting"),
            ["pool-expected-user-joins-a-sign-in"]),
        Entry("SessionPool.signIn(_:with:)", .generated("signInWith"), ["pool-pushes-race-renewal"]),
        Entry("SessionPool.setIdentityCredential(_:for:)", .generated("push"), ["pool-pushes-race-renewal"]),
        Entry(
            "SessionPool.signOut(_:)", .generated("signOut"),
            ["pool-sign-out-while-queued", "pool-calls-race-shutdown"]),
        Entry("SessionPool.addAccountChangeHook(_:)", .generated("addHook"), ["pool-pushes-race-renewal"]),
        Entry(
            "SessionPool.withIdentity(for:_:)", .generated("work"),
            ["pool-eviction-races-work", "pool-idle-sweep-races-work"]),
        Entry("SessionPool.renew(for:)", .generated("renew"), ["pool-pushes-race-renewal"]),
        Entry("SessionPool.credentialRejected(_:for:)", .generated("reject"), ["pool-pushes-race-renewal"]),
        Entry("SessionPool.run()", .generated("stopRunning"), ["pool-sign-ins-race-graceful-shutdown"]),
        Entry(
            "SessionPool.shutdown()", .everyProgram("the end of every program that no shutdown of its own ended"),
            ["pool-calls-race-shutdown"]),
        Entry(
            "SessionPool.shutdown(gracePeriod:)", .generated("gracefulShutdown"),
            ["pool-sign-ins-race-graceful-shutdown"]),
    ]

    /// The sources of the model's driver and of the races, per type, relative to the package's root.
    static let sources: [String: (programs: [String], races: [String])] = [
        "SessionEngine": (
            [
                "EngineModelDriver.swift", "EngineModelDriver+Operations.swift", "EngineModelDriver+Lifecycle.swift",
            ].map { "Tests/SessionEngineModel/\($0)" },
            ["Races.swift", "RaceRig.swift"].map { "Tests/SessionEngineSchedules/\($0)" }
        ),
        "SessionPool": (
            ["Tests/SessionEngineModel/PoolModelDriver.swift"], ["Tests/SessionEngineSchedules/PoolRaces.swift"]
        ),
    ]

    /// Runs the check against the symbol graph at `path`; prints every method with what calls it, and every
    /// failure. Returns whether it passed.
    static func check(symbolGraph path: String, races: [String]) -> Bool {
        var failures: [String] = []
        let methods: [String: [Parameter]]
        do {
            methods = try awaitedMethods(inSymbolGraph: path)
        } catch {
            print("public calls: cannot read the symbol graph \(path): \(error)")
            return false
        }
        let listed = Set(all.map(\.method))
        for method in methods.keys.sorted() where !listed.contains(method) {
            failures.append("\(method) is public and awaited, and no operation calls it: add one and list it here")
        }
        for entry in all where methods[entry.method] == nil {
            failures.append("\(entry.method) is listed, but the symbol graph has no such public awaited method")
        }
        let generated = generatedOperations(programs: 2000)
        for entry in all {
            if case .generated(let name) = entry.operation, !generated[entry.type, default: []].contains(name) {
                failures.append("\(entry.method): no generated \(entry.type) program has the operation \(name)")
            }
            for race in entry.races where !races.contains(race) {
                failures.append("\(entry.method): the explorer has no race \(race)")
            }
            guard let parameters = methods[entry.method], let files = sources[entry.type] else { continue }
            let programs = files.programs.compactMap { try? String(contentsOfFile: $0, encoding: .utf8) }.joined()
            let raceSources = files.races.compactMap { try? String(contentsOfFile: $0, encoding: .utf8) }.joined()
            if programs.isEmpty || raceSources.isEmpty {
                failures.append("\(entry.method): cannot read \(files) (run from the package's root)")
                continue
            }
            if !callsMethod(named: entry.method, parameters: parameters, in: programs) {
                failures.append(
                    "\(entry.method) is called nowhere in the model's driver (\(files.programs.joined(separator: ", ")))"
                )
            }
            // Each race it names calls it, itself or through a helper of the races' sources that does.
            let helpers = functions(calling: entry.method, parameters: parameters, in: raceSources)
            for race in entry.races where races.contains(race) {
                guard let block = raceProgram(named: race, in: raceSources) else {
                    failures.append(
                        "\(entry.method): the race \(race) is not in \(files.races.joined(separator: ", "))")
                    continue
                }
                let calls =
                    callsMethod(named: entry.method, parameters: parameters, in: block)
                    || helpers.contains { callsFunction(named: $0, in: block) }
                if !calls {
                    failures.append("\(entry.method): the race \(race) does not call it, itself or through a helper")
                }
            }
        }
        for entry in all {
            let operation =
                switch entry.operation {
                case .generated(let name): "operation .\(name)"
                case .everyProgram(let what): what
                }
            print("  \(entry.method): \(operation); races \(entry.races.joined(separator: ", "))")
        }
        for failure in failures { print("FAILED public calls: \(failure)") }
        print("public calls: \(methods.count) public awaited methods, \(all.count) listed, \(failures.count) failures")
        return failures.isEmpty
    }

    // MARK: The symbol graph

    /// One parameter of a method: its argument label (`_` for none) and whether it has a default.
    struct Parameter: Equatable {
        let label: String
        let hasDefault: Bool
    }

    private struct SymbolGraph: Decodable {
        struct Symbol: Decodable {
            struct Kind: Decodable { let identifier: String }
            struct Fragment: Decodable {
                let kind: String
                let spelling: String
            }
            struct Location: Decodable { let uri: String }
            let kind: Kind
            let pathComponents: [String]
            let accessLevel: String
            let declarationFragments: [Fragment]?
            let location: Location?
        }
        let symbols: [Symbol]
    }

    /// The public methods of `SessionEngine` and `SessionPool` declared in the package that a caller awaits, by
    /// `Type.name(labels:)`, with their parameters.
    static func awaitedMethods(inSymbolGraph path: String) throws -> [String: [Parameter]] {
        let graph = try JSONDecoder().decode(SymbolGraph.self, from: Data(contentsOf: URL(fileURLWithPath: path)))
        let types = ["SessionEngine", "SessionPool"]
        let actors = Set(
            graph.symbols.filter { symbol in
                symbol.pathComponents.count == 1 && types.contains(symbol.pathComponents[0])
                    && (symbol.declarationFragments ?? []).contains { $0.kind == "keyword" && $0.spelling == "actor" }
            }.map { $0.pathComponents[0] })
        var methods: [String: [Parameter]] = [:]
        for symbol in graph.symbols
        where symbol.kind.identifier == "swift.method" && symbol.pathComponents.count == 2
            && types.contains(symbol.pathComponents[0]) && symbol.accessLevel == "public"
            && symbol.location?.uri.contains("/Sources/SessionEngine/") == true
        {
            let declaration = (symbol.declarationFragments ?? []).map(\.spelling).joined()
            guard let (parameters, rest) = parameterClause(of: declaration) else { continue }
            let isolated = actors.contains(symbol.pathComponents[0]) && !declaration.contains("nonisolated")
            let effects = rest.components(separatedBy: "->")[0]
            guard isolated || effects.split(separator: " ").contains("async") else { continue }
            methods[symbol.pathComponents.joined(separator: ".")] = parameters
        }
        return methods
    }

    /// The parameters of a declaration `… func name<…>(…) effects -> Result`, and what follows the parameter clause.
    static func parameterClause(of declaration: String) -> ([Parameter], String)? {
        // A generic clause (`<T: Sendable>`) holds no parenthesis, so the first one opens the parameters.
        guard let function = declaration.range(of: "func "),
            let open = declaration[function.upperBound...].firstIndex(of: "("),
            let close = balancedEnd(of: declaration, from: open)
        else { return nil }
        let inside = declaration[declaration.index(after: open)..<declaration.index(before: close)]
        let parameters = (inside.isEmpty ? [] : splitAtTopLevel(String(inside))).map { text -> Parameter in
            let label = text.trimmingCharacters(in: .whitespaces).prefix { $0 != " " && $0 != ":" }
            return Parameter(label: String(label), hasDefault: splitAtTopLevel(text, on: "=").count > 1)
        }
        return (parameters, String(declaration[close...]))
    }

    // MARK: Calls in the sources

    /// Whether `text` calls a method of this name with argument labels the method accepts (defaulted arguments
    /// left out, a trailing closure for the last).
    static func callsMethod(named method: String, parameters: [Parameter], in text: String) -> Bool {
        let name = method.split(separator: ".").last!
        let base = "." + name.prefix { $0 != "(" }
        var search = text.startIndex
        while let found = text.range(of: base, range: search..<text.endIndex) {
            search = found.upperBound
            // A call has a receiver (`engine.`, `$0.`, `pool?.`); `case .signIn(let x)` and `(.signIn(…))` are
            // patterns and values of the programs' own operations.
            let before = found.lowerBound > text.startIndex ? text[text.index(before: found.lowerBound)] : " "
            guard before.isLetter || before.isNumber || "_)]?!".contains(before) else { continue }
            let after = text[found.upperBound...]
            var labels: [String] = []
            var end = found.upperBound
            if after.first == "(" {
                guard let close = balancedEnd(of: text, from: found.upperBound) else { continue }
                let inside = String(text[text.index(after: found.upperBound)..<text.index(before: close)])
                labels = inside.isEmpty ? [] : splitAtTopLevel(inside).map(Self.label(of:))
                end = close
            } else if !after.hasPrefix(" {") {
                continue
            }
            if text[end...].hasPrefix(" {") { labels.append("_") }
            if accepts(labels, parameters) { return true }
        }
        return false
    }

    /// The functions declared in `text` that call the method, themselves or through another such function.
    static func functions(calling method: String, parameters: [Parameter], in text: String) -> Set<String> {
        let declared = functionBodies(in: text)
        var found = Set(declared.filter { callsMethod(named: method, parameters: parameters, in: $0.body) }.map(\.name))
        while true {
            let more = declared.filter { function in
                !found.contains(function.name) && found.contains { callsFunction(named: $0, in: function.body) }
            }
            if more.isEmpty { return found }
            found.formUnion(more.map(\.name))
        }
    }

    /// Every `func name(…) … { body }` of `text`, by name and body.
    static func functionBodies(in text: String) -> [(name: String, body: String)] {
        var bodies: [(name: String, body: String)] = []
        var search = text.startIndex
        while let found = text.range(of: "func ", range: search..<text.endIndex) {
            search = found.upperBound
            let name = String(text[found.upperBound...].prefix { $0.isLetter || $0.isNumber || $0 == "_" })
            // A default argument may hold a closure, so the body is the first brace after the parameter clause.
            guard !name.isEmpty, let open = text[found.upperBound...].firstIndex(of: "("),
                let close = balancedEnd(of: text, from: open),
                let brace = text[close...].firstIndex(of: "{"),
                let end = balancedEnd(of: text, from: brace)
            else { continue }
            bodies.append((name, String(text[brace..<end])))
        }
        return bodies
    }

    /// Whether `text` calls a function of this name (`name(`, `.name(` or `name {`), other than declaring it.
    static func callsFunction(named name: String, in text: String) -> Bool {
        var search = text.startIndex
        while let found = text.range(of: name, range: search..<text.endIndex) {
            search = found.upperBound
            let before = found.lowerBound > text.startIndex ? text[text.index(before: found.lowerBound)] : " "
            let after = text[found.upperBound...]
            if before.isLetter || before.isNumber || before == "_" || text[..<found.lowerBound].hasSuffix("func ") {
                continue
            }
            if after.hasPrefix("(") || after.hasPrefix(" {") { return true }
        }
        return false
    }

    /// The source of the race program named `name`: from the `static let` that declares it to the next declaration.
    static func raceProgram(named name: String, in text: String) -> String? {
        guard let named = text.range(of: "name: \"\(name)\""),
            let start = text.range(of: "static let ", options: .backwards, range: text.startIndex..<named.lowerBound)
        else { return nil }
        let rest = named.upperBound..<text.endIndex
        let next = [text.range(of: "static let ", range: rest), text.range(of: "static func ", range: rest)]
            .compactMap { $0?.lowerBound }.min()
        return String(text[start.lowerBound..<(next ?? text.endIndex)])
    }

    /// Whether a call with these labels matches the parameters, each defaulted one present or left out.
    static func accepts(_ labels: [String], _ parameters: [Parameter]) -> Bool {
        guard let first = parameters.first else { return labels.isEmpty }
        let rest = Array(parameters.dropFirst())
        if let label = labels.first, label == first.label, accepts(Array(labels.dropFirst()), rest) { return true }
        return first.hasDefault && accepts(labels, rest)
    }

    /// The argument label of one argument of a call: `name:` before a value, or `_`.
    static func label(of argument: String) -> String {
        let trimmed = argument.trimmingCharacters(in: .whitespacesAndNewlines)
        let head = trimmed.prefix { $0.isLetter || $0.isNumber || $0 == "_" }
        return !head.isEmpty && trimmed.dropFirst(head.count).hasPrefix(":") ? String(head) : "_"
    }

    /// The index just past the bracket that closes the one at `open`; brackets inside string literals are not told
    /// apart, which the sources checked here never need.
    static func balancedEnd(of text: String, from open: String.Index) -> String.Index? {
        var depth = 0
        var index = open
        while index < text.endIndex {
            switch text[index] {
            case "(", "[", "{": depth += 1
            case ")", "]", "}": depth -= 1
            default: break
            }
            index = text.index(after: index)
            if depth == 0 { return index }
        }
        return nil
    }

    /// `text` split at `separator` where no bracket is open.
    static func splitAtTopLevel(_ text: String, on separator: Character = ",") -> [String] {
        var parts: [String] = []
        var current = ""
        var depth = 0
        for character in text {
            switch character {
            case "(", "[", "{": depth += 1
            case ")", "]", "}": depth -= 1
            default: break
            }
            if character == separator && depth == 0 {
                parts.append(current)
                current = ""
            } else {
                current.append(character)
            }
        }
        parts.append(current)
        return parts
    }

    // MARK: Generated programs

    /// The case names of the operations of `programs` generated programs of each kind, by the type they drive:
    /// the model test's and the explorer's lengths.
    static func generatedOperations(programs: Int) -> [String: Set<String>] {
        var engine = Set<String>()
        var pool = Set<String>()
        for index in 0..<programs {
            let seed = PropertyRandom.programSeed(run: Options.defaultSeed, index: index)
            for operation in EngineOperation.generator.array(count: 40).sample(seed: seed) {
                engine.insert(caseName(of: operation))
            }
            for operation in PoolOperation.program(seed: seed, length: 40) { pool.insert(caseName(of: operation)) }
        }
        return ["SessionEngine": engine, "SessionPool": pool]
    }

    /// An enumeration value's case name.
    static func caseName(of value: some CustomStringConvertible) -> String {
        if let label = Mirror(reflecting: value).children.first?.label { return label }
        let description = value.description
        return String(description.drop { $0 == "." }.prefix { $0.isLetter || $0.isNumber })
    }
}
