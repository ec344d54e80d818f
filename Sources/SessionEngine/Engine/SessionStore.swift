import Foundation
import Synchronization

/// The engine's lock-protected shared state: what identified work may use right now, and the account-scoped work
/// that is running.
///
/// Both live behind one `Mutex` so that handing out a credential and registering the work that uses it is one atomic
/// step, and so is beginning an account change and cancelling that work: no work of account A can start once a change
/// away from A has begun. The engine's actor is the only writer of the snapshot; requests read it without an actor
/// hop.
///
/// A value the engine holds inline, not an object of its own: a read goes from the engine straight to the lock, and a
/// pool's account carries no extra allocation for it. Its nested types are not private: a private type in the
/// layout of a value another file stores inline breaks the compiler's build of that file (Swift 6.3.1).
struct SessionStore: ~Copyable, Sendable {
    /// What a step of the engine installs: everything the store's readers see, decided by the machine.
    struct Snapshot: Sendable {
        /// The public state.
        var state: SessionState
        /// The current epoch.
        var epoch: UInt64
        /// The usable credential, if the state allows one; it belongs to `epoch`.
        var credential: IdentityCredential?
        /// Whether the engine has shut down.
        var shutDown: Bool
        /// The backend's clock minus the local one, which local expiry applies.
        var clockOffset: Duration
    }

    /// Why no credential is usable: the one place the store spells out availability.
    enum Unavailability: Sendable {
        case signedOut
        case switching
        case expired
        case shutDown

        /// The error a reader receives.
        var error: SessionError {
            switch self {
            case .signedOut: SessionError(.signedOut, reason: "no account is signed in")
            case .switching: SessionError(.switching, reason: "an account change is under way")
            case .shutDown: SessionError(.shutDown, reason: "the session engine has shut down")
            case .expired: SessionStore.expiredError
            }
        }
    }

    /// What identified work may use.
    enum Access: Sendable {
        case unavailable(Unavailability)
        /// A credential and its precomputed headers; usable until `expiresAt` (Unix seconds) by the local clock: the
        /// credential's own expiry, moved by the backend clock offset the engine applies.
        case usable(IdentityCredential, IdentityHeaders, expiresAt: TimeInterval, epoch: UInt64)

        /// The error of a read that finds no usable credential here (an expired one when a credential is held).
        var error: SessionError {
            switch self {
            case .unavailable(let why): why.error
            case .usable: SessionStore.expiredError
            }
        }
    }

    /// One piece of running scoped work, shared between the store and the work's caller: its epoch, its task and
    /// whether the engine cancelled it.
    final class WorkTicket: Sendable {
        let epoch: UInt64
        let task: any CancellableTask
        let cancelledByEngine = Atomic<Bool>(false)

        init(epoch: UInt64, task: any CancellableTask) {
            self.epoch = epoch
            self.task = task
        }
    }

    struct State {
        var access: Access = .unavailable(.signedOut)
        var state: SessionState = .signedOut
        // Stored after the state, in the room it leaves.
        /// A graceful shutdown began: no new work receives an identity.
        var refusesWork = false
        /// Work of epochs below this one has been cancelled; no new work may join them.
        var workFloor: UInt64 = 0
        /// The scoped work's books, from the first piece of work on.
        var books: WorkBooks?

        /// How many pieces of work run.
        var runningWork: Int { books.map { $0.work.count - $0.freeSlots.count } ?? 0 }

        func hasWork(before epoch: UInt64) -> Bool {
            books?.workPerEpoch.contains { $0.epoch < epoch } ?? false
        }

        /// The books, made if no work has run yet.
        mutating func openBooks() -> WorkBooks {
            if let books { return books }
            let made = WorkBooks()
            books = made
            return made
        }
    }

    /// The running scoped work and the drains waiting for it, touched only under the store's lock.
    ///
    /// Made when the first piece of work starts and kept, with the arrays' capacity, for the store's life: an account
    /// that never runs scoped work, as most of a pool's idle accounts, holds one word for them instead of four.
    final class WorkBooks {
        /// Running work, by slot; a finished piece's slot is reused. Cancelling walks the slots in order, so work
        /// started together is cancelled in the order it started: its tasks, created one after another, sit near each
        /// other in memory, and a walk in hash order would touch them at random.
        var work: [WorkTicket?] = []
        /// The slots of `work` that hold no work.
        var freeSlots: [Int] = []
        /// How many pieces of work run per epoch, oldest epoch first; few epochs ever have work at once, so a short
        /// list serves without hashing.
        var workPerEpoch: [(epoch: UInt64, count: Int)] = []
        /// The drains waiting, each for the work of epochs before its own.
        var drains = WaiterQueue<UInt64, Void>()
    }

    /// What ``headers()`` reads, and all it reads: the usable credential's headers and expiry, or why there are none.
    ///
    /// Kept apart from ``State`` so a read copies one reference (the headers' storage) and takes a lock no other
    /// path contends for. Written only by ``install(_:)``, right after `State.access`, by the engine's actor alone.
    enum Readable {
        /// The headers and the local expiry (Unix seconds), the credential's own moved by the applied clock offset.
        case usable(IdentityHeaders, expiresAt: TimeInterval)
        case unavailable(Unavailability)

