import Foundation
import SessionEngine
import SessionEngineBackend

#if canImport(FoundationNetworking)
    import FoundationNetworking
#endif

/// One fault soak: a pool on the system clock against the loopback backend, driven through its faults in ticks of
/// real time.
///
/// The run plays the service as well: after the backend's secret rotates, it checks every account's credential with
/// a verifier under the new secret and reports each one signed with the old secret rejected, as the service would on
/// the account's next request.
final class SoakRun {
    private let backend: PeerProcess
    private let port: Int
    private let secret: String
    private let schedule: [ScheduledFault]
    private let length: Double
    private let origin = ContinuousClock.now

    init(backend: PeerProcess, port: Int, secret: String, schedule: [ScheduledFault], length: Double) {
        self.backend = backend
        self.port = port
        self.secret = secret
        self.schedule = schedule
        self.length = length
    }

    /// How a fault is tracked until every account is identified again.
    private struct Tracked {
        var scheduled: ScheduledFault
        var unidentifiedAtEnd: Int?
        var maximumUnidentified = 0
        var recovery: Double?
    }

    private var elapsed: Double { origin.duration(to: .now).seconds }

    func run() async throws -> SoakOutcome {
        typealias Soak = FaultSoakBenchmark
        let starts = StartLog(origin: origin)
        guard let endpoint = URL(string: "http://127.0.0.1:\(port)/identity") else { fatalError("no endpoint") }
        let fetcher = HTTPCredentialFetcher(endpoint: endpoint, timeout: Soak.httpTimeout, proxy: .none) {
            account, request in
            starts.record()
            request.setValue("Bearer session-\(account.rawValue)", forHTTPHeaderField: "Authorization")
        }
        var session = SessionConfiguration()
        session.fetchTimeout = Soak.fetchTimeout
        let pool = SessionPool(
            fetcher: fetcher, configuration: SessionPoolConfiguration(session: session, budget: Soak.budget))
        let counter = EventCounter()
        let events = pool.events(bufferLimit: 1 << 16)
        let reader = Task { for await event in events { counter.count(event) } }
        let accounts = (0..<Soak.accounts).map { AccountID(String(format: "soak-%04d", $0)) }
        let signIns = accounts.map { account in Task { try? await pool.signIn(account) } }

        var verifier = try IdentityVerifier(projectID: Fixtures.projectID, secret: secret)
        var generation = 0
        var rejected: Set<String> = []
        var tracked = schedule.map { Tracked(scheduled: $0) }
        var next = 0
        var calmed = Set<Int>()
        var outcome = SoakOutcome()
        var backendSeconds: [Int: Int] = [:]
        var lastRequests = 0
        var lastSampleTime = 0.0
        var tick = 0

        while elapsed < length {
            tick += 1
            try await Task.sleep(until: origin + Soak.tick * tick, clock: .continuous)
            let now = elapsed
            while next < schedule.count, now >= schedule[next].start {
                let fault = schedule[next].fault
                if fault == .rotation {
                    _ = backend.ask("rotate")
                    generation += 1
                    try verifier.rotateSecret(to: "\(secret):rotated:\(generation)")
                } else {
                    _ = backend.ask("phase \(fault.rawValue)")
                }
                progress(String(format: "  %6.1f s  fault: %@", now, fault.description))
                next += 1
            }
            for (index, fault) in schedule.enumerated()
            where fault.fault != .rotation && now >= fault.end && !calmed.contains(index) {
                _ = backend.ask("phase calm")
                calmed.insert(index)
                progress(String(format: "  %6.1f s  calm", now))
            }

            // Accounts without a credential the service accepts; the service rejects those signed with an old secret.
            var unidentified = 0
            for account in accounts {
                guard let credential = try? pool.identityHeaders(for: account).credential() else {
                    unidentified += 1
                    continue
                }
                guard case .invalid(let failure) = verifier.verify(credential) else { continue }
                unidentified += 1
                if failure.check == .signatureMismatch, rejected.insert(credential.signature).inserted {
                    await pool.credentialRejected(credential, for: account)
                }
            }
            for index in tracked.indices where now >= tracked[index].scheduled.start && tracked[index].recovery == nil {
                tracked[index].maximumUnidentified = max(tracked[index].maximumUnidentified, unidentified)
                guard now >= tracked[index].scheduled.end else { continue }
                if tracked[index].unidentifiedAtEnd == nil { tracked[index].unidentifiedAtEnd = unidentified }
                // An account lost at the fault's end is back when none is missing; none lost is no wait at all.
                if unidentified == 0 {
                    tracked[index].recovery =
                        tracked[index].unidentifiedAtEnd == 0 ? 0 : now - tracked[index].scheduled.end
                }
            }

            guard tick % Soak.sampleEvery == 0 else { continue }
            let stats = backendStats()
            for (second, count) in stats.perSecond { backendSeconds[second, default: 0] += count }
            releaseFreeMemory()
            let applied = accounts.count { pool.metrics(for: $0)?.appliedClockOffset != nil }
            let sample = Sample(
                time: now, memory: residentMemory(), files: openFiles(), threads: threadCount(),
                backendRate: Double(stats.requests - lastRequests) / (now - lastSampleTime), appliedOffsets: applied,
                unidentified: unidentified)
            lastRequests = stats.requests
            lastSampleTime = now
            outcome.samples.append(sample)
            outcome.maximumAppliedOffsets = max(outcome.maximumAppliedOffsets, applied)
            let metrics = pool.metrics
            outcome.budgetWaitP99 = max(outcome.budgetWaitP99, metrics.budgetWait.p99.seconds)
            outcome.budgetWaitMax = max(outcome.budgetWaitMax, metrics.budgetWait.max.seconds)
            progress(
                String(
                    format: "  %6.1f s  rss %@  files %d  threads %d  backend %5.1f req/s  offsets %d  skew %d  "
                        + "unidentified %d  in flight %d  queued %d%@  budget wait p99 %@",
                    now, Unit.bytes.format(sample.memory), sample.files, sample.threads, sample.backendRate, applied,
                    counter.skew, unidentified, metrics.fetchesInFlight, metrics.queuedNeeded + metrics.queuedProactive,
                    metrics.holdsForOutage ? "  outage hold" : "", Unit.seconds.format(metrics.budgetWait.p99.seconds)))
        }

        // One second more, so the backend counts the last full second.
        try await Task.sleep(for: .seconds(1.1))
        let stats = backendStats()
        for (second, count) in stats.perSecond { backendSeconds[second, default: 0] += count }
        outcome.backendRequests = stats.requests
        outcome.backendPeak = Double(backendSeconds.values.max() ?? 0)
        outcome.clientStarts = starts.count
        outcome.clientPeak = Double(starts.peakInAnySecond())
        outcome.finalUnidentified = accounts.count { account in
            guard let credential = try? pool.identityHeaders(for: account).credential() else { return true }
            return !verifier.verify(credential).isValid
        }
        outcome.finalBudgetWait = pool.metrics.budgetWait.description
        var failures: [String: Int] = [:]
        for account in accounts {
            for (code, count) in pool.metrics(for: account)?.fetchesFailed ?? [:] {
                failures["\(code)", default: 0] += count
            }
        }
        outcome.failures =
            "failed fetches: "
            + failures.sorted { $0.key < $1.key }.map { "\($0.key) \($0.value)" }.joined(separator: ", ")
        outcome.skewEvents = counter.skew
        outcome.eventsDropped = counter.dropped
        outcome.faults = tracked.map {
            SoakOutcome.Fault(
                fault: $0.scheduled.fault, start: $0.scheduled.start, unidentifiedAtEnd: $0.unidentifiedAtEnd ?? 0,
                maximumUnidentified: $0.maximumUnidentified, recovery: $0.recovery)
        }
        await pool.shutdown()
        await reader.value
        for task in signIns { await task.value }
        return outcome
    }

