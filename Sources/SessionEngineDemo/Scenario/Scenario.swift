import Foundation
import SessionEngine
import Synchronization

/// The daemon scenario: a backend, the session engine and a stand-in for the service, driven on a manual clock.
///
/// The driver moves the clock only when the engine is at rest (every task it runs is asleep on the clock and the
/// timeline has printed every event), and then only to the next sleeper's deadline, so a run is the same for the
/// same seed and a simulated day takes seconds.
final class Scenario: Sendable {
    /// A phase could not go on; the checks not yet reached fail.
    struct Abort: Error {
        let reason: String
    }

    /// What an account-change hook saw.
    struct HookRecord: Sendable {
        let change: AccountChange
        let scopedWorkAtHook: Int
        let clearedCacheItems: Int
    }

    /// An account's poll: scoped work that reads the account's private reports and chat every five minutes.
    final class Poll: Sendable {
        let account: AccountID
        let task: Task<SessionError.Code?, Never>
        let counters: Locked<(rounds: Int, blockedLocally: Int)>

        init(
            account: AccountID, task: Task<SessionError.Code?, Never>,
            counters: Locked<(rounds: Int, blockedLocally: Int)>
        ) {
            self.account = account
            self.task = task
            self.counters = counters
        }
    }

    let options: ScenarioOptions
    let clock: ManualClock
    let backend: any ScenarioBackend
    let service: DemoService
    let engine: SessionEngine
    let timeline: Timeline
    let plan: ScenarioPlan
    let accounts: [AccountID]
    let verdicts = Verdicts()
    /// What the host displays: the current account's reports and chat, by owner. Cleared on every account change.
    let cache = Locked<[(owner: AccountID, item: String)]>([])
    let hooks = Locked<[HookRecord]>([])
    private let projectID: String
    private let baseSecret: String

    init(options: ScenarioOptions, projectID: String, secret: String) throws {
        self.options = options
        self.projectID = projectID
        self.baseSecret = secret
        let clock = ManualClock()
        self.clock = clock
        if let url = options.backend {
            backend = RemoteBackend(endpoint: url, clock: clock)
        } else {
            backend = try EmbeddedBackend(projectID: projectID, secret: secret, clock: clock)
        }
        service = try DemoService(projectID: projectID, secret: secret, clock: clock)
        let timeline = Timeline(json: options.json, clock: clock)
        self.timeline = timeline
        let configuration = SessionConfiguration(randomSeed: options.seed, log: { timeline.logged($0) })
        engine = SessionEngine(fetcher: backend, configuration: configuration, clock: clock)
        plan = ScenarioPlan(hours: options.hours, accounts: options.accounts)
        accounts = (0..<options.accounts).map(DemoAccounts.account(at:))
    }

    // MARK: - The run

    /// Runs the scenario and prints its timeline and verdicts.
    ///
    /// - Returns: Whether every Verify check passed.
    func run() async -> Bool {
        let started = ContinuousClock.now
        printHeader()
        let events = engine.events(bufferLimit: .max)
        let printer = Task { await timeline.consume(events) }
        await installHook()
        do {
            var poll = try await openingPhase(accounts[0])
            await advance(to: plan.outage)
            try await outagePhase(poll)
            for (index, time) in plan.switches.enumerated() {
                await advance(to: time)
                poll = try await switchPhase(from: accounts[index], to: accounts[index + 1], poll: poll)
            }
            await advance(to: plan.rotation)
            try await rotationPhase(accounts[accounts.count - 1])
            await advance(to: plan.end)
            try await closingPhase(poll)
        } catch {
            let reason = (error as? Abort)?.reason ?? "\(error)"
            await settle()
            timeline.note("the scenario stopped early: \(reason)")
            await engine.shutdown()
        }
        await settle { self.engine.diagnostics.liveTasks == 0 }
        await printer.value
        timeline.flush()
        let leftovers = engine.diagnostics
        return printVerdicts(elapsed: started.duration(to: .now), leftovers: leftovers)
    }

