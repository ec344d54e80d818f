import Foundation
import Synchronization

/// The engine's lock-protected shared state: what identified work may use right now, and the account-scoped work
/// that is running.
///
/// Both live behind one `Mutex` so that handing out a credential and registering the work that uses it is one atomic
/// step, and so is beginning an account change and cancelling that work: no work of account A can start once a change
/// away from A has begun. The engine's actor is the only writer of the snapshot; requests read it without an actor
/// hop.
final class SessionStore: Sendable {
    /// What identified work may use.
    enum Access: Sendable {
        case signedOut
        case switching
        case expired
        case shutDown
        /// A credential and its precomputed headers; usable until `expiresAt` (Unix seconds) by the local clock: the
        /// credential's own expiry, moved by the backend clock offset the engine applies.
        case usable(IdentityCredential, IdentityHeaders, expiresAt: TimeInterval, epoch: UInt64)
    }

    /// Shared between one piece of scoped work and its caller: whether the engine cancelled it.
    final class WorkTicket: Sendable {
        let cancelledByEngine = Atomic<Bool>(false)
    }

    private struct Work {
        var epoch: UInt64
        var ticket: WorkTicket
        var cancel: @Sendable () -> Void
    }

    private struct DrainWaiter {
        var epoch: UInt64
        var continuation: CheckedContinuation<Void, Never>
    }

    private struct State {
        var access: Access = .signedOut
        var state: SessionState = .signedOut
        /// Work of epochs below this one has been cancelled; no new work may join them.
        var workFloor: UInt64 = 0
        var work: [UInt64: Work] = [:]
        /// How many pieces of work run per epoch; few epochs ever have work at once.
        var workPerEpoch: [UInt64: Int] = [:]
        var nextWorkID: UInt64 = 0
        var drainWaiters: [DrainWaiter] = []
        /// A graceful shutdown began: no new work receives an identity.
        var refusesWork = false

        func hasWork(before epoch: UInt64) -> Bool {
            workPerEpoch.keys.contains { $0 < epoch }
        }
    }

    /// What ``headers()`` reads, and all it reads: the usable credential's headers and expiry, or why there are none.
    ///
    /// Kept apart from ``State`` so a read copies one reference (the headers' storage) and takes a lock no other
    /// path contends for. Written only under `state`'s lock, in the same step as `State.access`.
    private enum Readable {
        /// The headers and the local expiry (Unix seconds), the credential's own moved by the applied clock offset.
        case usable(IdentityHeaders, expiresAt: TimeInterval)
        case signedOut
        case switching
        case expired
        case shutDown
    }

    /// Why ``Readable`` holds no headers, as a trivial value.
    private enum Unavailable {
        case signedOut
        case switching
        case expired
        case shutDown
    }

    private let state = Mutex(State())
    private let readable = Mutex(Readable.signedOut)
    private let clock: any SessionClock
    private let wallClock: WallClockCheck
    private let ledger: ActivityLedger?

    /// Creates an empty store.
    ///
    /// - Parameters:
    ///   - clock: The clock that decides local expiry.
    ///   - ledger: Where drains waiting for work are parked.
    init(clock: any SessionClock, ledger: ActivityLedger?) {
        self.clock = clock
        self.wallClock = WallClockCheck(clock)
        self.ledger = ledger
    }

    /// The state as last published.
    var sessionState: SessionState { state.withLock { $0.state } }

    /// The number of scoped tasks running.
    var runningWorkCount: Int { state.withLock { $0.work.count } }

