import Synchronization

/// Callers waiting for a fetch's outcome, keyed by epoch, resolved in registration order.
///
/// Waiting is two steps. ``register(epoch:kind:)`` runs on the engine's actor, in the same step that decided to
/// wait, so no outcome can slip between the decision and the registration: an outcome that arrives before the caller
/// suspends is kept in its ticket. ``wait(_:)`` then suspends the caller outside the actor, so a resolved caller
/// resumes straight on its own executor instead of queueing on the actor to return. Outcomes are handed out first
/// come, first served. A cancelled caller is removed at once; the fetch it waited for goes on.
///
/// The callers sit in a ``WaiterQueue`` under the waiters' lock. Its continuations are unchecked: an entry is resumed
/// exactly once, by whichever of the resolution, the cancellation and the parking takes it from the queue under the
/// lock, and 10,000 waiters woken together should not pay for a check object each.
final class OutcomeWaiters: Sendable {
    /// A registered caller's claim on the next outcome of its epoch and kind, with the waiters it was registered with:
    /// an engine drops its waiters once none is registered and makes new ones for the next caller, so a ticket is
    /// waited on, and failed, through its own.
    struct Ticket: Sendable {
        fileprivate let place: Queue.Ticket
        let waiters: OutcomeWaiters
    }

    /// What a deciding step gives a caller: the credential now, a ticket to wait on off the actor, or a failure.
    enum Answer: Sendable {
        case now(IdentityCredential)
        case wait(Ticket)
        case failed(SessionError)
    }

    /// What a caller waits for: its epoch's next outcome of its kind.
    fileprivate struct Awaited {
        let epoch: UInt64
        let kind: SessionStateMachine.WaiterKind
    }

    fileprivate typealias Queue = WaiterQueue<Awaited, Result<IdentityCredential, any Error>>

    private let queue = SanitizedMutex(Queue())

    /// Creates an empty set of waiters.
    init() {}

    /// The number of callers waiting for an outcome.
    var count: Int { queue.withLock { $0.waiting } }

    /// Whether the waiters' queue holds storage: only while a caller is registered.
    var holdsStorage: Bool { queue.withLock { $0.holdsStorage } }

    /// Whether no caller is registered, waiting or holding an outcome it has not collected: the waiters can be
    /// dropped, and no ticket of theirs is outstanding.
    var isEmpty: Bool { queue.withLock { $0.isEmpty } }

    /// Registers a caller for the epoch's next outcome of the given kind; call it in the step that decided to wait.
    func register(epoch: UInt64, kind: SessionStateMachine.WaiterKind) -> Ticket {
        Ticket(place: queue.withLock { $0.enqueue(Awaited(epoch: epoch, kind: kind)) }, waiters: self)
    }

    /// Waits for the outcome of a registered ticket, off any actor.
    ///
    /// - Parameter ticket: What ``register(epoch:kind:)`` returned; each ticket is waited for once.
    /// - Returns: The installed credential.
    /// - Throws: The fetch's failure, or `CancellationError` when the caller is cancelled first.
    func wait(_ ticket: Ticket) async throws -> IdentityCredential {
        let outcome = await withTaskCancellationHandler {
            await withParkedContinuation { continuation in
                let ready = queue.withLock { $0.park(ticket.place, continuation) }
                if let ready { continuation.resume(returning: ready) }
            }
        } onCancel: {
            fail(ticket, with: CancellationError())
        }
        return try outcome.get()
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
        queue.withLock { queue in
            var wakeups = Queue.Wakeups()
            queue.resolve(ticket.place, with: .failure(error), into: &wakeups)
            return wakeups
        }.resume()
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
        queue.withLock { queue in
            var wakeups = Queue.Wakeups()
            queue.resolve(
                where: { $0.epoch == epoch && kinds.contains($0.kind) }, with: result, into: &wakeups)
            return wakeups
        }.resume()
    }

    /// Fails every waiter.
    func failAll(_ error: SessionError) {
        queue.withLock { queue in
            var wakeups = Queue.Wakeups()
            queue.resolveAll(with: .failure(error), into: &wakeups)
            return wakeups
        }.resume()
    }
}
