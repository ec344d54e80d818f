import Foundation
import SessionEngineBackend
import SessionEngineModel
import SessionEngineTestKit
import Testing

@testable import SessionEngine

/// A configuration is the host's input: every bounded value stays within its bounds however it is set, in the
/// initializer or through its property afterwards, so no setting can crash the process or stop its fetches.
@Suite struct ConfigurationBoundsTests {
    @Test func everyBoundedValueIsKeptInItsBoundsWhenItIsSet() {
        var budget = SessionPoolConfiguration.Budget()
        budget.maximumInFlight = 0
        budget.startsPerSecond = .nan
        budget.burst = -3
        budget.outageThreshold = 0
        budget.outageProbeInterval = .seconds(-1)
        #expect(budget.maximumInFlight == 1 && budget.startsPerSecond == 1 && budget.burst == 1)
        #expect(budget.outageThreshold == 1 && budget.outageProbeInterval == .milliseconds(10))
        budget.startsPerSecond = 0
        #expect(budget.startsPerSecond == 1, "not positive: 1, as the initializer makes it")
        #expect(
            budget
                == SessionPoolConfiguration.Budget(
                    maximumInFlight: 0, startsPerSecond: 0, burst: -3, outageThreshold: 0,
                    outageProbeInterval: .seconds(-1)))

        var pool = SessionPoolConfiguration()
        pool.maximumAccounts = -5
        pool.idleTimeout = .milliseconds(1)
        #expect(pool.maximumAccounts == 1 && pool.idleTimeout == .seconds(1))

        var retry = RetryPolicy()
        retry.multiplier = .nan
        retry.initial = .seconds(-5)
        retry.cap = .zero
        #expect(retry.multiplier == 2 && retry.initial == .milliseconds(1) && retry.cap == .milliseconds(1))
        retry.initial = .seconds(10)
        #expect(retry.cap == .seconds(10), "the cap is never below the first ceiling")
        #expect(retry == RetryPolicy(initial: .seconds(10), multiplier: .nan, cap: .zero))
        #expect(retry.ceiling(afterFailures: 3) == .seconds(10))
        // In either order, as the initializer makes them.
        var capFirst = RetryPolicy()
        capFirst.cap = .milliseconds(800)
        capFirst.initial = .milliseconds(500)
        var initialFirst = RetryPolicy()
        initialFirst.initial = .milliseconds(500)
        initialFirst.cap = .milliseconds(800)
        #expect(capFirst.cap == .milliseconds(800) && capFirst == initialFirst)
        #expect(capFirst == RetryPolicy(initial: .milliseconds(500), cap: .milliseconds(800)))
        #expect(Set([capFirst, initialFirst]).count == 1)

        var renewal = RenewalPolicy()
        renewal.fraction = .infinity
        renewal.jitter = 7
        renewal.minimumLead = .seconds(-1)
        #expect(renewal.fraction == 2.0 / 3.0 && renewal.jitter == 2.0 / 3.0 && renewal.minimumLead == .zero)
        renewal.fraction = 0.5
        #expect(renewal.jitter == 0.5, "the jitter is never wider than the share")
        #expect(renewal == RenewalPolicy(fraction: 0.5, jitter: 7, minimumLead: .seconds(-1)))
        var narrowed = RenewalPolicy(fraction: 0.6, jitter: 0.3)
        narrowed.fraction = 0.1
        #expect(narrowed.jitter == 0.1)
        narrowed.fraction = 0.6
        #expect(narrowed.jitter == 0.3, "a narrower share for a while narrows the jitter only for that while")
        #expect(narrowed == RenewalPolicy(fraction: 0.6, jitter: 0.3))

        var session = SessionConfiguration(minimumFetchInterval: .seconds(-5), clockSkewTolerance: .seconds(-60))
        #expect(session.minimumFetchInterval == .zero && session.clockSkewTolerance == .zero)
        session.eventBufferLimit = 0
        session.maximumRetryAfter = .seconds(-30)
        session.minimumFetchInterval = .milliseconds(-1)
        session.clockSkewTolerance = .seconds(-1)
        #expect(session.eventBufferLimit == 1 && session.maximumRetryAfter == .zero)
        #expect(session.minimumFetchInterval == .zero && session.clockSkewTolerance == .zero)
        session.clockSkewTolerance = .seconds(30)
        #expect(session.clockSkewTolerance == .seconds(30))
    }

    /// Values that once stopped a pool or crashed the process, set after the configuration was made: a rate of zero
    /// divided a second by it, no slot in flight admitted nothing, and a multiplier that is no number made the second
    /// backoff a duration of NaN seconds.
    @Test func aPoolConfiguredWithHostileValuesSignsInAndRetries() async throws {
        let clock = ManualClock()
        let signer = try IdentitySigner(projectID: "proj_bounds", secret: "bounds-secret", clock: clock)
        let failures = Locked(0)
        let fetcher = ScriptedCredentialFetcher(clock: clock) { request in
            // Two failures, so that the backoff grows once.
            let failed = failures.withLock { count -> Bool in
                count += 1
                return count <= 2
            }
            if failed { throw SessionError.fetchFailed("the backend is down") }
            return .credential(try signer.sign(email: exampleEmail(for: request.account)))
        }
        var configuration = SessionPoolConfiguration()
        configuration.budget.startsPerSecond = 0
        configuration.budget.maximumInFlight = 0
        configuration.budget.burst = 0
        configuration.budget.outageProbeInterval = .seconds(-1)
        configuration.session.retry.multiplier = .nan
        configuration.session.retry.initial = .seconds(-5)
        configuration.session.renewal.fraction = .nan
        configuration.session.renewal.jitter = .infinity
        configuration.session.eventBufferLimit = -1
        let pool = SessionPool(fetcher: fetcher, configuration: configuration, clock: clock)
        let signIn = await pool.startCall { try await $0.signIn("alice") }
        for _ in 0..<60 where !pool.state(of: "alice").isIdentified {
            clock.advance(by: .seconds(1))
            await pool.waitUntilIdle()
        }
        try await signIn.value
        #expect(failures.value == 3)
        #expect(try pool.identityHeaders(for: "alice").credential().email == "alice@example.com")
        await pool.shutdown()
    }
}
