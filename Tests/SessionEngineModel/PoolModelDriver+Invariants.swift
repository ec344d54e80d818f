import Foundation
package import SessionEngine
import SessionEngineTestKit
import Synchronization

/// Every member of a pool through a model probe of its own, fed as the pool publishes: the engine model's record of
/// one engine's events, states and fetch rules, per member rather than per account, since an account that leaves
/// and signs in again gets a new engine whose events count afresh.
package final class MemberProbes: Sendable {
    private struct State {
        var probes: [UInt64: ModelProbe] = [:]
        var accounts: [UInt64: AccountID] = [:]
        /// How many of each member's states have been checked against the transition table.
        var checkedStates: [UInt64: Int] = [:]
        var violations: [String] = []
        /// Whether the pool's last outage event began an outage.
        var outageHeld = false
        /// How many times the pool said its budget cannot keep up with its renewals.
        var budgetBehindReports = 0
    }

    private let state = SanitizedMutex(State())

    package init() {}

    /// The pool's observer.
    package func observe(member: UInt64, event: SessionPoolEvent) {
        if member == 0 {
            observeOutage(event)
            return
        }
        let probe = state.withLock { state -> ModelProbe? in
            if let known = state.accounts[member], known != event.account {
                state.violations.append("member \(member) of \(known) published an event of \(event.account)")
            }
            state.accounts[member] = event.account
            guard case .session = event.kind else { return nil }
            if let probe = state.probes[member] { return probe }
            let probe = ModelProbe()
            state.probes[member] = probe
            return probe
        }
        if case .session(let event) = event.kind { probe?.observe(event) }
    }

    /// The pool's own events: an outage begins, then ends, then perhaps begins again, never twice in a row; a budget
    /// behind its renewals is counted.
    private func observeOutage(_ event: SessionPoolEvent) {
        state.withLock { state in
            switch event.kind {
            case .outageBegan where !state.outageHeld: state.outageHeld = true
            case .outageEnded where state.outageHeld: state.outageHeld = false
            case .budgetBehind: state.budgetBehindReports += 1
            default:
                state.violations.append("the pool published \(event) while its outage held was \(state.outageHeld)")
            }
        }
    }

    /// Whether the pool's events say it holds fetches for an outage now.
    package var outageHeld: Bool { state.withLock { $0.outageHeld } }

    /// How many times the pool's events said its budget cannot keep up with its renewals.
    package var budgetBehindReports: Int { state.withLock { $0.budgetBehindReports } }

    package func probe(of member: UInt64) -> ModelProbe? { state.withLock { $0.probes[member] } }

    package var firstViolation: String? { state.withLock { $0.violations.first } }

    /// The member's states not yet checked, each with the state before it (a member starts signed out), and marks
    /// them checked.
    package func takeUncheckedStates(of member: UInt64) -> [(previous: SessionState, state: SessionState)] {
        guard let states = probe(of: member)?.states else { return [] }
        return state.withLock { state in
            let checked = state.checkedStates[member, default: 0]
            state.checkedStates[member] = states.count
            return (checked..<states.count).map { ($0 == 0 ? .signedOut : states[$0 - 1], states[$0]) }
        }
    }
}

/// The pool's rules after every step, and the engine model's invariants per account once the pool is idle.
extension PoolModelDriver {
    /// The pool's own rules: never more fetches in flight than the budget, never more starts in any second than rate
    /// plus bucket, no fetch still at the backend for an account that left.
    func checkPool() -> String? {
        if let failure = checkHookOrder(final: false) { return failure }
        let budget = Self.budget
        if fetcher.script.pendingCount > budget.maximumInFlight || pool.metrics.fetchesInFlight > budget.maximumInFlight
        {
            return "\(fetcher.script.pendingCount) fetches in flight, \(pool.metrics)"
        }
        let starts = fetcher.startTimes
        let allowed = budget.burst + Int(budget.startsPerSecond)
        for (index, start) in starts.enumerated() {
            let inWindow = starts[index...].prefix { $0 < start + .seconds(1) }.count
            if inWindow > allowed {
                return "\(inWindow) fetch starts within a second from \(start), at most \(allowed)"
            }
        }
        // A renewal admitted after its expiry is reported, once per backlog: never without one, never more often.
        let (late, reports) = (pool.metrics.renewalsPastDeadline, probes.budgetBehindReports)
        if (late > 0) != (reports > 0) || reports > late {
            return "\(late) renewals admitted after their expiry, \(reports) reports that the budget is behind"
        }
        if probes.outageHeld != pool.metrics.holdsForOutage {
            return
                "the pool holds fetches for an outage: \(pool.metrics.holdsForOutage); its events say \(probes.outageHeld)"
        }
        let held = Set(pool.accounts)
        for account in fetcher.accountsFetching where !held.contains(account) {
            return "a fetch for \(account) waits after it left the pool"
        }
        return nil
    }

