import SessionEngine
import SessionEngineTestKit

extension Scenario {
    /// An account's poll: scoped work that reads the account's private reports and chat every five minutes.
    final class Poll: Sendable {
        let account: AccountID
        /// The call that runs the poll; it returns the code of the error that ended the poll.
        let task: Task<SessionError.Code?, any Error>
        let counters: Locked<(rounds: Int, blockedLocally: Int)>

        init(
            account: AccountID, task: Task<SessionError.Code?, any Error>,
            counters: Locked<(rounds: Int, blockedLocally: Int)>
        ) {
            self.account = account
            self.task = task
            self.counters = counters
        }

        /// Waits for the poll to end and returns the code of the error that ended it.
        func end() async -> SessionError.Code? {
            (try? await task.value) ?? nil
        }
    }
}
