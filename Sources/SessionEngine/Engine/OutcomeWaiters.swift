import Synchronization

/// Callers waiting for a fetch's outcome, keyed by epoch, resolved in registration order.
///
/// Waiting is two steps. ``register(epoch:kind:)`` runs on the engine's actor, in the same step that decided to
/// wait, so no outcome can slip between the decision and the registration: an outcome that arrives before the caller
/// suspends is kept in its ticket. ``wait(_:)`` then suspends the caller outside the actor, so a resolved caller
/// resumes straight on its own executor instead of queueing on the actor to return. Outcomes are handed out first
/// come, first served. A cancelled caller is removed at once; the fetch it waited for goes on.
///
/// The continuations are unchecked: a slot is resumed exactly once, by whichever of the resolution, the cancellation
/// and the registration removes it from `slots` under the lock, and 10,000 waiters woken together should not pay for
/// a check object each.
final class OutcomeWaiters: Sendable {
    /// A registered caller's claim on the next outcome of its epoch and kind, with the waiters it was registered with:
    /// an engine drops its waiters once none is registered and makes new ones for the next caller, so a ticket is
    /// waited on, and failed, through its own.
    struct Ticket: Sendable {
        fileprivate let id: UInt64
        let waiters: OutcomeWaiters
    }

    /// What a deciding step gives a caller: the credential now, a ticket to wait on off the actor, or a failure.
    enum Answer: Sendable {
        case now(IdentityCredential)
        case wait(Ticket)
        case failed(SessionError)
    }

    private enum Slot {
        /// Registered; the caller has not suspended yet.
        case registered(epoch: UInt64, kind: SessionStateMachine.WaiterKind)
        /// The caller is suspended.
        case waiting(
            epoch: UInt64,
            kind: SessionStateMachine.WaiterKind,
            continuation: UnsafeContinuation<IdentityCredential, any Error>
        )
        /// The outcome arrived (or the caller was cancelled) before the caller suspended.
        case resolved(Result<IdentityCredential, any Error>)

        /// The epoch and kind of a caller still waiting for an outcome.
        var awaiting: (epoch: UInt64, kind: SessionStateMachine.WaiterKind)? {
            switch self {
            case .registered(let epoch, let kind), .waiting(let epoch, let kind, _): (epoch, kind)
            case .resolved: nil
            }
        }
    }

    private struct State {
        var nextID: UInt64 = 0
        var slots: [UInt64: Slot] = [:]
        /// Registration order of the slots; IDs of removed slots are dropped lazily.
        var order: [UInt64] = []
        /// Slots still waiting for an outcome.
        var awaiting = 0

        /// Drops the IDs of removed slots from `order` once they are most of it.
        mutating func compactIfSparse() {
            guard order.count > 2 * slots.count + 64 else { return }
            order.removeAll { slots[$0] == nil }
        }

        /// Removes a slot, and the tables' storage with the last one.
        mutating func remove(_ id: UInt64) {
            slots.removeValue(forKey: id)
            releaseStorageIfEmpty()
        }

        /// Once no slot is left, gives the tables' storage back, so an engine that waited once does not keep it for
        /// the rest of its life (a pool holds one engine per account).
        mutating func releaseStorageIfEmpty() {
            if slots.isEmpty { self = State(nextID: nextID) }
        }

        /// Takes the outcome for every slot the predicate selects, in registration order.
        mutating func take(
            _ outcome: Result<IdentityCredential, any Error>,
            where selected: (UInt64, SessionStateMachine.WaiterKind) -> Bool
        ) -> [UnsafeContinuation<IdentityCredential, any Error>] {
            var resumed: [UnsafeContinuation<IdentityCredential, any Error>] = []
            var kept: [UInt64] = []
            kept.reserveCapacity(order.count)
            for id in order {
                guard let slot = slots[id] else { continue }
                guard let (epoch, kind) = slot.awaiting, selected(epoch, kind) else {
                    kept.append(id)
                    continue
                }
                awaiting -= 1
                if case .waiting(_, _, let continuation) = slot {
                    slots.removeValue(forKey: id)
                    resumed.append(continuation)
                } else {
                    slots[id] = .resolved(outcome)
                }
            }
            order = kept
            releaseStorageIfEmpty()
            return resumed
        }
    }

    private let state = SanitizedMutex(State())

    /// Creates an empty set of waiters.
    init() {}

    /// The number of callers waiting for an outcome.
    var count: Int { state.withLock { $0.awaiting } }

