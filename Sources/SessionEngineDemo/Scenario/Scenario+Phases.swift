import SessionEngine
import SessionEngineBackend
import SessionEngineTestKit

/// The scenario's phases, in the order ``Scenario/run()`` runs them; each proves its part of the Verify checks.
extension Scenario {
    /// Signs the first account in, proves check 1 and the tampering half of check 2, and starts its poll.
    func openingPhase(_ account: AccountID) async throws -> Poll {
        try await driver.perform { try await $0.signIn(account) }.get()
        let email = DemoAccounts.email(for: account)
        let reply = await send(.submitAction("vote for roadmap item 7"))
        let accepted = (try? reply.get()) == .accepted(email: email)
        await note(
            verdictFor: 1, accepted, "the service accepted \(account)'s vote, sent with the backend-issued credential",
            otherwise: "the service did not accept \(account)'s vote sent with the backend-issued credential "
                + "(\(Self.describe(reply)))"
        )
        try await tamperChecks(account)
        try await postPrivateData(account)
        return await startPoll(account)
    }

    /// A backend outage longer than a credential's life: renewals back off, the credential expires, identified work
    /// is blocked locally, and the engine recovers when the backend does.
    func outagePhase(_ poll: Poll) async throws {
        let account = poll.account
        let beforeOutage = try await driver.perform { try await $0.withIdentity { $0 } }.get()
        await note("backend outage begins: every fetch answers 503 for \(Timeline.describe(ScenarioPlan.outageLength))")
        try await backend.setOutage(true)
        let outageStart = clock.uptime
        await driver.advance(to: outageStart + .seconds(16 * 60))

        let expired = engine.state.expiredReason == .expired
        await note(
            verdictFor: 2, expired, "\(account)'s credential expired during the outage (state \(engine.state.name))",
            otherwise: "\(account)'s credential had not expired 16 minutes into the outage (state \(engine.state.name))"
        )
        let sent = service.requestCount
        var blockedByHeaders = false
        do {
            _ = try engine.identityHeaders()
        } catch {
            blockedByHeaders = error.code == .invalidIdentity
        }
        let attempt = await send(.submitAction("comment on roadmap item 7"))
        var blockedCode = "nothing"
        if case .failure(let error as SessionError) = attempt { blockedCode = error.code.rawValue }
        let blocked = blockedByHeaders && blockedCode == "INVALID_IDENTITY" && service.requestCount == sent
        await note(
            verdictFor: 2,
            blocked,
            "the engine blocked \(account)'s next action locally with \(blockedCode); nothing was sent",
            otherwise: "the engine did not block \(account)'s next action locally with INVALID_IDENTITY (it ended "
                + "with \(blockedCode); \(service.requestCount - sent) requests reached the service)"
        )
        let reply = service.handle(.submitAction("comment on roadmap item 7"), headers: IdentityHeaders(beforeOutage))
        await note(
            verdictFor: 2,
            reply == .refused(.expired),
            "the service refused \(account)'s expired credential (\(Self.describe(reply)))",
            otherwise: "the service did not refuse \(account)'s expired credential as expired (\(Self.describe(reply)))"
        )

        await driver.advance(to: outageStart + ScenarioPlan.outageLength)
        try await backend.setOutage(false)
        await note("backend outage ends")
        let engine = self.engine
        let recovered = await driver.advance(limit: .seconds(15 * 60)) { engine.state.isIdentified }
        let (rounds, blockedPolls) = poll.counters.withLock { $0 }
        await note(
            recovered
                ? "recovered: \(account) is identified again; its poll ran \(rounds) times and was blocked locally "
                    + "\(blockedPolls) times while the credential was expired"
                : "the engine did not recover within 15 minutes of the outage's end"
        )
        guard recovered else { throw Abort(reason: "no recovery after the outage") }
    }

