import Foundation
import Synchronization

@testable import SessionEngine

/// What a program's tasks observe while they run: the engine's log, the calls in progress, the scoped work that is
/// running, the account-change hooks, and the invariants the tasks saw broken.
///
/// Everything here is shared between the driver and the tasks it starts, so it lives behind one lock.
final class ModelProbe: Sendable {
    private struct State {
        var violations: [String] = []
        /// Calls to the engine started and not yet returned.
        var outstanding = 0
        var calls: [Int: String] = [:]
        var nextCall = 0
        /// Scoped work bodies sleeping on the clock; each blocks exactly one outstanding call.
        var sleepingBodies = 0
        var stubbornBodies = 0
        /// Running scoped work: the epoch of the credential each body received.
        var work: [Int: UInt64] = [:]
        var nextWork = 0
        /// Account changes in progress: the epoch each began, and whether a call of the program made it (or the
        /// engine's own task, when the backend ended the session).
        var changes: [Int: (epoch: UInt64, isCall: Bool)] = [:]
        var nextChange = 0
        var hooks: [AccountChange] = []
        var stallNextHook = false
        var gate: CheckedContinuation<Void, Never>?
        var logCount = 0
        var recentLog: [SessionLogRecord] = []
        var states: [String] = []
        /// The epochs of the account changes the engine has begun and published, from its log.
        var begunEpochs: Set<UInt64> = []
        var beginning: UInt64?
        /// The epoch of the current account session, as the model predicts it.
        var epoch: UInt64 = 0
        /// The epochs in which the backend issued each credential, by signature (the same email, expiry and secret
        /// give the same credential in any epoch).
        var origins: [String: Set<UInt64>] = [:]
        /// Epochs in which a credential was installed.
        var installedEpochs: Set<UInt64> = []
        var shuttingDown = false
    }

    private let state = Mutex(State())

    // MARK: Log

    /// Receives the engine's log records; the state changes among them are the engine's own sequence of states.
    func log(_ record: SessionLogRecord) {
        state.withLock { state in
            state.logCount += 1
            state.recentLog.append(record)
            if state.recentLog.count > 24 { state.recentLog.removeFirst(12) }
            // A change has begun once the engine has also published its state, which it does right after logging
            // the change, in the same step.
            if record.message == "account change began" {
                state.beginning = record.metadata["epoch"].flatMap(UInt64.init)
            }
            if record.message == "state changed" {
                state.states.append("\(record.metadata["state"] ?? "?") \(record.metadata["account"] ?? "?")")
                if let epoch = state.beginning { state.begunEpochs.insert(epoch) }
                state.beginning = nil
            }
        }
    }

    var logCount: Int { state.withLock { $0.logCount } }

    /// The engine's last log records, oldest first.
    var recentLog: [String] { state.withLock { $0.recentLog.suffix(12).map(\.description) } }

    /// The engine's state changes so far, as `name account`.
    var states: [String] { state.withLock { $0.states } }

    var stateCount: Int { state.withLock { $0.states.count } }

    // MARK: Violations

    func violation(_ message: String) {
        state.withLock { $0.violations.append(message) }
    }

    var firstViolation: String? { state.withLock { $0.violations.first } }

    // MARK: Epochs and credentials

    var epoch: UInt64 {
        get { state.withLock { $0.epoch } }
        set { state.withLock { $0.epoch = newValue } }
    }

    func noteOrigin(of credential: IdentityCredential, epoch: UInt64) {
        state.withLock { _ = $0.origins[credential.signature, default: []].insert(epoch) }
    }

    /// The epochs in which the backend issued `credential`.
    func origins(of credential: IdentityCredential) -> Set<UInt64> {
        state.withLock { $0.origins[credential.signature] ?? [] }
    }

    func noteInstalled(epoch: UInt64) {
        state.withLock { _ = $0.installedEpochs.insert(epoch) }
    }

    func wasInstalled(in epoch: UInt64) -> Bool {
        state.withLock { $0.installedEpochs.contains(epoch) }
    }

    var shuttingDown: Bool {
        get { state.withLock { $0.shuttingDown } }
        set { state.withLock { $0.shuttingDown = newValue } }
    }

    // MARK: Calls

    /// A call to the engine began; returns its ticket for ``callFinished(_:)``.
    func callStarted(_ name: String) -> Int {
        state.withLock { state in
            state.outstanding += 1
            state.nextCall += 1
            state.calls[state.nextCall] = name
            return state.nextCall
        }
    }

    func callFinished(_ ticket: Int) {
        state.withLock { state in
            state.outstanding -= 1
            state.calls.removeValue(forKey: ticket)
        }
    }

    /// The calls that have not returned, oldest first.
    var callsInProgress: [String] { state.withLock { $0.calls.sorted { $0.key < $1.key }.map(\.value) } }

    var outstanding: Int { state.withLock { $0.outstanding } }

    var sleepingBodies: Int { state.withLock { $0.sleepingBodies } }

    /// Records what a call to the engine threw; codes outside `allowed` break the contract.
    func callFailed(_ call: String, _ error: any Error, allowed: Set<SessionError.Code>) {
        guard let error = error as? SessionError else {
            violation("\(call) threw \(type(of: error))")
            return
        }
        if error.code == .shutDown && shuttingDown { return }
        if !allowed.contains(error.code) { violation("\(call) threw \(error.code): \(error.reason)") }
    }

