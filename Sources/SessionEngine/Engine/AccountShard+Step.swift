import Foundation

/// The one path every input takes: the account's machine decides, the shard installs its snapshot and performs its
/// actions (fetches, timers, waiters, preparations, events).
extension AccountShard {
    func instant() -> SessionInstant {
        SessionInstant(wall: clock.now, uptime: clock.uptime)
    }

    /// The one path from an input to an account's machine and back: reads the clock once, lets the machine decide,
    /// and performs the decision with the machine's snapshot (``apply(_:installing:for:at:_:)``).
    ///
    /// An account whose life has ended (a pool's account that has shut down, ``lifeIndex(of:)``) decides as a
    /// shut-down account would, and nothing is performed: a call that reached it as it left fails with `SHUT_DOWN`,
    /// and a task of it that comes back late changes nothing.
    ///
    /// - Parameters:
    ///   - slot: The account.
    ///   - announce: Runs between the decision and its actions, for a log record that belongs before the step's own.
    ///   - decide: Hands the input to the machine, at the step's instant.
    /// - Returns: The machine's decision, for a caller that goes on according to it.
    @discardableResult
    func step<Decision: SessionDecision>(
        _ slot: Slot,
        announcing announce: ((Decision) -> Void)? = nil,
        _ decide: (inout SessionStateMachine, SessionInstant) -> Decision
    ) -> Decision {
        let now = instant()
        guard let index = lifeIndex(of: slot) else {
            var ended = shared.ended
            return decide(&ended, now)
        }
        let decision = decide(&lives[index]!.machine, now)
        announce?(decision)
        apply(decision.actions, installing: lives[index]!.machine.snapshot, for: slot, at: index, now)
        return decision
    }

    /// The life of `slot`'s account as it is between steps, for a decision that reads it; `nil` once it has ended.
    func life(of slot: Slot) -> AccountLife? {
        lifeIndex(of: slot).map { lives[$0]! }
    }

    /// Installs the machine's snapshot in the store, performs its actions in order, then publishes the events.
    ///
    /// Events go out last, so a subscriber that sees an event knows the engine has already done everything the event
    /// implies: the credential is installed, waiters are resolved, the next timer and fetch are set. Finishing the
    /// event streams at shutdown comes after the step's events, so every subscriber receives the final state.
    ///
    /// A pool's account whose shutdown the step finishes ends its life here, and its number is free for the next.
    ///
    /// - Parameters:
    ///   - actions: What the machine decided.
    ///   - snapshot: What the machine holds after deciding.
    ///   - slot: The account.
    ///   - index: Where its life is in ``lives``.
    ///   - now: The instant the machine decided at; every event of the step carries it.
    private func apply(
        _ actions: [SessionStateMachine.Action],
        installing snapshot: SessionStore.Snapshot,
        for slot: Slot,
        at index: Int,
        _ now: SessionInstant
    ) {
        let (stateChanged, reading, keepsHeaders) = slot.store.install(snapshot)
        if let membership = slot.membership {
            shared.outlets?.table.mirror(reading, keepsHeaders: keepsHeaders, of: slot, account: membership.account)
        } else {
            readers?.install(reading, keepsHeaders: keepsHeaders)
        }
        let newState = snapshot.state
        var events: [(SessionEvent.Kind, UInt64)] = []
        if stateChanged {
            events.append((.stateChanged(newState), snapshot.epoch))
            log(.debug, "state changed", ["state": newState.name, "account": newState.account?.rawValue ?? "none"])
        }
        var finishesShutdown = false
        for action in actions {
            switch action {
            case .emit(let kind, let epoch):
                logEvent(kind)
                events.append((kind, epoch))
            case .cancelWork(let epoch, let account):
                let count = slot.store.cancelWork(before: epoch)
                // An account change that cancelled nothing reports nothing.
                if count > 0 {
                    events.append((.workCancelled(account: account, count: count), epoch))
                }
            case .finishShutdown:
                finishesShutdown = true
                timers.cancel(for: slot.timerToken)
                if let watch = lives[index]!.gracePeriod?.value {
                    timers.release(watch.deadline)
                    watch.drain.cancel()
                }
                lives[index]!.gracePeriod = nil
            default:
                perform(action, for: slot, at: index, now)
            }
        }
        for (kind, epoch) in events { publish(kind, epoch: epoch, for: slot, at: index, now) }
        dropWaitersIfNone(slot)
        if finishesShutdown {
            slot.broadcaster.finish()
            lives[index]!.stopped?.open()
            if slot.membership != nil { endLife(at: index) }
        }
    }

