package import SessionEngine
package import SessionEngineTestKit
import Synchronization

/// A broken invariant, thrown out of a step of a program.
package struct Violation: Error, CustomStringConvertible {
    package let message: String

    package init(_ message: String) {
        self.message = message
    }

    package var description: String { message }
}

/// A backend whose every fetch waits for the program's driver, which answers it as the program scripted.
///
/// Each fetch takes the next scripted ``FetchBehaviour`` and is tagged with the epoch the engine started it in and
/// the monotonic time it started, so the fetcher can check that at most one fetch per epoch is in flight and that
/// fetch starts keep the minimum interval. A fetch waiting for its answer is parked on the clock's ledger, so the
/// engine counts as idle while the backend holds it.
package final class ModelFetcher: CredentialFetcher, ActivityLedgerFetcher {
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

    private struct Pending {
        package var request: Request
        package var continuation: CheckedContinuation<IdentityCredential, any Error>
    }

    private struct State {
        package var total = 0
        package var pending: [Int: Pending] = [:]
        package var script: [FetchBehaviour] = []
        package var recovering = false
        package var inFlight: [UInt64: Int] = [:]
        package var lastStart: [UInt64: Duration] = [:]
        package var violations: [String] = []
    }

    package static let defaultBehaviour = FetchBehaviour.succeed(lifetime: 300)

    private let state = Mutex(State())
    private let clock: ManualClock
    private let minimumInterval: Duration

    package init(clock: ManualClock, minimumInterval: Duration) {
        self.clock = clock
        self.minimumInterval = minimumInterval
    }

    /// The engine's fetches park on the clock's ledger, which the fetcher already knows.
    package func attach(_ ledger: ActivityLedger) {}

    package func fetchCredential(for account: AccountID) async throws -> IdentityCredential {
        preconditionFailure("the engine always says which fetch it starts")
    }

    package func fetchCredential(_ fetch: FetchRequest) async throws -> IdentityCredential {
        let start = clock.uptime
        let minimumInterval = self.minimumInterval
        let (account, epoch) = (fetch.account, fetch.epoch)
        let ledger = clock.activityLedger
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
            return Request(id: state.total, account: account, epoch: epoch, start: start, behaviour: behaviour)
        }
        return try await withTaskCancellationHandler {
            try await withCheckedThrowingContinuation { continuation in
                let cancelled = state.withLock { state -> Bool in
                    var request = request
                    request.cancelled = Task.isCancelled
                    if request.cancelled && !request.behaviour.ignoresCancellation {
                        state.inFlight[request.epoch, default: 1] -= 1
                        return true
                    }
                    state.pending[request.id] = Pending(request: request, continuation: continuation)
                    ledger.park()
                    return false
                }
                if cancelled { continuation.resume(throwing: CancellationError()) }
            }
        } onCancel: {
            let pending = state.withLock { state -> Pending? in
                guard let pending = state.pending[request.id] else { return nil }
                if pending.request.behaviour.ignoresCancellation {
                    state.pending[request.id]?.request.cancelled = true
                    return nil
                }
                state.pending.removeValue(forKey: request.id)
                state.inFlight[request.epoch, default: 1] -= 1
                return pending
            }
            guard let pending else { return }
            ledger.unpark()
            pending.continuation.resume(throwing: CancellationError())
        }
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

    package var pendingCount: Int { state.withLock { $0.pending.count } }

    package var total: Int { state.withLock { $0.total } }

    /// The first broken invariant the fetcher saw, if any.
    package var violation: String? { state.withLock { $0.violations.first } }

    /// Answers a pending fetch.
    package func answer(_ id: Int, with result: Result<IdentityCredential, any Error>) {
        let pending = state.withLock { state -> Pending? in
            guard let pending = state.pending.removeValue(forKey: id) else { return nil }
            state.inFlight[pending.request.epoch, default: 1] -= 1
            return pending
        }
        guard let pending else { return }
        clock.activityLedger.unpark()
        pending.continuation.resume(with: result)
    }

    /// Fails every pending fetch, to tear a program down.
    package func failAll() {
        for request in pendingRequests { answer(request.id, with: .failure(CancellationError())) }
    }
}