    private func printHeader() {
        let what =
            "\(options.accounts) accounts, \(options.hours) simulated hours, seed \(options.seed), "
            + "\(backend.label), 15-minute credentials"
        if options.json {
            var object = JSONObject()
            object.add("kind", "start")
            object.add("accounts", options.accounts)
            object.add("hours", options.hours)
            object.add("seed", String(options.seed))
            object.add("backend", backend.label)
            object.add("projectId", projectID)
            timeline.object(object)
        } else {
            timeline.plain("SessionEngine daemon scenario: \(what)")
            timeline.plain(
                "Times are simulated (+HH:MM:SS since the start); the state is the engine's after each line.")
            timeline.plain("")
            timeline.plain("     time  state       what happened")
        }
    }

    private func installHook() async {
        let cache = self.cache
        let hooks = self.hooks
        let engine = self.engine
        await engine.addAccountChangeHook { change in
            // The host discards the previous account's view models and read cache here.
            let work = engine.diagnostics.scopedWork
            let cleared = cache.withLock { items -> Int in
                defer { items.removeAll() }
                return items.count
            }
            hooks.withLock { $0.append(HookRecord(change: change, scopedWorkAtHook: work, clearedCacheItems: cleared)) }
        }
    }

    // MARK: - Phases

    /// Signs the first account in, proves check 1 and the tampering half of check 2, and starts its poll.
    private func openingPhase(_ account: AccountID) async throws -> Poll {
        try await signIn(account)
        let email = DemoAccounts.email(for: account)
        let reply = await perform { try await self.identified(.submitAction("vote for roadmap item 7")) }
        let accepted = (try? reply.get()) == .accepted(email: email)
        await note(
            verdictFor: 1, accepted, "the service accepted \(account)'s vote, sent with the backend-issued credential")
        try await tamperChecks(account)
        try await postPrivateData(account)
        return startPoll(account)
    }

    /// A backend outage longer than a credential's life: renewals back off, the credential expires, identified work
    /// is blocked locally, and the engine recovers when the backend does.
    private func outagePhase(_ poll: Poll) async throws {
        let account = poll.account
        let beforeOutage = try await perform { try await self.engine.withIdentity { $0 } }.get()
        await settle()
        timeline.note(
            "backend outage begins: every fetch answers 503 for \(Timeline.describe(ScenarioPlan.outageLength))")
        try await backend.setOutage(true)
        let outageStart = clock.uptime
        await advance(to: outageStart + .seconds(16 * 60))

        let expired = engine.state.expiredReason == .expired
        await note(
            verdictFor: 2, expired, "\(account)'s credential expired during the outage (state \(engine.state.name))")
        let sent = service.requestCount
        var blockedByHeaders = false
        do {
            _ = try engine.identityHeaders()
        } catch {
            blockedByHeaders = error.code == .invalidIdentity
        }
        let attempt = await perform { try await self.identified(.submitAction("comment on roadmap item 7")) }
        var blockedCode = "nothing"
        if case .failure(let error as SessionError) = attempt { blockedCode = error.code.rawValue }
        let blocked = blockedByHeaders && blockedCode == "INVALID_IDENTITY" && service.requestCount == sent
        await note(
            verdictFor: 2,
            blocked,
            "the engine blocked \(account)'s next action locally with \(blockedCode); nothing was sent"
        )
        let reply = service.handle(.submitAction("comment on roadmap item 7"), headers: IdentityHeaders(beforeOutage))
        await note(
            verdictFor: 2,
            reply == .refused(.expired),
            "the service refused \(account)'s expired credential (\(Self.describe(reply)))"
        )

        await advance(to: outageStart + ScenarioPlan.outageLength)
        try await backend.setOutage(false)
        timeline.note("backend outage ends")
        let recovered = await drive(limit: .seconds(15 * 60)) { self.engine.state.isIdentified }
        await settle()
        let (rounds, blockedPolls) = poll.counters.withLock { $0 }
        timeline.note(
            recovered
                ? "recovered: \(account) is identified again; its poll ran \(rounds) times and was blocked locally "
                    + "\(blockedPolls) times while the credential was expired"
                : "the engine did not recover within 15 minutes of the outage's end"
        )
        guard recovered else { throw Abort(reason: "no recovery after the outage") }
    }