    /// Whether the waiters' tables hold storage: only while a caller is registered.
    var holdsStorage: Bool { state.withLock { $0.slots.capacity > 0 || $0.order.capacity > 0 } }

    /// Whether no caller is registered, waiting or holding an outcome it has not collected: the waiters can be
    /// dropped, and no ticket of theirs is outstanding.
    var isEmpty: Bool { state.withLock { $0.slots.isEmpty } }

    /// Registers a caller for the epoch's next outcome of the given kind; call it in the step that decided to wait.
    func register(epoch: UInt64, kind: SessionStateMachine.WaiterKind) -> Ticket {
        state.withLock { state in
            state.nextID += 1
            let id = state.nextID
            state.compactIfSparse()
            state.slots[id] = .registered(epoch: epoch, kind: kind)
            state.order.append(id)
            state.awaiting += 1
            return Ticket(id: id, waiters: self)
        }
    }

    /// Waits for the outcome of a registered ticket, off any actor.
    ///
    /// - Parameter ticket: What ``register(epoch:kind:)`` returned; each ticket is waited for once.
    /// - Returns: The installed credential.
    /// - Throws: The fetch's failure, or `CancellationError` when the caller is cancelled first.
    func wait(_ ticket: Ticket) async throws -> IdentityCredential {
        try await withTaskCancellationHandler {
            try await withUnsafeThrowingContinuation { continuation in
                let ready = state.withLock { state -> Result<IdentityCredential, any Error>? in
                    switch state.slots[ticket.id] {
                    case .registered(let epoch, let kind):
                        state.slots[ticket.id] = .waiting(epoch: epoch, kind: kind, continuation: continuation)
                        return nil
                    case .resolved(let outcome):
                        state.remove(ticket.id)
                        return outcome
                    case .waiting, nil:
                        preconditionFailure("a ticket was waited for twice")
                    }
                }
                if let ready { continuation.resume(with: ready) }
            }
        } onCancel: {
            fail(ticket, with: CancellationError())
        }
    }

    /// Registers and waits: for callers that decide to wait inside an actor step.
    ///
    /// - Parameter isolation: The caller's actor; registration runs there before the caller suspends.
    func wait(
        epoch: UInt64,
        kind: SessionStateMachine.WaiterKind,
        isolation: isolated (any Actor)? = #isolation
    ) async throws -> IdentityCredential {
        let ticket = register(epoch: epoch, kind: kind)
        return try await wait(ticket)
    }

    /// Fails one registered caller, whether or not it has suspended yet; a caller already resolved is left alone.
    ///
    /// - Parameters:
    ///   - ticket: The caller's ticket.
    ///   - error: What the caller receives.
    func fail(_ ticket: Ticket, with error: any Error) {
        let waiting = state.withLock { state -> UnsafeContinuation<IdentityCredential, any Error>? in
            switch state.slots[ticket.id] {
            case .registered:
                state.slots[ticket.id] = .resolved(.failure(error))
                state.awaiting -= 1
                return nil
            case .waiting(_, _, let continuation):
                state.awaiting -= 1
                state.remove(ticket.id)
                return continuation
            case .resolved, nil:
                return nil
            }
        }
        guard let waiting else { return }
        waiting.resume(throwing: error)
    }

    /// Resolves the epoch's waiters of the given kinds with an outcome, in registration order.
    func resolve(
        epoch: UInt64,
        kinds: Set<SessionStateMachine.WaiterKind>,
        outcome: SessionStateMachine.Outcome
    ) {
        let result: Result<IdentityCredential, any Error> =
            switch outcome {
            case .installed(let credential): .success(credential)
            case .failed(let error): .failure(error)
            }
        let resumed = state.withLock { state in
            state.take(result) { $0 == epoch && kinds.contains($1) }
        }
        resume(resumed, with: result)
    }

    /// Fails every waiter.
    func failAll(_ error: SessionError) {
        let result = Result<IdentityCredential, any Error>.failure(error)
        let resumed = state.withLock { state in
            state.take(result) { _, _ in true }
        }
        resume(resumed, with: result)
    }

    /// Resumes the callers in order; they run on their own executors.
    private func resume(
        _ continuations: [UnsafeContinuation<IdentityCredential, any Error>],
        with result: Result<IdentityCredential, any Error>
    ) {
        for continuation in continuations {
            continuation.resume(with: result)
        }
    }
}
