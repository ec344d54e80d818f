package import SessionEngine

/// What the scripted backend does with one fetch.
package enum FetchBehaviour: Hashable, Sendable, CustomStringConvertible {
    /// Returns a credential at once.
    case succeed(lifetime: Int)
    /// Returns a credential once the monotonic clock has moved `seconds`; honours cancellation.
    case succeedAfter(seconds: Int, lifetime: Int)
    /// Returns a credential for the account it was asked for once the clock has moved `seconds`, even if it was
    /// cancelled meanwhile, like a response already on the wire.
    case lateSuccess(seconds: Int)
    /// Fails with a transient error.
    case failTransiently
    /// Fails with ``SessionError/backendSessionEnded(_:)``.
    case failTerminally
    /// Never answers; ends only when cancelled.
    case hang
    /// Returns a credential naming another account's email.
    case otherAccountEmail
    /// Returns a credential that has already expired.
    case alreadyExpired
    /// Returns a credential that lives 24 hours and `extra` seconds.
    case lifetimeOver24Hours(extra: Int)
    /// Throws a ``CredentialError``, as a decoder does for a malformed signature.
    case malformedSignature
    /// Fails with a 429 or 503 whose `Retry-After` asks for `seconds`: a transient ``SessionError`` carrying
    /// ``SessionError/retryAfter``.
    case retryAfter(seconds: Int, status: Int)
    /// The fetcher answers by itself, from a task of its own, after `yields` yields, without waiting for the driver
    /// or for the engine to be idle: the answer can land between any two of the engine's actor hops. It honours
    /// cancellation until it answers.
    case onItsOwn(yields: Int, answer: OwnAnswer)

    /// Whether the fetch answers at all without being cancelled.
    package var delay: Int? {
        switch self {
        case .succeedAfter(let seconds, _), .lateSuccess(let seconds): seconds
        case .hang: nil
        default: 0
        }
    }

    package var ignoresCancellation: Bool {
        if case .lateSuccess = self { return true }
        return false
    }

    package static let generator: Gen<FetchBehaviour> = .frequency([
        (3, Gen.element(of: [60, 300, 900, 3600]).map { .succeed(lifetime: $0) }),
        (3, Gen.element(of: [1, 5, 20, 90]).map { .succeedAfter(seconds: $0, lifetime: 300) }),
        (2, Gen.element(of: [1, 10, 45]).map { .lateSuccess(seconds: $0) }),
        (4, .constant(.failTransiently)),
        (1, .constant(.failTerminally)),
        (2, .constant(.hang)),
        (2, .constant(.otherAccountEmail)),
        (2, .constant(.alreadyExpired)),
        (2, Gen.element(of: [30, 7200]).map { .lifetimeOver24Hours(extra: $0) }),
        (2, .constant(.malformedSignature)),
        (
            2,
            Gen.element(of: [1, 30, 120, 900]).flatMap { seconds in
                Gen.element(of: [429, 503]).map { .retryAfter(seconds: seconds, status: $0) }
            }
        ),
        (
            4,
            Gen.element(of: [0, 1, 3, 10]).flatMap { yields in
                OwnAnswer.generator.map { .onItsOwn(yields: yields, answer: $0) }
            }
        ),
    ])

    package var simpler: [FetchBehaviour] {
        switch self {
        case .succeed(let lifetime): lifetime == 300 ? [] : [.succeed(lifetime: 300)]
        case .succeedAfter(let seconds, let lifetime):
            [.succeed(lifetime: lifetime)]
                + (seconds > 1 ? [.succeedAfter(seconds: seconds / 2, lifetime: lifetime)] : [])
        case .lateSuccess(let seconds): [.succeedAfter(seconds: seconds, lifetime: 300)]
        case .failTerminally, .hang, .otherAccountEmail, .alreadyExpired, .lifetimeOver24Hours, .malformedSignature:
            [.failTransiently]
        case .failTransiently: []
        case .retryAfter: [.failTransiently]
        case .onItsOwn(let yields, let answer):
            [answer.scripted] + (yields > 0 ? [.onItsOwn(yields: 0, answer: answer)] : [])
        }
    }

    package var description: String {
        switch self {
        case .succeed(let lifetime): ".succeed(lifetime: \(lifetime))"
        case .succeedAfter(let seconds, let lifetime): ".succeedAfter(seconds: \(seconds), lifetime: \(lifetime))"
        case .lateSuccess(let seconds): ".lateSuccess(seconds: \(seconds))"
        case .failTransiently: ".failTransiently"
        case .failTerminally: ".failTerminally"
        case .hang: ".hang"
        case .otherAccountEmail: ".otherAccountEmail"
        case .alreadyExpired: ".alreadyExpired"
        case .lifetimeOver24Hours(let extra): ".lifetimeOver24Hours(extra: \(extra))"
        case .malformedSignature: ".malformedSignature"
        case .retryAfter(let seconds, let status): ".retryAfter(seconds: \(seconds), status: \(status))"
        case .onItsOwn(let yields, let answer): ".onItsOwn(yields: \(yields), answer: \(answer))"
        }
    }
}

