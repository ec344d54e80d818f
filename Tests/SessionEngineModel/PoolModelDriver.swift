package import SessionEngine
import SessionEngineBackend
package import SessionEngineTestKit
import Synchronization

/// Runs one pool program against a real pool on a manual clock and a scripted backend, and checks it after every
/// step: the pool's own rules after each step, and, whenever the pool is idle, the engine model's invariants for every
/// account (`PoolModelDriver+Invariants.swift`).
///
/// The program's calls enter the pool in program order: each starts in a task of its own and the driver waits until
/// it has entered an account's engine and the pool is idle again. The driver never polls and never sleeps on real
/// time. The property test runs its programs with the default executor; the schedule explorer passes its own, so that
/// every hop of every task is a step it schedules.
package final class PoolModelDriver {
    /// The accounts a program acts for, `member-0` … `member-3`, one more than the pool's cap.
    package static let accounts = 4
    package static let maximumAccounts = 3
    /// The budget: tight, so that programs queue, and quick to hold fetches for an outage (three failures in a row),
    /// so that programs with outages run through held fetches and probes.
    package static let budget = SessionPoolConfiguration.Budget(
        maximumInFlight: 2, startsPerSecond: 2, burst: 3, outageThreshold: 3, outageProbeInterval: .seconds(5))
    /// How many virtual minutes the backend answering every fetch may take to identify every held account.
    package static let recoveryRounds = 40

    package let clock: ManualClock
    package let fetcher: PoolModelFetcher
    package let pool: SessionPool
    package let probes = MemberProbes()
    package let names = (0..<PoolModelDriver.accounts).map { AccountID("member-\($0)") }
    let signer: IdentitySigner
    /// Runs the pool's and the program's tasks and says when none can run.
    let owner: WorkOwner
    private var tasks: [Task<Void, Never>] = []
    /// Per account, the steps at which the program signed it out; work cancelled by the pool must follow one.
    private var signedOutAt: [AccountID: [Int]] = [:]
    /// What the program's tasks saw.
    let log = ProgramLog()

    /// The task that runs ``SessionPool/run()`` from the program's start, and the gate it opens once `run()` returns.
    private var running: (task: Task<Void, Never>, returned: Gate)?

    /// What the program's tasks see while they run, shared with them.
    final class ProgramLog: Sendable {
        let violations = SanitizedMutex<[String]>([])
        /// Scoped work the pool cancelled, with the step that started it.
        let cancelledWork = SanitizedMutex<[(account: AccountID, started: Int)]>([])
        let shuttingDown = Atomic<Bool>(false)
        /// Every hook's runs in the order they began: the hook's index (0 registered first) and its change.
        let hookRuns = SanitizedMutex<[(hook: Int, change: AccountChange)]>([])
        /// For each hook the program added, how many runs the first hook had made when it was registered.
        let hooksAdded = SanitizedMutex<[Int]>([])

        func violation(_ text: String) { violations.withLock { $0.append(text) } }
    }

    /// Creates a driver.
    ///
    /// - Parameters:
    ///   - seed: The accounts' random seed (each account mixes it with its name).
    ///   - explorer: The schedule explorer's owner of the program's work; `nil` runs it on the clock's executor.
    /// How long a program of `seed` lets an account go unused before the pool signs it out: 15 minutes for one
    /// seed in four, so that the idle sweep runs among the program's calls; never for the others.
    package static func idleTimeout(seed: UInt64) -> Duration? {
        seed % 4 == 0 ? .seconds(900) : nil
    }

    /// Creates a driver.
    ///
    /// - Parameters:
    ///   - seed: The accounts' random seed (each account mixes it with its name).
    ///   - idleTimeout: The pool's ``SessionPoolConfiguration/idleTimeout``.
    ///   - explorer: The schedule explorer's owner of the program's work; `nil` runs it on the clock's executor.
    package init(seed: UInt64, idleTimeout: Duration?, explorer: WorkOwner? = nil) {
        let clock = ManualClock(executor: ManualExecutor(tasksRunInParallel: explorer == nil))
        self.clock = clock
        let probes = self.probes
        let owner = explorer ?? WorkOwner(clock: clock)
        self.owner = owner
        fetcher = PoolModelFetcher(clock: clock)
        signer = try! IdentitySigner(projectID: "proj_pool_model", secret: "pool-model-secret", clock: clock)
        var session = SessionConfiguration(randomSeed: seed)
        session.taskExecutor = owner.configuredExecutor
        pool = SessionPool(
            fetcher: fetcher,
            configuration: SessionPoolConfiguration(
                session: session, budget: Self.budget, maximumAccounts: Self.maximumAccounts,
                idleTimeout: idleTimeout),
            clock: clock,
            observer: { probes.observe(member: $0, event: $1) }
        )
        fetcher.lookUpMembers { [weak pool] in pool?.memberSerial(of: $0) }
    }

    package static func email(_ account: AccountID) -> String { "\(account.rawValue)@example.com" }

    /// How many outages the pool held its fetches for.
    package var outagesHeld: Int { pool.metrics.outages }

    /// What the pool holds and does, for a failure's report.
    package var activity: String {
        "pool \(pool.metrics); accounts \(pool.accounts.map { "\($0): \(pool.state(of: $0).name)" }.sorted())"
    }

    /// Runs the program, then lets the backend answer every fetch and checks liveness, then shuts the pool down and
    /// checks that nothing is left.
    ///
    /// - Returns: The first broken rule, or `nil`.
    package func run(_ program: [PoolOperation]) async -> Violation? {
        let log = self.log
        await pool.addAccountChangeHook { change in
            log.hookRuns.withLock { $0.append((0, change)) }
            // A member acts for one account: its changes enter it or leave it, never another account.
            if let from = change.from, let to = change.to {
                log.violations.withLock { $0.append("a hook ran from \(from) to \(to)") }
            }
        }
        let (pool, returned) = (self.pool, Gate())
        let run = owner.start {
            try? await pool.run()
            if !log.shuttingDown.load(ordering: .relaxed) { log.violation("run() returned before any shutdown") }
            returned.open()
        }
        running = (run, returned)
        for (step, operation) in program.enumerated() {
            if operation.endsTheProgram {
                return await shutDownAndCheck(by: operation, step: step).map {
                    Violation("step \(step) \(operation): \($0)")
                }
            }
            let idle = await perform(operation, step: step)
            if let failure = idle.failure ?? checkPool() ?? log.violations.withLock({ $0.first }) {
                return Violation("step \(step) \(operation): \(failure)")
            }
            if idle.isIdle, let failure = checkAccounts() {
                return Violation("step \(step) \(operation): \(failure)")
            }
        }
        if let failure = await recover() { return Violation("after the program: \(failure)") }
        return await shutDownAndCheck().map { Violation("after the shutdown: \($0)") }
    }

    /// Performs one operation; returns whether it left the pool idle, or what it found broken.
    private func perform(_ operation: PoolOperation, step: Int) async -> (isIdle: Bool, failure: String?) {
        if operation.isCall {
            startCall(operation, step: step)
            await owner.waitUntilIdle()
            return (false, nil)
        }
        switch operation {
        case .signIn, .signInWithin, .signInExpecting, .signInWith, .signOut, .work, .renew:
            preconditionFailure("a call is started above")
        case .gracefulShutdown, .stopRunning:
            preconditionFailure("a program's shutdown is performed by shutDownAndCheck")
        case .addHook:
            let log = self.log
            let index = log.hooksAdded.withLock { added in
                added.append(log.hookRuns.withLock { runs in runs.count { $0.hook == 0 } })
                return added.count
            }
            await pool.addAccountChangeHook { change in log.hookRuns.withLock { $0.append((index, change)) } }
        case .together(let first, let second):
            startCall(first, step: step)
            startCall(second, step: step)
            await owner.waitUntilIdle()
            return (false, nil)
        case .read(let index):
            if let headers = try? pool.identityHeaders(for: names[index]),
                let credential = try? headers.credential(), credential.email != Self.email(names[index])
            {
                return (false, "\(names[index])'s headers hold \(credential.email)'s credential")
            }
            return (false, nil)
        case .reject(let index):
            if let credential = try? pool.identityHeaders(for: names[index]).credential() {
                await pool.credentialRejected(credential, for: names[index])
            }
        case .rotate:
            for account in names {
                guard let credential = try? pool.identityHeaders(for: account).credential() else { continue }
                await pool.credentialRejected(credential, for: account)
            }
        case .push(let index), .pushForeign(let index, _):
            let account = names[index]
            var owner = account
            if case .pushForeign(_, let other) = operation { owner = names[other] }
            let established = pool.state(of: account).isIdentified || pool.state(of: account).isRenewing
            // Before an account's first credential the pool cannot know its email: handing it another account's is
            // the host's mistake, which no session library can tell from a first sign-in.
            if owner != account, !established { return (false, nil) }
            let credential = try! signer.sign(email: Self.email(owner))
            let accepted = (try? await pool.setIdentityCredential(credential, for: account)) != nil
            if owner != account, accepted { return (false, "\(account) accepted \(owner)'s credential") }
        case .answer(let count):
            await answer(count) { .success(try! signer.sign(email: Self.email($0.account))) }
        case .failWithRetryAfter(let seconds):
            await answer(1) { _ in
                .failure(SessionError(.fetchFailed, reason: "503", isTransient: true, retryAfter: .seconds(seconds)))
            }
        case .outage(let count):
            await answer(count) { _ in .failure(SessionError(.fetchFailed, reason: "unreachable", isTransient: true)) }
        case .jumpWallClock(let seconds):
            clock.jumpWallClock(by: .seconds(seconds))
            fetcher.noteWallClock()
        case .advance(let seconds):
            clock.advance(by: .seconds(seconds))
        }
        await owner.waitUntilIdle()
        return (true, nil)
    }

    /// Starts one call of the program (a sign-in, sign-out, work or renewal), if it applies, without waiting for it.
    private func startCall(_ operation: PoolOperation, step: Int) {
        switch operation {
        case .signIn(let index):
            startSignIn(names[index], "signIn") { try await $0.signIn($1) }
        case .signInWithin(let index, let seconds):
            startSignIn(names[index], "signIn(timeout: \(seconds) s)", timeout: .seconds(seconds)) {
                try await $0.signIn($1, timeout: .seconds(seconds))
            }
        case .signInExpecting(let index, let seconds):
            let spelled = " \(Self.email(names[index]).uppercased())  "
            let timeout = seconds.map { Duration.seconds($0) }
            startSignIn(
                names[index], "signIn(expecting:timeout: \(seconds.map { "\($0) s" } ?? "nil"))", timeout: timeout
            ) {
                try await $0.signIn($1, expecting: spelled, timeout: timeout)
            }
        case .signInWith(let index):
            let credential = try! signer.sign(email: Self.email(names[index]))
            startSignIn(names[index], "signIn(with:)") { try await $0.signIn($1, with: credential) }
        case .signOut(let index):
            let account = names[index]
            signedOutAt[account, default: []].append(step)
            if pool.accounts.contains(account) { start { await $0.signOut(account) } }
        case .work(let index, let seconds):
            let account = names[index]
            guard pool.state(of: account).isIdentified || pool.state(of: account).isRenewing else { return }
            let (clock, log) = (clock, log)
            start { pool in
                do {
                    try await pool.withIdentity(for: account) { credential in
                        if credential.email != Self.email(account) {
                            log.violations.withLock { $0.append("work for \(account) got \(credential.email)") }
                        }
                        try await clock.sleep(for: .seconds(seconds))
                    }
                } catch let error as SessionError where error.code == .accountChanged {
                    if !log.shuttingDown.load(ordering: .relaxed) {
                        log.cancelledWork.withLock { $0.append((account, step)) }
                    }
                }
            }
        case .renew(let index):
            let account = names[index]
            if pool.accounts.contains(account) { start { _ = try await $0.renew(for: account) } }
        default:
            preconditionFailure("\(operation) is not a call")
        }
    }

    /// Starts one of the pool's sign-ins of `account`. It returns, or fails because the account left or the pool shut
    /// down meanwhile; with a deadline, it may fail with `SIGN_IN_TIMED_OUT`, never before the deadline. Any other
    /// outcome breaks a rule.
    private func startSignIn(
        _ account: AccountID,
        _ name: String,
        timeout: Duration? = nil,
        _ call: @escaping @Sendable (SessionPool, AccountID) async throws -> Void
    ) {
        let (clock, log) = (clock, log)
        let deadline = timeout.map { clock.uptime + $0 }
        start { pool in
            do {
                try await call(pool, account)
            } catch let error as SessionError {
                switch error.code {
                case .accountChanged, .shutDown:
                    break
                case .signInTimedOut where deadline != nil:
                    if let deadline, clock.uptime < deadline {
                        log.violation("\(name) of \(account) timed out at \(clock.uptime), before \(deadline)")
                    }
                default:
                    log.violation("\(name) of \(account) failed with \(error.code)")
                }
            }
        }
    }

    /// Starts `call` in a task of its own on the program's executor, without waiting for it: the caller waits until
    /// the pool is idle, when the call has done all it can (returned, or waits inside an account's engine).
    private func start(_ call: @escaping @Sendable (SessionPool) async throws -> Void) {
        let pool = pool
        tasks.append(owner.start { try? await call(pool) })
    }

    /// Starts a sign-in once the pool's shutdown has begun: it must be refused with `SHUT_DOWN`.
    private func startSignInAfterTheShutdownBegan(step: Int) {
        let (account, log) = (names[step % names.count], log)
        start { pool in
            do {
                try await pool.signIn(account)
                log.violation("a sign-in of \(account) returned after the pool's shutdown began")
            } catch let error as SessionError where error.code == .shutDown {
            } catch {
                log.violation("a sign-in of \(account) after the pool's shutdown began failed with \(error)")
            }
        }
    }

    /// The order of hooks: a change runs its hooks in registration order, so at every point of the runs, for every
    /// change (an account entered or left), each added hook has run no more often than the hook before it; `final`,
    /// once nothing can run, every hook added before a change ran its hooks has run for it. (Members of one account
    /// may leave while another enters it, so runs of different changes interleave.)
    func checkHookOrder(final: Bool) -> String? {
        let runs = log.hookRuns.withLock { $0 }
        var counts: [AccountChange: [Int: Int]] = [:]
        for run in runs {
            counts[run.change, default: [:]][run.hook, default: 0] += 1
            if run.hook > 0, counts[run.change]![run.hook]! > counts[run.change]![run.hook - 1, default: 0] {
                let order = runs.map { "\($0.hook): \($0.change)" }
                return "hook \(run.hook) ran for \(run.change) before hook \(run.hook - 1) did: \(order)"
            }
        }
        guard final else { return nil }
        for (offset, before) in log.hooksAdded.withLock({ $0 }).enumerated() {
            let first = runs.count { $0.hook == 0 } - before
            let ran = runs.count { $0.hook == offset + 1 }
            if ran != first { return "hook \(offset + 1) ran \(ran) times for the \(first) changes after it was added" }
        }
        return nil
    }

    /// Answers up to `count` of the fetches waiting at the backend, oldest first.
    private func answer(
        _ count: Int, with result: (ScriptedCredentialFetcher.Request) -> Result<IdentityCredential, any Error>
    ) async {
        for _ in 0..<count where fetcher.script.pendingCount > 0 {
            let request = await fetcher.script.nextRequest()
            fetcher.script.respond(to: request, with: result(request))
        }
    }

    /// Liveness: once the backend answers every fetch, every account the pool holds becomes identified, and every
    /// account's invariants still hold.
    private func recover() async -> String? {
        let (signer, clock) = (signer, clock)
        fetcher.script.setResponder { try signer.sign(email: Self.email($0)) }
        for _ in 0..<Self.recoveryRounds {
            while fetcher.script.pendingCount > 0 {
                await answer(1) { .success(try! signer.sign(email: Self.email($0.account))) }
            }
            await owner.waitUntilIdle()
            if let failure = checkAccounts() { return failure }
            if pool.accounts.allSatisfy({ pool.state(of: $0).isIdentified }) { return nil }
            clock.advance(by: .seconds(60))
            await owner.waitUntilIdle()
        }
        let stuck = pool.accounts.filter { !pool.state(of: $0).isIdentified }.map { "\($0): \(pool.state(of: $0))" }
        return "the backend answered every fetch for \(Self.recoveryRounds) minutes, and \(stuck) are not identified"
    }

    /// Shuts the pool down, with ``SessionPool/shutdown()`` after the program or by the operation that ends it: nothing
    /// may be left, `run()` has returned, the hooks ran in order, and work cancelled before the shutdown must follow a
    /// sign-out of its account, never an eviction. A graceful shutdown signs every account out with its hooks, and a
    /// sign-in that reaches a pool whose shutdown has begun is refused.
    private func shutDownAndCheck(by ending: PoolOperation? = nil, step: Int = 0) async -> String? {
        log.shuttingDown.store(true, ordering: .relaxed)
        // The accounts whose hooks entered them and have not left them: a graceful shutdown runs their hooks out.
        let (held, hookRunsBefore) = log.hookRuns.withLock { runs in
            var entered = Set<AccountID>()
            for run in runs where run.hook == 0 {
                if let from = run.change.from { entered.remove(from) }
                if let to = run.change.to { entered.insert(to) }
            }
            return (entered, runs.count)
        }
        let pool = pool
        switch ending {
        case .gracefulShutdown(let grace)?:
            let done = Gate()
            owner.start {
                await pool.shutdown(gracePeriod: .seconds(grace))
                done.open()
            }
            await owner.waitUntilIdle()
            startSignInAfterTheShutdownBegan(step: step)
            var steps = 0
            while true {
                await owner.waitUntilIdle()
                if done.isOpen { break }
                guard let deadline = clock.nextDeadline, steps < 10_000 else {
                    return "shutdown(gracePeriod: \(grace) s) never returned: \(activity)"
                }
                clock.advance(by: max(.zero, deadline - clock.uptime))
                steps += 1
            }
            let signedOut = log.hookRuns.withLock { runs in
                Set(runs[hookRunsBefore...].filter { $0.hook == 0 && $0.change.to == nil }.compactMap(\.change.from))
            }
            if !held.isSubset(of: signedOut) {
                return
                    "a graceful shutdown left \(held.subtracting(signedOut).map(\.rawValue).sorted()) without their hooks"
            }
        case .stopRunning?:
            running?.task.cancel()
            await owner.waitUntilIdle()
            startSignInAfterTheShutdownBegan(step: step)
            await running?.task.value
        default:
            await pool.shutdown()
        }
        for task in tasks { await task.value }
        await owner.waitUntilIdle()
        if let running, !running.returned.isOpen { return "run() has not returned after the shutdown" }
        if let failure = log.violations.withLock({ $0.first }) ?? checkHookOrder(final: true) { return failure }
        fetcher.lookUpMembers(with: nil)
        let metrics = pool.metrics
        if metrics.accounts != 0 || metrics.fetchesInFlight != 0 || metrics.timers != 0
            || metrics.queuedNeeded + metrics.queuedProactive != 0 || !fetcher.accountsFetching.isEmpty
        {
            return "\(metrics), fetching for \(fetcher.accountsFetching)"
        }
        for work in log.cancelledWork.withLock({ $0 }) {
            let signedOutLater = signedOutAt[work.account, default: []].contains { $0 >= work.started }
            if !signedOutLater {
                return "\(work.account)'s work of step \(work.started) was cancelled without a sign-out"
            }
        }
        return nil
    }
}