    /// Changes accounts and proves check 3 for this change: the first change signs out and then signs the next
    /// account in, as the contract's Verify step does; later ones switch directly.
    private func switchPhase(from previous: AccountID, to next: AccountID, poll: Poll) async throws -> Poll {
        let signOutFirst = previous == accounts[0]
        await settle()
        let previousEmail = DemoAccounts.email(for: previous)
        let previousItems = cache.withLock { $0.filter { $0.owner == previous }.count }
        let previousReports = await privateReports(of: previous)
        let marker = service.requestCount
        let hooksBefore = hooks.withLock { $0.count }
        if signOutFirst {
            _ = await perform { await self.engine.signOut() }
            try await perform { try await self.engine.signIn(next) }.get()
        } else {
            try await perform { try await self.engine.switchAccount(to: next) }.get()
        }
        let pollEnd = await poll.task.value
        let change = signOutFirst ? "sign-out" : "switch"

        await note(
            verdictFor: 3,
            pollEnd == .accountChanged,
            "\(previous)'s poll was cancelled by the \(change) (it ended with \(pollEnd?.rawValue ?? "no error"))"
        )
        let hook = hooks.withLock { $0.dropFirst(hooksBefore).first }
        let drained = hook?.scopedWorkAtHook == 0
        await note(
            verdictFor: 3,
            drained,
            "the account-change hook ran after \(previous)'s work drained and cleared \(hook?.clearedCacheItems ?? 0) "
                + "cached items (\(previousItems) were \(previous)'s)"
        )
        let late = service.requests(after: marker).filter { $0.claimedEmail == previousEmail }
        await note(
            verdictFor: 3,
            late.isEmpty,
            "no request with \(previous)'s identity reached the service after the \(change) began (\(late.count) did)"
        )

        let inbox = try await perform { try await self.identified(.readInbox) }.get()
        var leaked = 0
        if case .inbox(let reports, let chat) = inbox {
            leaked += reports.filter(previousReports.contains).count
            leaked += chat.filter { $0.hasPrefix("\(previous):") }.count
        } else {
            leaked = -1
        }
        var opened = 0
        for id in previousReports {
            let reply = try await perform { try await self.identified(.readReport(id)) }.get()
            if reply != .notFound { opened += 1 }
        }
        let cached = cache.withLock { $0.filter { $0.owner == previous }.count }
        await note(
            verdictFor: 3,
            leaked == 0 && opened == 0 && cached == 0 && !previousReports.isEmpty,
            "\(next) cannot see \(previous)'s private report or chat (inbox leaks \(max(leaked, 0)), "
                + "report #\(previousReports.map(String.init).joined(separator: ",")) opened \(opened) times, "
                + "cached \(cached))"
        )
        if DemoAccounts.session(for: next)?.properties != nil {
            try await tamperChecks(next)
        }
        try await postPrivateData(next)
        return startPoll(next)
    }

    /// Rotates the secret and proves check 4.
    private func rotationPhase(_ account: AccountID) async throws {
        let installed = try await perform { try await self.engine.withIdentity { $0 } }.get()
        let issued = try await backend.fetchCredential(for: account)
        await settle()
        timeline.note("the project's secret is rotated in the backend and the service")
        try await backend.rotateSecret()
        try service.rotateSecret(to: DemoSecrets.rotated(baseSecret, generation: 1))

        let replies = [installed, issued].map {
            service.handle(.submitAction("vote for roadmap item 9"), headers: IdentityHeaders($0))
        }
        await note(
            verdictFor: 4,
            replies.allSatisfy { $0 == .refused(.signatureMismatch) },
            "both credentials issued before the rotation are refused "
                + "(\(Set(replies.map(Self.describe)).sorted().joined(separator: "; ")))"
        )

        let fetches = engine.diagnostics.fetchesStarted
        let attempts = Locked(0)
        let reply = await perform {
            try await self.engine.withIdentity { credential in
                attempts.withLock { $0 += 1 }
                return try self.call(.submitAction("vote for roadmap item 9"), with: credential)
            }
        }
        let renewals = engine.diagnostics.fetchesStarted - fetches
        let accepted = (try? reply.get()) == .accepted(email: DemoAccounts.email(for: account))
        await note(
            verdictFor: 4,
            accepted && renewals == 1 && attempts.withLock { $0 } == 2 && engine.state.isIdentified,
            "the engine recovered by renewing once: \(renewals) fetch, \(attempts.withLock { $0 }) attempts, "
                + "the retried vote was \(accepted ? "accepted" : "not accepted")"
        )
    }

