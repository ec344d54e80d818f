import Synchronization

/// The self-test's toy programs: two withdrawals of 10 from an account holding 10, each checking the balance,
/// awaiting another actor, then debiting. The racy variant debits after the `await` (a check-then-act across a
/// suspension: actor reentrancy lets both checks pass, and the balance goes to -10); the correct variant debits
/// before it.
enum Toy {
    /// Continuations the deadlock check parks; never resumed.
    static let parked = Mutex<[CheckedContinuation<Void, Never>]>([])

    /// An actor that records which task visited it, in order.
    actor Recorder {
        /// The visitors, in order.
        var visits: [Int] = []

        /// Records a visit by task `number`.
        func visit(_ number: Int) {
            visits.append(number)
        }
    }

    /// Three child tasks of a group, two visiting one recorder and one another, each returning its number; throws the
    /// order in which the group delivered the results as a ``FinalState``.
    static func groupOrder() -> @Sendable () async throws -> Void {
        {
            let first = Recorder()
            let second = Recorder()
            let order = await withTaskGroup(of: Int.self) { group in
                for number in 1...3 {
                    group.addTask {
                        await (number == 2 ? second : first).visit(number)
                        return number
                    }
                }
                var order: [Int] = []
                for await number in group {
                    order.append(number)
                }
                return order
            }
            throw FinalState(description: "\(order)")
        }
    }

    /// Three tasks, each visiting two recorders; throws the final visit orders as a ``FinalState``, so that an
    /// exploration's outcomes are the orders it reached.
    static func interleavings() -> @Sendable () async throws -> Void {
        {
            let first = Recorder()
            let second = Recorder()
            await withTaskGroup(of: Void.self) { group in
                for number in 1...3 {
                    group.addTask {
                        await first.visit(number)
                        await second.visit(number)
                    }
                }
            }
            throw FinalState(description: "\(await first.visits) \(await second.visits)")
        }
    }

    /// The account; its balance must never go below zero.
    actor Account {
        /// The balance.
        var balance = 10

        /// Withdraws 10 if the balance allows it, with an `await` on `other` in the middle.
        ///
        /// - Parameters:
        ///   - other: The actor awaited between the check and the act.
        ///   - racy: Whether the debit comes after the `await` (the bug) or before it.
        func withdraw(via other: Other, racy: Bool) async {
            guard balance >= 10 else { return }
            if racy {
                await other.ping()
                balance -= 10
            } else {
                balance -= 10
                await other.ping()
            }
        }
    }

    /// The actor awaited in the middle of a withdrawal.
    actor Other {
        /// How many times it was pinged; the count keeps the optimizer from removing the hop (a release build drops
        /// a call to an empty actor method, and its hop with it).
        var pings = 0

        /// Counts a ping, on this actor.
        func ping() {
            pings += 1
        }
    }

    /// The order in which withdrawals ended.
    actor Log {
        /// The withdrawals, by number, in the order they ended.
        var order: [Int] = []

        /// Records that withdrawal `number` ended.
        func ended(_ number: Int) {
            order.append(number)
        }
    }

    /// The invariant's failure: the balance went below zero.
    struct Overdrawn: Error, CustomStringConvertible {
        /// The final balance.
        var balance: Int
        /// "balance -10".
        var description: String { "overdrawn: balance \(balance)" }
    }

    /// A program's final state, thrown on purpose so that an exploration's outcomes are its final states.
    struct FinalState: Error, CustomStringConvertible {
        /// The final balance and the order in which the two withdrawals ended.
        var description: String
    }

    /// The toy program: the first withdrawal starts, the program awaits `other` twice (so that under FIFO the first
    /// withdrawal ends before the second starts), then the second starts.
    ///
    /// - Parameters:
    ///   - racy: Whether the withdrawals debit after their `await`.
    ///   - reportFinalState: Whether to throw ``FinalState`` (the final balance and order) at the end instead of
    ///     passing, for comparing the outcomes two explorations reach.
    /// - Returns: The program.
    static func program(racy: Bool, reportFinalState: Bool = false) -> @Sendable () async throws -> Void {
        {
            let account = Account()
            let other = Other()
            let log = Log()
            await withTaskGroup(of: Void.self) { group in
                group.addTask {
                    await account.withdraw(via: other, racy: racy)
                    await log.ended(1)
                }
                await other.ping()
                await other.ping()
                group.addTask {
                    await account.withdraw(via: other, racy: racy)
                    await log.ended(2)
                }
            }
            let balance = await account.balance
            if reportFinalState {
                throw FinalState(description: "balance \(balance), ended \(await log.order)")
            }
            if balance < 0 {
                throw Overdrawn(balance: balance)
            }
        }
    }
}
