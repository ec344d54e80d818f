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

    /// Whether a change's hooks run, as far as the model can tell.
    package enum HookStatus: Equatable {
        /// They run once the change is prepared (or have run).
        case mustRun
        /// A later change began while this one's preparation was still parked before its hooks: it was superseded,
        /// and Design/engine.md says a superseded change runs no hooks.
        case mustNotRun
        /// A later change raced this one, so the model cannot tell which of them the actor saw first.
        case mayRun
    }

    /// One account change's hooks.
    package struct PlannedHook {
        package let epoch: UInt64
        package let to: AccountID?
        package var status: HookStatus
    }

    /// The backend's clock-skew tolerance the engine's configuration uses (the default).
    package static let clockSkewTolerance = Duration.seconds(60)

    package var epoch: UInt64 = 0
    package var account: AccountID?
    /// The account (or target) the current change left, as `switching(from:to:)` shows it.
    package var from: AccountID?
    package var phase = Phase.signedOut
    package var installed: IdentityCredential?
    package var pinnedEmail: String?
    /// The installed credential's signature once a rejection of it was reported.
    package var rejected: String?
    /// The hooks the changes run, in order.
    package var hookPlan: [PlannedHook] = []
    /// The backend's clock offset the engine applies (zero until a fetch reports one beyond the tolerance); it
    /// outlives account changes, as the machine's does.
    package var appliedOffset = Duration.zero
    /// A credential handed over while its account's change is still being prepared: the engine installs it once
    /// the change is prepared, if it is still valid then.
    package var deferredPush: IdentityCredential?

    /// Begins an account change; returns its epoch, or `nil` when the target is already current.
    ///
    /// - Parameters:
    ///   - superseded: The epochs of earlier changes whose preparation is still parked before their hooks (they wait
    ///     for work to drain): this change supersedes them, so their hooks must never run.
    ///   - racing: The change follows the previous one without waiting for it: that one's hooks may or may not have
    ///     been decided first.
    package mutating func beginChange(
        to target: AccountID?,
        superseded: Set<UInt64> = [],
        racing: Bool = false
    ) -> UInt64? {
        guard target != account else { return nil }
        for index in hookPlan.indices {
            if superseded.contains(hookPlan[index].epoch) {
                hookPlan[index].status = .mustNotRun
            } else if racing, index == hookPlan.count - 1, hookPlan[index].status == .mustRun {
                hookPlan[index].status = .mayRun
            }
        }
        epoch += 1
        from = account
        account = target
        phase = target == nil ? .signedOut : .awaitingFirst
        installed = nil
        pinnedEmail = nil
        rejected = nil
        deferredPush = nil
        hookPlan.append(PlannedHook(epoch: epoch, to: target, status: .mustRun))
        return epoch
    }

    /// Whether `credential` is plausible on the clock `offset` away from this host's wall clock at `now`: not
    /// expired there, and living at most 24 hours plus the tolerance from there.
    package static func isPlausible(_ credential: IdentityCredential, offset: Duration, at now: Date) -> Bool {
        let clock = now.addingTimeInterval(offset.timeInterval)
        guard credential.isValid(at: clock) else { return false }
        let maximum = IdentitySigner.maximumLifetime.timeInterval + clockSkewTolerance.timeInterval
        return credential.expirationDate.timeIntervalSince(clock) <= maximum
    }

    /// Whether the engine installs a fetched credential, and with which clock offset applied: the pin, then the
    /// clock cross-check of Design/state-machine.md (of the clocks that make the credential plausible, the one under
    /// which it expires soonest; none, a refusal).
    ///
    /// - Parameters:
    ///   - credential: The fetched credential.
    ///   - measured: The offset the fetcher reported with it, if any.
    ///   - now: This host's wall-clock time.
    /// - Returns: The offset the engine applies from then on, or `nil` when it refuses the credential.
    package func judge(_ credential: IdentityCredential, measured: Duration?, at now: Date) -> Duration? {
        if let pinnedEmail, pinnedEmail != credential.email { return nil }
        let backend = measured ?? appliedOffset
        let magnitude = backend < .zero ? .zero - backend : backend
        let backendOffset = magnitude > Self.clockSkewTolerance ? backend : .zero
        let onBackend = Self.isPlausible(credential, offset: backendOffset, at: now)
        let onHost = Self.isPlausible(credential, offset: .zero, at: now)
        if onBackend, backendOffset >= .zero || !onHost { return backendOffset }
        if backendOffset != .zero, onHost { return .zero }
        return nil
    }

    /// Whether the engine accepts a credential the host hands over: the pin, and plausibility on the backend's time
    /// as the engine applies it (a handed-over credential measures no offset).
    package func acceptsPush(_ credential: IdentityCredential, pinned: String?, at now: Date) -> Bool {
        if let pinned, pinned != credential.email { return false }
        return Self.isPlausible(credential, offset: appliedOffset, at: now)
    }

    /// Whether `credential` has not expired at `now` on the backend's time as the engine applies it.
    package func isUnexpired(_ credential: IdentityCredential, at now: Date) -> Bool {
        credential.isValid(at: now.addingTimeInterval(appliedOffset.timeInterval))
    }

    /// When the installed credential expires on this host's clock.
    package var localExpiry: Date? {
        installed.map { $0.expirationDate.addingTimeInterval(-appliedOffset.timeInterval) }
    }

    package mutating func install(_ credential: IdentityCredential) {
        installed = credential
        pinnedEmail = pinnedEmail ?? credential.email
        phase = .established
        rejected = nil
        deferredPush = nil
    }
}
