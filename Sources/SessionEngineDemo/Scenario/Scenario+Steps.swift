import SessionEngine
import SessionEngineBackend
import SessionEngineTestKit

/// The steps the phases share: the host's requests, its poll, tampering and notes.
extension Scenario {
    /// Changing one signed field of the installed credential makes the service refuse it (check 2).
    func tamperChecks(_ account: AccountID) async throws {
        await driver.settle()
        let credential = try engine.identityHeaders().credential()
        for (field, tampered) in try Self.tampered(credential) {
            let reply = service.handle(.submitAction("vote for roadmap item 7"), headers: IdentityHeaders(tampered))
            await note(
                verdictFor: 2,
                reply == .refused(.signatureMismatch),
                "\(account)'s credential with its signed \(field) changed is refused (\(Self.describe(reply)))",
                otherwise: "\(account)'s credential with its signed \(field) changed was not refused for its signature "
                    + "(\(Self.describe(reply)))"
            )
        }
    }

    /// Copies of `credential` with one signed field changed and the original signature, by the field's name.
    private static func tampered(_ credential: IdentityCredential) throws -> [(String, IdentityCredential)] {
        func changed(email: String? = nil, expiresAt: Int64? = nil, properties: IdentityProperties? = nil) throws
            -> IdentityCredential
        {
            try IdentityCredential(
                email: email ?? credential.email,
                expiresAt: expiresAt ?? credential.expiresAt,
                signature: credential.signature,
                properties: properties ?? credential.properties
            )
        }
        var copies = [
            ("email", try changed(email: "mallory@example.com")),
            ("expiresAt", try changed(expiresAt: credential.expiresAt + 3600)),
        ]
        if let properties = credential.properties, let key = properties.values.keys.sorted().first {
            // Raise a number or change a value: still valid properties, but not the ones that were signed.
            var values = properties.values
            switch values[key] {
            case .number(let number): values[key] = .number(number * 10 + 1)
            case .string(let text): values[key] = .string("x" + text)
            case .boolean(let flag): values[key] = .boolean(!flag)
            case nil: break
            }
            copies.append(("properties", try changed(properties: IdentityProperties(values))))
        }
        return copies
    }

    /// Files a private report and a chat message as the account.
    func postPrivateData(_ account: AccountID) async throws {
        let report = try await send(.postReport("\(account)'s private report")).get()
        _ = try await send(.postChat("\(account): a private question")).get()
        guard case .reportPosted(let id) = report else { throw Abort(reason: "the service did not take the report") }
        await note("\(account) filed private report #\(id) and sent a chat message")
    }

    /// The IDs of the account's private reports, as the service lists them to the current account.
    func privateReports(of account: AccountID) async -> [Int] {
        let reply = try? await send(.readInbox).get()
        guard case .inbox(let reports, _) = reply else { return [] }
        return reports
    }

    /// Starts the account's poll as scoped work: an account change cancels it and waits for it to end.
    func startPoll(_ account: AccountID) async -> Poll {
        let counters = Locked((rounds: 0, blockedLocally: 0))
        let task = await engine.startCall { engine -> SessionError.Code? in
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

    /// Sends one identified request through ``ClockDriver/perform(_:)``.
    func send(_ operation: ServiceStandIn.Operation) async -> Result<ServiceStandIn.Reply, any Error> {
        await driver.perform { _ in try await self.identified(operation) }
    }

    /// Sends an identified request with the engine's current credential; a refusal asks the engine to renew once.
    func identified(_ operation: ServiceStandIn.Operation) async throws -> ServiceStandIn.Reply {
        try await engine.withIdentity { credential in try self.call(operation, with: credential) }
    }

    /// Sends one request; throws ``SessionError/credentialRejected`` when the service answers `INVALID_IDENTITY`.
    func call(_ operation: ServiceStandIn.Operation, with credential: IdentityCredential) throws -> ServiceStandIn.Reply
    {
        let reply = service.handle(operation, headers: IdentityHeaders(credential))
        if case .refused = reply { throw SessionError.credentialRejected }
        return reply
    }

    /// Prints a note once the engine is idle and every event before it has been printed.
    func note(_ text: String) async {
        await driver.settle()
        timeline.note(text)
    }

    /// Records one part of a Verify check and prints it once the engine is idle.
    ///
    /// - Parameters:
    ///   - check: The Verify check's number.
    ///   - passed: Whether this part of it held.
    ///   - text: What held, printed when it passed.
    ///   - failure: What went wrong instead, printed when it did not.
    func note(verdictFor check: Int, _ passed: Bool, _ text: String, otherwise failure: @autoclosure () -> String)
        async
    {
        await driver.settle()
        verdicts.record(check, passed)
        timeline.check(check, passed, passed ? text : failure())
    }

    /// A short description of the outcome of a request the host sent.
    static func describe(_ outcome: Result<ServiceStandIn.Reply, any Error>) -> String {
        switch outcome {
        case .success(let reply): describe(reply)
        case .failure(let error as SessionError): "blocked locally with \(error.code.rawValue)"
        case .failure: "the request failed"
        }
    }

    /// A short description of a service reply for the timeline.
    static func describe(_ reply: ServiceStandIn.Reply) -> String {
        switch reply {
        case .refused(let check): "INVALID_IDENTITY, \(check)"
        case .accepted: "accepted"
        case .notFound: "not found"
        default: "answered"
        }
    }
}