    /// The engine's invariants for every account, as the engine model checks them for one engine: the account's
    /// member published a gapless sequence of events and only legal transitions (invariant 4), is in the state it last
    /// published, names only its own account and credential, hands out headers only of the credential it last
    /// installed and only before it expires, refusing with the state's code otherwise (invariants 1 and 2), leaves no
    /// caller waiting in a settled state, counted every event it published, started every fetch no earlier than its
    /// own announced backoff and `Retry-After` allowed (invariant 10), and has at most one fetch at the backend.
    func checkAccounts() -> String? {
        if let violation = probes.firstViolation { return violation }
        for start in fetcher.takeStarts() {
            guard let member = start.member, let probe = probes.probe(of: member) else { continue }
            // A start that waited for the budget is known only to a `Date`'s precision: within a microsecond of a
            // rule, it is at that rule's instant, which may belong before or after it.
            var time = start.time
            if let instant = probe.fetchRules(of: start.epoch).map(\.time).first(where: {
                $0 - time < .microseconds(1) && time - $0 < .microseconds(1)
            }) {
                time = instant
            }
            if let earliest = probe.earliestAllowedStart(in: start.epoch, ifNotAt: time) {
                return "invariant 10: a fetch for \(start.account) (member \(member), epoch \(start.epoch)) started at "
                    + "\(time) of uptime, before its rules allowed it (\(earliest))"
            }
        }
        for (account, count) in fetcher.outstandingByAccount where count > 1 {
            return "\(count) fetches for \(account) wait at the backend at once"
        }
        for account in names {
            if let failure = checkAccount(account) {
                return "\(account): \(failure)"
            }
        }
        return nil
    }

    private func checkAccount(_ account: AccountID) -> String? {
        guard let member = pool.memberSerial(of: account) else {
            if pool.state(of: account) != .signedOut { return "not held, but \(pool.state(of: account))" }
            do {
                _ = try pool.identityHeaders(for: account)
                return "not held, but the pool handed out headers"
            } catch {
                return error.code == .signedOut ? nil : "not held, but a read said \(error.code)"
            }
        }
        let state = pool.state(of: account)
        guard let probe = probes.probe(of: member) else {
            return state == .signedOut ? nil : "member \(member) is \(state) and published nothing"
        }
        if let violation = probe.firstViolation { return violation }
        for (previous, next) in probes.takeUncheckedStates(of: member) {
            if next == previous { return "invariant 4: \(next) was published twice in a row" }
            if !StateEdges.isLegal(from: previous, to: next) {
                return "invariant 4: illegal transition \(previous) → \(next)"
            }
        }
        let published = probe.states.last ?? .signedOut
        if state != published { return "the engine is \(state), it last published \(published)" }
        if let named = state.account, named != account { return "its engine is \(state)" }
        if let failure = Self.checkIdentity(of: account, state: state, probe: probe) { return failure }
        if let failure = checkFastPath(account, state: state) { return failure }
        guard let metrics = pool.metrics(for: account) else { return "held, but it has no metrics" }
        switch state {
        case .signedOut, .identified:
            if metrics.waiters > 0 { return "\(metrics.waiters) callers wait in \(state.name)" }
        case .switching, .renewing, .expired:
            break
        }
        if metrics.eventsPublished != probe.eventCount {
            return "it counted \(metrics.eventsPublished) events and published \(probe.eventCount)"
        }
        // The backend's clock agrees with the pool's: time a fetch waited for the budget (a full queue, an outage's
        // hold, a pause) must never be taken for a clock offset.
        if let applied = metrics.appliedClockOffset {
            return "it applied a clock offset of \(applied) while the clocks agree"
        }
        return nil
    }

    /// The state's identity is the last credential the member installed, of the account's own email.
    private static func checkIdentity(of account: AccountID, state: SessionState, probe: ModelProbe) -> String? {
        let email = email(account)
        switch state {
        case .identified(let identity), .renewing(let identity):
            guard let install = probe.lastInstall else { return "\(state) with nothing installed" }
            if identity.email != email || install.email != email { return "\(state) holds \(identity.email)" }
            if identity.epoch != install.epoch || identity.expiresAt != install.expiresAt {
                return "\(state) is not the last installed credential (epoch \(install.epoch))"
            }
        case .expired(let expired):
            if let install = probe.lastInstall, install.epoch == expired.epoch,
                expired.lastExpiresAt != install.expiresAt
            {
                return "\(state) names another credential than the last installed one"
            }
        case .signedOut, .switching:
            break
        }
        return nil
    }

    /// Invariants 1 and 2 on the member's read: only the state's credential, only before it expires, else the
    /// state's code, never anonymous. The read goes to the member's store, as the pool's read does after its lookup,
    /// so that checking does not stamp the account as used and change which account the pool evicts.
    private func checkFastPath(_ account: AccountID, state: SessionState) -> String? {
        let now = clock.now
        var usable: SessionIdentity?
        switch state {
        case .identified(let identity), .renewing(let identity):
            if Double(identity.expiresAt) > now.timeIntervalSince1970 { usable = identity }
        case .signedOut, .switching, .expired:
            break
        }
        do {
            let headers = try pool.headersWithoutUse(for: account)
            guard let credential = try? headers.credential() else { return "invariant 2: headers not a credential" }
            guard let usable else { return "invariant 1: the read handed out a credential in \(state)" }
            if credential.email != usable.email || credential.expiresAt != usable.expiresAt {
                return "invariant 1: the read handed out \(credential.email)'s credential of \(credential.expiresAt)"
            }
            return nil
        } catch {
            let expected: SessionError.Code =
                switch state {
                case .signedOut: .signedOut
                case .switching: .switching
                case .identified, .renewing, .expired: .invalidIdentity
                }
            if error.code != expected { return "the read said \(error.code) in \(state)" }
            if usable != nil { return "the read refused a valid credential in \(state)" }
            return nil
        }
    }

}