    private func publish(
        _ kind: SessionEvent.Kind, epoch: UInt64, for slot: Slot, at index: Int, _ now: SessionInstant
    ) {
        lives[index]!.sequence += 1
        let event = SessionEvent(kind, time: now, epoch: epoch, sequence: lives[index]!.sequence)
        slot.recorder.record(event)
        shared.observer?(event)
        if let membership = slot.membership {
            shared.outlets?.publish(
                SessionPoolEvent(account: membership.account, kind: .session(event)), member: membership.serial)
        }
        slot.broadcaster.publish(event)
    }

    /// The fetch in flight.
    struct RunningFetch: Sendable {
        let id: FetchID
        let task: Task<Void, Never>
        /// The fetch's claim on the pool's budget, which a caller that comes to wait for it promotes; `nil` for an
        /// engine without a budget.
        let ticket: FetchBudget.Ticket?
    }

    /// Performs one action that reports no event for the account of `slot`, whose life is at `index`, decided at
    /// the step's instant `now`.
    private func perform(_ action: SessionStateMachine.Action, for slot: Slot, at index: Int, _ now: SessionInstant) {
        switch action {
        case .startFetch(let request):
            startFetch(request, for: slot, at: index, now)
        case .cancelFetch:
            lives[index]!.fetch?.value.task.cancel()
            lives[index]!.fetch = nil
        case .scheduleTimer(let spec):
            timers.schedule(spec, for: slot.timerToken)
        case .cancelTimer:
            timers.cancel(for: slot.timerToken)
        case .resolveWaiters(let epoch, let kinds, let outcome):
            slot.waitersIfAny?.resolve(epoch: epoch, kinds: kinds, outcome: outcome)
        case .failAllWaiters(let error):
            slot.waitersIfAny?.failAll(error)
        case .prepareChange(let epoch):
            let previous = lives[index]!.preparation
            let done = OneShot<Void>()
            lives[index]!.preparation = done
            // The task holds the account's slot until the change is prepared, as the fetch task holds it until the
            // fetch has ended: no weak reference gives the slot a side table.
            _ = startTask(slot) {
                await previous?.value()
                await self.prepare(slot, epoch: epoch, signalledBy: done)
                done.open()
            }
        case .refuseNewWork:
            slot.store.refuseNewWork()
        case .startGracePeriod(let grace):
            startGracePeriod(grace, for: slot, at: index)
        case .emit, .cancelWork, .finishShutdown:
            // Performed by `apply`, which publishes their events.
            break
        }
    }

    /// Starts one of the account's own tasks on the shard's task executor, counted in its metrics until it ends.
    nonisolated func startTask(_ slot: Slot, _ body: @escaping @Sendable () async -> Void) -> Task<Void, Never> {
        slot.recorder.tasks(1)
        // The task holds the slot and the shard, as every body it runs does.
        return Task.start(preferring: shared.taskExecutor) {
            defer { slot.recorder.tasks(-1) }
            await body()
        }
    }