/// What a fetcher that answers on its own answers.
package enum OwnAnswer: Hashable, Sendable, CustomStringConvertible {
    case succeed(lifetime: Int)
    case failTransiently
    case retryAfter(seconds: Int)

    static let generator: Gen<OwnAnswer> = .frequency([
        (4, Gen.element(of: [60, 300, 900]).map { .succeed(lifetime: $0) }),
        (2, .constant(.failTransiently)),
        (1, Gen.element(of: [1, 30, 120]).map { .retryAfter(seconds: $0) }),
    ])

    /// The same answer, given by the driver once the engine is idle.
    package var scripted: FetchBehaviour {
        switch self {
        case .succeed(let lifetime): .succeed(lifetime: lifetime)
        case .failTransiently: .failTransiently
        case .retryAfter(let seconds): .retryAfter(seconds: seconds, status: 429)
        }
    }

    package var description: String {
        switch self {
        case .succeed(let lifetime): ".succeed(lifetime: \(lifetime))"
        case .failTransiently: ".failTransiently"
        case .retryAfter(let seconds): ".retryAfter(seconds: \(seconds))"
        }
    }
}

/// How the backend's clocks stand against this host's: the signer's (which sets `expiresAt`) and the one its
/// `Date` header reports (the offset the fetcher measures and hands to the engine).
package enum BackendClock: Hashable, Sendable, CustomStringConvertible {
    /// The signer runs on this host's time and no `Date` is reported: the start of every program.
    case noDate
    /// The signer runs on this host's time and the `Date` header agrees.
    case agrees
    /// This host's clock is off: the signer and the `Date` header both run `seconds` ahead of it.
    case skewed(seconds: Int)
    /// The `Date` header runs `seconds` ahead of this host while the signer agrees with it.
    case dateWrong(seconds: Int)
    /// The signer runs `seconds` ahead of this host and no `Date` is reported.
    case signerOnly(seconds: Int)

    /// The signer's clock minus this host's.
    package var signerOffset: Int {
        switch self {
        case .noDate, .agrees, .dateWrong: 0
        case .skewed(let seconds), .signerOnly(let seconds): seconds
        }
    }

    /// The offset the fetcher reports with each credential, if any.
    package var reportedOffset: Duration? {
        switch self {
        case .noDate, .signerOnly: nil
        case .agrees: .zero
        case .skewed(let seconds), .dateWrong(let seconds): .seconds(seconds)
        }
    }

    static let generator: Gen<BackendClock> = {
        let offsets = Gen.element(of: [-7200, -3600, -45, 45, 3600, 7200])
        return .frequency([
            (1, .constant(.noDate)), (1, .constant(.agrees)), (3, offsets.map { .skewed(seconds: $0) }),
            (1, offsets.map { .dateWrong(seconds: $0) }),
            // A signer far ahead with no `Date` makes credentials live hours on this host's clock, which only makes
            // programs longer: ahead by less than the tolerance, or behind.
            (1, Gen.element(of: [-7200, -3600, -45, 45]).map { .signerOnly(seconds: $0) }),
        ])
    }()

    package var description: String {
        switch self {
        case .noDate: ".noDate"
        case .agrees: ".agrees"
        case .skewed(let seconds): ".skewed(seconds: \(seconds))"
        case .dateWrong(let seconds): ".dateWrong(seconds: \(seconds))"
        case .signerOnly(let seconds): ".signerOnly(seconds: \(seconds))"
        }
    }
}