    /// Signs out at the end and shuts the engine down.
    private func closingPhase(_ poll: Poll) async throws {
        await settle()
        timeline.note("the daemon stops: sign out, then shut down")
        _ = await perform { await self.engine.signOut() }
        _ = await poll.task.value
        await engine.shutdown()
    }

    // MARK: - Steps

    private func signIn(_ account: AccountID) async throws {
        try await perform { try await self.engine.signIn(account) }.get()
    }

    /// Changing one signed field of the installed credential makes the service refuse it (check 2).
    private func tamperChecks(_ account: AccountID) async throws {
        await settle()
        let headers = try engine.identityHeaders()
        var changes = [
            (IdentityHeaders.emailName, "mallory@example.com", "email"),
            (
                IdentityHeaders.expiresAtName, String(Int64(headers[IdentityHeaders.expiresAtName] ?? "0")! + 3600),
                "expiresAt"
            ),
        ]
        if let encoded = headers[IdentityHeaders.propertiesName], let json = Self.base64URLDecode(encoded) {
            // Raise a number or flip a value: still valid properties, but not the ones that were signed.
            let changed =
                json.contains("\"seats\":3")
                ? json.replacingOccurrences(of: "\"seats\":3", with: "\"seats\":30")
                : json.replacingOccurrences(of: "\":\"", with: "\":\"x")
            changes.append((IdentityHeaders.propertiesName, Self.base64URLEncode(changed), "properties"))
        }
        for (name, value, field) in changes {
            let tampered = IdentityHeaders(
                requestHeaders: headers.map { (name: $0.name, value: $0.name == name ? value : $0.value) }
            )
            let reply = service.handle(.submitAction("vote for roadmap item 7"), headers: tampered)
            await note(
                verdictFor: 2,
                reply == .refused(.signatureMismatch),
                "\(account)'s credential with its signed \(field) changed is refused (\(Self.describe(reply)))"
            )
        }
    }

    /// Files a private report and a chat message as the account.
    private func postPrivateData(_ account: AccountID) async throws {
        let report = try await perform { try await self.identified(.postReport("\(account)'s private report")) }.get()
        _ = try await perform { try await self.identified(.postChat("\(account): a private question")) }.get()
        await settle()
        guard case .reportPosted(let id) = report else { throw Abort(reason: "the service did not take the report") }
        timeline.note("\(account) filed private report #\(id) and sent a chat message")
    }

    private func privateReports(of account: AccountID) async -> [Int] {
        let reply = try? await perform { try await self.identified(.readInbox) }.get()
        guard case .inbox(let reports, _) = reply else { return [] }
        return reports
    }

    /// Starts the account's poll as scoped work: an account change cancels it and waits for it to end.
    private func startPoll(_ account: AccountID) -> Poll {
        let counters = Locked((rounds: 0, blockedLocally: 0))
        let task = Task { () -> SessionError.Code? in
            do {
                try await engine.withIdentity { _ in
                    while true {
                        try await self.clock.sleep(for: ScenarioPlan.pollInterval)
                        do {
                            let reply = try await self.identified(.readInbox)
                            if case .inbox(let reports, let chat) = reply {
                                let items = reports.map { "report #\($0)" } + chat
                                self.cache.withLock { $0 = items.map { (owner: account, item: $0) } }
                            }
                            counters.withLock { $0.rounds += 1 }
                        } catch let error as SessionError where error.code == .invalidIdentity {
                            // Expired: blocked locally, never sent anonymously. Try again next round.
                            counters.withLock { $0.blockedLocally += 1 }
                        }
                    }
                }
                return nil
            } catch let error as SessionError {
                return error.code
            } catch {
                return nil
            }
        }
        return Poll(account: account, task: task, counters: counters)
    }

