import Foundation
import SessionEngineTestKit
import Synchronization
import Testing

@testable import SessionEngine

/// What people read: durations in at most two units, accounts by name, one number for a capped `Retry-After`, no
/// event for work that was not there, and the latency of successes kept apart from failures.
@Suite(.timeLimit(TimeLimits.minutes(1)))
struct WordsForPeopleTests {
    @Test(arguments: [
        (Duration.zero, "0 s"),
        (.microseconds(300), "< 1 ms"),
        (.milliseconds(250), "250 ms"),
        (.milliseconds(999), "999 ms"),
        (.nanoseconds(999_600_000), "1 s"),
        (.seconds(5.899879770538004), "5.9 s"),
        (.seconds(30), "30 s"),
        (.seconds(59.97), "1 min"),
        (.seconds(150), "2 min 30 s"),
        (.seconds(600), "10 min"),
        (.seconds(2598), "43 min 18 s"),
        (.seconds(3599.6), "1 h"),
        (.seconds(3900), "1 h 5 min"),
        (.seconds(86_400), "1 d"),
        (.seconds(97_200), "1 d 3 h"),
        (.seconds(-3900), "-1 h 5 min"),
        (.milliseconds(-250), "-250 ms"),
    ])
    func durationsReadAsPeopleWriteThem(duration: Duration, text: String) {
        #expect(duration.readable == text)
    }

