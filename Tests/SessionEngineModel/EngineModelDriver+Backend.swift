import Foundation
package import SessionEngine
package import SessionEngineBackend
package import SessionEngineTestKit
import Synchronization

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
        let behaviour = recovering && live ? .succeed(lifetime: 900) : request.behaviour
        let result = backend.result(for: request, behaviour: behaviour)
        if live { apply(result, of: request) }
        fetcher.answer(request.id, with: result)
    }

    /// Brings the model up to date with a live fetch's answer, as the engine handles it: installed when the pin and
    /// the clock cross-check accept it, the session ended on `BACKEND_SESSION_ENDED`.
    package func apply(_ result: Result<FetchedCredential, any Error>, of request: ModelFetcher.Request) {
        switch result {
        case .success(let fetched):
            if let offset = model.judge(fetched.credential, measured: fetched.serverClockOffset, at: clock.now) {
                model.appliedOffset = offset
                install(fetched.credential)
            }
        case .failure(let error as SessionError) where error.code == .backendSessionEnded:
            // The engine ends the session: it signs out, which is an account change.
            if let epoch = model.beginChange(to: nil, superseded: probe.heldEpochs) {
                probe.changeStarted(epoch: epoch, isCall: false)
            }
            syncBackend()
        case .failure:
            break
        }
    }

    /// Installs a credential in the model and tells the probe when it expires on this host's clock.
    package func install(_ credential: IdentityCredential) {
        model.install(credential)
        history.append(credential)
        probe.noteLocalExpiry(of: credential, at: model.localExpiry!)
        syncBackend()
    }

    /// Brings the model up to date with the answers fetches gave by themselves since the last call.
    ///
    /// A live one is handled as the driver's own answers are. One whose epoch has ended meanwhile may have been
    /// installed before the change began or dropped after it; either leaves the new epoch alone, but an install
    /// would have moved the applied clock offset, so the model takes the engine's.
    package func reconcileDeliveries() {
        for delivery in fetcher.takeDeliveries() {
            if isLive(delivery.request) {
                apply(delivery.result, of: delivery.request)
            } else if case .success = delivery.result {
                model.appliedOffset = engine.metrics.appliedClockOffset ?? .zero
            }
        }
    }

    /// Tells the backend which epoch is current and which email it pinned, for the answers fetches give by
    /// themselves.
    package func syncBackend() {
        backend.update(epoch: model.epoch, account: model.account, pinnedEmail: model.pinnedEmail)
    }
}

/// The scripted backend: its signer, how its clocks stand against this host's, and what it answers. Shared between
/// the driver and the fetches that answer by themselves.
package final class ModelBackend: Sendable {
    private struct State {
        var signer: IdentitySigner
        var clock = BackendClock.noDate
        var epoch: UInt64 = 0
        var account: AccountID?
        var pinnedEmail: String?
    }

    private let state: SanitizedMutex<State>
    private let hostClock: ManualClock
    private let probe: ModelProbe

    package init(signer: IdentitySigner, clock: ManualClock, probe: ModelProbe) {
        state = SanitizedMutex(State(signer: signer))
        hostClock = clock
        self.probe = probe
    }

    package var signer: IdentitySigner {
        get { state.withLock { $0.signer } }
        set { state.withLock { $0.signer = newValue } }
    }

    package var clock: BackendClock {
        get { state.withLock { $0.clock } }
        set { state.withLock { $0.clock = newValue } }
    }

    package func update(epoch: UInt64, account: AccountID?, pinnedEmail: String?) {
        state.withLock { state in
            state.epoch = epoch
            state.account = account
            state.pinnedEmail = pinnedEmail
        }
    }

    /// A credential for `email` living `lifetime` seconds from now on the signer's clock (negative: expired).
    package func credential(for email: String, lifetime: Int) -> IdentityCredential {
        let (signer, clock) = state.withLock { ($0.signer, $0.clock) }
        let now = Int64(hostClock.now.timeIntervalSince1970.rounded(.down)) + Int64(clock.signerOffset)
        let expiresAt = now + Int64(lifetime)
        guard lifetime > 86_400 || clock.signerOffset > 0 else {
            return try! signer.sign(email: email, properties: nil, expiresAt: expiresAt)
        }
        // The signer refuses more than 24 hours on this host's clock; a backend whose clock runs ahead does not.
        let payload = IdentityPayload.make(
            projectID: EngineModelDriver.projectID, expiresAt: expiresAt, email: email, properties: nil)
        return IdentityCredential(
            validatedEmail: email,
            expiresAt: expiresAt,
            signature: signer.signature(of: payload),
            properties: nil
        )
    }

    /// What the backend answers to `request` with `behaviour`; a credential's origin is noted before it is handed
    /// to the engine.
    package func result(for request: ModelFetcher.Request, behaviour: FetchBehaviour)
        -> Result<FetchedCredential, any Error>
    {
        let (clock, pinned) = state.withLock { state in
            (state.clock, state.epoch == request.epoch && state.account == request.account ? state.pinnedEmail : nil)
        }
        let email = pinned ?? exampleEmail(for: request.account)
        func issued(_ lifetime: Int, for email: String = email) -> Result<FetchedCredential, any Error> {
            let credential = credential(for: email, lifetime: lifetime)
            probe.noteOrigin(of: credential, epoch: request.epoch)
            return .success(FetchedCredential(credential, serverClockOffset: clock.reportedOffset))
        }
        switch behaviour {
        case .succeed(let lifetime), .succeedAfter(_, let lifetime):
            return issued(lifetime)
        case .lateSuccess:
            return issued(300)
        case .failTransiently, .hang:
            return .failure(SessionError.fetchFailed("the backend timed out"))
        case .failTerminally:
            return .failure(SessionError.backendSessionEnded())
        case .otherAccountEmail:
            return issued(300, for: EngineOperation.accounts.map(exampleEmail(for:)).first { $0 != email }!)
        case .alreadyExpired:
            return issued(-30)
        case .lifetimeOver24Hours(let extra):
            return issued(86_400 + extra)
        case .malformedSignature:
            return .failure(
                CredentialError(.invalidSignature, reason: "the signature must be 64 lowercase hexadecimal characters")
            )
        case .retryAfter(let seconds, let status):
            return .failure(
                SessionError(
                    .fetchFailed, reason: "the backend answered \(status)", isTransient: true,
                    retryAfter: .seconds(seconds))
            )
        case .onItsOwn(_, let answer):
            return result(for: request, behaviour: answer.scripted)
        }
    }
}
