import SessionEngine

/// The accounts of the scenario and the backend sessions behind them.
///
/// The loopback backend in `Tests/SessionEngineTests/Fixtures/backend/identity_backend.py` holds the same sessions,
/// so the scenario runs the same against either backend.
enum DemoAccounts {
    /// A backend session: the email as the session holds it (raw, normalized only when signing) and the signed
    /// properties, if any.
    struct Session: Sendable {
        let rawEmail: String
        let properties: IdentityProperties?
    }

    static let names = ["alice", "bob", "carol", "dave", "erin", "frank", "grace", "heidi"]

    /// The most accounts a scenario may use.
    static let maximumCount = 1000

    /// The `index`th account: the named ones first, then `user9`, `user10`, ….
    static func account(at index: Int) -> AccountID {
        index < names.count ? AccountID(names[index]) : AccountID("user\(index + 1)")
    }

    /// The backend session of an account, or `nil` when the backend does not know it.
    static func session(for account: AccountID) -> Session? {
        switch account.rawValue {
        case "alice": return Session(rawEmail: "  Alice@Example.com ", properties: nil)
        case "bob":
            return Session(
                rawEmail: "Bob@Example.com",
                properties: properties(["plan": .string("pro"), "seats": .number(3), "beta": .boolean(true)]))
        case "dave": return Session(rawEmail: "Dave@Example.com", properties: properties(["team": .string("ops")]))
        case "frank": return Session(rawEmail: "frank@example.com", properties: properties(["plan": .string("free")]))
        case let name where names.contains(name): return Session(rawEmail: "\(name)@example.com", properties: nil)
        case let name where name.hasPrefix("user"):
            guard let number = Int(name.dropFirst(4)), number > names.count, number <= maximumCount else { return nil }
            return Session(rawEmail: "\(name)@example.com", properties: nil)
        default: return nil
        }
    }

    /// The normalized email the backend signs for an account.
    static func email(for account: AccountID) -> String {
        IdentityEmail.normalize(session(for: account)?.rawEmail ?? "")
    }

    /// The bearer token of an account's backend session.
    static func sessionToken(for account: AccountID) -> String { "session-\(account.rawValue)" }

    private static func properties(_ values: [String: IdentityProperty]) -> IdentityProperties {
        try! IdentityProperties(values)
    }
}

/// How the scenario's backends derive the secret after a rotation, so the service stand-in can follow.
enum DemoSecrets {
    /// The secret of rotation `generation`; generation 0 is the original secret.
    static func rotated(_ base: String, generation: Int) -> String {
        generation == 0 ? base : "\(base):rotated:\(generation)"
    }

    /// A fresh random secret for the embedded backend.
    static func random() -> String {
        var generator = SystemRandomNumberGenerator()
        return (0..<4).map { _ in String(generator.next() as UInt64, radix: 16) }.joined()
    }
}