    @Test func descriptionsNameAccountsAndDurationsAsPeopleRead() {
        #expect("\(AccountChange(from: nil, to: "alice"))" == "from: none, to: alice")
        #expect("\(AccountChange(from: "alice", to: "bob"))" == "from: alice, to: bob")
        #expect("\(SessionState.switching(from: "alice", to: nil))" == "switching(from: alice, to: none)")
        let failure = FetchFailure(
            account: "alice",
            error: SessionError(.fetchFailed, reason: "the backend answered 503", isTransient: true),
            fetch: FetchAttempt(number: 2, duration: .seconds(1.23456)),
            retryIn: .seconds(5.899879770538004),
            serverRetryAfter: .seconds(150)
        )
        #expect(
            "\(failure)" == "alice, FETCH_FAILED, attempt 2 in 1.2 s, retryIn: 5.9 s, server asked for 2 min 30 s")
        let error = SessionError(.fetchFailed, reason: "the backend answered 429", retryAfter: .seconds(3900))
        #expect("\(error)" == "FETCH_FAILED: the backend answered 429 (retry after 1 h 5 min)")
        let metrics = SessionMetrics(clockOffset: .seconds(-3600), fetchLatency: LatencySummary(of: [.seconds(2)]))
        #expect("\(metrics)".contains("clockOffset=-1 h "))
        #expect("\(metrics)".contains("latency=[n=1 p50=2 s p90=2 s p99=2 s max=2 s]"))
        #expect(!"\(metrics)".contains("seconds"))
    }

    @Test func logRecordsWriteDurationsAsPeopleRead() async throws {
        let records = Recorder<SessionLogRecord>()
        let harness = EngineHarness(configuration: SessionConfiguration(randomSeed: 5, log: { records.append($0) }))
        let signIn = await harness.engine.startCall { try await $0.signIn("alice") }
        await harness.answerNext(with: .failure(SessionError.fetchFailed("the backend could not be reached")))
        await harness.engine.waitUntilIdle()
        let failed = try #require(
            records.values.first { $0.metadata["code"] == SessionError.Code.fetchFailed.rawValue })
        let retryIn = try #require(failed.metadata["retryIn"])
        #expect(!retryIn.contains("seconds"), "\(retryIn)")
        #expect(retryIn.hasSuffix(" ms") || retryIn.hasSuffix(" s"), "\(retryIn)")
        #expect(retryIn.count <= 7, "at most one decimal: \(retryIn)")
        signIn.cancel()
        await harness.engine.shutdown()
    }

    /// A backend asking for 2598 s when the engine waits at most 600 s: the event, the error it carries and the
    /// caller's error all say 10 min, the delay the engine applies.
    @Test func aCappedRetryAfterShowsTheDelayTheEngineApplies() async throws {
        let harness = EngineHarness(
            configuration: SessionConfiguration(maximumRetryAfter: .seconds(600), randomSeed: 9))
        let engine = harness.engine
        try await harness.signIn("alice")
        var events = engine.events(bufferLimit: .max).makeAsyncIterator()
        harness.clock.advance(by: .seconds(60))
        let renewal = await engine.startCall { try await $0.renew() }
        let busy = SessionError(
            .fetchFailed, reason: "the backend answered 429", isTransient: true, retryAfter: .seconds(2598))
        await harness.answerNext(with: .failure(busy))
        let failure = try #require(await events.nextFailure())
        #expect(failure.serverRetryAfter == .seconds(600))
        #expect(failure.retryIn == .seconds(600))
        #expect(failure.error.retryAfter == .seconds(600))
        #expect(!"\(failure)".contains("43 min") && !"\(failure.error)".contains("43 min"))
        #expect("\(failure.error)".contains("retry after 10 min"))
        do {
            _ = try await renewal.value
            Issue.record("the renewal succeeded")
        } catch let error as SessionError {
            #expect(error.retryAfter == .seconds(600))
        }
        await engine.shutdown()
    }

    @Test func anAccountChangeWithoutWorkReportsNoCancelledWork() async throws {
        let harness = EngineHarness()
        let engine = harness.engine
        let published = Recorder<SessionEvent.Kind>()
        var events = engine.events(bufferLimit: .max).makeAsyncIterator()
        try await harness.signIn("alice")
        await engine.signOut()
        try await harness.signIn("bob")
        let clock = harness.clock
        let work = await engine.startCall { engine in
            try await engine.withIdentity { _ in try await clock.sleep(for: .seconds(3600)) }
        }
        await engine.signOut()
        await #expect(throws: SessionError.self) { try await work.value }
        await engine.shutdown()
        while let event = await events.next() { published.append(event.kind) }
        let cancelled = published.values.filter {
            if case .workCancelled = $0 { return true }
            return false
        }
        #expect(cancelled == [.workCancelled(account: "bob", count: 1)])
        #expect(engine.metrics.scopedWorkCancelled == 1)
    }

    @Test func fetchLatencyCountsSuccessesAndFailuresApart() async throws {
        let harness = EngineHarness(
            configuration: SessionConfiguration(
                retry: RetryPolicy(initial: .seconds(1), multiplier: 1, cap: .seconds(1)),
                minimumFetchInterval: .seconds(1),
                randomSeed: 4
            ))
        let engine = harness.engine
        let clock = harness.clock
        let signIn = await engine.startCall { try await $0.signIn("alice") }
        // A refusal that fails at once, then a timeout after 30 s, then a success after 2 s.
        await harness.answerNext(with: .failure(SessionError.fetchFailed("connection refused")))
        _ = await harness.clock.advance(upTo: .seconds(60)) { harness.fetcher.pendingCount > 0 }
        var request = await harness.fetcher.nextRequest()
        clock.advance(by: .seconds(30))
        harness.fetcher.respond(to: request, with: .failure(SessionError.fetchFailed("timed out")))
        _ = await harness.clock.advance(upTo: .seconds(60)) { harness.fetcher.pendingCount > 0 }
        request = await harness.fetcher.nextRequest()
        clock.advance(by: .seconds(2))
        harness.fetcher.respond(to: request, with: .success(harness.credential(for: "alice")))
        try await signIn.value
        let metrics = engine.metrics
        #expect(metrics.fetchLatency == LatencySummary(of: [.seconds(2)]))
        #expect(metrics.failedFetchLatency == LatencySummary(of: [.zero, .seconds(30)]))
        await engine.shutdown()
    }
}
