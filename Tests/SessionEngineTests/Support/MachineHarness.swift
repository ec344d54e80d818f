import Foundation
import SessionEngineModel

@testable import SessionEngine

/// A state machine with a model of its owner: the fetch and the timer the owner would be running, the results it
/// has retired, and the time. Each input is checked for legality against the state before and after it.
struct MachineHarness {
    typealias Machine = SessionStateMachine

    static let configuration = SessionConfiguration(
        retry: RetryPolicy(initial: .seconds(1), multiplier: 2, cap: .seconds(60)),
        // Misconfigurations (another user's credential, a malformed one) retry slower, within the same cap, so the
        // liveness bounds hold for both.
        misconfigurationRetry: RetryPolicy(initial: .seconds(10), multiplier: 2, cap: .seconds(60)),
        minimumFetchInterval: .seconds(5)
    )
    static let otherEmail = "mallory@example.com"
    /// The longest a planned fetch may wait: the backoff cap, or the longest delay a backend may impose.
    static let longestWait = max(
        configuration.retry.cap, configuration.misconfigurationRetry.cap, configuration.maximumRetryAfter)

    var machine: Machine
    var now = SessionInstant(wall: Date(timeIntervalSince1970: 1_800_000_000), uptime: .zero)
    /// The fetch the owner is running, if any.
    var runningFetch: FetchID?
    /// The timer the owner has armed, if any.
    var ownerTimer: TimerSpec?
    var retiredFetches: [FetchID] = []
    var retiredTimers: [TimerID] = []
    /// Every credential delivered, newest last.
    var credentials: [IdentityCredential] = []
    /// The change whose preparation the machine asked for and the owner has not finished.
    var pendingPreparation: UInt64?
    /// The machine told the owner the engine has shut down.
    var finished = false
    /// The machine asked the owner to watch a graceful shutdown's grace period.
    var gracePending = false
    /// Callers waiting for an outcome: sign-in and switch callers for the identity, `renew()` callers for the next
    /// fetch outcome.
    var waiters: [(epoch: UInt64, kind: Machine.WaiterKind)] = []
    /// The epoch each credential was delivered in, by signature.
    var origins: [String: UInt64] = [:]
    /// The epoch and monotonic time of the last fetch start.
    var lastFetchStart: (epoch: UInt64, uptime: Duration)?
    private var serial: UInt64 = 0

    /// A machine seeded with `seed`; `coordinated` as under a fleet's coordinator.
    init(seed: UInt64, coordinated: Bool = false) {
        machine = Machine(
            configuration: Machine.Configuration(Self.configuration, coordinated: coordinated),
            seed: seed)
    }

    var session: Machine.AccountSession? { machine.state.session }

    private var wallSeconds: Int64 { Int64(now.wall.timeIntervalSince1970.rounded(.down)) }

    /// The backend's clock, as the machine reads it.
    private var backendSeconds: Int64 { Int64(machine.backendTime(now).timeIntervalSince1970.rounded(.down)) }

    /// When the credential expires on the local wall clock, given the offset the machine applies.
    func localExpiry(of credential: IdentityCredential) -> Date {
        machine.localTime(ofBackend: credential.expirationDate)
    }

    /// A credential for `email` that expires at `expiresAt`, with a signature no other credential has.
    mutating func credential(email: String, expiresAt: Int64) -> IdentityCredential {
        serial += 1
        let hex = String(serial, radix: 16)
        let signature = String(repeating: "0", count: 64 - hex.count) + hex
        let credential = IdentityCredential(
            validatedEmail: email,
            expiresAt: max(1, expiresAt),
            signature: IdentityCredential.Signature(lowercaseHex: signature)!,
            properties: nil
        )
        credentials.append(credential)
        origins[signature] = machine.epoch
        return credential
    }

    /// A credential for the current or target account that lives `lifetime` seconds on the backend's clock.
    mutating func goodCredential(lifetime: Int) -> IdentityCredential? {
        guard let account = machine.currentAccount else { return nil }
        let email = session?.pinnedEmail ?? exampleEmail(for: account)
        return credential(email: email, expiresAt: backendSeconds + Int64(lifetime))
    }

    /// Moves both clocks forward by `duration`.
    mutating func advance(by duration: Duration) {
        now.uptime += duration
        now.wall += duration.timeInterval
    }

    /// Takes the running fetch's result away from the owner; `nil` when no fetch runs.
    private mutating func deliver() -> FetchID? {
        guard let id = runningFetch else { return nil }
        runningFetch = nil
        retiredFetches.append(id)
        return id
    }