        /// What a reader may see of `access`.
        init(_ access: Access) {
            switch access {
            case .usable(_, let headers, let expiresAt, _): self = .usable(headers, expiresAt: expiresAt)
            case .unavailable(let why): self = .unavailable(why)
            }
        }

        /// What ``SessionStore/reading()`` hands out for it.
        @inline(__always)
        var reading: Reading {
            switch self {
            case .usable(let headers, let expiresAt): (headers, expiresAt, .expired)
            case .unavailable(let why): (nil, 0, why)
            }
        }
    }

    /// What ``reading()`` returns: the headers and their local expiry, or why there are none.
    typealias Reading = (headers: IdentityHeaders?, expiresAt: TimeInterval, unavailable: Unavailability)

    private let state = SanitizedMutex(State())
    private let readable = SanitizedMutex(Readable.unavailable(.signedOut))
    /// The check of the clock that decides local expiry, which the store shares with its engine's other stores.
    private let wallClock: SharedWallClockCheck
    /// The clock that decides local expiry, the one the check reads.
    private var clock: any SessionClock { wallClock.clock }

    /// Creates an empty store.
    ///
    /// - Parameter wallClock: The check of the clock that decides local expiry, shared with the engine's other stores.
    init(wallClock: SharedWallClockCheck) {
        self.wallClock = wallClock
    }

    /// The state as last published.
    var sessionState: SessionState { state.withLock { $0.state } }

    /// The number of scoped tasks running.
    var runningWorkCount: Int { state.withLock { $0.runningWork } }

    /// Installs what a step of the engine decided.
    ///
    /// - Returns: Whether the state changed, which the engine then publishes (the store holds the state as last
    ///   published, so the engine keeps no copy of its own), and what ``reading()`` returns from now on, which a pool's
    ///   engine copies into its row of the pool's table.
    @discardableResult
    func install(_ snapshot: Snapshot) -> (stateChanged: Bool, reading: Reading) {
        let offset = snapshot.clockOffset.timeInterval
        let (changed, next) = state.withLock { state -> (Bool, Readable) in
            let changed = state.state != snapshot.state
            state.state = snapshot.state
            if snapshot.shutDown {
                state.access = .unavailable(.shutDown)
            } else if let credential = snapshot.credential {
                let epoch = snapshot.epoch
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
                switch snapshot.state {
                case .signedOut: state.access = .unavailable(.signedOut)
                case .switching: state.access = .unavailable(.switching)
                case .expired, .identified, .renewing: state.access = .unavailable(.expired)
                }
            }
            return (changed, Readable(state.access))
        }
        // Each lock alone, one after the other: the engine's actor is the only writer, so its installs reach the
        // readers, and a pool's table after them, in order with no lock held across them.
        readable.withLock { $0 = next }
        return (changed, next.reading)
    }

    /// The usable credential's headers, checked against the local clock.
    ///
    /// It takes only the lock of ``Readable`` and, on the ``SystemClock``, reads the coarse wall clock (see
    /// ``WallClockCheck``): the one read every identified request makes. Inlined into
    /// ``SessionEngine/identityHeaders()`` alone, a function that is never inlined, so its lock is inlined
    /// (``SanitizedMutex/withLockInlined(_:)``) and never lands in an `async` function.
    @inline(__always)
    func headers() throws(SessionError) -> IdentityHeaders {
        // The closure hands the headers out as an optional, so the read retains them once and destroys no copy.
        let (headers, expiresAt, unavailable) = readable.withLockInlined { $0.reading }
        guard let headers else { throw unavailable.error }
        guard wallClock.isBefore(expiresAt) else { throw Self.expiredError }
        return headers
    }

    /// What ``headers()`` reads under the lock of ``Readable``, before it checks the clock: the headers and their
    /// local expiry, or why there are none.
    func reading() -> Reading {
        readable.withLock { $0.reading }
    }

