import Foundation
package import SessionEngine
import SessionEngineTestKit

/// The invariants the driver checks after every step, against the reference model and the engine's typed seam.
extension EngineModelDriver {

    package func check() throws {
        if let violation = probe.firstViolation ?? fetcher.violation { throw Violation(violation) }
        if let violation = probe.checkResumes() { throw Violation(violation) }
        try checkFetchStarts()
        try checkStates()
        try checkModel()
        try checkHooks()
        _ = try checkFastPath()
        let metrics = engine.metrics
        switch engine.state {
        case .signedOut, .identified:
            if metrics.waiters > 0 {
                throw Violation(
                    "\(metrics.waiters) callers wait in \(engine.state.name) for an outcome that never comes: "
                        + activity
                )
            }
        case .switching, .renewing, .expired:
            break
        }
        if metrics.fetchesStarted != fetcher.total {
            throw Violation("the engine started \(metrics.fetchesStarted) fetches, the backend saw \(fetcher.total)")
        }
        if metrics.eventsPublished != probe.eventCount {
            throw Violation("the engine counted \(metrics.eventsPublished) events, it published \(probe.eventCount)")
        }
    }

    /// Invariant 4: the unbounded subscribers saw exactly the engine's sequence of states, each an edge of the table.
    package func checkStates() throws {
        let states = subscribers[0].log.states
        let published = probe.states
        guard states.count == published.count + 1, states.first == .signedOut else {
            throw Violation(
                "invariant 4: the subscriber saw \(states.count) states, the engine published \(published.count + 1)")
        }
        while checkedStates < states.count {
            let index = checkedStates
            let (previous, state) = (states[index - 1], states[index])
            if state != published[index - 1] {
                throw Violation(
                    "invariant 4: the subscriber saw \(state) where the engine published \(published[index - 1])")
            }
            if state == previous { throw Violation("invariant 4: \(state) was published twice in a row") }
            if !StateEdges.isLegal(from: previous, to: state) {
                throw Violation("invariant 4: illegal transition \(previous) → \(state)")
            }
            checkedStates += 1
        }
        if engine.state != states.last {
            throw Violation("invariant 4: the engine is \(engine.state), its subscriber last saw \(states.last!)")
        }
        for subscriber in subscribers.dropFirst() where subscriber.active {
            if subscriber.log.states != Array(states[subscriber.baseline...]) {
                throw Violation("invariant 4: a subscriber since state \(subscriber.baseline) saw another sequence")
            }
        }
        if subscribers.contains(where: { $0.log.dropped }) { throw Violation("an unbounded subscriber lost events") }
    }

    package func checkModel() throws {
        let state = engine.state
        var expected: Bool
        switch model.phase {
        case .signedOut:
            expected = state == .signedOut
        case .awaitingFirst:
            if case .expired(let expired) = state {
                expected =
                    expired
                    == ExpiredIdentity(
                        account: model.account!,
                        reason: .unavailable,
                        lastExpiresAt: nil,
                        epoch: model.epoch
                    )
            } else {
                expected = state == .switching(from: model.from, to: model.account)
            }
        case .established:
            let installed = model.installed!
            let identity = SessionIdentity(account: model.account!, credential: installed, epoch: model.epoch)
            switch state {
            case .identified(let current), .renewing(let current):
                expected = current == identity && model.rejected != installed.signature
            case .expired(let expired):
                expected =
                    expired.account == model.account && expired.epoch == model.epoch
                    && expired.lastExpiresAt == installed.expiresAt
            case .signedOut, .switching:
                expected = false
            }
        }
        if probe.changesHeldByWork != (0, 0) {
            // The change waits for work that ignores cancellation: it stays switching until the work ends.
            expected = state == .switching(from: model.from, to: model.account)
        }
        if !expected {
            throw Violation(
                "the engine is \(state) in epoch \(model.epoch); the model expects \(model.phase) for "
                    + "\(model.account?.rawValue ?? "nil")\(model.installed.map { " with \($0)" } ?? "")"
            )
        }
    }