    // MARK: Scoped work

    /// A scoped work body began with `credential`: it must be a credential of one of `allowedEpochs` that has not
    /// expired.
    func workStarted(with credential: IdentityCredential, at now: Date, allowedEpochs: Set<UInt64>) -> Int {
        state.withLock { state in
            let origins = state.origins[credential.signature] ?? []
            let epoch = origins.intersection(allowedEpochs).max()
            if epoch == nil {
                state.violations.append(
                    "invariant 1: work launched in epochs \(allowedEpochs.sorted()) received a credential of epochs "
                        + "\(origins.sorted())"
                )
            }
            if !credential.isValid(at: now) {
                state.violations.append(
                    "invariant 2: work received a credential that expired at \(credential.expiresAt)")
            }
            state.nextWork += 1
            state.work[state.nextWork] = epoch ?? origins.max() ?? 0
            return state.nextWork
        }
    }

    func workEnded(_ id: Int) {
        state.withLock { _ = $0.work.removeValue(forKey: id) }
    }

    func bodySleeps(_ delta: Int, stubborn: Bool = false) {
        state.withLock { state in
            state.sleepingBodies += delta
            if stubborn { state.stubbornBodies += delta }
        }
    }

    /// Work sleeping through its cancellation.
    var stubbornWork: Int { state.withLock { $0.stubbornBodies } }

    /// An account change that began `epoch` returned: no work of an earlier epoch may still run.
    func checkDrained(before epoch: UInt64, after call: String) {
        state.withLock { state in
            let left = state.work.values.filter { $0 < epoch }
            if !left.isEmpty {
                state.violations.append(
                    "invariant 5: \(call) returned while \(left.count) pieces of work of epochs \(left.sorted()) ran"
                )
            }
        }
    }

    var runningWork: Int { state.withLock { $0.work.count } }

    /// An account change began: a call of the program, or the engine's own sign-out when the backend ended the
    /// session (that one is never finished: it matters only while it waits for work to drain).
    @discardableResult
    func changeStarted(epoch: UInt64, isCall: Bool = true) -> Int {
        state.withLock { state in
            state.nextChange += 1
            state.changes[state.nextChange] = (epoch, isCall)
            return state.nextChange
        }
    }

    func changeFinished(_ id: Int) {
        state.withLock { _ = $0.changes.removeValue(forKey: id) }
    }

    /// Account changes the engine has begun that cannot go on yet because work of an earlier epoch still runs: they
    /// wait for the work to drain, not for anything the engine decides.
    var changesHeldByWork: (calls: Int, tasks: Int) {
        state.withLock { state in
            guard let oldest = state.work.values.min() else { return (0, 0) }
            let held = state.changes.values.filter { $0.epoch > oldest && state.begunEpochs.contains($0.epoch) }
            let calls = held.filter(\.isCall).count
            return (calls, held.count - calls)
        }
    }

    // MARK: Hooks

    /// The account-change hook: records the change, checks that the previous work has drained, and holds the
    /// change when the program asked for it.
    func hook(_ change: AccountChange, scopedWork: Int) async {
        let stall = state.withLock { state -> Bool in
            state.hooks.append(change)
            if !state.work.isEmpty || scopedWork != 0 {
                state.violations.append(
                    "invariant 5: hooks of \(change.from?.rawValue ?? "nil") → \(change.to?.rawValue ?? "nil") ran "
                        + "while \(max(state.work.count, scopedWork)) pieces of work ran"
                )
            }
            defer { state.stallNextHook = false }
            return state.stallNextHook
        }
        guard stall else { return }
        await withCheckedContinuation { (continuation: CheckedContinuation<Void, Never>) in
            state.withLock { $0.gate = continuation }
        }
    }

    var hooks: [AccountChange] { state.withLock { $0.hooks } }

    func stallNextHook() {
        state.withLock { $0.stallNextHook = true }
    }

    var hookStalled: Bool { state.withLock { $0.gate != nil } }

    func releaseHooks() {
        let gate = state.withLock { state -> CheckedContinuation<Void, Never>? in
            state.stallNextHook = false
            defer { state.gate = nil }
            return state.gate
        }
        gate?.resume()
    }
}

/// The service's verifier, shared with scoped work that sends credentials to the service.
final class ServiceVerifier: Sendable {
    private let verifier: Mutex<IdentityVerifier>

    init(_ verifier: IdentityVerifier) {
        self.verifier = Mutex(verifier)
    }

    func rotate(to secret: String) {
        verifier.withLock { try! $0.rotateSecret(to: secret) }
    }

    func verify(_ credential: IdentityCredential) -> IdentityVerification {
        verifier.withLock { $0.verify(credential) }
    }
}

/// The states and events one subscriber received.
final class SubscriberLog: Sendable {
    private struct State {
        var states: [SessionState] = []
        var dropped = false
        var finished = false
    }

    private let state = Mutex(State())

    func record(_ event: SessionEvent) {
        state.withLock { state in
            switch event {
            case .stateChanged(let session): state.states.append(session)
            case .eventsDropped: state.dropped = true
            default: break
            }
        }
    }

    func finish() {
        state.withLock { $0.finished = true }
    }

    var states: [SessionState] { state.withLock { $0.states } }
    var stateCount: Int { state.withLock { $0.states.count } }
    var dropped: Bool { state.withLock { $0.dropped } }
    var finished: Bool { state.withLock { $0.finished } }
}
