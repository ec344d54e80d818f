import Foundation
import SessionEngine
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

/// Yields until `condition` holds, so the tasks it waits for can run.
///
/// A workload that never gets there is a broken benchmark, not a slow one: after ten million yields the process
/// stops with `what` rather than report figures of a workload that did not happen.
func waitUntil(_ what: String, _ condition: () -> Bool) async {
    for _ in 0..<10_000_000 {
        if condition() { return }
        await Task.yield()
    }
    fatalError("gave up waiting until \(what)")
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
/// benchmark that renews back to back keeps going and can count such calls.
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

/// A value behind a lock, shared between tasks.
final class Locked<Value: Sendable>: Sendable {
    private let mutex: Mutex<Value>

    init(_ value: Value) {
        mutex = Mutex(value)
    }

    func withLock<Result: Sendable>(_ body: (inout Value) -> Result) -> Result {
        mutex.withLock { body(&$0) }
    }
}

/// A counter shared between tasks.
final class Counter: Sendable {
    private let value = Atomic<Int>(0)

    var count: Int { value.load(ordering: .acquiring) }

    func increment() {
        value.add(1, ordering: .releasing)
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
    /// The clock only moves while the engine is identified, so a renewal under way never sees its credential
    /// expire.
    func renewOnce() async {
        let target = fetcher.issuedCount + 1
        while true {
            await clock.waitForSleepers(count: 1)
            guard case .identified = engine.state else {
                await Task.yield()
                continue
            }
            if fetcher.issuedCount >= target { return }
            if let deadline = clock.nextDeadline { clock.advance(by: max(.zero, deadline - clock.uptime)) }
        }
    }
}
