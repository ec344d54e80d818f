import Foundation
import SessionEngineModel

@testable import SessionEngine

/// One input to the machine, as its owner would deliver it.
enum MachineInput: Hashable, Sendable, CustomStringConvertible, Shrinkable {
    case signIn(AccountID)
    case signOut
    case prepare
    case prepareStale
    case succeed(lifetime: Int)
    case succeedExpired
    case succeedTooLong
    case succeedOtherEmail
    case failTransiently
    case failTerminally
    case staleResult
    case fireTimer
    case advanceToTimer
    case fireStaleTimer
    case renew
    case rejectInstalled
    case rejectOlder
    case advance(seconds: Int)
    case jumpWall(seconds: Int)
    case shutdown
    /// A transient failure whose backend asked for a delay (Retry-After).
    case failWithRetryAfter(seconds: Int)
    /// A credential valid on a backend clock `offset` seconds from the local one, with that offset reported.
    case succeedSkewed(offset: Int)
    /// The host hands over a credential for the current account.
    case push(lifetime: Int)
    /// The host hands over an already expired credential for the current account.
    case pushExpired
    /// The host hands over a credential for an account the engine is not signed in to.
    case pushForOther
    /// The host signs in with a credential it already holds.
    case signInWith(AccountID)
    /// A graceful shutdown begins.
    case gracefulShutdown
    /// The owner reports the grace period's end (work finished or time ran out).
    case graceEnded

    /// Every input once, with representative values, for the exhaustive check.
    static let alphabet: [MachineInput] = [
        .signIn("alice"), .signIn("bob"), .signOut, .prepare, .prepareStale, .succeed(lifetime: 900),
        .succeed(lifetime: 30), .succeedExpired, .succeedTooLong, .succeedOtherEmail, .failTransiently,
        .failTerminally, .staleResult, .fireTimer, .advanceToTimer, .fireStaleTimer, .renew, .rejectInstalled,
        .rejectOlder, .advance(seconds: 1), .advance(seconds: 600), .jumpWall(seconds: 7200),
        .jumpWall(seconds: -7200), .shutdown, .failWithRetryAfter(seconds: 120), .succeedSkewed(offset: -3600),
        .succeedSkewed(offset: 3600), .push(lifetime: 900), .pushExpired, .pushForOther, .signInWith("alice"),
        .signInWith("bob"), .gracefulShutdown, .graceEnded,
    ]

    static let generator: Gen<MachineInput> = .frequency([
        (4, Gen.element(of: ["alice", "bob", "carol"]).map { .signIn($0) }),
        (1, .constant(.signOut)),
        (5, .constant(.prepare)),
        (1, .constant(.prepareStale)),
        (6, Gen.element(of: [30, 300, 900, 3600]).map { .succeed(lifetime: $0) }),
        (1, .constant(.succeedExpired)),
        (1, .constant(.succeedTooLong)),
        (1, .constant(.succeedOtherEmail)),
        (3, .constant(.failTransiently)),
        (1, .constant(.failTerminally)),
        (1, .constant(.staleResult)),
        (2, .constant(.fireTimer)),
        (5, .constant(.advanceToTimer)),
        (1, .constant(.fireStaleTimer)),
        (3, .constant(.renew)),
        (3, .constant(.rejectInstalled)),
        (1, .constant(.rejectOlder)),
        (3, Gen.element(of: [1, 4, 30, 600]).map { .advance(seconds: $0) }),
        (1, Gen.element(of: [-7200, -60, 60, 7200]).map { .jumpWall(seconds: $0) }),
        (1, .constant(.shutdown)),
        (2, Gen.element(of: [1, 30, 120, 3600]).map { .failWithRetryAfter(seconds: $0) }),
        (2, Gen.element(of: [-3600, -30, 30, 3600]).map { .succeedSkewed(offset: $0) }),
        (2, Gen.element(of: [300, 900]).map { .push(lifetime: $0) }),
        (1, .constant(.pushExpired)),
        (1, .constant(.pushForOther)),
        (1, Gen.element(of: ["alice", "bob"]).map { .signInWith($0) }),
        (1, .constant(.gracefulShutdown)),
        (1, .constant(.graceEnded)),
    ])

    var isStale: Bool {
        switch self {
        case .prepareStale, .staleResult, .fireStaleTimer, .rejectOlder, .pushForOther: true
        default: false
        }
    }

    var simplerForms: [[MachineInput]] {
        switch self {
        case .signIn(let account) where account != "alice": [[.signIn("alice")]]
        case .succeed(let lifetime) where lifetime != 900: [[.succeed(lifetime: 900)]]
        case .succeedExpired, .succeedTooLong, .succeedOtherEmail, .failTerminally: [[.failTransiently]]
        case .shutdown, .gracefulShutdown: [[.signOut]]
        case .failWithRetryAfter: [[.failTransiently]]
        case .succeedSkewed: [[.succeed(lifetime: 900)]]
        case .push(let lifetime) where lifetime != 900: [[.push(lifetime: 900)]]
        case .pushExpired: [[.push(lifetime: 900)]]
        case .signInWith(let account): [[.signIn(account)]]
        case .advance(let seconds) where seconds > 1: [[.advance(seconds: seconds / 2)]]
        case .jumpWall(let seconds) where abs(seconds) > 1: [[.jumpWall(seconds: seconds / 2)]]
        default: []
        }
    }

    var description: String {
        switch self {
        case .signIn(let account): ".signIn(\"\(account.rawValue)\")"
        case .succeed(let lifetime): ".succeed(lifetime: \(lifetime))"
        case .advance(let seconds): ".advance(seconds: \(seconds))"
        case .jumpWall(let seconds): ".jumpWall(seconds: \(seconds))"
        case .signOut: ".signOut"
        case .prepare: ".prepare"
        case .prepareStale: ".prepareStale"
        case .succeedExpired: ".succeedExpired"
        case .succeedTooLong: ".succeedTooLong"
        case .succeedOtherEmail: ".succeedOtherEmail"
        case .failTransiently: ".failTransiently"
        case .failTerminally: ".failTerminally"
        case .staleResult: ".staleResult"
        case .fireTimer: ".fireTimer"
        case .advanceToTimer: ".advanceToTimer"
        case .fireStaleTimer: ".fireStaleTimer"
        case .renew: ".renew"
        case .rejectInstalled: ".rejectInstalled"
        case .rejectOlder: ".rejectOlder"
        case .shutdown: ".shutdown"
        case .failWithRetryAfter(let seconds): ".failWithRetryAfter(seconds: \(seconds))"
        case .succeedSkewed(let offset): ".succeedSkewed(offset: \(offset))"
        case .push(let lifetime): ".push(lifetime: \(lifetime))"
        case .pushExpired: ".pushExpired"
        case .pushForOther: ".pushForOther"
        case .signInWith(let account): ".signInWith(\"\(account.rawValue)\")"
        case .gracefulShutdown: ".gracefulShutdown"
        case .graceEnded: ".graceEnded"
        }
    }
}

extension MachineInput {
    /// Whether the input hands the machine a credential the host holds.
    var isPush: Bool {
        switch self {
        case .push, .pushExpired, .pushForOther, .signInWith: true
        default: false
        }
    }
}