    /// The usable credential, checked against the local clock.
    func credential() throws(SessionError) -> IdentityCredential {
        let access = state.withLock { $0.access }
        guard case .usable(let credential, _, let expiresAt, _) = access else { throw access.error }
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

    /// Refuses identities to new scoped work from now on if none runs, in one lock step with the check, so no work
    /// can start between them; returns whether it did.
    func refuseNewWorkIfNoneRuns() -> Bool {
        state.withLock { state in
            guard state.runningWork == 0 else { return false }
            state.refusesWork = true
            return true
        }
    }

    /// Hands out the usable credential to new scoped work and registers the work, atomically.
    ///
    /// - Parameters:
    ///   - required: When set (a retry after a rejection), the work must start in this account session, or the
    ///     call fails with `ACCOUNT_CHANGED`, and with a credential other than the rejected one, or it fails with
    ///     `INVALID_IDENTITY`: the rejection's renewal, or one installed after it in the same session (pushed, or
    ///     renewed again), which is as much the account's.
    ///   - makeTask: Creates the work's task from the credential and the work's slot, which identifies it until it
    ///     finishes.
    /// - Returns: The credential handed out, the task and its ticket.
    func startWork<T: Sendable>(
        requiring required: (epoch: UInt64, rejected: IdentityCredential)? = nil,
        _ makeTask: (IdentityCredential, Int) -> Task<T, any Error>
    ) throws(SessionError) -> (IdentityCredential, Task<T, any Error>, WorkTicket) {
        let now = clock.now.timeIntervalSince1970
        let result = state.withLock {
            state -> Result<(IdentityCredential, Task<T, any Error>, WorkTicket), SessionError> in
            guard !state.refusesWork else { return .failure(Self.shuttingDownError) }
            guard case .usable(let credential, _, let expiresAt, let epoch) = state.access else {
                return .failure(state.access.error)
            }
            if let required, required.epoch != epoch { return .failure(Self.accountChangedError) }
            guard now < expiresAt, epoch >= state.workFloor, required.map({ $0.rejected != credential }) ?? true
            else {
                return .failure(Self.expiredError)
            }
            let books = state.openBooks()
            let slot = books.freeSlots.popLast() ?? books.work.count
            let task = makeTask(credential, slot)
            let ticket = WorkTicket(epoch: epoch, task: task)
            if slot == books.work.count {
                books.work.append(ticket)
            } else {
                books.work[slot] = ticket
            }
            if let index = books.workPerEpoch.lastIndex(where: { $0.epoch == epoch }) {
                books.workPerEpoch[index].count += 1
            } else {
                books.workPerEpoch.append((epoch, 1))
            }
            return .success((credential, task, ticket))
        }
        return try result.get()
    }

    /// Removes finished work and wakes drains that were waiting for it.
    ///
    /// - Parameter slot: The slot ``startWork(requiring:_:)`` gave the work.
    func finishWork(_ slot: Int) {
        // The ticket comes out of the lock to be released after it.
        let (_, ready) = state.withLock { state -> (WorkTicket?, WaiterQueue<UInt64, Void>.Wakeups) in
            var ready = WaiterQueue<UInt64, Void>.Wakeups()
            guard let books = state.books, let work = books.work[slot].take() else { return (nil, ready) }
            if books.freeSlots.count + 1 == books.work.count {
                // No work runs: the next work starts again from the first slot, in order.
                books.work.removeAll(keepingCapacity: true)
                books.freeSlots.removeAll(keepingCapacity: true)
            } else {
                books.freeSlots.append(slot)
            }
            guard let index = books.workPerEpoch.firstIndex(where: { $0.epoch == work.epoch }) else {
                return (work, ready)
            }
            books.workPerEpoch[index].count -= 1
            // Only an epoch's last piece can end a drain's wait.
            guard books.workPerEpoch[index].count == 0 else { return (work, ready) }
            books.workPerEpoch.remove(at: index)
            let oldest = books.workPerEpoch.lazy.map(\.epoch).min() ?? .max
            books.drains.resolve(where: { oldest >= $0 }, with: (), into: &ready)
            return (work, ready)
        }
        ready.resume()
    }

    /// Cancels all work of epochs before `epoch` and closes those epochs to new work.
    ///
    /// - Returns: How many pieces of work were cancelled.
    @discardableResult
    func cancelWork(before epoch: UInt64) -> Int {
        let cancelled = state.withLock { state -> [WorkTicket] in
            state.workFloor = max(state.workFloor, epoch)
            var cancelled: [WorkTicket] = []
            // Only this step, under the lock, sets the flag: a plain load and store suffice.
            for case let work? in state.books?.work ?? []
            where work.epoch < epoch && !work.cancelledByEngine.load(ordering: .relaxed) {
                work.cancelledByEngine.store(true, ordering: .relaxed)
                cancelled.append(work)
            }
            return cancelled
        }
        // Outside the lock: cancelling runs the work's cancellation handlers.
        for work in cancelled { work.task.cancel() }
        return cancelled.count
    }

    /// Waits until no work of epochs before `epoch` is running.
    func drain(before epoch: UInt64) async {
        await withParkedContinuation { (continuation: UnsafeContinuation<Void, Never>) in
            let done = state.withLock { state -> Bool in
                guard state.hasWork(before: epoch) else { return true }
                state.openBooks().drains.park(epoch, continuation)
                return false
            }
            if done { continuation.resume() }
        }
    }

    static let expiredError = SessionError(
        .invalidIdentity,
        reason: "the identity credential has expired or was rejected; it is being renewed"
    )

    /// The error of scoped work that an account change cancelled, or whose rejection renewal found another account.
    static let accountChangedError = SessionError(
        .accountChanged, reason: "the account changed; the work was cancelled")

    /// ``accountChangedError`` boxed once as an error to throw: an account change fails each piece of work it cancelled
    /// with it, and ten thousand pieces then allocate nothing for their errors.
    static let accountChangedFailure: any Error = accountChangedError

    static let shuttingDownError = SessionError(
        .shutDown,
        reason: "the session engine is shutting down; new work receives no identity"
    )
}

/// A task the store can cancel, whatever its result type.
protocol CancellableTask: Sendable {
    /// Cancels the task.
    func cancel()
}

extension Task: CancellableTask {}