    /// Invariant 5: the hooks ran once per change, in order, each from the previous hook's account, and never for
    /// a change superseded before its hooks were due (Design/engine.md). `final` once nothing can run any more: then
    /// every change that must run its hooks has.
    package func checkHooks(final: Bool = false) throws {
        let hooks = probe.hooks
        // The hooks of changes still held by work have not run yet; they may or may not have run at a check.
        let held = final ? [] : probe.heldEpochs
        let plan = model.hookPlan.map { entry -> (to: AccountID?, mayRun: Bool, mustRun: Bool) in
            switch entry.status {
            case .mustRun: (entry.to, true, !held.contains(entry.epoch))
            case .mayRun: (entry.to, true, false)
            case .mustNotRun: (entry.to, false, false)
            }
        }
        // Whether plan[i...] explains hooks[j...]: every entry that must run ran, in order, no entry that must not
        // run did, and nothing else ran.
        var explains = Array(repeating: Array(repeating: false, count: hooks.count + 1), count: plan.count + 1)
        explains[plan.count][hooks.count] = true
        for i in plan.indices.reversed() {
            for j in (0...hooks.count).reversed() {
                let skipped = !plan[i].mustRun && explains[i + 1][j]
                let ran = plan[i].mayRun && j < hooks.count && hooks[j].to == plan[i].to && explains[i + 1][j + 1]
                explains[i][j] = skipped || ran
            }
        }
        if !explains[0][0] {
            let expected = model.hookPlan.map { entry -> String in
                let mark =
                    switch entry.status {
                    case .mustRun: held.contains(entry.epoch) ? " (held)" : ""
                    case .mayRun: "?"
                    case .mustNotRun: " (superseded)"
                    }
                return "\(entry.to?.rawValue ?? "nil")\(mark)"
            }
            let ran = hooks.map { "\($0.from?.rawValue ?? "nil") → \($0.to?.rawValue ?? "nil")" }
            throw Violation("invariant 5: the hooks ran as \(ran), the changes were \(expected)")
        }
        if let failure = probe.checkHookOrder(final: final) { throw Violation("invariant 5: \(failure)") }
        for (previous, hook) in zip([nil] + hooks.map(\.to), hooks) where hook.from != previous {
            throw Violation(
                "invariant 5: a hook ran from \(hook.from?.rawValue ?? "nil"), not from \(previous?.rawValue ?? "nil")")
        }
    }

    /// Invariant 10: every fetch started no earlier than the engine's own rules allow. After a failure the engine
    /// announces its backoff (`fetchFailed.retryIn`), after a repeated rejection its wait (`credentialRejected.retryIn`),
    /// and after a `Retry-After` the backend's floor (`serverRetryAfter`), which holds for the rest of the account
    /// session whatever asks for a fetch (Design/engine.md: "whatever asks for one"), also through a credential the
    /// host hands over; an install or a first rejection (which renews at once) ends the backoff.
    /// The minimum interval between starts is invariant 3, checked by the fetcher. A start at the same instant as an
    /// announcement may belong before or after it, so it counts as allowed if either order allows it.
    package func checkFetchStarts() throws {
        for start in fetcher.takeStarts() {
            if let earliest = probe.earliestAllowedStart(in: start.epoch, ifNotAt: start.start) {
                throw Violation(
                    "invariant 10: a fetch in epoch \(start.epoch) started at \(start.start) of uptime, before the "
                        + "engine's rules allowed it (\(earliest))"
                )
            }
        }
    }

    /// Invariants 1 and 2 on the fast path: headers only of the current epoch's installed credential, only before it
    /// expires, and otherwise an error that says why, never anonymous.
    package func checkFastPath() throws -> IdentityHeaders? {
        let state = engine.state
        let now = clock.now
        let valid = engine.hasValidIdentity(at: now)
        let usable =
            (state.isIdentified || state.isRenewing) && model.installed.map { model.isUnexpired($0, at: now) } == true
        do {
            let headers = try engine.identityHeaders()
            guard let credential = try? headers.credential() else {
                throw Violation("invariant 2: the fast path handed out headers that are not a credential: \(headers)")
            }
            let origins = probe.origins(of: credential)
            if !origins.contains(model.epoch) || credential != model.installed {
                throw Violation(
                    "invariant 1: the fast path handed out a credential of epochs \(origins.sorted()) in epoch "
                        + "\(model.epoch) (\(state))"
                )
            }
            if !model.isUnexpired(credential, at: now) {
                throw Violation(
                    "invariant 2: the fast path handed out a credential that expired at \(credential.expiresAt)")
            }
            if !usable || !valid { throw Violation("the fast path handed out a credential in \(state)") }
            return headers
        } catch let error as SessionError {
            let expected: SessionError.Code
            switch state {
            case .signedOut: expected = .signedOut
            case .switching: expected = .switching
            case .identified, .renewing, .expired: expected = .invalidIdentity
            }
            if error.code != expected { throw Violation("the fast path said \(error.code) in \(state)") }
            if usable { throw Violation("the fast path refused a valid credential in \(state): \(error)") }
            if valid { throw Violation("hasValidIdentity(at:) accepted what the fast path refused in \(state)") }
            return nil
        }
    }
}
