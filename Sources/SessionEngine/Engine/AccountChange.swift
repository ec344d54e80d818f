/// An account change, as account-change hooks see it.
public struct AccountChange: Sendable, Hashable, CustomStringConvertible {
    /// The account being left; `nil` when signing in from signed out.
    public let from: AccountID?
    /// The account being entered; `nil` when signing out.
    public let to: AccountID?

    /// Creates an account change.
    ///
    /// - Parameters:
    ///   - from: The account being left.
    ///   - to: The account being entered.
    public init(from: AccountID?, to: AccountID?) {
        self.from = from
        self.to = to
    }

    /// `from: alice, to: bob`, with `none` for no account: `from: none, to: alice` is a sign-in.
    public var description: String {
        "from: \(from?.rawValue ?? "none"), to: \(to?.rawValue ?? "none")"
    }
}