    /// Sends an identified request with the engine's current credential; a refusal asks the engine to renew once.
    private func identified(_ operation: DemoService.Operation) async throws -> DemoService.Reply {
        try await engine.withIdentity { credential in try self.call(operation, with: credential) }
    }

    /// Sends one request; throws ``SessionError/credentialRejected`` when the service answers `INVALID_IDENTITY`.
    private func call(_ operation: DemoService.Operation, with credential: IdentityCredential) throws
        -> DemoService.Reply
    {
        let reply = service.handle(operation, headers: IdentityHeaders(credential))
        if case .refused = reply { throw SessionError.credentialRejected }
        return reply
    }

    private func note(verdictFor check: Int, _ passed: Bool, _ text: String) async {
        await settle()
        verdicts.record(check, passed)
        timeline.check(check, passed, text)
    }

    // MARK: - Driving the clock

    /// Moves the clock to `target`, sleeper by sleeper, letting the engine react at each step.
    private func advance(to target: Duration) async {
        while clock.uptime < target {
            await settle()
            let before = clock.uptime
            let next = min(clock.nextDeadline ?? target, target)
            clock.advance(by: max(next - before, .zero))
            if showsProgress, Int(before.seconds / 86_400) < Int(clock.uptime.seconds / 86_400) {
                reportProgress()
            }
        }
        await settle()
    }

    /// Runs `body` while driving the clock until it returns.
    ///
    /// The clock moves only while a caller waits for a fetch (a sign-in during an outage, a renewal held back by
    /// the minimum fetch interval); otherwise `body` is still running and is left to finish.
    private func perform<T: Sendable>(_ body: @escaping @Sendable () async throws -> T) async -> Result<T, any Error> {
        let outcome = Locked<Result<T, any Error>?>(nil)
        let task = Task {
            do {
                let value = try await body()
                outcome.withLock { $0 = .success(value) }
            } catch {
                outcome.withLock { $0 = .failure(error) }
            }
        }
        let finished = await drive(limit: .seconds(3600), whenWaiting: true) { outcome.withLock { $0 != nil } }
        guard finished else {
            task.cancel()
            await task.value
            return .failure(Abort(reason: "an operation did not finish within a simulated hour"))
        }
        await task.value
        return outcome.withLock { $0 } ?? .failure(Abort(reason: "an operation did not finish"))
    }

    /// Advances the clock deadline by deadline until `done` holds or `limit` has passed.
    ///
    /// - Parameter whenWaiting: Advance only while a caller waits for a fetch outcome.
    private func drive(limit: Duration, whenWaiting: Bool = false, until done: () -> Bool) async -> Bool {
        let start = clock.uptime
        var idleRounds = 0
        while true {
            await settle(until: done)
            if done() { return true }
            // A caller that has not reached the engine yet is runnable, not waiting: let it run first.
            if whenWaiting, engine.diagnostics.waiters == 0, idleRounds < 10_000 {
                idleRounds += 1
                await Task.yield()
                continue
            }
            idleRounds = 0
            guard clock.uptime - start < limit, let deadline = clock.nextDeadline else { return false }
            clock.advance(by: max(deadline - clock.uptime, .zero))
        }
    }

    /// Lets every task run until the engine is at rest (each of its tasks asleep on the clock, the timeline caught
    /// up) or `done` holds.
    ///
    /// With an HTTP backend a fetch takes real time, so the wait then also pauses briefly between checks.
    private func settle(until done: () -> Bool = { false }) async {
        var quiet = 0
        var rounds = 0
        while quiet < 3 {
            if done() { return }
            await Task.yield()
            rounds += 1
            let atRest = engine.diagnostics.liveTasks <= clock.sleeperCount && timeline.isCaughtUp
            quiet = atRest ? quiet + 1 : 0
            if backend.isRemote, rounds % 100 == 0 {
                try? await Task.sleep(for: .milliseconds(1))
            }
        }
    }

    // MARK: - Progress and verdicts

    /// Runs of three simulated days or more report each simulated day on standard error.
    private var showsProgress: Bool { options.hours >= 72 }

    private func reportProgress() {
        let days = Int(clock.uptime.seconds / 86_400)
        let total = Double(plan.end.seconds) / 86_400
        let renewals = timeline.counts.renewals
        let line = "progress: day \(days) of \(Int(total.rounded(.up))), \(renewals) credentials installed so far\n"
        FileHandle.standardError.write(Data(line.utf8))
    }

