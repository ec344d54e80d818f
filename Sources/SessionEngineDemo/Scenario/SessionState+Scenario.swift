import SessionEngine

extension SessionState {
    /// Whether an account is identified with a valid credential.
    var isIdentified: Bool {
        if case .identified = self { return true }
        return false
    }

    /// Why the state is expired, or `nil` when it is not.
    var expiredReason: ExpiredIdentity.Reason? {
        if case .expired(let expired) = self { return expired.reason }
        return nil
    }
}
