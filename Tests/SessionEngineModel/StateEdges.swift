package import SessionEngine

/// The legal edges between the engine's five states, as data, matching the transition table of
/// `Design/state-machine.md`.
///
/// A state may also be followed by an equal state only if nothing was published (no event), so the checks treat
/// `from == to` as "no transition" and any other pair as an edge that must be listed here.
package enum StateEdges {
    /// A state's case, without its data.
    package enum Kind: Hashable, CaseIterable {
        case signedOut, switching, identified, renewing, expired

        package init(_ state: SessionState) {
            switch state {
            case .signedOut: self = .signedOut
            case .switching: self = .switching
            case .identified: self = .identified
            case .renewing: self = .renewing
            case .expired: self = .expired
            }
        }
    }

    package static let table: [Kind: Set<Kind>] = [
        .signedOut: [.switching],
        .switching: [.switching, .identified, .expired, .signedOut],
        // identified → identified: the host handed over a renewal (`setIdentityCredential`).
        .identified: [.identified, .renewing, .expired, .switching],
        .renewing: [.identified, .expired, .switching],
        .expired: [.identified, .switching],
    ]

    /// Whether `from` may be followed by `to`: the same state (no transition) or an edge of the table.
    package static func isLegal(from: SessionState, to: SessionState) -> Bool {
        from == to || table[Kind(from), default: []].contains(Kind(to))
    }
}
