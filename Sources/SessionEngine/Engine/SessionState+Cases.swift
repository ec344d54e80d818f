extension SessionState {
    /// Whether the state is ``identified(_:)``.
    package var isIdentified: Bool {
        if case .identified = self { return true }
        return false
    }

    /// Whether the state is ``renewing(_:)``.
    package var isRenewing: Bool {
        if case .renewing = self { return true }
        return false
    }

    /// Whether the state is ``expired(_:)``.
    package var isExpired: Bool {
        if case .expired = self { return true }
        return false
    }

    /// Whether the state is ``switching(from:to:)``.
    package var isSwitching: Bool {
        if case .switching = self { return true }
        return false
    }

    /// Why the state is expired, or `nil` when it is not.
    package var expiredReason: ExpiredIdentity.Reason? {
        if case .expired(let expired) = self { return expired.reason }
        return nil
    }
}
