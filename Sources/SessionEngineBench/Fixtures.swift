import Foundation
import SessionEngine
import SessionEngineBackend
import SessionEngineTestKit
import Synchronization

/// The project the benchmarks sign for.
enum Fixtures {
    static let projectID = "proj_bench"
    static let secret = "bench-secret-0123456789abcdef"

    /// A signer on `clock`.
    static func signer(clock: some SessionClock) -> IdentitySigner {
        try! IdentitySigner(projectID: projectID, secret: secret, clock: clock)
    }

    /// The email the backend signs for an account.
    static func email(for account: AccountID) -> String { "\(account.rawValue)@example.com" }
}

/// A backend without a network: every fetch signs a fresh credential at once.
///
/// Consecutive credentials differ in `expiresAt` by a second, so every renewal installs a credential the engine
/// has not seen, and the engine recomputes its headers as it would in production.
final class SigningFetcher: CredentialFetcher {
    /// Called with every credential issued, before it is returned: the account, the clock's time and the expiry.
    typealias IssueObserver = @Sendable (AccountID, Date, Int64) -> Void

    private let signer: IdentitySigner
    private let clock: any SessionClock
    private let lifetime: Int64
    private let issued = Atomic<Int>(0)
    private let onIssue: IssueObserver?

    /// Creates a fetcher.
    ///
    /// - Parameters:
    ///   - clock: The clock `expiresAt` is stamped from.
    ///   - lifetime: The credentials' lifetime in seconds.
    ///   - onIssue: Observes every credential issued.
    init(clock: some SessionClock, lifetime: Int64 = 900, onIssue: IssueObserver? = nil) {
        self.signer = Fixtures.signer(clock: clock)
        self.clock = clock
        self.lifetime = lifetime
        self.onIssue = onIssue
    }

    /// The number of credentials issued.
    var issuedCount: Int { issued.load(ordering: .relaxed) }

    func fetchCredential(for account: AccountID) async throws -> IdentityCredential {
        let serial = issued.add(1, ordering: .relaxed).newValue
        let now = clock.now
        let expiresAt = Int64(now.timeIntervalSince1970.rounded(.down)) + lifetime - Int64(serial % 2)
        onIssue?(account, now, expiresAt)
        return try signer.sign(email: Fixtures.email(for: account), properties: nil, expiresAt: expiresAt)
    }
}

/// Starts `count` calls into `engine` at once, each in a task of its own, and returns once `count` callers wait in
/// the engine for an outcome (its metrics' `waiters`): for calls that wait, on an engine that runs on the runtime's
/// own executors (``VirtualClock``). It yields while it waits; the calls' own work is what it measures.
///
/// - Parameters:
///   - count: How many calls to start.
///   - engine: The engine to call.
///   - call: One call, given the engine; it must wait in the engine for an outcome.
/// - Returns: The tasks running the calls.
func startConcurrentCalls<T: Sendable>(
    _ count: Int,
    into engine: SessionEngine,
    _ call: @escaping @Sendable (SessionEngine) async throws -> T
) async -> [Task<T, any Error>] {
    let tasks = (0..<count).map { _ in Task { try await call(engine) } }
    while engine.metrics.waiters < count { await Task.yield() }
    return tasks
}

/// Manual time on the runtime's own executors: a ``ManualClock``'s time without its executor, for benchmarks that
/// time the engine as it runs in a host (its actor on its own executor, its tasks on the global one) while the test
/// moves the clock.
struct VirtualClock: SessionClock {
    /// The clock whose time this is.
    let manual: ManualClock

    var now: Date { manual.now }
    var uptime: Duration { manual.uptime }
    func sleep(for duration: Duration) async throws { try await manual.sleep(for: duration) }
}

/// Suspends until the calling task is cancelled, then throws `CancellationError`: a request waiting on the network
/// until it is cancelled, without a timer.
func suspendUntilCancelled() async throws {
    let parked = ParkedUntilCancelled()
    try await withTaskCancellationHandler {
        try await withCheckedThrowingContinuation { parked.park($0) }
    } onCancel: {
        parked.cancel()
    }
}