    /// Applies one input and returns what it broke; `nil` when the input does not apply (its owner would never
    /// deliver it in this state).
    mutating func apply(_ input: MachineInput) -> [String]? {
        let before = self
        var actions: [Machine.Action] = []
        var renewDecision: Machine.RenewDecision?
        var liveTerminalFailure = false
        var pushedCredential: IdentityCredential?
        switch input {
        case .signIn(let account):
            if case .began(let epoch, let began) = machine.changeAccount(to: account, at: now) {
                actions = began
                waiters.append((epoch, .identity))
            }
        case .signOut:
            if case .began(_, let began) = machine.changeAccount(to: nil, at: now) { actions = began }
        case .prepare:
            _ = machine.hooksDue(epoch: machine.epoch)
            actions = machine.changePrepared(epoch: machine.epoch, at: now)
        case .prepareStale:
            actions = machine.changePrepared(epoch: machine.epoch &- 1, at: now)
        case .succeed(let lifetime):
            guard runningFetch != nil, let credential = goodCredential(lifetime: lifetime), let id = deliver() else {
                return nil
            }
            actions = machine.fetchSucceeded(id, credential: credential, at: now)
        case .succeedExpired, .succeedTooLong, .succeedOtherEmail:
            guard runningFetch != nil, let account = machine.currentAccount else { return nil }
            let email =
                input == .succeedOtherEmail ? Self.otherEmail : session?.pinnedEmail ?? exampleEmail(for: account)
            let expiresAt =
                switch input {
                case .succeedExpired: wallSeconds - 60
                case .succeedTooLong: wallSeconds + 86_400 + 3600
                default: wallSeconds + 900
                }
            let credential = credential(email: email, expiresAt: expiresAt)
            actions = machine.fetchSucceeded(deliver()!, credential: credential, at: now)
        case .failTransiently:
            guard let id = deliver() else { return nil }
            actions = machine.fetchFailed(id, error: .fetchFailed("timed out"), at: now)
        case .failTerminally:
            guard let id = deliver() else { return nil }
            liveTerminalFailure = machine.fetchInFlight == id
            actions = machine.fetchFailed(id, error: .backendSessionEnded(), at: now)
        case .staleResult:
            let id = retiredFetches.last ?? .max
            let credential = credential(email: "alice@example.com", expiresAt: wallSeconds + 900)
            actions = machine.fetchSucceeded(id, credential: credential, at: now)
        case .fireTimer:
            guard let timer = ownerTimer, timer.isDue(at: now) else { return nil }
            ownerTimer = nil
            retiredTimers.append(timer.id)
            actions = machine.timerFired(timer.id, at: now)
        case .advanceToTimer:
            guard let timer = ownerTimer else { return nil }
            var delay = Duration.seconds(365 * 86_400)
            if let uptime = timer.uptimeDeadline { delay = min(delay, uptime - now.uptime) }
            if let wall = timer.wallDeadline { delay = min(delay, .seconds(wall.timeIntervalSince(now.wall))) }
            advance(by: max(.zero, delay))
            ownerTimer = nil
            retiredTimers.append(timer.id)
            actions = machine.timerFired(timer.id, at: now)
        case .fireStaleTimer:
            actions = machine.timerFired(retiredTimers.last ?? .max, at: now)
        case .renew:
            let decision = machine.renewRequested(at: now)
            renewDecision = decision
            if case .wait(let epoch, let waitActions) = decision {
                actions = waitActions
                waiters.append((epoch, .nextOutcome))
            }
        case .rejectInstalled:
            guard let credential = session?.credential ?? credentials.last else { return nil }
            actions = machine.credentialRejected(credential, at: now)
        case .rejectOlder:
            let installed = session?.credential
            guard let older = credentials.last(where: { $0 != installed }) else { return nil }
            actions = machine.credentialRejected(older, at: now)
        case .advance(let seconds):
            advance(by: .seconds(seconds))
        case .jumpWall(let seconds):
            now.wall += TimeInterval(seconds)
        case .shutdown:
            if case .began(_, let began) = machine.shutdownRequested(at: now) { actions = began }
        case .failWithRetryAfter(let seconds):
            guard let id = deliver() else { return nil }
            let error = SessionError(.fetchFailed, reason: "429", isTransient: true, retryAfter: .seconds(seconds))
            actions = machine.fetchFailed(id, error: error, at: now)
        case .succeedSkewed(let offset):
            guard runningFetch != nil, let account = machine.currentAccount else { return nil }
            let email = session?.pinnedEmail ?? exampleEmail(for: account)
            let credential = credential(email: email, expiresAt: wallSeconds + Int64(offset) + 900)
            actions = machine.fetchSucceeded(
                deliver()!, credential: credential, serverClockOffset: .seconds(offset), at: now)
        case .push(let lifetime):
            guard let account = machine.currentAccount, let credential = goodCredential(lifetime: lifetime) else {
                return nil
            }
            pushedCredential = credential
            if case .installed(let installed) = machine.credentialPushed(credential, for: account, at: now) {
                actions = installed
            }
        case .pushExpired:
            guard let account = machine.currentAccount else { return nil }
            let email = session?.pinnedEmail ?? exampleEmail(for: account)
            let credential = credential(email: email, expiresAt: backendSeconds - 60)
            pushedCredential = credential
            if case .installed(let installed) = machine.credentialPushed(credential, for: account, at: now) {
                actions = installed
            }
        case .pushForOther:
            let credential = credential(email: "zed@example.com", expiresAt: backendSeconds + 900)
            pushedCredential = credential
            if case .installed(let installed) = machine.credentialPushed(credential, for: "zed", at: now) {
                actions = installed
            }
        case .signInWith(let account):
            let credential = credential(email: exampleEmail(for: account), expiresAt: backendSeconds + 900)
            switch machine.changeAccount(to: account, pushing: credential, at: now) {
            case .began(let epoch, let began):
                actions = began
                waiters.append((epoch, .identity))
                origins[credential.signature] = epoch
            case .alreadyCurrent:
                // The owner hands the credential over to the current account, as a push.
                pushedCredential = credential
                if case .installed(let installed) = machine.credentialPushed(credential, for: account, at: now) {
                    actions = installed
                }
            case .refused(_, let refused):
                actions = refused
            case .shutDown:
                break
            }
        case .gracefulShutdown:
            actions = machine.gracefulShutdownRequested(grace: .seconds(30), at: now)
        case .graceEnded:
            guard gracePending else { return nil }
            actions = machine.gracePeriodEnded(at: now)
        }
        var problems = perform(actions)
        if let pushedCredential, input == .pushExpired || input == .pushForOther,
            machine.usableCredential == pushedCredential
        {
            problems.append("installed a credential that should have been refused (\(input))")
        }
        problems += checkTransition(
            from: before,
            input: input,
            actions: actions,
            renewDecision: renewDecision,
            liveTerminalFailure: liveTerminalFailure
        )
        problems += checkState()
        return problems
    }

