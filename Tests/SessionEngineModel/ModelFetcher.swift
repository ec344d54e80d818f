package import SessionEngine
package import SessionEngineTestKit
import Synchronization

/// A broken invariant, rule or property, in words that name the step and the rule: thrown out of a step of a model
/// program or a race program, or returned by a property.
package struct Violation: Error, CustomStringConvertible {
    package let message: String

    package init(_ message: String) {
        self.message = message
    }

    package var description: String { message }
}

/// The address the test backends sign an account's credentials for: the account's name at example.com.
package func exampleEmail(for account: AccountID) -> String { "\(account.rawValue)@example.com" }

/// A backend whose every fetch waits for the program's driver, which answers it as the program scripted, or answers
/// by itself from a task of its own (``FetchBehaviour/onItsOwn(yields:answer:)``).
///
/// Each fetch takes the next scripted ``FetchBehaviour`` and is tagged with the epoch the engine started it in and
/// the monotonic time it started, so the fetcher can check that at most one fetch per epoch is in flight and that
/// fetch starts keep the minimum interval; the driver checks every start against the backoff the engine announced.
/// A fetch waiting for the driver has no job, so the engine counts as idle while the backend holds it; a fetch that
/// answers by itself does so from a task on the program's executor, so the engine is not idle before the answer has
/// landed.
/// Kept apart from the kit's fetcher: it checks the engine's fetch invariants and yields on the explorer, which no
/// host needs.
package final class ModelFetcher: CredentialFetcher {
    package struct Request: Sendable {
        package let id: Int
        package let account: AccountID
        package let epoch: UInt64
        package let start: Duration
        package let behaviour: FetchBehaviour
        /// The engine cancelled the fetch; only a fetch that ignores cancellation is still pending then.
        package var cancelled = false

        /// When the backend answers, or `nil` when it answers only a cancellation.
        package var due: Duration? { behaviour.delay.map { start + .seconds($0) } }
    }

    /// A fetch that answered by itself: what it answered, for the driver to bring the model up to date.
    package struct Delivery: Sendable {
        package let request: Request
        package let result: Result<FetchedCredential, any Error>
    }

    /// Computes the answer of a fetch that answers by itself, when it answers.
    package typealias Oracle = @Sendable (Request, OwnAnswer) -> Result<FetchedCredential, any Error>

    private struct Pending {
        var request: Request
        var continuation: CheckedContinuation<FetchedCredential, any Error>
    }

    private struct State {
        var total = 0
        var pending: [Int: Pending] = [:]
        /// Fetches that answer by themselves and have not answered yet.
        var answering: [Int: Pending] = [:]
        var delivered: [Delivery] = []
        var starts: [Request] = []
        var script: [FetchBehaviour] = []
        var recovering = false
        var inFlight: [UInt64: Int] = [:]
        var lastStart: [UInt64: Duration] = [:]
        var violations: [String] = []
        var oracle: Oracle?
    }

    package static let defaultBehaviour = FetchBehaviour.succeed(lifetime: 300)

    private let state = SanitizedMutex(State())
    private let clock: ManualClock
    private let minimumInterval: Duration
    /// The executor the tasks that answer on their own prefer.
    private let taskExecutor: any TaskExecutor

    package init(clock: ManualClock, minimumInterval: Duration, taskExecutor: any TaskExecutor) {
        self.clock = clock
        self.minimumInterval = minimumInterval
        self.taskExecutor = taskExecutor
    }

    /// Sets how a fetch that answers by itself computes its answer.
    package func answerOnItsOwn(with oracle: @escaping Oracle) {
        state.withLock { $0.oracle = oracle }
    }

    package func fetchCredential(for account: AccountID) async throws -> IdentityCredential {
        preconditionFailure("the engine always says which fetch it starts")
    }

    package func fetchCredential(_ fetch: FetchRequest) async throws -> IdentityCredential {
        try await self.fetch(fetch).credential
    }

    package func fetch(_ fetch: FetchRequest) async throws -> FetchedCredential {
        let start = clock.uptime
        let minimumInterval = self.minimumInterval
        let (account, epoch) = (fetch.account, fetch.epoch)
        let request = state.withLock { state -> Request in
            state.total += 1
            var behaviour = Self.defaultBehaviour
            if state.recovering {
                behaviour = .succeed(lifetime: 900)
            } else if !state.script.isEmpty {
                behaviour = state.script.removeFirst()
            }
            let inFlight = state.inFlight[epoch, default: 0] + 1
            state.inFlight[epoch] = inFlight
            if inFlight > 1 {
                state.violations.append("invariant 3: \(inFlight) fetches in flight in epoch \(epoch)")
            }
            if let last = state.lastStart[epoch], start - last < minimumInterval {
                state.violations.append(
                    "invariant 3: fetches for \(account) started \(start - last) apart in epoch \(epoch)"
                )
            }
            state.lastStart[epoch] = start
            let request = Request(id: state.total, account: account, epoch: epoch, start: start, behaviour: behaviour)
            state.starts.append(request)
            return request
        }
        if case .onItsOwn(let yields, let answer) = request.behaviour {
            return try await answerByItself(request, after: yields, with: answer)
        }
        return try await withTaskCancellationHandler {
            try await withCheckedThrowingContinuation { continuation in
                let cancelled = state.withLock { state -> Bool in
                    var request = request
                    request.cancelled = Task.isCancelled
                    // A cancelled fetch is no longer the engine's fetch in flight, even while its answer is on the wire.
                    if request.cancelled { state.inFlight[request.epoch, default: 1] -= 1 }
                    if request.cancelled && !request.behaviour.ignoresCancellation { return true }
                    state.pending[request.id] = Pending(request: request, continuation: continuation)
                    return false
                }
                if cancelled { continuation.resume(throwing: CancellationError()) }
            }
        } onCancel: {
            let pending = state.withLock { state -> Pending? in
                guard let pending = state.pending[request.id] else { return nil }
                if pending.request.behaviour.ignoresCancellation {
                    if !pending.request.cancelled { state.inFlight[request.epoch, default: 1] -= 1 }
                    state.pending[request.id]?.request.cancelled = true
                    return nil
                }
                state.pending.removeValue(forKey: request.id)
                state.inFlight[request.epoch, default: 1] -= 1
                return pending
            }
            guard let pending else { return }
            pending.continuation.resume(throwing: CancellationError())
        }
    }

    /// Answers from a task of the fetcher's own after `yields` yields, whatever the engine is doing then; the fetch
    /// is never parked, so the engine is not idle before the answer has landed.
    private func answerByItself(_ request: Request, after yields: Int, with answer: OwnAnswer) async throws
        -> FetchedCredential
    {
        try await withTaskCancellationHandler {
            try await withCheckedThrowingContinuation { continuation in
                let cancelled = state.withLock { state -> Bool in
                    if Task.isCancelled {
                        state.inFlight[request.epoch, default: 1] -= 1
                        return true
                    }
                    state.answering[request.id] = Pending(request: request, continuation: continuation)
                    return false
                }
                if cancelled {
                    continuation.resume(throwing: CancellationError())
                    return
                }
                Task(executorPreference: taskExecutor) {
                    for _ in 0..<yields { await Task.yield() }
                    self.deliver(request.id, answer)
                }
            }
        } onCancel: {
            let pending = state.withLock { state -> Pending? in
                guard let pending = state.answering.removeValue(forKey: request.id) else { return nil }
                state.inFlight[request.epoch, default: 1] -= 1
                return pending
            }
            pending?.continuation.resume(throwing: CancellationError())
        }
    }

    private func deliver(_ id: Int, _ answer: OwnAnswer) {
        let taken = state.withLock { state -> (Pending, Oracle?)? in
            guard let pending = state.answering.removeValue(forKey: id) else { return nil }
            state.inFlight[pending.request.epoch, default: 1] -= 1
            return (pending, state.oracle)
        }
        guard let (pending, oracle) = taken else { return }
        let result = oracle?(pending.request, answer) ?? .failure(SessionError.fetchFailed("no backend"))
        state.withLock { $0.delivered.append(Delivery(request: pending.request, result: result)) }
        pending.continuation.resume(with: result)
    }

    /// Scripts the answer to the next fetch.
    package func enqueue(_ behaviour: FetchBehaviour) {
        state.withLock { $0.script.append(behaviour) }
    }

    /// From now on every fetch succeeds.
    package func recover() {
        state.withLock { state in
            state.recovering = true
            state.script.removeAll()
        }
    }

    /// The fetches waiting for an answer, oldest first.
    package var pendingRequests: [Request] {
        state.withLock { $0.pending.values.map(\.request).sorted { $0.id < $1.id } }
    }

    package var pendingCount: Int { state.withLock { $0.pending.count + $0.answering.count } }

    package var total: Int { state.withLock { $0.total } }

    /// The answers fetches gave by themselves since the last call, in the order they gave them.
    package func takeDeliveries() -> [Delivery] {
        state.withLock { state in
            defer { state.delivered.removeAll() }
            return state.delivered
        }
    }

    /// The fetches started since the last call, in the order they started.
    package func takeStarts() -> [Request] {
        state.withLock { state in
            defer { state.starts.removeAll() }
            return state.starts
        }
    }

    /// The first broken invariant the fetcher saw, if any.
    package var violation: String? { state.withLock { $0.violations.first } }

    /// Answers a pending fetch.
    package func answer(_ id: Int, with result: Result<FetchedCredential, any Error>) {
        let pending = state.withLock { state -> Pending? in
            guard let pending = state.pending.removeValue(forKey: id) else { return nil }
            if !pending.request.cancelled { state.inFlight[pending.request.epoch, default: 1] -= 1 }
            return pending
        }
        guard let pending else { return }
        pending.continuation.resume(with: result)
    }

    /// Fails every pending fetch, to tear a program down.
    package func failAll() {
        for request in pendingRequests { answer(request.id, with: .failure(CancellationError())) }
    }
}