/// The continuation of one ``suspendUntilCancelled()``, resumed when its task is cancelled.
private final class ParkedUntilCancelled: Sendable {
    private let state = SanitizedMutex<(continuation: CheckedContinuation<Void, any Error>?, cancelled: Bool)>(
        (nil, false))

    func park(_ continuation: CheckedContinuation<Void, any Error>) {
        let cancelled = state.withLock { state -> Bool in
            if !state.cancelled { state.continuation = continuation }
            return state.cancelled
        }
        if cancelled { continuation.resume(throwing: CancellationError()) }
    }

    func cancel() {
        let continuation = state.withLock { state in
            state.cancelled = true
            defer { state.continuation = nil }
            return state.continuation
        }
        continuation?.resume(throwing: CancellationError())
    }
}

/// How a `renew()` call made with a time limit ended.
enum RenewOutcome: Sendable {
    case renewed
    case failed
    /// The call had not returned within the limit and was cancelled.
    case timedOut
}

/// Calls `engine.renew()` and cancels the call if it has not returned within `limit`.
///
/// With a backend that answers at once, a call that takes longer than a few milliseconds is one that missed its
/// fetch's outcome (see "renew() can miss its outcome" in BENCHMARKS.md). Cancelling removes its waiter, so a
/// benchmark that renews back to back keeps going and can count such calls. For engines on the `SystemClock`: the
/// limit is real time, a timeout rather than a wait for anything to happen.
func renew(_ engine: SessionEngine, within limit: Duration) async -> RenewOutcome {
    await withTaskGroup(of: RenewOutcome.self) { group in
        group.addTask {
            do {
                _ = try await engine.renew()
                return .renewed
            } catch {
                return .failed
            }
        }
        group.addTask {
            try? await Task.sleep(for: limit)
            return .timedOut
        }
        let first = await group.next()!
        group.cancelAll()
        return first
    }
}

/// A count of arrivals shared between tasks, which a task can wait on until enough have arrived.
final class Arrivals: Sendable {
    private struct State {
        var count = 0
        var waiters: [(count: Int, continuation: CheckedContinuation<Void, Never>)] = []
    }

    private let state = SanitizedMutex(State())

    /// How many have arrived.
    var count: Int { state.withLock { $0.count } }

    /// Counts one arrival and resumes the waiters it completes.
    func arrive() {
        let ready = state.withLock { state -> [CheckedContinuation<Void, Never>] in
            state.count += 1
            var ready: [CheckedContinuation<Void, Never>] = []
            state.waiters.removeAll { waiter in
                guard waiter.count <= state.count else { return false }
                ready.append(waiter.continuation)
                return true
            }
            return ready
        }
        for continuation in ready { continuation.resume() }
    }

    /// Suspends until at least `count` have arrived.
    func wait(for count: Int) async {
        await withCheckedContinuation { (continuation: CheckedContinuation<Void, Never>) in
            let ready = state.withLock { state -> Bool in
                if state.count >= count { return true }
                state.waiters.append((count, continuation))
                return false
            }
            if ready { continuation.resume() }
        }
    }
}

/// Drives an engine on a manual clock through its renewal cycles as fast as the engine allows.
struct RenewalDriver {
    let engine: SessionEngine
    let clock: ManualClock
    let fetcher: SigningFetcher

    /// Advances the clock from one timer deadline to the next until one more credential has been issued and
    /// installed and the engine's timer sleeps again.
    ///
    /// The clock moves only when the engine is idle (the test kit's `ManualClock.advance(upTo:until:)` waits for that
    /// before each step), so a renewal under way always completes before time moves on.
    func renewOnce() async {
        let target = fetcher.issuedCount + 1
        let renewed = await clock.advance(upTo: .seconds(365 * 86_400)) { fetcher.issuedCount >= target }
        guard renewed else { fatalError("the engine has no timer asleep on the clock") }
    }
}
