public import SessionEngine
public import SessionEngineBackend
import Synchronization

/// A stand-in for the service: it checks identity headers with `IdentityVerifier` and keeps each account's
/// private reports and chat, answering only to the account the verified credential names.
///
/// Hosts' tests use it to prove the contract's Verify steps end to end: an identified action is accepted with a real
/// credential and refused with a changed or expired one, another account cannot read the previous account's private
/// report or chat, and a secret rotation refuses every earlier credential. It logs every request with the email the
/// headers claim, so a test can prove that nothing of a previous account reached the service after a switch.
public final class ServiceStandIn: Sendable {
    /// What a request asks for.
    public enum Operation: Sendable {
        /// An identified community action, such as a vote.
        case submitAction(String)
        /// Files a private report.
        case postReport(String)
        /// Reads one private report by its ID.
        case readReport(Int)
        /// Sends a message to the account's chat.
        case postChat(String)
        /// Reads the account's private reports and chat.
        case readInbox
    }

    /// The service's answer.
    public enum Reply: Sendable, Hashable {
        /// The request was accepted for the account with this email.
        case accepted(email: String)
        /// The report was filed under this ID.
        case reportPosted(id: Int)
        /// The report's text.
        case report(String)
        /// No report of this account has the ID: another account's report reads the same.
        case notFound
        /// The account's reports and chat.
        case inbox(reports: [Int], chat: [String])
        /// `INVALID_IDENTITY`, with the check that failed.
        case refused(IdentityVerificationFailure.Check)
    }

    /// One request as the service logged it.
    public struct LoggedRequest: Sendable, Hashable {
        /// The request's position, from 1.
        public let sequence: Int
        /// The email the identity headers claim, whether or not they verified.
        public let claimedEmail: String?
        /// Whether the headers verified.
        public let accepted: Bool
    }

    private struct Report {
        let owner: String
        let text: String
    }

    private struct State {
        var verifier: IdentityVerifier
        var reports: [Int: Report] = [:]
        var nextReport = 1
        var chat: [String: [String]] = [:]
        var log: [LoggedRequest] = []
    }

    private let state: SanitizedMutex<State>

    /// Creates a service that accepts credentials signed with `secret` for `projectID`.
    ///
    /// - Parameters:
    ///   - projectID: The project the credentials must name.
    ///   - secret: The identity secret.
    ///   - clock: The clock that decides expiry.
    /// - Throws: `CredentialError` for an invalid project ID or an empty secret.
    public init(projectID: String, secret: String, clock: any SessionClock) throws {
        state = SanitizedMutex(
            State(verifier: try IdentityVerifier(projectID: projectID, secret: secret, clock: clock)))
    }

    /// How many requests the service has received.
    public var requestCount: Int { state.withLock { $0.log.count } }

    /// The requests received after the `sequence`th.
    ///
    /// - Parameter sequence: How many requests to skip; 0 for all.
    /// - Returns: The requests, oldest first.
    public func requests(after sequence: Int = 0) -> [LoggedRequest] {
        state.withLock { Array($0.log.dropFirst(sequence)) }
    }

    /// Rotates the secret: every credential signed before fails from now on.
    ///
    /// - Parameter secret: The new secret.
    /// - Throws: `CredentialError` for an empty secret.
    public func rotateSecret(to secret: String) throws {
        try state.withLock { state throws in try state.verifier.rotateSecret(to: secret) }
    }

    /// Handles one identified request.
    ///
    /// - Parameters:
    ///   - operation: What the request asks for.
    ///   - headers: The request's identity headers.
    /// - Returns: The answer; ``Reply/refused(_:)`` with the failed check when the headers do not verify.
    public func handle(_ operation: Operation, headers: IdentityHeaders) -> Reply {
        state.withLock { state in
            let claimed = (try? headers.credential())?.email ?? headers[IdentityHeaders.emailName]
            let verification = state.verifier.verify(headers: headers)
            state.log.append(
                LoggedRequest(sequence: state.log.count + 1, claimedEmail: claimed, accepted: verification.isValid)
            )
            guard case .valid(let credential) = verification else {
                if case .invalid(let failure) = verification { return .refused(failure.check) }
                return .refused(.malformed)
            }
            let email = credential.email
            switch operation {
            case .submitAction:
                return .accepted(email: email)
            case .postReport(let text):
                let id = state.nextReport
                state.nextReport += 1
                state.reports[id] = Report(owner: email, text: text)
                return .reportPosted(id: id)
            case .readReport(let id):
                // Another account's report is indistinguishable from a missing one.
                guard let report = state.reports[id], report.owner == email else { return .notFound }
                return .report(report.text)
            case .postChat(let text):
                state.chat[email, default: []].append(text)
                return .accepted(email: email)
            case .readInbox:
                let reports = state.reports.filter { $0.value.owner == email }.keys.sorted()
                return .inbox(reports: reports, chat: state.chat[email] ?? [])
            }
        }
    }
}
