/// One operation of a pool program, over the accounts `member-0` … `member-n`, named by index.
package enum PoolOperation: Sendable, CustomStringConvertible {
    /// ``SessionPool/signIn(_:)``.
    case signIn(Int)
    /// ``SessionPool/signIn(_:timeout:)``: returns, or fails with `SIGN_IN_TIMED_OUT` once the deadline has passed.
    case signInWithin(Int, seconds: Int)
    /// ``SessionPool/signIn(_:expecting:timeout:)`` expecting the account's own user, spelled as a host might, with
    /// a deadline of `seconds` or none.
    case signInExpecting(Int, seconds: Int?)
    /// ``SessionPool/signIn(_:with:)`` with a credential the host's backend issued for the account.
    case signInWith(Int)
    case signOut(Int)
    case read(Int)
    case work(Int, seconds: Int)
    case renew(Int)
    case reject(Int)
    case answer(Int)
    case failWithRetryAfter(seconds: Int)
    /// The backend is unreachable for the next fetches waiting at it.
    case outage(Int)
    /// The host's backend pushes the account a fresh credential.
    case push(Int)
    /// The host pushes the account another account's credential, which an established account must refuse.
    case pushForeign(Int, of: Int)
    /// The service's secret rotated: every account's credential is rejected.
    case rotate
    /// This host's wall clock jumps (an NTP step, a suspended VM resuming); the monotonic clock does not.
    case jumpWallClock(seconds: Int)
    case advance(seconds: Int)
    /// Registers one more account-change hook (``SessionPool/addAccountChangeHook(_:)``): each account's changes run
    /// every hook once, one at a time, in registration order.
    case addHook
    /// Shuts the pool down gracefully (``SessionPool/shutdown(gracePeriod:)``) while a sign-in races it; the program
    /// ends here.
    case gracefulShutdown(grace: Int)
    /// Cancels the task that runs ``SessionPool/run()`` from the program's start, which shuts the pool down, while a
    /// sign-in races it; the program ends here.
    case stopRunning
    /// Two calls (sign-ins, sign-outs, work, renewals) that enter the pool together, racing each other.
    indirect case together(PoolOperation, PoolOperation)

    package var description: String {
        switch self {
        case .signIn(let account): "signIn(\(account))"
        case .signInWithin(let account, let seconds): "signIn(\(account), timeout: \(seconds) s)"
        case .signInExpecting(let account, let seconds):
            "signIn(\(account), expecting:, timeout: \(seconds.map { "\($0) s" } ?? "nil"))"
        case .signInWith(let account): "signIn(\(account), with:)"
        case .addHook: "addHook"
        case .gracefulShutdown(let grace): "shutdown(gracePeriod: \(grace) s)"
        case .stopRunning: "stopRunning"
        case .signOut(let account): "signOut(\(account))"
        case .read(let account): "read(\(account))"
        case .work(let account, let seconds): "work(\(account), \(seconds) s)"
        case .renew(let account): "renew(\(account))"
        case .reject(let account): "reject(\(account))"
        case .answer(let count): "answer(\(count))"
        case .failWithRetryAfter(let seconds): "503(Retry-After \(seconds) s)"
        case .outage(let count): "outage(\(count))"
        case .push(let account): "push(\(account))"
        case .pushForeign(let account, let other): "push(\(account), credential of \(other))"
        case .rotate: "rotate"
        case .jumpWallClock(let seconds): "jumpWallClock(\(seconds) s)"
        case .advance(let seconds): "advance(\(seconds) s)"
        case .together(let first, let second): "together(\(first), \(second))"
        }
    }

    /// Whether the operation is one call that enters the pool, which can race another (``together(_:_:)``).
    package var isCall: Bool {
        switch self {
        case .signIn, .signInWithin, .signInExpecting, .signInWith, .signOut, .work, .renew: true
        default: false
        }
    }

    /// Whether the program ends with this operation (a shutdown of its own).
    package var endsTheProgram: Bool {
        switch self {
        case .gracefulShutdown, .stopRunning: true
        default: false
        }
    }

    /// A random operation over `accounts` accounts.
    package static func random(_ random: inout PropertyRandom, accounts: Int) -> PoolOperation {
        let account = Int(random.next() % UInt64(accounts))
        // About one program of 40 operations in six ends with a shutdown of its own.
        if random.next() % 200 == 0 {
            return random.next() % 2 == 0
                ? .gracefulShutdown(grace: [0, 30, 600][Int(random.next() % 3)]) : .stopRunning
        }
        switch random.next() % 34 {
        case 0...3: return .signIn(account)
        case 4: return .signOut(account)
        case 5...6: return .read(account)
        case 7...8: return .work(account, seconds: Int(random.next() % 120) + 1)
        case 9: return .renew(account)
        case 10: return .reject(account)
        case 11...14: return .answer(Int(random.next() % 3) + 1)
        case 15: return .failWithRetryAfter(seconds: Int(random.next() % 40) + 1)
        case 16...17: return .outage(Int(random.next() % 3) + 1)
        case 18: return .push(account)
        case 19: return .pushForeign(account, of: (account + 1 + Int(random.next() % UInt64(accounts - 1))) % accounts)
        case 20: return .rotate
        case 21: return .jumpWallClock(seconds: [-3600, -600, -30, 30, 600, 3600][Int(random.next() % 6)])
        case 22...23:
            var calls: [PoolOperation] = []
            while calls.count < 2 {
                let call = Self.random(&random, accounts: accounts)
                if call.isCall { calls.append(call) }
            }
            return .together(calls[0], calls[1])
        case 24: return .signInWithin(account, seconds: [1, 10, 120][Int(random.next() % 3)])
        case 25: return .signInExpecting(account, seconds: random.next() % 2 == 0 ? nil : 30)
        case 26: return .signInWith(account)
        case 27: return .addHook
        default: return .advance(seconds: [1, 1, 5, 30, 300, 700][Int(random.next() % 6)])
        }
    }

    /// The program of `length` operations with this seed, over ``PoolModelDriver/accounts`` accounts.
    package static func program(seed: UInt64, length: Int) -> [PoolOperation] {
        var random = PropertyRandom(seed: seed)
        return (0..<length).map { _ in PoolOperation.random(&random, accounts: PoolModelDriver.accounts) }
    }
}

extension PoolOperation: Shrinkable {
    /// A shorter wait or shorter work; every other operation is only ever removed.
    package var simplerForms: [[PoolOperation]] {
        switch self {
        case .advance(let seconds) where seconds > 1: [[.advance(seconds: 1)]]
        case .work(let account, let seconds) where seconds > 1: [[.work(account, seconds: 1)]]
        case .answer(let count) where count > 1: [[.answer(1)]]
        case .outage(let count) where count > 1: [[.outage(1)]]
        case .together(let first, let second): [[first, second], [first], [second]]
        case .signInWithin(let account, _), .signInExpecting(let account, _), .signInWith(let account):
            [[.signIn(account)]]
        case .gracefulShutdown(let grace) where grace > 0: [[.gracefulShutdown(grace: 0)]]
        default: []
        }
    }
}