    /// Replaces the snapshot.
    ///
    /// - Parameters:
    ///   - sessionState: The public state.
    ///   - credential: The usable credential and its epoch, if the state allows one.
    ///   - shutDown: Whether the engine has shut down.
    ///   - clockOffset: The backend's clock minus the local one that expiry applies.
    func update(
        sessionState: SessionState,
        credential: (IdentityCredential, UInt64)?,
        shutDown: Bool = false,
        clockOffset: Duration = .zero
    ) {
        let offset = clockOffset.timeInterval
        state.withLock { state in
            state.state = sessionState
            if shutDown {
                state.access = .shutDown
            } else if let (credential, epoch) = credential {
                if case .usable(let current, let headers, _, let currentEpoch) = state.access,
                    currentEpoch == epoch, current == credential
                {
                    state.access = .usable(
                        current, headers, expiresAt: TimeInterval(current.expiresAt) - offset, epoch: epoch)
                } else {
                    state.access = .usable(
                        credential,
                        IdentityHeaders(credential),
                        expiresAt: TimeInterval(credential.expiresAt) - offset,
                        epoch: epoch
                    )
                }
            } else {
                switch sessionState {
                case .signedOut: state.access = .signedOut
                case .switching: state.access = .switching
                case .expired, .identified, .renewing: state.access = .expired
                }
            }
            publishReadable(state.access)
        }
    }

    /// Mirrors `access` into the field ``headers()`` reads; called under `state`'s lock.
    private func publishReadable(_ access: Access) {
        let next: Readable =
            switch access {
            case .usable(_, let headers, let expiresAt, _): .usable(headers, expiresAt: expiresAt)
            case .signedOut: .signedOut
            case .switching: .switching
            case .expired: .expired
            case .shutDown: .shutDown
            }
        readable.withLock { $0 = next }
    }

    /// The usable credential's headers, checked against the local clock.
    ///
    /// It takes only the lock of ``Readable`` and, on the ``SystemClock``, reads the coarse wall clock (see
    /// ``WallClockCheck``): the one read every identified request makes.
    func headers() throws(SessionError) -> IdentityHeaders {
        // The closure hands the headers out as an optional, so the read retains them once and destroys no copy.
        let (headers, expiresAt, unavailable) = readable.withLock {
            readable -> (IdentityHeaders?, TimeInterval, Unavailable) in
            switch readable {
            case .usable(let headers, let expiresAt): (headers, expiresAt, .expired)
            case .signedOut: (nil, 0, .signedOut)
            case .switching: (nil, 0, .switching)
            case .expired: (nil, 0, .expired)
            case .shutDown: (nil, 0, .shutDown)
            }
        }
        guard let headers else {
            switch unavailable {
            case .signedOut: throw Self.error(for: .signedOut)
            case .switching: throw Self.error(for: .switching)
            case .expired: throw Self.expiredError
            case .shutDown: throw Self.error(for: .shutDown)
            }
        }
        guard wallClock.isBefore(expiresAt) else { throw Self.expiredError }
        return headers
    }

    /// The usable credential, checked against the local clock.
    func credential() throws(SessionError) -> IdentityCredential {
        let access = state.withLock { $0.access }
        guard case .usable(let credential, _, let expiresAt, _) = access else { throw Self.error(for: access) }
        guard clock.now.timeIntervalSince1970 < expiresAt else { throw Self.expiredError }
        return credential
    }

    /// The local wall-clock time (Unix seconds) at which the usable credential expires, if one is usable now.
    func localExpiry() -> TimeInterval? {
        let access = state.withLock { $0.access }
        guard case .usable(_, _, let expiresAt, _) = access, clock.now.timeIntervalSince1970 < expiresAt else {
            return nil
        }
        return expiresAt
    }

    /// Refuses identities to new scoped work from now on; running work goes on.
    func refuseNewWork() {
        state.withLock { $0.refusesWork = true }
    }

