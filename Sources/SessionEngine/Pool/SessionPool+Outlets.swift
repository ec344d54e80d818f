extension SessionPool {
    /// Where every member's engine reports to: the pool's event stream, its observer and the accounts' table. One per
    /// pool, which the engines' ``AccountShard/Shared`` holds, and through which the pool publishes its own events too.
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

    /// One account of the pool: its slot in one of the pool's shards, which knows the member it is
    /// (``AccountShard/Slot/membership``), as the accounts' table holds it. A later member of the same account has a
    /// slot of its own.
    struct Member: Sendable {
        let slot: AccountShard.Slot

        /// Makes the member of a pool's slot, which has a membership.
        init(slot: AccountShard.Slot) {
            precondition(slot.membership != nil, "a pool's member is a slot the pool made for it")
            self.slot = slot
        }

        /// The shard the member's account lives in.
        var shard: AccountShard { slot.shard }

        /// Which member the slot is.
        var membership: AccountShard.Membership {
            // The initializer checked it; a pool's slot keeps its membership for life.
            slot.membership.unsafelyUnwrapped
        }

        var account: AccountID { membership.account }

        /// The member's serial (``AccountShard/Membership/serial``).
        var serial: UInt64 { membership.serial }

        /// Whether `other` is this member, not only a member of its account.
        func `is`(_ other: Member) -> Bool { slot === other.slot }

        /// What tells this member from every other while it lives: its slot's identity.
        var id: ObjectIdentifier { ObjectIdentifier(slot) }
    }
}