    /// Plays the owner: keeps track of the fetch and the timer the actions start and stop.
    private mutating func perform(_ actions: [Machine.Action]) -> [String] {
        var problems: [String] = []
        for action in actions {
            switch action {
            case .startFetch(let request):
                let id = request.id
                if runningFetch != nil { problems.append("started fetch \(id) while fetch \(runningFetch!) ran") }
                runningFetch = id
                let interval = Self.configuration.minimumFetchInterval
                if let last = lastFetchStart, last.epoch == machine.epoch, now.uptime - last.uptime < interval {
                    problems.append("fetches started \(now.uptime - last.uptime) apart in one account session")
                }
                lastFetchStart = (machine.epoch, now.uptime)
            case .cancelFetch:
                if let id = runningFetch { retiredFetches.append(id) }
                runningFetch = nil
            case .scheduleTimer(let spec):
                if let timer = ownerTimer { retiredTimers.append(timer.id) }
                ownerTimer = spec
            case .cancelTimer:
                if let timer = ownerTimer { retiredTimers.append(timer.id) }
                ownerTimer = nil
            case .prepareChange(let epoch):
                pendingPreparation = epoch
            case .failAllWaiters:
                waiters.removeAll()
            case .finishShutdown:
                if finished { problems.append("finished the shutdown twice") }
                finished = true
            case .resolveWaiters(let epoch, let kinds, _):
                waiters.removeAll { $0.epoch == epoch && kinds.contains($0.kind) }
            case .startGracePeriod:
                if gracePending { problems.append("started a second grace period") }
                gracePending = true
            case .emit, .cancelWork, .refuseNewWork:
                break
            }
        }
        return problems
    }