    /// Hands out the usable credential to new scoped work and registers the work, atomically.
    ///
    /// - Parameters:
    ///   - required: When set, the credential must be this one (a retry after a rejection); otherwise the call
    ///     fails with `INVALID_IDENTITY`.
    ///   - makeTask: Creates the work's task from the credential, the work's ID and its ticket.
    /// - Returns: The credential handed out, the task and its ticket.
    func startWork<T: Sendable>(
        requiring required: IdentityCredential? = nil,
        _ makeTask: (IdentityCredential, UInt64) -> Task<T, any Error>
    ) throws(SessionError) -> (IdentityCredential, Task<T, any Error>, WorkTicket) {
        let now = clock.now.timeIntervalSince1970
        let result = state.withLock {
            state -> Result<(IdentityCredential, Task<T, any Error>, WorkTicket), SessionError> in
            guard !state.refusesWork else { return .failure(Self.shuttingDownError) }
            guard case .usable(let credential, _, let expiresAt, let epoch) = state.access else {
                return .failure(Self.error(for: state.access))
            }
            guard now < expiresAt, epoch >= state.workFloor, required == nil || required == credential else {
                return .failure(Self.expiredError)
            }
            state.nextWorkID += 1
            let id = state.nextWorkID
            let ticket = WorkTicket()
            let task = makeTask(credential, id)
            state.work[id] = Work(epoch: epoch, ticket: ticket, cancel: { task.cancel() })
            state.workPerEpoch[epoch, default: 0] += 1
            return .success((credential, task, ticket))
        }
        return try result.get()
    }

    /// Removes finished work and wakes drains that were waiting for it.
    func finishWork(_ id: UInt64) {
        let ready = state.withLock { state -> [CheckedContinuation<Void, Never>] in
            guard let work = state.work.removeValue(forKey: id) else { return [] }
            if state.workPerEpoch[work.epoch, default: 1] <= 1 {
                state.workPerEpoch.removeValue(forKey: work.epoch)
            } else {
                state.workPerEpoch[work.epoch]! -= 1
            }
            guard !state.drainWaiters.isEmpty else { return [] }
            let oldest = state.workPerEpoch.keys.min() ?? .max
            var ready: [CheckedContinuation<Void, Never>] = []
            state.drainWaiters.removeAll { waiter in
                guard oldest >= waiter.epoch else { return false }
                ready.append(waiter.continuation)
                return true
            }
            return ready
        }
        for continuation in ready {
            ledger?.unpark()
            continuation.resume()
        }
    }

    /// Cancels all work of epochs before `epoch` and closes those epochs to new work.
    ///
    /// - Returns: How many pieces of work were cancelled.
    @discardableResult
    func cancelWork(before epoch: UInt64) -> Int {
        let cancels = state.withLock { state -> [@Sendable () -> Void] in
            state.workFloor = max(state.workFloor, epoch)
            var cancels: [@Sendable () -> Void] = []
            for work in state.work.values where work.epoch < epoch {
                if !work.ticket.cancelledByEngine.exchange(true, ordering: .relaxed) {
                    cancels.append(work.cancel)
                }
            }
            return cancels
        }
        for cancel in cancels { cancel() }
        return cancels.count
    }

    /// Waits until no work of epochs before `epoch` is running.
    func drain(before epoch: UInt64) async {
        await withCheckedContinuation { (continuation: CheckedContinuation<Void, Never>) in
            let done = state.withLock { state -> Bool in
                guard state.hasWork(before: epoch) else { return true }
                state.drainWaiters.append(DrainWaiter(epoch: epoch, continuation: continuation))
                ledger?.park()
                return false
            }
            if done { continuation.resume() }
        }
    }

    static let expiredError = SessionError(
        .invalidIdentity,
        reason: "the identity credential has expired or was rejected; it is being renewed"
    )

    static let shuttingDownError = SessionError(
        .shutDown,
        reason: "the session engine is shutting down; new work receives no identity"
    )

    private static func error(for access: Access) -> SessionError {
        switch access {
        case .signedOut: SessionError(.signedOut, reason: "no account is signed in")
        case .switching: SessionError(.switching, reason: "an account change is under way")
        case .shutDown: SessionError(.shutDown, reason: "the session engine has shut down")
        case .expired, .usable: expiredError
        }
    }
}