    private func startFetch(_ request: FetchRequest, for slot: Slot, at index: Int, _ now: SessionInstant) {
        lives[index]!.fetch?.value.task.cancel()
        let fetcher = self.fetcher
        let budget = self.budget
        let fleet = shared.fleet
        let clock = self.clock
        let (urgency, deadline) = lives[index]!.machine.fetchUrgency(at: now, callersWaiting: slot.waitingCallers > 0)
        let ticket = budget?.ticket(urgency: urgency, deadline: deadline, account: request.account)
        // What the fleet's coordinator hears of the fetch, and the user and credential a shared one must match and
        // outlive. Before the first credential of a session pinned to a user (a sign-in that named one), a shared
        // credential need only be unexpired, so the coordinator hears the fetch as holding one that expires now.
        // After the service rejected the held credential (a rotation), another replica's credential may have been
        // signed before the rotation too: the coordinator then shares only one whose fetch started after the fleet
        // first heard of the rejection.
        let session = fleet == nil ? nil : lives[index]!.machine.activeSession
        let held = session?.credential
        let pinnedEmail = session?.pinnedEmail
        let fleetFetch = fleet.map { _ in
            FleetFetch(
                account: request.account, isNeeded: urgency == .needed,
                heldExpiry: held?.expirationDate ?? (pinnedEmail == nil ? nil : now.wall),
                followsRejection: session?.rejectedSignature != nil)
        }
        let configuration = self.configuration
        let taskExecutor = shared.taskExecutor
        let timers = self.timers
        let task = startTask(slot) {
            let result: Result<FetchedCredential, any Error>
            var waited = Duration.zero
            if let budget, let ticket, await !budget.acquire(ticket) {
                // Cancelled while it waited for the pool's budget: it never reached the backend.
                result = .failure(CancellationError())
            } else if Task.isCancelled {
                // The account session ended (a change, a sign-out, shutdown) before this task first ran: its request
                // never reaches the backend, which by now may be serving the next account's hooks.
                if let ticket { budget?.release(ticket, outcome: .neither, started: false) }
                result = .failure(CancellationError())
            } else {
                // The budget let it go; the fleet, if there is one, has its say.
                var budgetWaited = ticket == nil ? Duration.zero : max(.zero, clock.uptime - now.uptime)
                var lease: FleetLease?
                // Whether it took its start of the pool's budget while the fleet reserved one for it.
                var tookStart = false
                if let fleet, let fleetFetch {
                    let rejected = { @Sendable in await self.followsRejection(slot) }
                    let takeStart = { @Sendable () async -> Bool in
                        guard let budget, let ticket else { return true }
                        return await budget.leave(ticket)
                    }
                    let admission: FleetGate.Admission
                    let giveUpStart = { @Sendable in
                        if let ticket { budget?.giveUpStart(ticket) }
                    }
                    (admission, tookStart) = await fleet.admit(
                        fleetFetch, pinnedTo: pinnedEmail, holding: held, followsRejection: rejected,
                        takeStart: takeStart, giveUpStart: giveUpStart)
                    switch admission {
                    case .start(let granted): lease = granted
                    case .shared(let credential):
                        // A start it took goes unused, never back to the bucket, which may have dropped one meanwhile.
                        if let ticket { budget?.release(ticket, outcome: .neither, started: tookStart) }
                        waited = max(.zero, clock.uptime - now.uptime)
                        await self.fetchCompleted(
                            slot, request.id, .success(FetchedCredential(credential)), waited: waited)
                        return
                    case .cancelled:
                        if let ticket { budget?.release(ticket, outcome: .neither, started: tookStart) }
                        await self.fetchCompleted(slot, request.id, .failure(CancellationError()), waited: waited)
                        return
                    }
                }
                // It takes its start of the pool's budget when it leaves, after the fleet let it go (or reserved a
                // start for it), so a fetch the fleet answered at once spent none and every request the backend sees
                // took one (at once where admission took the start).
                let leaving = clock.uptime
                if !tookStart, let budget, let ticket, await !budget.leave(ticket) {
                    budget.release(ticket, outcome: .neither, started: false)
                    if let fleetFetch { fleet?.ended(fleetFetch, lease: lease, outcome: .abandoned) }
                    await self.fetchCompleted(slot, request.id, .failure(CancellationError()), waited: waited)
                    return
                }
                budgetWaited += max(.zero, clock.uptime - leaving)
                // The request leaves now: the time it waited for the budget and the fleet is neither the backend's
                // clock offset nor its latency, so the fetcher measures from here.
                var admitted = request
                if ticket != nil || fleet != nil {
                    waited = max(.zero, clock.uptime - now.uptime)
                    admitted = request.leaving(at: clock.now)
                }
                // Counted in the job that calls the fetcher, so the count is of requests the backend can see.
                let outcome = await FetchRace.run(
                    admitted, on: fetcher, timeout: configuration.fetchTimeout, clock: clock, timers: timers,
                    taskExecutor: taskExecutor, calling: { slot.recorder.fetchStarted() })
                switch outcome {
                case .finished(let finished): result = finished
                case .timedOut: result = .failure(Self.fetchTimedOut(after: configuration.fetchTimeout))
                case .cancelled: result = .failure(CancellationError())
                }
                if let budget, let ticket {
                    // A backend that asks for a pause speaks for every account of the pool.
                    if case .failure(let error as SessionError) = result, let pause = error.retryAfter {
                        budget.pause(for: min(pause, configuration.maximumRetryAfter))
                    }
                    // Released as soon as the race is decided: a fetcher that outlives its deadline or its account
                    // session holds no slot of the budget.
                    budget.release(
                        ticket, outcome: Self.budgetOutcome(of: result, cancelled: Task.isCancelled),
                        waited: budgetWaited)
                }
                if let fleet, let fleetFetch {
                    fleet.ended(
                        fleetFetch, lease: lease,
                        outcome: Self.fleetOutcome(
                            of: result, cancelled: Task.isCancelled, maximumPause: configuration.maximumRetryAfter))
                }
            }
            await self.fetchCompleted(slot, request.id, result, waited: waited)
        }
        lives[index]!.fetch = OutOfLine(RunningFetch(id: request.id, task: task, ticket: ticket))
        log(.debug, "fetch started", ["account": request.account.rawValue, "fetch": "\(request.id)"])
    }

