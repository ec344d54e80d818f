import Foundation
package import SessionEngine
import SessionEngineBackend
import SessionEngineTestKit

/// The scripted backend's side of the driver: which fetches are live, when each is due, and what each answers.
extension EngineModelDriver {

    package func isLive(_ request: ModelFetcher.Request) -> Bool {
        !request.cancelled && request.epoch == model.epoch && request.account == model.account
            && !probe.shuttingDown
    }

    /// Answers the live fetches that are due; returns whether it answered any.
    package func answerLiveRequests() -> Bool {
        var answered = false
        for request in fetcher.pendingRequests where isLive(request) {
            if recovering || request.due.map({ $0 <= clock.uptime }) == true {
                answer(request)
                answered = true
            }
        }
        return answered
    }

    /// A fetch of an earlier epoch, or a cancelled one, whose answer is due.
    package var dueStaleRequest: ModelFetcher.Request? {
        fetcher.pendingRequests.first { !isLive($0) && $0.due.map { $0 <= clock.uptime } == true }
    }

    /// When the next scripted answer is due.
    package var nextDue: Duration? {
        fetcher.pendingRequests.compactMap(\.due).filter { $0 > clock.uptime }.min()
    }

    package func answer(_ request: ModelFetcher.Request) {
        let live = isLive(request)
        let now = clock.now
        let nowSeconds = Int64(now.timeIntervalSince1970.rounded(.down))
        let ownEmail = Self.email(for: request.account)
        let email = live ? model.pinnedEmail ?? ownEmail : ownEmail
        let behaviour = recovering && live ? .succeed(lifetime: 900) : request.behaviour
        let result: Result<IdentityCredential, any Error>
        switch behaviour {
        case .succeed(let lifetime), .succeedAfter(_, let lifetime):
            result = .success(sign(email, expiresAt: nowSeconds + Int64(lifetime)))
        case .lateSuccess:
            result = .success(sign(email, expiresAt: nowSeconds + 300))
        case .failTransiently, .hang:
            result = .failure(SessionError.fetchFailed("the backend timed out"))
        case .failTerminally:
            result = .failure(SessionError.backendSessionEnded())
        case .otherAccountEmail:
            let other = EngineOperation.accounts.map(Self.email(for:)).first { $0 != email }!
            result = .success(sign(other, expiresAt: nowSeconds + 300))
        case .alreadyExpired:
            result = .success(sign(email, expiresAt: nowSeconds - 30))
        case .lifetimeOver24Hours(let extra):
            let expiresAt = nowSeconds + 86_400 + Int64(extra)
            let payload = IdentityPayload.make(
                projectID: Self.projectID, expiresAt: expiresAt, email: email, properties: nil)
            result = .success(
                IdentityCredential(
                    validatedEmail: email,
                    expiresAt: expiresAt,
                    signature: signer.signature(of: payload),
                    properties: nil
                )
            )
        case .malformedSignature:
            result = .failure(
                CredentialError(.invalidSignature, reason: "the signature must be 64 lowercase hexadecimal characters")
            )
        }
        if case .success(let credential) = result { probe.noteOrigin(of: credential, epoch: request.epoch) }
        if live {
            switch result {
            case .success(let credential):
                if model.accepts(credential, at: now) {
                    model.install(credential)
                    history.append(credential)
                    probe.noteInstalled(epoch: model.epoch)
                }
            case .failure(let error as SessionError) where error.code == .backendSessionEnded:
                // The engine ends the session: it signs out, which is an account change.
                let held = probe.changesHeldByWork
                if let epoch = model.beginChange(to: nil, superseding: held.calls + held.tasks) {
                    probe.changeStarted(epoch: epoch, isCall: false)
                }
            case .failure:
                break
            }
        }
        fetcher.answer(request.id, with: result)
    }

    package func sign(_ email: String, expiresAt: Int64) -> IdentityCredential {
        try! signer.sign(email: email, properties: nil, expiresAt: expiresAt)
    }
}