    private func checkTransition(
        from before: MachineHarness,
        input: MachineInput,
        actions: [Machine.Action],
        renewDecision: Machine.RenewDecision?,
        liveTerminalFailure: Bool
    ) -> [String] {
        var problems: [String] = []
        let old = before.machine.publicState
        let new = machine.publicState
        if !StateEdges.isLegal(from: old, to: new) {
            problems.append("illegal transition \(old.name) → \(new.name) (\(old) → \(new))")
        }
        if input.isStale {
            if machine.state != before.machine.state || machine.timer != before.machine.timer || !actions.isEmpty {
                problems.append("a stale input was not a no-op: \(actions)")
            }
        }

        let epochChanged = machine.epoch != before.machine.epoch
        let has: ((Machine.Action) -> Bool) -> Bool = { actions.contains(where: $0) }
        if epochChanged {
            if machine.epoch != before.machine.epoch + 1 { problems.append("the epoch jumped") }
            if !has({ if case .cancelTimer = $0 { true } else { false } }) {
                problems.append("an account change did not cancel the timer")
            }
            let cancelledWork = has { action in
                guard case .cancelWork(let epoch, let account) = action else { return false }
                return epoch == machine.epoch && account == before.machine.currentAccount
            }
            if !cancelledWork { problems.append("an account change did not cancel the previous work: \(actions)") }
            let failedWaiters = has { action in
                guard case .resolveWaiters(let epoch, let kinds, .failed) = action else { return false }
                return epoch == before.machine.epoch && kinds == [.identity, .nextOutcome]
            }
            if !failedWaiters { problems.append("an account change left the previous epoch's callers waiting") }
            let cancelledFetch = has { if case .cancelFetch = $0 { true } else { false } }
            // A terminal failure ends the fetch that failed: there is nothing left to cancel.
            if cancelledFetch != (before.machine.fetchInFlight != nil && !liveTerminalFailure) {
                problems.append("an account change cancelled the fetch \(cancelledFetch ? "without" : "despite") one")
            }
            guard case .switching(let change) = machine.state, !change.prepared,
                change.target?.account == machine.currentAccount
            else {
                problems.append("an account change did not begin switching")
                return problems
            }
            if !has({ if case .prepareChange(machine.epoch) = $0 { true } else { false } }) {
                problems.append("an account change did not ask for its preparation")
            }
        } else if has({ if case .cancelWork = $0 { true } else { false } }) {
            problems.append("work was cancelled without an account change")
        } else if has({ if case .cancelFetch = $0 { true } else { false } }), !input.isPush {
            // Only a credential the host hands over replaces a running fetch.
            problems.append("a fetch was cancelled without an account change")
        }

        var starts = 0
        for action in actions {
            switch action {
            case .startFetch(let request):
                let (id, account) = (request.id, request.account)
                starts += 1
                if machine.fetchInFlight != id {
                    problems.append("startFetch \(id) but the phase is not inFlight(\(id))")
                }
                if machine.currentAccount != account { problems.append("startFetch for \(account), not the account") }
            case .resolveWaiters(let epoch, _, let outcome):
                if epoch != machine.epoch && !(epochChanged && epoch == before.machine.epoch) {
                    problems.append("resolved waiters of epoch \(epoch) in epoch \(machine.epoch)")
                }
                if case .installed(let credential) = outcome, machine.usableCredential != credential {
                    problems.append("resolved waiters with a credential that is not installed")
                }
            case .emit(.renewed(let identity, let fetch), let epoch):
                if new != .identified(identity) { problems.append("reported a renewal to \(identity) but is \(new)") }
                if epoch != identity.epoch { problems.append("stamped a renewal of epoch \(identity.epoch) \(epoch)") }
                if fetch.number < 1 { problems.append("reported attempt \(fetch.number)") }
            case .emit(.fetchFailed(let failure), let epoch):
                if failure.account != before.machine.currentAccount {
                    problems.append("reported a failure of another account")
                }
                if epoch != before.machine.epoch { problems.append("stamped a failure with epoch \(epoch)") }
            case .finishShutdown:
                if machine.state != .shutDown { problems.append("finished the shutdown in \(machine.publicState)") }
            case .emit, .cancelFetch, .cancelTimer, .scheduleTimer, .cancelWork, .prepareChange, .failAllWaiters,
                .refuseNewWork, .startGracePeriod:
                break
            }
        }
        if starts > 1 { problems.append("started \(starts) fetches at once") }
        if starts > 0 && machine.currentAccount == nil { problems.append("started a fetch without an account") }
        if liveTerminalFailure {
            guard epochChanged, case .switching(let change) = machine.state, change.target == nil else {
                problems.append("a terminal failure did not begin signing out: \(machine.publicState)")
                return problems
            }
        }
        if ownerTimer != machine.timer {
            problems.append("the owner's timer \(String(describing: ownerTimer)) is not the machine's")
        }
        if runningFetch != machine.fetchInFlight {
            problems.append("the owner runs fetch \(String(describing: runningFetch)), the machine expects one")
        }

        switch renewDecision {
        case .current(let credential):
            if credential != before.machine.usableCredential || !machine.isValid(credential, at: now) {
                problems.append("renew returned a credential that is not the usable one")
            }
            if machine.state != before.machine.state { problems.append("renew returned the current one but changed") }
        case .wait(let epoch, _):
            if epoch != machine.epoch { problems.append("renew waits for epoch \(epoch) in \(machine.epoch)") }
        case .fail:
            if machine.currentAccount != nil { problems.append("renew failed with an account") }
        case nil:
            break
        }
        return problems
    }

