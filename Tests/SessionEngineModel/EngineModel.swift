package import Foundation
package import SessionEngine
import SessionEngineBackend

/// The reference model: what a host may rely on after each step, predicted from the operations and the backend's
/// answers alone, without the engine's internals (renewal and backoff times are left to the engine).
package struct EngineModel {
    package enum Phase: Equatable {
        case signedOut
        /// An account change to `account` began and no credential has been installed since.
        case awaitingFirst
        /// The account session has installed a credential.
        case established
    }

    package var epoch: UInt64 = 0
    package var account: AccountID?
    /// The account (or target) the current change left, as `switching(from:to:)` shows it.
    package var from: AccountID?
    package var phase = Phase.signedOut
    package var installed: IdentityCredential?
    package var pinnedEmail: String?
    /// The installed credential's signature once a rejection of it was reported.
    package var rejected: String?
    /// The hooks the changes run, in order: each change's target, and whether a change racing the next one may
    /// have been superseded before its hooks ran.
    package var hookPlan: [(to: AccountID?, optional: Bool)] = []

    /// Begins an account change; returns its epoch, or `nil` when the target is already current.
    ///
    /// - Parameter superseding: How many of the latest changes may not have run their hooks yet (they race this
    ///   one, or wait for work to drain); a change superseded before its hooks run skips them.
    package mutating func beginChange(to target: AccountID?, superseding: Int = 0) -> UInt64? {
        guard target != account else { return nil }
        for index in hookPlan.indices.suffix(superseding) { hookPlan[index].optional = true }
        epoch += 1
        from = account
        account = target
        phase = target == nil ? .signedOut : .awaitingFirst
        installed = nil
        pinnedEmail = nil
        rejected = nil
        hookPlan.append((target, false))
        return epoch
    }

    /// Whether the engine installs a fetched credential: the contract's checks, nothing else.
    package func accepts(_ credential: IdentityCredential, at now: Date) -> Bool {
        if let pinnedEmail, pinnedEmail != credential.email { return false }
        guard credential.isValid(at: now) else { return false }
        let maximum = IdentitySigner.maximumLifetime.timeInterval + 60
        return credential.expirationDate.timeIntervalSince(now) <= maximum
    }

    package mutating func install(_ credential: IdentityCredential) {
        installed = credential
        pinnedEmail = pinnedEmail ?? credential.email
        phase = .established
        rejected = nil
    }
}