/// A credential the host hands over with ``SessionEngine/setIdentityCredential(_:for:)``, as its backend issued it.
package enum PushKind: Hashable, Sendable, CustomStringConvertible {
    /// The current account's, living `lifetime` seconds on the signer's clock.
    case valid(lifetime: Int)
    /// The current account's, expired already.
    case expired
    /// The current account's, living longer than 24 hours.
    case tooLong
    /// Another user's credential for the current account.
    case otherUser
    /// A credential for an account the engine is not signed in to.
    case otherAccount

    static let generator: Gen<PushKind> = .frequency([
        (5, Gen.element(of: [60, 300, 900]).map { .valid(lifetime: $0) }), (1, .constant(.expired)),
        (1, .constant(.tooLong)), (1, .constant(.otherUser)), (1, .constant(.otherAccount)),
    ])

    package var description: String {
        switch self {
        case .valid(let lifetime): ".valid(lifetime: \(lifetime))"
        case .expired: ".expired"
        case .tooLong: ".tooLong"
        case .otherUser: ".otherUser"
        case .otherAccount: ".otherAccount"
        }
    }
}

/// A call that waits for the engine and is cancelled while it waits.
package enum CancelledCall: Hashable, Sendable, CustomStringConvertible {
    /// `renew()`, parked on the fetch it asked for.
    case renew
    /// `switchAccount(to:)`, parked on the account's first credential.
    case signIn(AccountID)
    /// `withIdentity`, whose work the service rejected once: parked on the renewal the rejection asked for.
    case rejectedWork

    package var description: String {
        switch self {
        case .renew: ".renew"
        case .signIn(let account): ".signIn(\"\(account.rawValue)\")"
        case .rejectedWork: ".rejectedWork"
        }
    }
}

/// Scoped work that a program runs through ``SessionEngine/withIdentity(_:)``.
package enum WorkKind: Hashable, Sendable, CustomStringConvertible {
    /// Reads the credential and returns.
    case quick
    /// Sends the credential to the service, which verifies it; a rejection is thrown back to the engine.
    case verifying
    /// Sleeps on the clock for `seconds`, honouring cancellation.
    case long(seconds: Int)
    /// Sleeps on the clock for `seconds` and only then notices cancellation, like work that cannot stop half-way;
    /// an account change waits for it.
    case stubborn(seconds: Int)
    /// Sleeps on the clock for `seconds`; cancelled, it throws `credentialRejected`, like an HTTP client whose cut
    /// request comes back as the service's `INVALID_IDENTITY`. An account change must still fail it with
    /// `ACCOUNT_CHANGED`, never renew for it or run it again as the next account.
    case rejectedWhenCancelled(seconds: Int)

    package var description: String {
        switch self {
        case .quick: ".quick"
        case .verifying: ".verifying"
        case .long(let seconds): ".long(seconds: \(seconds))"
        case .stubborn(let seconds): ".stubborn(seconds: \(seconds))"
        case .rejectedWhenCancelled(let seconds): ".rejectedWhenCancelled(seconds: \(seconds))"
        }
    }
}

/// What runs while an account change is held inside its hooks.
package enum Partner: Hashable, Sendable, CustomStringConvertible {
    case change(AccountID?)
    case renew
    case work
    case readHeaders

    package var operation: EngineOperation {
        switch self {
        case .change(let account): account.map { .switchAccount($0) } ?? .signOut
        case .renew: .renew
        case .work: .work(.quick)
        case .readHeaders: .readHeaders(reportRejection: false)
        }
    }

    package var description: String {
        switch self {
        case .change(let account): ".change(\(account.map { "\"\($0.rawValue)\"" } ?? "nil"))"
        case .renew: ".renew"
        case .work: ".work"
        case .readHeaders: ".readHeaders"
        }
    }
}