    /// What must hold in every state, so that nothing waits forever.
    private func checkState() -> [String] {
        var problems: [String] = []
        let state = machine.state
        let timer = machine.timer
        if let session, session.epoch != machine.epoch {
            problems.append("the session's epoch \(session.epoch) is not the machine's \(machine.epoch)")
        }
        switch state {
        case .signedOut:
            if timer != nil { problems.append("a timer runs while signed out") }
        case .shutDown:
            if timer != nil { problems.append("a timer runs after shutdown") }
            if !waiters.isEmpty { problems.append("\(waiters.count) callers wait after shutdown") }
            if !finished { problems.append("shut down without finishing") }
        case .switching(let change):
            if change.epoch != machine.epoch { problems.append("the change's epoch is stale") }
            if !change.prepared && pendingPreparation != change.epoch {
                problems.append("nobody was asked to prepare the change of epoch \(change.epoch)")
            }
            if !change.prepared {
                if timer != nil { problems.append("a timer runs before the change is prepared") }
                if let target = change.target, target.fetch != .idle || target.credential != nil {
                    problems.append("an unprepared change already fetched")
                }
            } else if change.target == nil {
                problems.append("a prepared sign-out is still switching")
            } else if case .idle = change.target!.fetch {
                problems.append("a prepared change has no fetch")
            }
        case .identified(let session):
            if session.fetch != .idle { problems.append("identified while fetching: \(session.fetch)") }
            guard let credential = session.credential, let renewAt = session.renewAt else {
                problems.append("identified without a credential or a renewal time")
                break
            }
            guard let wall = timer?.wallDeadline, wall <= min(renewAt, localExpiry(of: credential)) else {
                problems.append("identified without a timer for renewal: \(String(describing: timer))")
                break
            }
        case .renewing(let session):
            if session.fetch == .idle { problems.append("renewing without a fetch") }
            guard let credential = session.credential, let wall = timer?.wallDeadline,
                wall <= localExpiry(of: credential)
            else {
                problems.append("renewing without a timer for expiry: \(String(describing: timer))")
                break
            }
        case .expired(let session):
            if session.fetch == .idle { problems.append("expired with no renewal planned") }
        }
        if let session, case .waiting(let until, _) = session.fetch {
            if timer?.uptimeDeadline == nil || timer!.uptimeDeadline! > until {
                problems.append("a fetch waits until \(until) without a timer: \(String(describing: timer))")
            }
        }
        let usable: Bool
        switch state {
        case .identified, .renewing: usable = true
        case .signedOut, .switching, .expired, .shutDown: usable = false
        }
        if usable != (machine.usableCredential != nil) { problems.append("the usable credential disagrees with state") }
        if let credential = machine.usableCredential, origins[credential.signature] != machine.epoch {
            problems.append("the usable credential was fetched in another epoch")
        }
        if let session, case .waiting(let until, _) = session.fetch,
            until > now.uptime + Self.longestWait + Self.configuration.minimumFetchInterval
        {
            problems.append("a fetch waits \(until - now.uptime), beyond the backoff cap")
        }
        // A caller may wait only for an outcome that is still coming: one of the current epoch, while a fetch is
        // running or planned.
        if waiters.contains(where: { $0.epoch != machine.epoch }) {
            problems.append("callers of an earlier epoch are still waiting")
        }
        switch state {
        case .signedOut, .identified:
            if !waiters.isEmpty { problems.append("\(waiters.count) callers wait in \(machine.publicState.name)") }
        case .switching, .renewing, .expired, .shutDown:
            break
        }
        return problems
    }