    private static let titles = [
        1: "an identified action with a real backend-issued credential is accepted",
        2: "a changed signed field and an expired credential are refused; the engine blocks expiry locally",
        3: "after a switch the other account cannot see the previous account's private report or chat",
        4: "after rotating the secret old credentials are refused and the engine recovers by renewing once",
    ]

    private func printVerdicts(elapsed: Duration, leftovers: SessionDiagnostics) -> Bool {
        let results = verdicts.results
        let counts = timeline.counts
        let seconds = (elapsed.seconds * 100).rounded() / 100
        if options.json {
            for number in 1...4 {
                var object = JSONObject()
                object.add("kind", "verify")
                object.add("check", number)
                object.add("result", results[number] == true ? "PASS" : "FAIL")
                object.add("title", Self.titles[number]!)
                timeline.object(object)
            }
            var object = JSONObject()
            object.add("kind", "summary")
            object.add("simulatedHours", clock.uptime.seconds / 3600)
            object.add("seconds", seconds)
            object.add("credentialsInstalled", counts.renewals)
            object.add("fetchFailures", counts.fetchFailures)
            object.add("serviceRequests", service.requestCount)
            object.add("tasksLeft", leftovers.liveTasks)
            object.add("passed", results.count == 4 && results.values.allSatisfy { $0 })
            timeline.object(object)
        } else {
            timeline.plain("")
            for number in 1...4 {
                timeline.plain("VERIFY \(number) \(results[number] == true ? "PASS" : "FAIL")  \(Self.titles[number]!)")
            }
            let hours = (clock.uptime.seconds / 36).rounded() / 100
            timeline.plain(
                "Simulated \(ECMAScript.numberToString(hours)) h in \(seconds) s: \(counts.renewals) credentials "
                    + "installed, \(counts.fetchFailures) failed fetches, \(service.requestCount) service requests, "
                    + "\(leftovers.liveTasks) tasks left running."
            )
        }
        return results.count == 4 && results.values.allSatisfy { $0 }
    }

    private static func describe(_ reply: DemoService.Reply) -> String {
        switch reply {
        case .refused(let check): "INVALID_IDENTITY, \(check)"
        case .accepted: "accepted"
        case .notFound: "not found"
        default: "answered"
        }
    }

    private static func base64URLEncode(_ text: String) -> String {
        Data(text.utf8).base64EncodedString()
            .replacingOccurrences(of: "+", with: "-")
            .replacingOccurrences(of: "/", with: "_")
            .replacingOccurrences(of: "=", with: "")
    }

    private static func base64URLDecode(_ text: String) -> String? {
        var base64 = text.replacingOccurrences(of: "-", with: "+").replacingOccurrences(of: "_", with: "/")
        base64 += String(repeating: "=", count: (4 - base64.count % 4) % 4)
        return Data(base64Encoded: base64).flatMap { String(data: $0, encoding: .utf8) }
    }
}

/// The outcome of each Verify check: it passes when every part of it passed.
final class Verdicts: Sendable {
    private let state = Mutex<[Int: Bool]>([:])

    func record(_ check: Int, _ passed: Bool) {
        state.withLock { $0[check] = ($0[check] ?? true) && passed }
    }

    var results: [Int: Bool] { state.withLock { $0 } }
}

/// A value behind a lock, shared between tasks.
final class Locked<Value: Sendable>: Sendable {
    private let mutex: Mutex<Value>

    init(_ value: Value) {
        mutex = Mutex(value)
    }

    func withLock<Result: Sendable, Failure: Error>(_ body: (inout Value) throws(Failure) -> Result) throws(Failure)
        -> Result
    {
        try mutex.withLock { (value: inout sending Value) throws(Failure) -> Result in try body(&value) }
    }
}

extension SessionState {
    var isIdentified: Bool {
        if case .identified = self { return true }
        return false
    }

    var expiredReason: ExpiredIdentity.Reason? {
        if case .expired(let expired) = self { return expired.reason }
        return nil
    }
}
