extension SessionPool {
    /// Where every member's engine reports to: the pool's event stream, its observer and the accounts' table. One per
    /// pool, which each member's ``MemberLink`` names, and through which the pool publishes its own events too.
    final class Outlets: Sendable {
        let broadcaster: PoolEventBroadcaster
        /// Receives every event of the pool, with the serial of the member it is about, before any subscriber does.
        let observer: (@Sendable (_ member: UInt64, _ event: SessionPoolEvent) -> Void)?
        let table: AccountTable

        init(
            broadcaster: PoolEventBroadcaster,
            observer: (@Sendable (_ member: UInt64, _ event: SessionPoolEvent) -> Void)?,
            table: AccountTable
        ) {
            self.broadcaster = broadcaster
            self.observer = observer
            self.table = table
        }

        /// Publishes an event of the pool: to the observer, with the serial of the member it is about (0 for the
        /// pool's own), then on the pool's stream.
        func publish(_ event: SessionPoolEvent, member: UInt64) {
            observer?(member, event)
            broadcaster.publish(event)
        }
    }

    /// What a member's engine reports under: the account, the member's serial and the account's hash, and the pool's
    /// outlets. It also tells one member from another of the same account: a member is its link.
    ///
    /// The engine's observer and its store's mirror each capture this one object and nothing else, so neither needs a
    /// closure context of its own: one allocation an account instead of two.
    final class MemberLink: Sendable {
        let account: AccountID
        /// Which member of the pool this is, counting from 1 in the order the pool made them: an account that leaves
        /// and signs in again has a new member, with an engine and events of its own.
        let serial: UInt64
        /// The account's hash in the accounts' table.
        let hash: UInt64
        let outlets: Outlets

        init(account: AccountID, serial: UInt64, hash: UInt64, outlets: Outlets) {
            self.account = account
            self.serial = serial
            self.hash = hash
            self.outlets = outlets
        }

        /// Publishes one of the engine's events on the pool's stream, naming the account.
        func publish(_ event: SessionEvent) {
            outlets.publish(SessionPoolEvent(account: account, kind: .session(event)), member: serial)
        }

        /// Copies a change of the engine's read into the member's row of the accounts' table.
        func mirror(_ reading: SessionStore.Reading) {
            outlets.table.mirror(reading, of: self)
        }
    }

    /// One account of the pool: its engine and the link the engine reports under, as the accounts' table holds it.
    struct Member: Sendable {
        let link: MemberLink
        let engine: SessionEngine

        var account: AccountID { link.account }

        /// The member's serial (``MemberLink/serial``).
        var serial: UInt64 { link.serial }

        /// Whether `other` is this member, not only a member of its account.
        func `is`(_ other: Member) -> Bool { link === other.link }
    }
}