    /// The backend's requests so far and its counts per second since the last call.
    private func backendStats() -> (requests: Int, perSecond: [(Int, Int)]) {
        backend.backendStats() ?? (0, [])
    }
}

/// When each fetch started, as its authentication was added, in seconds since the run began.
final class StartLog: Sendable {
    private let origin: ContinuousClock.Instant
    private let times = SanitizedMutex<[Double]>([])

    init(origin: ContinuousClock.Instant) { self.origin = origin }

    func record() {
        let time = origin.duration(to: .now).seconds
        times.withLock { $0.append(time) }
    }

    var count: Int { times.withLock { $0.count } }

    /// The most starts in any window of one second.
    func peakInAnySecond() -> Int {
        let sorted = times.withLock { $0 }.sorted()
        var peak = 0
        var first = 0
        for (index, time) in sorted.enumerated() {
            while sorted[first] <= time - 1 { first += 1 }
            peak = max(peak, index - first + 1)
        }
        return peak
    }
}

/// Counts the pool's clock-skew reports and dropped events.
final class EventCounter: Sendable {
    private let counts = SanitizedMutex<(skew: Int, dropped: Int)>((0, 0))

    func count(_ event: SessionPoolEvent) {
        guard case .session(let session) = event.kind else { return }
        switch session.kind {
        case .clockSkewSuspected: counts.withLock { $0.skew += 1 }
        case .eventsDropped(let count): counts.withLock { $0.dropped += count }
        default: break
        }
    }

    var skew: Int { counts.withLock { $0.skew } }
    var dropped: Int { counts.withLock { $0.dropped } }
}