    /// Changes accounts and proves check 3 for this change: the first change signs out and then signs the next
    /// account in, as the contract's Verify step does; later ones switch directly.
    func switchPhase(from previous: AccountID, to next: AccountID, poll: Poll) async throws -> Poll {
        let signOutFirst = previous == accounts[0]
        await driver.settle()
        let previousEmail = DemoAccounts.email(for: previous)
        let previousItems = cache.withLock { $0.filter { $0.owner == previous }.count }
        let previousReports = await privateReports(of: previous)
        let marker = service.requestCount
        let hooksBefore = hooks.withLock { $0.count }
        if signOutFirst {
            _ = await driver.perform { await $0.signOut() }
            try await driver.perform { try await $0.signIn(next) }.get()
        } else {
            try await driver.perform { try await $0.switchAccount(to: next) }.get()
        }
        let pollEnd = await poll.end()
        let change = signOutFirst ? "sign-out" : "switch"

        await note(
            verdictFor: 3,
            pollEnd == .accountChanged,
            "\(previous)'s poll was cancelled by the \(change) (it ended with \(pollEnd?.rawValue ?? "no error"))",
            otherwise: "\(previous)'s poll was not cancelled by the \(change) "
                + "(it ended with \(pollEnd?.rawValue ?? "no error"))"
        )
        let hook = hooks.withLock { $0.dropFirst(hooksBefore).first }
        let drained = hook?.scopedWorkAtHook == 0
        await note(
            verdictFor: 3,
            drained,
            "the account-change hook ran after \(previous)'s work drained and cleared \(hook?.clearedCacheItems ?? 0) "
                + "cached items (\(previousItems) were \(previous)'s)",
            otherwise: hook.map {
                "the account-change hook ran while \($0.scopedWorkAtHook) pieces of \(previous)'s work "
                    + "were still running"
            } ?? "no account-change hook ran for the \(change)"
        )
        let late = service.requests(after: marker).filter { $0.claimedEmail == previousEmail }
        await note(
            verdictFor: 3,
            late.isEmpty,
            "no request with \(previous)'s identity reached the service after the \(change) began",
            otherwise:
                "\(late.count) requests with \(previous)'s identity reached the service after the \(change) began"
        )

        let inbox = try await send(.readInbox).get()
        var leaked = 0
        if case .inbox(let reports, let chat) = inbox {
            leaked += reports.filter(previousReports.contains).count
            leaked += chat.filter { $0.hasPrefix("\(previous):") }.count
        } else {
            leaked = -1
        }
        var opened = 0
        for id in previousReports {
            let reply = try await send(.readReport(id)).get()
            if reply != .notFound { opened += 1 }
        }
        let cached = cache.withLock { $0.filter { $0.owner == previous }.count }
        await note(
            verdictFor: 3,
            leaked == 0 && opened == 0 && cached == 0 && !previousReports.isEmpty,
            "\(next) cannot see \(previous)'s private report or chat (inbox leaks \(max(leaked, 0)), "
                + "report #\(previousReports.map(String.init).joined(separator: ",")) opened \(opened) times, "
                + "cached \(cached))",
            otherwise: previousReports.isEmpty
                ? "\(previous) had no private report to check"
                : "\(next) could see \(previous)'s private data (inbox leaks \(max(leaked, 0)), "
                    + "report #\(previousReports.map(String.init).joined(separator: ",")) opened \(opened) times, "
                    + "cached \(cached)\(leaked < 0 ? ", the inbox could not be read" : ""))"
        )
        if DemoAccounts.session(for: next)?.properties != nil {
            try await tamperChecks(next)
        }
        try await postPrivateData(next)
        return await startPoll(next)
    }

    /// Rotates the secret and proves check 4.
    func rotationPhase(_ account: AccountID) async throws {
        let installed = try await driver.perform { try await $0.withIdentity { $0 } }.get()
        let issued = try await backend.fetchCredential(for: account)
        await note("the project's secret is rotated in the backend and the service")
        let generation = try await backend.rotateSecret()
        try service.rotateSecret(to: DemoSecrets.rotated(baseSecret, generation: generation))

        let replies = [installed, issued].map {
            service.handle(.submitAction("vote for roadmap item 9"), headers: IdentityHeaders($0))
        }
        await note(
            verdictFor: 4,
            replies.allSatisfy { $0 == .refused(.signatureMismatch) },
            "both credentials issued before the rotation are refused "
                + "(\(Set(replies.map(Self.describe)).sorted().joined(separator: "; ")))",
            otherwise: "a credential issued before the rotation was not refused for its signature "
                + "(\(replies.map(Self.describe).joined(separator: "; ")))"
        )

        let fetches = engine.metrics.fetchesStarted
        let attempts = Locked(0)
        let reply = await driver.perform { engine in
            try await engine.withIdentity { credential in
                attempts.withLock { $0 += 1 }
                return try self.call(.submitAction("vote for roadmap item 9"), with: credential)
            }
        }
        let renewals = engine.metrics.fetchesStarted - fetches
        let accepted = (try? reply.get()) == .accepted(email: DemoAccounts.email(for: account))
        await note(
            verdictFor: 4,
            accepted && renewals == 1 && attempts.withLock { $0 } == 2 && engine.state.isIdentified,
            "the engine recovered by renewing once: \(renewals) fetch, \(attempts.withLock { $0 }) attempts, "
                + "the retried vote was accepted",
            otherwise: "the engine did not recover by renewing once: \(renewals) fetches, "
                + "\(attempts.withLock { $0 }) attempts, the retried vote was \(accepted ? "accepted" : "not accepted"), "
                + "state \(engine.state.name)"
        )
    }

    /// Signs out at the end and shuts the engine down.
    func closingPhase(_ poll: Poll) async throws {
        await note("the daemon stops: sign out, then shut down")
        _ = await driver.perform { await $0.signOut() }
        _ = await poll.end()
        await engine.shutdown()
    }
}