/// One step of a program run against the engine.
package enum EngineOperation: Hashable, Sendable, CustomStringConvertible, Shrinkable {
    /// Signs in (``SessionEngine/signIn(_:)``).
    case signIn(AccountID)
    /// Switches accounts (``SessionEngine/switchAccount(to:)``).
    case switchAccount(AccountID)
    /// Signs in with a deadline (``SessionEngine/signIn(_:timeout:)``): the call returns once the account's credential
    /// is installed, or fails with `SIGN_IN_TIMED_OUT` once the deadline has passed while the sign-in goes on.
    case signInWithin(AccountID, seconds: Int)
    /// Switches accounts with a deadline (``SessionEngine/switchAccount(to:timeout:)``), as ``signInWithin(_:seconds:)``.
    case switchWithin(AccountID, seconds: Int)
    /// Signs in expecting the account's user, spelled as a host might (upper case, spaces around), with a deadline
    /// or without (``SessionEngine/signIn(_:expecting:timeout:)``): the account session is pinned to that user from
    /// the start, so a first credential naming another user is refused.
    case signInExpecting(AccountID, seconds: Int?)
    case signOut
    /// Registers one more account-change hook (``SessionEngine/addAccountChangeHook(_:)``): every later change runs
    /// every hook once, one at a time, in registration order.
    case addHook
    /// Moves the monotonic and the wall clock forward, stepping through every timer on the way.
    case advance(seconds: Int)
    /// Moves the clocks to `seconds` past the installed credential's expiry.
    case advancePastExpiry(seconds: Int)
    /// Moves only the wall clock, forwards or backwards.
    case jumpWallClock(seconds: Int)
    /// Reads the fast-path headers; when `reportRejection`, sends them to the service and reports a rejection.
    case readHeaders(reportRejection: Bool)
    case work(WorkKind)
    /// Reports that the service rejected the installed credential (or, with `older`, an earlier one).
    case reportRejection(older: Bool)
    case renew
    /// Rotates the backend's secret: the backend signs with the new one and the service accepts only it.
    case rotateSecret
    case subscribe
    case stopSubscriber(Int)
    /// Scripts the backend's answer to the next fetch.
    case nextFetch(FetchBehaviour)
    /// Begins an account change whose hooks are held until `partner` has begun.
    case stalledChange(to: AccountID?, partner: Partner)
    /// Begins two account changes back to back, without waiting for the first to be prepared.
    case concurrentChanges(AccountID?, AccountID?)
    /// Starts long scoped work and an account change at once.
    case changeDuringWork(to: AccountID?)
    /// Sets how the backend's clocks stand against this host's from now on.
    case backendClock(BackendClock)
    /// Hands the engine a credential the host got elsewhere (``SessionEngine/setIdentityCredential(_:for:)``).
    case push(PushKind)
    /// Signs in with a credential the host already holds (``SessionEngine/signIn(_:with:)``).
    case signInWith(AccountID)
    /// Starts a call that waits for the engine, and cancels it once it waits: it fails with cancellation and
    /// nothing else changes.
    case cancelled(CancelledCall)
    /// Starts long scoped work, then shuts the engine down gracefully (``SessionEngine/shutdown(gracePeriod:)``) and
    /// lets the grace period run out or the work finish; the program ends there.
    case gracefulShutdown(grace: Int)
    /// Cancels the task that runs ``SessionEngine/run()`` from the program's start, which shuts the engine down as
    /// ``SessionEngine/shutdown()`` does and makes `run()` return; the program ends there.
    case stopRunning

    package static let accounts: [AccountID] = ["alice", "bob", "carol"]

    /// One operation of a program: mostly ``ordinary``'s, and now and then a graceful shutdown or the end of `run()`,
    /// which end the program (about one program in six has one of each).
    package static let generator: Gen<EngineOperation> = .frequency([
        (198, ordinary),
        (1, Gen.element(of: [0, 5, 60, 900]).map { .gracefulShutdown(grace: $0) }),
        (1, .constant(.stopRunning)),
    ])

    /// Every operation but the graceful shutdown.
    package static let ordinary: Gen<EngineOperation> = {
        let account = Gen.element(of: accounts)
        let target = Gen<AccountID?>.frequency([(4, account.map { $0 }), (1, .constant(nil))])
        let partner = Gen<Partner>.frequency([
            (3, target.map { .change($0) }), (2, .constant(.renew)), (1, .constant(.work)),
            (1, .constant(.readHeaders)),
        ])
        let deadline = Gen.element(of: [1, 10, 120])
        let work = Gen<WorkKind>.frequency([
            (2, .constant(.quick)), (2, .constant(.verifying)),
            (2, Gen.element(of: [5, 60, 600]).map { .long(seconds: $0) }),
            (1, Gen.element(of: [2, 30]).map { .stubborn(seconds: $0) }),
            (1, Gen.element(of: [60, 600]).map { .rejectedWhenCancelled(seconds: $0) }),
        ])
        return .frequency([
            (6, account.map { .signIn($0) }),
            (4, account.map { .switchAccount($0) }),
            (2, account.flatMap { account in deadline.map { .signInWithin(account, seconds: $0) } }),
            (2, account.flatMap { account in deadline.map { .switchWithin(account, seconds: $0) } }),
            (
                2,
                account.flatMap { account in
                    Gen<Int?>.frequency([(1, .constant(nil)), (1, deadline.map { $0 })]).map {
                        .signInExpecting(account, seconds: $0)
                    }
                }
            ),
            (2, .constant(.signOut)),
            (1, .constant(.addHook)),
            (8, Gen.element(of: [1, 3, 10, 30, 60]).map { .advance(seconds: $0) }),
            (3, Gen.element(of: [0, 1, 20]).map { .advancePastExpiry(seconds: $0) }),
            (2, Gen.element(of: [-7200, -300, -10, 10, 300, 7200]).map { .jumpWallClock(seconds: $0) }),
            (6, Gen.bool.map { .readHeaders(reportRejection: $0) }),
            (5, work.map { .work($0) }),
            (3, Gen.frequency([(4, .constant(false)), (1, .constant(true))]).map { .reportRejection(older: $0) }),
            (3, .constant(.renew)),
            (2, .constant(.rotateSecret)),
            (2, .constant(.subscribe)),
            (1, Gen.int(in: 0...2).map { .stopSubscriber($0) }),
            (10, FetchBehaviour.generator.map { .nextFetch($0) }),
            (2, target.flatMap { to in partner.map { .stalledChange(to: to, partner: $0) } }),
            (2, target.flatMap { first in target.map { .concurrentChanges(first, $0) } }),
            (2, target.map { .changeDuringWork(to: $0) }),
            (2, BackendClock.generator.map { .backendClock($0) }),
            (3, PushKind.generator.map { .push($0) }),
            (1, account.map { .signInWith($0) }),
            (2, .constant(.cancelled(.renew))),
            (1, account.map { .cancelled(.signIn($0)) }),
            (1, .constant(.cancelled(.rejectedWork))),
        ])
    }()

    package static func change(to account: AccountID?) -> EngineOperation {
        account.map { .switchAccount($0) } ?? .signOut
    }

    package var simplerForms: [[EngineOperation]] {
        switch self {
        case .signIn(let account):
            account == "alice" ? [] : [[.signIn("alice")]]
        case .switchAccount(let account):
            [[.signIn(account)]]
        case .signInWithin(let account, _), .signInExpecting(let account, _):
            [[.signIn(account)]]
        case .switchWithin(let account, _):
            [[.switchAccount(account)]]
        case .advance(let seconds):
            seconds > 1 ? [[.advance(seconds: seconds / 2)]] : []
        case .advancePastExpiry(let seconds):
            seconds > 0 ? [[.advancePastExpiry(seconds: 0)]] : []
        case .jumpWallClock(let seconds):
            abs(seconds) > 1 ? [[.jumpWallClock(seconds: seconds / 10)]] : []
        case .readHeaders(let report):
            report ? [[.readHeaders(reportRejection: false)]] : []
        case .work(.stubborn(let seconds)):
            [[.work(.long(seconds: seconds))]]
        case .work(let kind):
            kind == .quick ? [] : [[.work(.quick)]]
        case .reportRejection(let older):
            older ? [[.reportRejection(older: false)]] : []
        case .stopSubscriber(let index):
            index > 0 ? [[.stopSubscriber(0)]] : []
        case .nextFetch(let behaviour):
            behaviour.simpler.map { [.nextFetch($0)] }
        case .stalledChange(let to, let partner):
            [[Self.change(to: to)], [Self.change(to: to), partner.operation]]
        case .concurrentChanges(let first, let second):
            [[Self.change(to: second)], [Self.change(to: first), Self.change(to: second)]]
        case .changeDuringWork(let to):
            [[Self.change(to: to)], [.work(.long(seconds: 600)), Self.change(to: to)]]
        case .backendClock(let setup):
            setup == .noDate ? [] : [[.backendClock(.noDate)]]
        case .push(let kind):
            kind == .valid(lifetime: 300) ? [] : [[.push(.valid(lifetime: 300))]]
        case .signInWith(let account):
            [[.signIn(account)]]
        case .cancelled(.renew):
            [[.renew]]
        case .cancelled(.signIn(let account)):
            [[.signIn(account)], [.cancelled(.renew)]]
        case .cancelled(.rejectedWork):
            [[.cancelled(.renew)], [.reportRejection(older: false)]]
        case .gracefulShutdown(let grace):
            grace > 0 ? [[.gracefulShutdown(grace: 0)]] : []
        case .signOut, .renew, .rotateSecret, .subscribe, .addHook, .stopRunning:
            []
        }
    }

    package var description: String {
        func quoted(_ account: AccountID?) -> String { account.map { "\"\($0.rawValue)\"" } ?? "nil" }
        switch self {
        case .signIn(let account): return ".signIn(\(quoted(account)))"
        case .switchAccount(let account): return ".switchAccount(\(quoted(account)))"
        case .signInWithin(let account, let seconds): return ".signInWithin(\(quoted(account)), seconds: \(seconds))"
        case .switchWithin(let account, let seconds): return ".switchWithin(\(quoted(account)), seconds: \(seconds))"
        case .signInExpecting(let account, let seconds):
            return ".signInExpecting(\(quoted(account)), seconds: \(seconds.map(String.init) ?? "nil"))"
        case .signOut: return ".signOut"
        case .addHook: return ".addHook"
        case .stopRunning: return ".stopRunning"
        case .advance(let seconds): return ".advance(seconds: \(seconds))"
        case .advancePastExpiry(let seconds): return ".advancePastExpiry(seconds: \(seconds))"
        case .jumpWallClock(let seconds): return ".jumpWallClock(seconds: \(seconds))"
        case .readHeaders(let report): return ".readHeaders(reportRejection: \(report))"
        case .work(let kind): return ".work(\(kind))"
        case .reportRejection(let older): return ".reportRejection(older: \(older))"
        case .renew: return ".renew"
        case .rotateSecret: return ".rotateSecret"
        case .subscribe: return ".subscribe"
        case .stopSubscriber(let index): return ".stopSubscriber(\(index))"
        case .nextFetch(let behaviour): return ".nextFetch(\(behaviour))"
        case .stalledChange(let to, let partner): return ".stalledChange(to: \(quoted(to)), partner: \(partner))"
        case .concurrentChanges(let first, let second): return ".concurrentChanges(\(quoted(first)), \(quoted(second)))"
        case .changeDuringWork(let to): return ".changeDuringWork(to: \(quoted(to)))"
        case .backendClock(let setup): return ".backendClock(\(setup))"
        case .push(let kind): return ".push(\(kind))"
        case .signInWith(let account): return ".signInWith(\(quoted(account)))"
        case .cancelled(let call): return ".cancelled(\(call))"
        case .gracefulShutdown(let grace): return ".gracefulShutdown(grace: \(grace))"
        }
    }
}