    /// Plays the owner with a backend that succeeds from now on; returns why `identified` was not reached within
    /// the backoff cap of monotonic time, if it was not.
    mutating func recover() -> String? {
        guard machine.currentAccount != nil else { return nil }
        let start = now.uptime
        let bound = Self.longestWait + Self.configuration.minimumFetchInterval + .seconds(1)
        for _ in 0..<100 {
            if case .identified = machine.state { return nil }
            let input: MachineInput
            if case .switching(let change) = machine.state, !change.prepared {
                input = .prepare
            } else if runningFetch != nil {
                input = .succeed(lifetime: 900)
            } else if ownerTimer != nil {
                input = .advanceToTimer
            } else {
                return "stuck in \(machine.publicState) with no fetch and no timer"
            }
            if let problems = apply(input), !problems.isEmpty {
                return "\(input): \(problems.joined(separator: "; "))"
            }
            if now.uptime - start > bound {
                return "not identified \(now.uptime - start) after fetches began to succeed: \(machine.publicState)"
            }
        }
        return "not identified after 100 steps: \(machine.publicState)"
    }

    // MARK: Shapes

    /// What distinguishes states for the exhaustive check: the case, the fetch phase and the flags that change what
    /// an input does, without times, IDs or credentials.
    struct Shape: Hashable, CustomStringConvertible {
        var name: String
        var phase: String
        var hasCredential: Bool
        var credentialValid: Bool
        var renewedAfterRejection: Bool
        var rejected: Bool
        var failures: Bool
        var expiredReason: String
        var timer: Bool
        var waiting: Bool
        var skewed: Bool
        var graceful: Bool
        var pushedPending: Bool
        var heldByServer: Bool

        var coverageKey: String { "\(name) \(phase)" }
        var description: String {
            "\(name) \(phase)\(hasCredential ? " credential" : "")\(credentialValid ? "" : " stale")"
                + "\(renewedAfterRejection ? " renewedAfterRejection" : "")\(rejected ? " rejected" : "")"
                + "\(failures ? " failures" : "")\(expiredReason)\(timer ? " timer" : "")"
                + "\(waiting ? " waiting callers" : "")\(skewed ? " skewed" : "")\(graceful ? " graceful" : "")"
                + "\(pushedPending ? " pushed" : "")\(heldByServer ? " heldByServer" : "")"
        }
    }

    var shape: Shape {
        var name: String
        switch machine.state {
        case .signedOut: name = "signedOut"
        case .switching(let change):
            name = change.prepared ? "switching(prepared)" : "switching(unprepared)"
            if change.target == nil { name = "switching(unprepared, signing out)" }
            if change.shutsDown { name = "switching(unprepared, shutting down)" }
        case .identified: name = "identified"
        case .renewing: name = "renewing"
        case .expired: name = "expired"
        case .shutDown: name = "shutDown"
        }
        let phase: String =
            switch session?.fetch {
            case nil, .idle: "idle"
            case .inFlight(_, let reason): "inFlight(\(reason))"
            case .waiting(_, let reason): "waiting(\(reason))"
            }
        return Shape(
            name: name,
            phase: phase,
            hasCredential: session?.credential != nil,
            credentialValid: session?.credential.map { machine.isValid($0, at: now) } ?? true,
            renewedAfterRejection: session?.renewedAfterRejection ?? false,
            rejected: session?.rejectedSignature != nil,
            failures: (session?.failures ?? 0) > 0,
            expiredReason: session?.expiredReason.map { " \($0)" } ?? "",
            timer: machine.timer != nil,
            waiting: !waiters.isEmpty,
            skewed: machine.serverClockOffset != .zero,
            graceful: machine.gracefulShutdown,
            pushedPending: { if case .switching(let change) = machine.state { change.pushed != nil } else { false } }(),
            heldByServer: (session?.retryNotBefore).map { $0 > now.uptime } ?? false
        )
    }
}

extension SessionStateMachine.State {
    /// The account session the state holds: the current one, or a switch's target.
    var session: SessionStateMachine.AccountSession? {
        switch self {
        case .signedOut, .shutDown: nil
        case .switching(let change): change.target
        case .identified(let session), .renewing(let session), .expired(let session): session
        }
    }
}
