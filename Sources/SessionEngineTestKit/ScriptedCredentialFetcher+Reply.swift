public import SessionEngine

extension ScriptedCredentialFetcher {
    /// How a ``ScriptedCredentialFetcher`` answers one fetch.
    ///
    /// A reply is a credential (with the backend's clock offset, as an HTTP fetcher measures it from a `Date`
    /// header) or an error, at once or after a delay on the fetcher's ``ManualClock``, so that the answer arrives on
    /// its own when the test advances the clock; or it holds the fetch until the test answers it. A reply that ignores
    /// cancellation models a backend whose answer is already on the wire: the fetch ends only when its answer comes.
    public struct Reply: Sendable {
        enum Answer {
            case result(Result<FetchedCredential, any Error>)
            case held
        }

        let answer: Answer
        let delay: Duration
        let ignoresCancellation: Bool

        /// Answers with a credential.
        ///
        /// - Parameters:
        ///   - credential: The credential to return.
        ///   - serverClockOffset: The backend's clock offset to report with it, as
        ///     `FetchedCredential.serverClockOffset`; `nil` reports none.
        ///   - delay: How long the answer takes on the fetcher's clock; a delay needs a fetcher created with
        ///     ``ScriptedCredentialFetcher/init(clock:script:)``.
        ///   - ignoringCancellation: Whether the fetch waits out the delay even when the engine cancels it.
        /// - Returns: The reply.
        public static func credential(
            _ credential: IdentityCredential,
            serverClockOffset: Duration? = nil,
            after delay: Duration = .zero,
            ignoringCancellation: Bool = false
        ) -> Reply {
            Reply(
                answer: .result(.success(FetchedCredential(credential, serverClockOffset: serverClockOffset))),
                delay: delay, ignoresCancellation: ignoringCancellation)
        }

        /// Answers with an error.
        ///
        /// - Parameters:
        ///   - error: The error the fetch throws.
        ///   - delay: How long the answer takes on the fetcher's clock; a delay needs a fetcher created with
        ///     ``ScriptedCredentialFetcher/init(clock:script:)``.
        ///   - ignoringCancellation: Whether the fetch waits out the delay even when the engine cancels it.
        /// - Returns: The reply.
        public static func error(
            _ error: any Error,
            after delay: Duration = .zero,
            ignoringCancellation: Bool = false
        ) -> Reply {
            Reply(answer: .result(.failure(error)), delay: delay, ignoresCancellation: ignoringCancellation)
        }

        /// Holds the fetch until the test answers it with ``ScriptedCredentialFetcher/respond(to:with:)-(_,ScriptedCredentialFetcher.Reply)``
        /// and claims it first with ``ScriptedCredentialFetcher/nextRequest()``.
        ///
        /// - Parameter ignoringCancellation: Whether the fetch keeps waiting for the test's answer when the engine
        ///   cancels it; otherwise it ends with `CancellationError`.
        /// - Returns: The reply.
        public static func held(ignoringCancellation: Bool = false) -> Reply {
            Reply(answer: .held, delay: .zero, ignoresCancellation: ignoringCancellation)
        }
    }
}
