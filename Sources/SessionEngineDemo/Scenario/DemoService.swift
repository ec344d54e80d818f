import SessionEngine
import Synchronization

/// A stand-in for the service: it checks identity headers with ``IdentityVerifier`` and keeps each account's
/// private reports and chat, answering only to the account the verified credential names.
final class DemoService: Sendable {
    /// What a request asks for.
    enum Operation: Sendable {
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
    enum Reply: Sendable, Hashable {
        case accepted(email: String)
        case reportPosted(id: Int)
        case report(String)
        case notFound
        case inbox(reports: [Int], chat: [String])
        /// `INVALID_IDENTITY`, with the check that failed.
        case refused(IdentityVerificationFailure.Check)
    }

    /// One request as the service logged it.
    struct LoggedRequest: Sendable {
        let sequence: Int
        /// The email the identity headers claim, whether or not they verified.
        let claimedEmail: String?
        let accepted: Bool
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

    private let state: Mutex<State>

    init(projectID: String, secret: String, clock: any SessionClock) throws {
        state = Mutex(State(verifier: try IdentityVerifier(projectID: projectID, secret: secret, clock: clock)))
    }

    /// How many requests the service has received.
    var requestCount: Int { state.withLock { $0.log.count } }

    /// The requests received after the `sequence`th.
    func requests(after sequence: Int) -> [LoggedRequest] {
        state.withLock { Array($0.log.dropFirst(sequence)) }
    }

    /// Rotates the secret: every credential signed before fails from now on.
    func rotateSecret(to secret: String) throws {
        try state.withLock { state throws in try state.verifier.rotateSecret(to: secret) }
    }

    /// Handles one identified request.
    func handle(_ operation: Operation, headers: IdentityHeaders) -> Reply {
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
