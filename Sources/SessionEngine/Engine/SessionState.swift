/// The engine's state: one of exactly five.
///
/// States never carry a signature. See `Design/state-machine.md` for every transition.
public enum SessionState: Sendable, Hashable, CustomStringConvertible {
    /// No account is signed in.
    case signedOut
    /// The account holds a valid credential and no renewal is under way.
    case identified(SessionIdentity)
    /// The account holds a valid credential and a renewal is under way (fetching, or waiting to retry).
    case renewing(SessionIdentity)
    /// The account holds no usable credential: identified work fails with `INVALID_IDENTITY` while renewal keeps
    /// trying in the background.
    case expired(ExpiredIdentity)
    /// An account change is under way: sign-in, switch or sign-out. Work is cancelled and drained, hooks run, and
    /// the next account's first credential is fetched.
    case switching(from: AccountID?, to: AccountID?)

    /// The account the state belongs to; for ``switching(from:to:)`` the account being switched to.
    public var account: AccountID? {
        switch self {
        case .signedOut: nil
        case .identified(let identity), .renewing(let identity): identity.account
        case .expired(let expired): expired.account
        case .switching(_, let to): to
        }
    }

    /// The state's name: `signedOut`, `identified`, `renewing`, `expired` or `switching`.
    public var name: String {
        switch self {
        case .signedOut: "signedOut"
        case .identified: "identified"
        case .renewing: "renewing"
        case .expired: "expired"
        case .switching: "switching"
        }
    }

    /// A one-line summary without any secret.
    public var description: String {
        switch self {
        case .signedOut: "signedOut"
        case .identified(let identity): "identified(\(identity))"
        case .renewing(let identity): "renewing(\(identity))"
        case .expired(let expired): "expired(\(expired))"
        case .switching(let from, let to):
            "switching(from: \(from.map(\.rawValue) ?? "none"), to: \(to.map(\.rawValue) ?? "none"))"
        }
    }
}

/// The public facts of an installed credential: who and until when, never the signature.
///
/// It keeps the credential's facts (one reference to what the credential shares with it: the expiry, the version and
/// the email, never the signature or a property's value), so that the state every account keeps, the state's copy in
/// the event a new subscriber starts from and each event of the account share them instead of holding a copy of the
/// email each. Two identities are equal when their facts are.
public struct SessionIdentity: Sendable, Hashable, CustomStringConvertible, CustomReflectable {
    /// The host's account.
    public let account: AccountID
    /// The account session's epoch: it grows with every account change.
    public let epoch: UInt64
    /// The installed credential's public facts.
    private let facts: IdentityCredential.Facts

    /// The normalized email the credential identifies.
    ///
    /// The credential keeps the email's UTF-8 bytes, so each call makes the text anew.
    public var email: String { facts.email }
    /// The credential's expiry in Unix seconds.
    public var expiresAt: Int64 { facts.expiresAt }
    /// The credential's payload version.
    public var version: IdentityVersion { facts.version }

    /// Creates the public facts of a credential.
    ///
    /// - Parameters:
    ///   - account: The host's account.
    ///   - credential: The installed credential.
    ///   - epoch: The account session's epoch.
    public init(account: AccountID, credential: IdentityCredential, epoch: UInt64) {
        self.account = account
        self.facts = credential.facts
        self.epoch = epoch
    }

    /// Whether two identities have the same facts: account, email, expiry, epoch and version. Two credentials with
    /// the same facts and different signatures make equal identities.
    public static func == (lhs: SessionIdentity, rhs: SessionIdentity) -> Bool {
        lhs.account == rhs.account && lhs.epoch == rhs.epoch && lhs.facts == rhs.facts
    }

    /// Hashes the facts that ``==(_:_:)`` compares.
    public func hash(into hasher: inout Hasher) {
        hasher.combine(account)
        hasher.combine(email)
        hasher.combine(expiresAt)
        hasher.combine(epoch)
        hasher.combine(version)
    }

    /// `account, email, expiresAt`.
    public var description: String { "\(account), \(email), expiresAt: \(expiresAt)" }

    /// The identity's facts by name, never the reference they are read from.
    public var customMirror: Mirror {
        Mirror(
            self,
            children: ["account": account, "email": email, "expiresAt": expiresAt, "epoch": epoch, "version": version],
            displayStyle: .struct)
    }
}

/// An account that holds no usable credential, and why.
public struct ExpiredIdentity: Sendable, Hashable, CustomStringConvertible {
    /// Why the account holds no usable credential.
    public enum Reason: String, Sendable, Hashable {
        /// The credential passed its `expiresAt` by the local clock before a renewal was installed.
        case expired
        /// The service rejected the credential (for example after a secret rotation).
        case rejected
        /// No credential has been obtained yet for this account: its first fetch failed.
        case unavailable
    }

    /// The host's account.
    public let account: AccountID
    /// The account session's epoch.
    public let epoch: UInt64
    /// The last credential's expiry in Unix seconds, when there was one.
    public let lastExpiresAt: Int64?
    // Stored after the optional expiry, in the room it leaves.
    /// Why no credential is usable.
    public let reason: Reason

    /// Creates the description of an expired identity.
    ///
    /// - Parameters:
    ///   - account: The host's account.
    ///   - reason: Why no credential is usable.
    ///   - lastExpiresAt: The last credential's expiry, if any.
    ///   - epoch: The account session's epoch.
    public init(account: AccountID, reason: Reason, lastExpiresAt: Int64?, epoch: UInt64) {
        self.account = account
        self.reason = reason
        self.lastExpiresAt = lastExpiresAt
        self.epoch = epoch
    }

    /// `account, reason`.
    public var description: String { "\(account), \(reason.rawValue)" }
}
