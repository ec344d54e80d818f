import Foundation
import Testing

@testable import SessionEngine

/// One named test per row of the transition table in `Design/state-machine.md`, and one per fetch decision.
///
/// Each test builds the machine in the row's from-state with a few real inputs (through ``MachineHarness``, whose
/// oracle checks each of them), feeds the row's input directly, and checks the state and the actions it returns.
/// The tests are split by from-state over the files of this folder.
@Suite struct SessionStateMachineRuleTests {
    typealias Machine = SessionStateMachine

    /// What an action does, with the data a rule decides and without what it cannot (IDs, random delays).
    enum Effect: Hashable {
        case startFetch(AccountID, epoch: UInt64)
        case cancelFetch
        case scheduleTimer
        case cancelTimer
        case cancelWork(before: UInt64, account: AccountID?)
        case renewed(AccountID, pushed: Bool)
        case fetchFailed(SessionError.Code)
        case rejected(renewing: Bool)
        case clockSkew(ClockSkewReport.Finding?)
        case resolve(epoch: UInt64, Set<Machine.WaiterKind>, Resolution)
        case prepareChange(epoch: UInt64)
        case failAllWaiters(SessionError.Code)
        case finishShutdown
        case refuseNewWork
        case startGracePeriod(Duration)
        case otherEvent(String)
    }

    /// How waiting callers are resolved.
    enum Resolution: Hashable {
        case installed(IdentityCredential)
        case failed(SessionError.Code)
    }

    /// Sign-in and switch callers, and `renew()` callers.
    static let everyone: Set<Machine.WaiterKind> = [.identity, .nextOutcome]
    /// `renew()` callers only: a transient failure does not resolve a sign-in.
    static let renewCallers: Set<Machine.WaiterKind> = [.nextOutcome]

    static func effects(_ actions: [Machine.Action]) -> [Effect] {
        actions.map { action in
            switch action {
            case .startFetch(let request): .startFetch(request.account, epoch: request.epoch)
            case .cancelFetch: .cancelFetch
            case .scheduleTimer: .scheduleTimer
            case .cancelTimer: .cancelTimer
            case .cancelWork(let before, let account): .cancelWork(before: before, account: account)
            case .emit(.renewed(let identity, let fetch), _): .renewed(identity.account, pushed: fetch.pushed)
            case .emit(.fetchFailed(let failure), _): .fetchFailed(failure.error.code)
            case .emit(.credentialRejected(let report), _): .rejected(renewing: report.renewing)
            case .emit(.clockSkewSuspected(let report), _): .clockSkew(report.finding)
            case .emit(let kind, _): .otherEvent("\(kind)")
            case .resolveWaiters(let epoch, let kinds, .installed(let credential)):
                .resolve(epoch: epoch, kinds, .installed(credential))
            case .resolveWaiters(let epoch, let kinds, .failed(let error)):
                .resolve(epoch: epoch, kinds, .failed(error.code))
            case .prepareChange(let epoch): .prepareChange(epoch: epoch)
            case .failAllWaiters(let error): .failAllWaiters(error.code)
            case .finishShutdown: .finishShutdown
            case .refuseNewWork: .refuseNewWork
            case .startGracePeriod(let grace): .startGracePeriod(grace)
            }
        }
    }

    static func effects(_ decision: some SessionDecision) -> [Effect] { effects(decision.actions) }

    /// The actions of beginning a change from `account` (or none) in `epoch - 1` to epoch `epoch`, whose previous
    /// callers fail with `error`.
    static func changeBegun(
        epoch: UInt64,
        leaving account: AccountID?,
        cancellingFetch: Bool = false,
        waitersFail error: SessionError.Code = .accountChanged
    ) -> [Effect] {
        (cancellingFetch ? [.cancelFetch] : []) + [
            .cancelTimer,
            .cancelWork(before: epoch, account: account),
            .resolve(epoch: epoch - 1, everyone, .failed(error)),
            .prepareChange(epoch: epoch),
        ]
    }

    /// The actions of installing `credential` for `account` in `epoch`.
    static func installed(
        _ credential: IdentityCredential,
        for account: AccountID,
        epoch: UInt64,
        pushed: Bool = false
    ) -> [Effect] {
        [.scheduleTimer, .renewed(account, pushed: pushed), .resolve(epoch: epoch, everyone, .installed(credential))]
    }
}

extension MachineHarness {
    /// A machine with no account.
    static func signedOut() -> MachineHarness { MachineHarness(seed: 1) }

    /// Signing in to `account`, before the change is prepared.
    static func switching(to account: AccountID) -> MachineHarness {
        var harness = signedOut()
        harness.run(.signIn(account))
        return harness
    }

    /// Signing in to `account`, prepared: the first fetch runs.
    static func signingIn(as account: AccountID) -> MachineHarness {
        var harness = switching(to: account)
        harness.run(.prepare)
        return harness
    }

    /// Identified as `account` with a credential of fifteen minutes, installed at uptime zero.
    static func identified(as account: AccountID) -> MachineHarness {
        var harness = signingIn(as: account)
        harness.run(.succeed(lifetime: 900))
        return harness
    }

    /// Renewing `account`'s credential at its renewal time: the renewal fetch runs.
    static func renewing(as account: AccountID) -> MachineHarness {
        var harness = identified(as: account)
        harness.run(.advanceToTimer)
        return harness
    }

    /// `account`'s credential expired while its renewal fetch runs.
    static func expired(as account: AccountID) -> MachineHarness {
        var harness = renewing(as: account)
        harness.run(.advanceToTimer)
        return harness
    }

    /// Applies each input as its owner would, recording an issue if it does not apply or breaks a rule the
    /// harness checks.
    mutating func run(_ inputs: MachineInput..., sourceLocation: SourceLocation = #_sourceLocation) {
        for input in inputs {
            let problems = apply(input)
            #expect(problems == [], "\(input)", sourceLocation: sourceLocation)
        }
    }

    /// Brings the owner's model up to date after inputs fed to the machine directly, as if the owner had performed
    /// their actions, so that later inputs can go through ``run(_:sourceLocation:)`` again.
    mutating func syncOwner() {
        runningFetch = machine.fetchInFlight
        ownerTimer = machine.timer
        if case .switching(let change) = machine.state, !change.prepared { pendingPreparation = change.epoch }
    }

    /// A credential for the current or target account that lives `lifetime` seconds on the backend's clock.
    mutating func freshCredential(lifetime: Int) -> IdentityCredential {
        goodCredential(lifetime: lifetime)!
    }

    /// Why the published state is `expired`, when it is.
    var expiredReason: ExpiredIdentity.Reason? {
        guard case .expired(let expired) = machine.publicState else { return nil }
        return expired.reason
    }

    /// The installed or target account session's fetch phase.
    var fetch: SessionStateMachine.FetchPhase? { session?.fetch }

    /// The running fetch's ID; records an issue when none runs.
    func fetchID(sourceLocation: SourceLocation = #_sourceLocation) throws -> FetchID {
        try #require(machine.fetchInFlight, sourceLocation: sourceLocation)
    }
}
