import Synchronization

/// Counts the engine work that can run right now, so a test can wait until none can without polling.
///
/// An *activity* is one of the engine's own tasks (a fetch, a timer, an account change's preparation), a piece of
/// scoped work, or a call into the engine while it runs inside the engine. An activity is *runnable* unless it is
/// parked: asleep on a manual clock, held by a scripted fetcher or a hold, waiting for a fetch outcome, waiting for
/// scoped work to drain, or waiting for another activity. Every place that parks an activity also unparks it, in the
/// same lock step that makes it runnable again and before it is resumed, so the count never reads zero while
/// something can still run.
///
/// The engine is *idle* when no activity is runnable: nothing changes until the test acts (advances the clock,
/// answers a fetch, releases a hold, calls the engine). The ledger belongs to a manual clock; every engine driven by
/// that clock, and the test doubles that park on it, share it. Engines on other clocks have no ledger.
package final class ActivityLedger: Sendable {
    private struct Waiter {
        var callsEntered: UInt64
        /// Whether the waiter also waits for no activity to be runnable.
        var idle: Bool
        var continuation: CheckedContinuation<Void, Never>
    }

    private struct State {
        var runnable = 0
        /// Calls that have entered an engine, over the ledger's life.
        var callsEntered: UInt64 = 0
        /// Calls inside an engine now, parked or not.
        var callsInside = 0
        var waiters: [Waiter] = []

        mutating func ready() -> [CheckedContinuation<Void, Never>] {
            guard !waiters.isEmpty else { return [] }
            var ready: [CheckedContinuation<Void, Never>] = []
            waiters.removeAll { waiter in
                guard callsEntered >= waiter.callsEntered, runnable == 0 || !waiter.idle else { return false }
                ready.append(waiter.continuation)
                return true
            }
            return ready
        }
    }

    private let state = Mutex(State())

    /// Creates an empty ledger.
    package init() {}

    /// The number of runnable activities.
    package var runnable: Int { state.withLock { $0.runnable } }

    /// The number of calls that have entered an engine.
    package var callsEntered: UInt64 { state.withLock { $0.callsEntered } }

    /// The number of calls inside an engine now, parked or not.
    package var callsInside: Int { state.withLock { $0.callsInside } }

    /// An activity started; call before the task that performs it is created.
    package func begin() { change(by: 1) }

    /// `count` activities started, in one step; call before the tasks that perform them are created.
    package func begin(count: Int) {
        guard count > 0 else { return }
        change(by: count)
    }

    /// An activity ended.
    package func end() { change(by: -1) }

    /// A runnable activity is about to suspend on something only an outside step can release.
    package func park() { change(by: -1) }

    /// A parked activity is made runnable again; call before resuming it.
    package func unpark() { change(by: 1) }

    /// `count` parked activities are made runnable again, in one step; call before resuming any of them.
    package func unpark(count: Int) {
        guard count > 0 else { return }
        change(by: count)
    }

    /// The call a task counts itself as on a ledger, from ``countingCall(_:)``: the ledger and the task.
    private struct CountedCall: Sendable, Hashable {
        var ledger: ObjectIdentifier
        var task: Int
    }

    @TaskLocal private static var countedCall: CountedCall?

    /// Whether the current task runs inside ``countingCall(_:)`` on this ledger; tasks it starts do not, though they
    /// inherit its task-local values.
    private var insideCountedCall: Bool {
        guard let call = Self.countedCall, call.ledger == ObjectIdentifier(self) else { return false }
        return withUnsafeCurrentTask { $0?.hashValue } == call.task
    }

    /// Runs `body` as one call: entered before it, left after it, and the engine calls it makes from its own task
    /// neither enter nor leave again, so the call counts as runnable in its own code between them.
    ///
    /// A pool's call makes several engine calls in a row (an eviction's sign-out and shutdown, then the sign-in);
    /// counted one by one, the call would be runnable but uncounted between two of them, and the ledger could read
    /// idle while it still had work to do. The engine calls' parking still parks this one count.
    package func countingCall<T>(_ body: () async throws -> T) async rethrows -> T {
        enter()
        defer { leave() }
        let call = CountedCall(ledger: ObjectIdentifier(self), task: withUnsafeCurrentTask { $0?.hashValue } ?? 0)
        return try await Self.$countedCall.withValue(call) { try await body() }
    }

    /// A call entered an engine: it is runnable until it parks or returns. Inside ``countingCall(_:)`` it is
    /// already counted, and nothing changes.
    package func enter() {
        guard !insideCountedCall else { return }
        let ready = state.withLock { state in
            state.runnable += 1
            state.callsEntered += 1
            state.callsInside += 1
            return state.ready()
        }
        for continuation in ready { continuation.resume() }
    }

    /// A call returned from an engine; inside ``countingCall(_:)``, nothing changes.
    package func leave() {
        guard !insideCountedCall else { return }
        let ready = state.withLock { state in
            state.runnable -= 1
            state.callsInside -= 1
            precondition(state.runnable >= 0 && state.callsInside >= 0, "a call left that never entered")
            return state.ready()
        }
        for continuation in ready { continuation.resume() }
    }

    /// Suspends until no activity is runnable and at least `callsEntered` calls have entered an engine.
    ///
    /// - Parameter callsEntered: How many calls must have entered first; calls started in other tasks count only
    ///   once they are inside the engine.
    package func waitUntilIdle(callsEntered: UInt64 = 0) async {
        await wait(callsEntered: callsEntered, idle: true)
    }

    /// Suspends until at least `callsEntered` calls have entered an engine.
    ///
    /// - Parameter callsEntered: How many calls must have entered.
    package func waitUntilEntered(_ callsEntered: UInt64) async {
        await wait(callsEntered: callsEntered, idle: false)
    }

    private func wait(callsEntered: UInt64, idle: Bool) async {
        await withCheckedContinuation { (continuation: CheckedContinuation<Void, Never>) in
            let now = state.withLock { state -> Bool in
                if (state.runnable == 0 || !idle) && state.callsEntered >= callsEntered { return true }
                state.waiters.append(Waiter(callsEntered: callsEntered, idle: idle, continuation: continuation))
                return false
            }
            if now { continuation.resume() }
        }
    }

    private func change(by delta: Int) {
        let ready = state.withLock { state in
            state.runnable += delta
            precondition(state.runnable >= 0, "an activity was parked or ended that the ledger never counted")
            return state.ready()
        }
        for continuation in ready { continuation.resume() }
    }
}

/// A clock that carries an ``ActivityLedger``: engines driven by it count their activities there.
package protocol ActivityLedgerClock: SessionClock {
    /// The ledger shared by everything this clock drives.
    var activityLedger: ActivityLedger { get }
}

/// A fetcher that parks the engine's fetches while a script holds them, on the ledger of the engine's clock.
package protocol ActivityLedgerFetcher: CredentialFetcher {
    /// Called once by each engine or pool that uses the fetcher, with its ledger.
    func attach(_ ledger: ActivityLedger)
}

extension ActivityLedger {
    /// The ledger of `clock`, if it keeps one, attached to `fetcher`: where an engine, or a pool and its engines,
    /// count their work.
    static func of(_ clock: any SessionClock, attaching fetcher: any CredentialFetcher) -> ActivityLedger? {
        let ledger = (clock as? any ActivityLedgerClock)?.activityLedger
        if let ledger { (fetcher as? any ActivityLedgerFetcher)?.attach(ledger) }
        return ledger
    }
}