    /// Whether the service rejected the credential the slot's account session holds: read again each time the fleet is
    /// asked, since a fetch under way when a rejection comes becomes the renewal after it.
    func followsRejection(_ slot: Slot) -> Bool {
        guard let index = lifeIndex(of: slot) else { return false }
        return lives[index]!.machine.currentSession?.rejectedSignature != nil
    }

    /// The failure of a fetch whose fetcher had not answered by ``SessionConfiguration/fetchTimeout``: transient, an
    /// outage.
    static func fetchTimedOut(after timeout: Duration) -> SessionError {
        SessionError(
            .fetchTimedOut, reason: "the fetcher did not answer within \(timeout.readable); the fetch was abandoned",
            isTransient: true)
    }

    private func fetchCompleted(
        _ slot: Slot, _ id: FetchID, _ result: Result<FetchedCredential, any Error>, waited: Duration
    ) {
        let index = lifeIndex(of: slot)
        let current = index.map { lives[$0]!.fetch?.value.id == id } ?? false
        if current, let index { lives[index]!.fetch = nil }
        switch result {
        case .success(let fetched):
            step(slot) { machine, now in
                machine.fetchSucceeded(
                    id, credential: fetched.credential, serverClockOffset: fetched.serverClockOffset, waited: waited,
                    at: now)
            }
        case .failure(let error):
            if current, let error = error as? SessionError, error.code == .fetchTimedOut {
                // Once per fetch: its late answer, if it ever comes, is dropped without another record.
                log(
                    .warning, "the fetcher outlived its deadline",
                    [
                        "account": index.flatMap { self.lives[$0]!.machine.currentSession?.account.rawValue } ?? "none",
                        "fetch": "\(id)",
                    ])
            }
            step(slot) { $0.fetchFailed(id, error: Self.classify(error), waited: waited, at: $1) }
        }
    }

    /// How a fetch that reached the fetcher ended, as the pool's budget counts it toward an outage.
    static func budgetOutcome(
        of result: Result<FetchedCredential, any Error>, cancelled: Bool
    ) -> FetchBudget.Outcome {
        guard case .failure(let error) = result else { return .answered }
        if cancelled || error is CancellationError { return .neither }
        let classified = classify(error)
        if classified.retryAfter != nil { return .neither }
        return classified.failureClass == .outage ? .outage : .answered
    }

    /// How a fetch that reached the fetcher ended, as the fleet's coordinator hears it.
    static func fleetOutcome(
        of result: Result<FetchedCredential, any Error>, cancelled: Bool, maximumPause: Duration
    ) -> FleetOutcome {
        let error: any Error
        switch result {
        case .success(let fetched): return .credential(fetched.credential)
        case .failure(let failure): error = failure
        }
        if cancelled || error is CancellationError { return .abandoned }
        let classified = classify(error)
        if let pause = classified.retryAfter { return .retryAfter(min(pause, maximumPause)) }
        return classified.failureClass == .outage ? .outage : .refused
    }

    /// Maps what a fetcher threw to the engine's error.
    ///
    /// Terminal, ending the session: ``SessionError/Code/backendSessionEnded``, and a credential refused for good
    /// (``SessionError/Code/invalidCredential`` marked not transient, or a ``CredentialError`` with
    /// ``CredentialError/Code/unpairedSurrogate``), since fetching again would return the same one. A
    /// ``SessionError/Code/fetchFailed`` the fetcher marked not transient (it refused the endpoint or the request)
    /// becomes ``SessionError/Code/backendMisconfigured``. Everything else is transient and retried with backoff, a
    /// misconfiguration on its slower schedule.

    static func classify(_ error: any Error) -> SessionError {
        switch error {
        case let error as SessionError:
            // Terminal: the backend ended the session, or said its credential can never verify.
            let terminal =
                error.code == .backendSessionEnded || (error.code == .invalidCredential && !error.isTransient)
            if error.code == .fetchFailed && !error.isTransient {
                // The fetcher refused to fetch (an endpoint it must not use, a request it cannot send): fetching
                // again fails the same way until someone changes the setup.
                return SessionError(
                    .backendMisconfigured, reason: error.reason, isTransient: true, retryAfter: error.retryAfter)
            }
            return SessionError(
                error.code, reason: error.reason, isTransient: !terminal, retryAfter: error.retryAfter,
                failureClass: error.failureClass)
        case let error as CredentialError:
            // A credential the reference backend signs but no verifier can check is refused for good: retrying
            // would fetch the same one for ever.
            return SessionError(
                .invalidCredential,
                reason: "the fetched credential is invalid: \(error.reason)",
                isTransient: error.code != .unpairedSurrogate
            )
        case is CancellationError:
            return .fetchFailed("the fetch was cancelled")
        default:
            return .fetchFailed("the fetcher failed with \(type(of: error))")
        }
    }
}
