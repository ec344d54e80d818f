import Foundation
import SessionEngine

/// A long-running process that keeps one account's verified identity alive with `SessionEngine`, does identified
/// work every second, reports events and metrics, and shuts down gracefully on SIGTERM or SIGINT.
///
/// Exit status: 0 after a graceful shutdown, 1 when the sign-in failed for good, 2 for a usage error.
@main
struct SessionDaemon {
    /// How long running work may take to finish after SIGTERM before the engine cancels it.
    static let gracePeriod: Duration = .seconds(10)

    static func main() async throws {
        let options: DaemonOptions
        do {
            let arguments = Array(CommandLine.arguments.dropFirst())
            guard let parsed = try DaemonOptions.parse(arguments, environment: ProcessInfo.processInfo.environment)
            else {
                print(DaemonOptions.usage)
                return
            }
            options = parsed
        } catch {
            FileHandle.standardError.write(Data("error: \(error)\n\n\(DaemonOptions.usage)\n".utf8))
            exit(2)
        }

        let token = options.token
        let fetcher = HTTPCredentialFetcher(endpoint: options.endpoint) { _, request in
            // Authenticate as the account's backend session; throw SessionError.backendSessionEnded() once it is gone.
            request.setValue("Bearer \(token)", forHTTPHeaderField: "Authorization")
        }
        let engine = SessionEngine(fetcher: fetcher)
        let events = engine.events()  // subscribed before signing in, so no event is missed

        // SIGTERM (systemd, Kubernetes) and SIGINT (Ctrl-C) begin a graceful shutdown. The signal's default action,
        // ending the process, must be turned off first, or the dispatch source never sees it.
        let signalSources = [SIGTERM, SIGINT].map { number in
            signal(number, SIG_IGN)
            let source = DispatchSource.makeSignalSource(signal: number, queue: .global())
            source.setEventHandler {
                let name = number == SIGTERM ? "SIGTERM" : "SIGINT"
                log("\(name): shutting down, grace period \(gracePeriod.components.seconds) s")
                Task { await engine.shutdown(gracePeriod: gracePeriod) }
            }
            source.resume()
            return source
        }

        log("SessionDaemon: account \(options.account), backend \(options.endpointOrigin)")
        async let eventsPrinted: Void = printEvents(events)
        async let signedIn = signIn(engine, options.account)  // in its own task: the loop below never waits for it
        async let actionsStopped: Void = performIdentifiedActions(engine)
        // run() owns the engine's lifetime: it returns once the shutdown has finished (work drained, signed out).
        try await engine.run()
        let succeeded = await signedIn
        await actionsStopped
        await eventsPrinted  // the event stream ends after the engine's last event
        signalSources.forEach { $0.cancel() }
        log(describe(engine.metrics))
        guard succeeded else { exit(1) }
        log("shut down gracefully")
    }
}

/// Signs the account in and waits for its first credential, which may take long (the backend is down: the engine
/// retries with backoff meanwhile).
///
/// - Returns: `false` when the sign-in failed for good (the backend refused the account's session, or the fetcher
///   refused the endpoint), after shutting the engine down; `true` otherwise.
func signIn(_ engine: SessionEngine, _ account: AccountID) async -> Bool {
    do {
        try await engine.signIn(account)
        // identityHeaders() reads the installed credential without an actor hop, as every request should.
        log("signed in as \((try? engine.identityHeaders())?[IdentityHeaders.emailName] ?? "?")")
        return true
    } catch let error as SessionError where error.code == .shutDown {
        return true  // a shutdown came before the first credential
    } catch {
        log("sign-in failed: \(error)")
        await engine.shutdown()
        return false
    }
}

/// Every second, does one piece of work as the account, and every fifth second reports the engine's metrics; stops
/// once the engine refuses new work because it is shutting down.
func performIdentifiedActions(_ engine: SessionEngine) async {
    var done = 0
    for tick in 1... {
        do {
            try await Task.sleep(for: .seconds(1))
            if tick.isMultiple(of: 5) { log(describe(engine.metrics)) }
            // Work bound to the account: an account change cancels it, a graceful shutdown lets it finish.
            let (email, headerCount) = try await engine.withIdentity { credential in
                let headers = IdentityHeaders(credential)
                // Send your request here with `headers`; when the service answers INVALID_IDENTITY, throw
                // SessionError.credentialRejected and the engine renews once and runs this closure again.
                try await Task.sleep(for: .milliseconds(50))  // stands in for the request
                return (credential.email, headers.fields.count)
            }
            done += 1
            log("identified action \(done) done as \(email) with \(headerCount) identity headers")
        } catch let error as SessionError where error.code == .shutDown {
            log("identified actions stopped: the engine is shutting down")
            return
        } catch is CancellationError {
            return
        } catch {
            // INVALID_IDENTITY once the credential has expired (the engine keeps renewing in the background),
            // SWITCHING before the first credential, SIGNED_OUT after the backend ended the session: skip this round.
            log("identified action skipped: \(error)")
        }
    }
}

/// Prints every event until the engine has shut down.
func printEvents(_ events: SessionEvents) async {
    for await event in events {
        log("event: " + describe(event.kind))
    }
}

/// One line for an event. Events never hold a signature, a secret or a property value, so every description is
/// safe to print; the common ones are spelled out.
func describe(_ kind: SessionEvent.Kind) -> String {
    switch kind {
    case .stateChanged(.expired(let expired)):
        "no usable identity (\(expired.reason.rawValue)): identified work fails with INVALID_IDENTITY until renewed"
    case .stateChanged(let state):
        "state \(state.name)" + (state.account.map { " (account \($0))" } ?? "")
    case .renewed(let identity, let fetch):
        "credential for \(identity.email) installed, fetched in \(milliseconds(fetch.duration)), expires "
            + Date(timeIntervalSince1970: TimeInterval(identity.expiresAt)).ISO8601Format()
    case .fetchFailed(let failure):
        "fetch failed: \(failure.error); " + (failure.retryIn.map { "retrying in \(seconds($0))" } ?? "giving up")
    default:
        kind.description
    }
}

/// A few of the engine's metrics on one line.
func describe(_ metrics: SessionMetrics) -> String {
    let remaining = metrics.credentialRemainingLifetime.map { "\($0.components.seconds) s" } ?? "none"
    return "metrics: fetches \(metrics.fetchesSucceeded) ok, \(metrics.fetchesFailedTotal) failed; "
        + "renewals \(metrics.renewals), expiries \(metrics.expiries), rejections \(metrics.rejections); "
        + "fetch p50 \(milliseconds(metrics.fetchLatency.p50)), p99 \(milliseconds(metrics.fetchLatency.p99)); "
        + "credential left \(remaining)"
}

func milliseconds(_ duration: Duration) -> String {
    "\(Int((duration / .milliseconds(1)).rounded())) ms"
}

func seconds(_ duration: Duration) -> String {
    String(format: "%.1f s", duration / .seconds(1))
}

/// Writes one stamped line to standard output in a single write, so lines from concurrent tasks never mix and each
/// reaches a pipe (journald, a log collector) at once instead of waiting in a buffer.
func log(_ message: String) {
    FileHandle.standardOutput.write(Data("\(Date.now.ISO8601Format()) \(message)\n".utf8))
}
