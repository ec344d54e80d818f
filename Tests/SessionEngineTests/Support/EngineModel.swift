import Foundation

@testable import SessionEngine
@testable import SessionEngineBackend

/// The reference model: what a host may rely on after each step, predicted from the operations and the backend's
/// answers alone, without the engine's internals (renewal and backoff times are left to the engine).
struct EngineModel {
    enum Phase: Equatable {
        case signedOut
        /// An account change to `account` began and no credential has been installed since.
        case awaitingFirst
        /// The account session has installed a credential.
        case established
    }

    var epoch: UInt64 = 0
    var account: AccountID?
    /// The account (or target) the current change left, as `switching(from:to:)` shows it.
    var from: AccountID?
    var phase = Phase.signedOut
    var installed: IdentityCredential?
    var pinnedEmail: String?
    /// The installed credential's signature once a rejection of it was reported.
    var rejected: String?
    /// The hooks the changes run, in order: each change's target, and whether a change racing the next one may
    /// have been superseded before its hooks ran.
    var hookPlan: [(to: AccountID?, optional: Bool)] = []

    /// Begins an account change; returns its epoch, or `nil` when the target is already current.
    ///
    /// - Parameter superseding: How many of the latest changes may not have run their hooks yet (they race this
    ///   one, or wait for work to drain); a change superseded before its hooks run skips them.
    mutating func beginChange(to target: AccountID?, superseding: Int = 0) -> UInt64? {
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
    func accepts(_ credential: IdentityCredential, at now: Date) -> Bool {
        if let pinnedEmail, pinnedEmail != credential.email { return false }
        guard credential.isValid(at: now) else { return false }
        let maximum = IdentitySigner.maximumLifetime.timeInterval + 60
        return credential.expirationDate.timeIntervalSince(now) <= maximum
    }

    mutating func install(_ credential: IdentityCredential) {
        installed = credential
        pinnedEmail = pinnedEmail ?? credential.email
        phase = .established
        rejected = nil
    }
}
