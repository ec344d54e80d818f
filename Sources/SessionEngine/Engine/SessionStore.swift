import Foundation
import Synchronization

/// The engine's lock-protected shared state: what identified work may use right now, and the account-scoped work
/// that is running.
///
/// Both live behind one `Mutex` so that handing out a credential and registering the work that uses it is one atomic
/// step, and so is beginning an account change and cancelling that work: no work of account A can start once a change
/// away from A has begun. The engine's actor is the only writer of the snapshot; requests read it without an actor
/// hop. The identity read every request makes reads a copy the step writes right after each install: an engine's
/// ``ReadersCopy``, or a pool's account's row of the pool's table.
///
/// A value each account's slot holds inline, not an object of its own, so a pool's account carries no extra allocation
/// for it. Its nested types are not private: a private type in the layout of a value another file stores inline breaks
/// the compiler's build of that file (Swift 6.3.1).
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
        /// A credential, usable until `expiresAt` (Unix seconds) by the local clock: the credential's own expiry,
        /// moved by the backend clock offset the engine applies.
        case usable(IdentityCredential, expiresAt: TimeInterval, epoch: UInt64)

        /// What a reader may see of it: the credential, its headers not yet built, and its local expiry; or why there
        /// is none.
        var reading: Reading {
            switch self {
            case .usable(let credential, let expiresAt, _): (.unbuilt(credential), expiresAt, .expired)
            case .unavailable(let why): (nil, 0, why)
            }
        }

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
        /// The callers waiting for an outcome, made when the first registers and dropped by the step after the last
        /// has gone (``AccountShard/dropWaitersIfNone(_:)``): an identified account nobody waits on keeps none. Under
        /// the store's lock, where a lock of their own would cost every account 16 bytes.
        var waiters: OutcomeWaiters?

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

    /// A usable credential's headers as readers hold them: the credential, until the first read that finds it
    /// unexpired builds its headers, and from then on the headers that read built, which every later read hands out.
    ///
    /// An account nobody reads holds no headers: in an idle pool most accounts are not read between two renewals, and
    /// the headers' array (176 bytes with the allocator's) was the largest part of their credential. The first read
    /// pays for the build (an array, the email's and properties' encodings and the signature's text) outside every
    /// lock, then keeps it with ``ReadersCopy/keep(_:of:)`` or ``AccountTable/keep(_:of:account:hash:)``; two first
    /// reads at once may both build, and the later keeps nothing.
    enum Headers: Sendable {
        case unbuilt(IdentityCredential)
        case built(IdentityHeaders)

        /// What a read copies out of its lock for `headers` and `expiresAt`, or for `unavailable` when no credential
        /// is usable: the built headers apart from the credential, so that a read hands on the headers it copied, not
        /// a copy of them taken out of the enum (a retain and a release more: one engine's read took 40 ns, not 28).
        @inline(__always)
        static func copy(_ headers: Self?, _ expiresAt: TimeInterval, _ unavailable: Unavailability) -> Copy {
            switch headers {
            case .built(let built): (built, nil, expiresAt, unavailable)
            case .unbuilt(let credential): (nil, credential, expiresAt, unavailable)
            case nil: (nil, nil, expiresAt, unavailable)
            }
        }

        /// What a read that found no headers built hands out: the headers it builds now, if a credential is usable
        /// and the wall clock `isBefore` its expiry, handed to `keep` for where the read found the credential.
        @inline(never)
        static func first(
            _ unbuilt: IdentityCredential?, _ expiresAt: TimeInterval, _ unavailable: Unavailability,
            isBefore: (TimeInterval) -> Bool, keep: (IdentityHeaders, IdentityCredential) -> Void
        ) throws(SessionError) -> IdentityHeaders {
            guard let unbuilt else { throw unavailable.error }
            guard isBefore(expiresAt) else { throw SessionStore.expiredError }
            let headers = IdentityHeaders(unbuilt)
            keep(headers, unbuilt)
            return headers
        }

        /// Puts `headers` a read built for `credential` in place of that credential, if this still holds it unbuilt.
        mutating func keep(_ headers: IdentityHeaders, of credential: IdentityCredential) {
            guard case .unbuilt(let current) = self, current == credential else { return }
            self = .built(headers)
        }

        /// What a reader's copy holds once an install reaches it: what it held, when the install kept the usable
        /// credential in its session (`keepsHeaders`), so that headers a read built stay; the install's, otherwise.
        static func installed(_ next: Self?, over current: Self?, keepsHeaders: Bool) -> Self? {
            keepsHeaders && next != nil ? current ?? next : next
        }
    }

    /// What a read copies out of its lock: the built headers, or the credential to build them from, with their local
    /// expiry; neither, and why there are none, when no credential is usable.
    typealias Copy = (
        headers: IdentityHeaders?, unbuilt: IdentityCredential?, expiresAt: TimeInterval, unavailable: Unavailability
    )

    /// What ``ReadersCopy/headers(checkedBy:)`` reads, and all it reads: the usable credential's headers and expiry, or
    /// why there are none.
    ///
    /// ``ReadersCopy`` holds it.
    enum Readable {
        /// The headers and the local expiry (Unix seconds), the credential's own moved by the applied clock offset.
        case usable(Headers, expiresAt: TimeInterval)
        case unavailable(Unavailability)

        /// What a reader sees of `reading`.
        init(_ reading: Reading) {
            self =
                reading.headers.map { .usable($0, expiresAt: reading.expiresAt) } ?? .unavailable(reading.unavailable)
        }

        /// The reading it holds.
        var reading: Reading {
            switch self {
            case .usable(let headers, let expiresAt): (headers, expiresAt, .expired)
            case .unavailable(let why): (nil, 0, why)
            }
        }

        /// What ``ReadersCopy/headers(checkedBy:)`` copies out of the lock.
        @inline(__always)
        var copy: Copy {
            switch self {
            case .usable(let headers, let expiresAt): Headers.copy(headers, expiresAt, .expired)
            case .unavailable(let why): (nil, nil, 0, why)
            }
        }
    }

    /// What ``reading()`` returns: the headers, or the credential until a read builds them, and their local expiry, or
    /// why there are none.
    typealias Reading = (headers: Headers?, expiresAt: TimeInterval, unavailable: Unavailability)

    /// An engine's readers' copy of its store's read (a pool's readers read their account's row of the pool's table
    /// instead, so a pool's account holds none): the usable credential's headers and expiry, or why there are none.
    ///
    /// Kept apart from the store's ``State`` so a read copies one reference (the headers' storage, or the credential
    /// until a read builds them) and takes a lock no other path contends for. Written by ``install(_:keepsHeaders:)``,
    /// right after the store's install, by the engine's actor alone, and by ``keep(_:of:)``, which only puts a read's
    /// build of the credential's headers in place of that credential.
    final class ReadersCopy: Sendable {
        /// The copy, behind a lock no other path contends for.
        let readable = SanitizedMutex(Readable.unavailable(.signedOut))

        /// Installs what the store's install returned (``SessionStore/install(_:)``), keeping headers a read built
        /// when the install kept the credential (`keepsHeaders`). The store's lock and this one are taken one after
        /// the other, never one inside the other: the engine's actor is the only writer of both, so its installs reach
        /// the readers in order.
        func install(_ next: Reading, keepsHeaders: Bool) {
            readable.withLock { readable in
                var reading = next
                reading.headers = Headers.installed(
                    reading.headers, over: readable.reading.headers, keepsHeaders: keepsHeaders)
                readable = Readable(reading)
            }
        }

        /// The usable credential's headers, checked against the local clock.
        ///
        /// It takes only the lock of ``Readable`` and, on the ``SystemClock``, reads the coarse wall clock (see
        /// ``WallClockCheck``): the one read every identified request makes. Inlined into
        /// ``SessionEngine/identityHeaders()`` alone, a function that is never inlined, so its lock is inlined
        /// (``SanitizedMutex/withLockInlined(_:)``) and never lands in an `async` function.
        ///
        /// - Parameter wallClock: The check of the clock that decides local expiry.
        @inline(__always)
        func headers(checkedBy wallClock: SharedWallClockCheck) throws(SessionError) -> IdentityHeaders {
            // The closure hands the built headers out as an optional of their own, so the read retains them once and
            // destroys no copy.
            let (headers, unbuilt, expiresAt, unavailable) = readable.withLockInlined { $0.copy }
            if let headers {
                guard wallClock.isBefore(expiresAt) else { throw SessionStore.expiredError }
                return headers
            }
            return try Headers.first(unbuilt, expiresAt, unavailable, isBefore: wallClock.isBefore) {
                keep($0, of: $1)
            }
        }

        /// Keeps headers a read built for `credential`, if the copy still holds that credential unbuilt.
        func keep(_ headers: IdentityHeaders, of credential: IdentityCredential) {
            readable.withLock { readable in
                guard case .usable(var held, let expiresAt) = readable else { return }
                held.keep(headers, of: credential)
                readable = .usable(held, expiresAt: expiresAt)
            }
        }
    }

    private let state = SanitizedMutex(State())

    /// Creates an empty store.
    ///
    /// The clock that decides local expiry is its callers' to pass (the engine's or the shard's check of it): a
    /// reference to it here would be a word of every account of a pool.
    init() {}

    /// The state as last published.
    var sessionState: SessionState { state.withLock { $0.state } }

    /// The callers waiting for an outcome, while any caller is registered with them.
    var waiters: OutcomeWaiters? { state.withLock { $0.waiters } }

    /// The waiters, made if none are kept. The shard's actor alone makes and drops them.
    func openWaiters() -> OutcomeWaiters {
        state.withLock { state in
            if let waiters = state.waiters { return waiters }
            let made = OutcomeWaiters()
            state.waiters = made
            return made
        }
    }

    /// Drops the waiters once no caller is registered with them. Their count is read outside the store's lock, which
    /// is taken inside no other: the shard's actor alone registers callers and calls this, so none registers between.
    func dropWaitersIfNone() {
        guard let held = waiters, held.isEmpty else { return }
        state.withLock { state in
            if state.waiters === held { state.waiters = nil }
        }
    }

    /// The number of scoped tasks running.
    var runningWorkCount: Int { state.withLock { $0.runningWork } }

    /// Installs what a step of the engine decided.
    ///
    /// - Returns: Whether the state changed, which the engine then publishes (the store holds the state as last
    ///   published, so the engine keeps no copy of its own); what ``reading()`` returns from now on, which the step
    ///   copies into the engine's ``ReadersCopy`` or the account's row of the pool's table; and whether the usable
    ///   credential stayed the one before, in the same epoch, so that headers a read has built for it stay too.
    @discardableResult
    func install(_ snapshot: Snapshot) -> (stateChanged: Bool, reading: Reading, keepsHeaders: Bool) {
        let offset = snapshot.clockOffset.timeInterval
        let (changed, next, keepsHeaders) = state.withLock { state -> (Bool, Reading, Bool) in
            let changed = state.state != snapshot.state
            state.state = snapshot.state
            var keepsHeaders = false
            if snapshot.shutDown {
                state.access = .unavailable(.shutDown)
            } else if let credential = snapshot.credential {
                let epoch = snapshot.epoch
                if case .usable(let current, _, let currentEpoch) = state.access, currentEpoch == epoch,
                    current == credential
                {
                    keepsHeaders = true
                    state.access = .usable(current, expiresAt: TimeInterval(current.expiresAt) - offset, epoch: epoch)
                } else {
                    state.access = .usable(
                        credential, expiresAt: TimeInterval(credential.expiresAt) - offset, epoch: epoch)
                }
            } else {
                switch snapshot.state {
                case .signedOut: state.access = .unavailable(.signedOut)
                case .switching: state.access = .unavailable(.switching)
                case .expired, .identified, .renewing: state.access = .unavailable(.expired)
                }
            }
            return (changed, state.access.reading, keepsHeaders)
        }
        return (changed, next, keepsHeaders)
    }

    /// What readers may see as of the last install: the credential (its headers not built), and its local expiry, or
    /// why there is none. A pool's table copies it when an account joins.
    func reading() -> Reading {
        state.withLock { $0.access.reading }
    }

    /// The local wall-clock time (Unix seconds) at which the usable credential expires, if one is usable at `now`.
    ///
    /// - Parameter now: The local wall clock's time, in Unix seconds.
    func localExpiry(at now: TimeInterval) -> TimeInterval? {
        let access = state.withLock { $0.access }
        guard case .usable(_, let expiresAt, _) = access, now < expiresAt else {
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
    ///   - now: The local wall clock's time, in Unix seconds, which the credential must be unexpired at.
    ///   - required: When set (a retry after a rejection), the work must start in this account session, or the
    ///     call fails with `ACCOUNT_CHANGED`, and with a credential other than the rejected one, or it fails with
    ///     `INVALID_IDENTITY`: the rejection's renewal, or one installed after it in the same session (pushed, or
    ///     renewed again), which is as much the account's.
    ///   - makeTask: Creates the work's task from the credential and the work's slot, which identifies it until it
    ///     finishes.
    /// - Returns: The credential handed out, the task and its ticket.
    func startWork<T: Sendable>(
        at now: TimeInterval,
        requiring required: (epoch: UInt64, rejected: IdentityCredential)? = nil,
        _ makeTask: (IdentityCredential, Int) -> Task<T, any Error>
    ) throws(SessionError) -> (IdentityCredential, Task<T, any Error>, WorkTicket) {
        let result = state.withLock {
            state -> Result<(IdentityCredential, Task<T, any Error>, WorkTicket), SessionError> in
            guard !state.refusesWork else { return .failure(Self.shuttingDownError) }
            guard case .usable(let credential, let expiresAt, let epoch) = state.access else {
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
    /// - Parameter slot: The slot ``startWork(at:requiring:_:)`` gave the work.
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
