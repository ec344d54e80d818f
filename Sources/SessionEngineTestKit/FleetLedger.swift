public import Foundation
public import SessionEngine

/// A fleet's coordination as one value: the rules an ``InProcessFleetCoordinator`` decides by, with the time passed
/// in, so that every rule is a function a test can call.
///
/// - **One budget.** At most `FleetLimits/startsPerSecond` fetch starts a second (a bucket of `FleetLimits/burst`) and
///   `FleetLimits/maximumInFlight` fetches in flight across every replica. A fetch that finds no start left is given
///   the next free one, counted now (`FleetDecision/reserved(_:retryIn:)`): the starts go in the order fetches asked,
///   and a queue costs each fetch two questions, not one each time a start frees. A reserved start not taken within
///   a second of its time is lost, and the fetch queues again. A fetch over the fetches in flight is
///   held (`FleetDecision/HoldReason/budget`) until one may end. A hold for an outage or a `Retry-After` voids every
///   reservation, so the fetches held meanwhile queue again at the fleet's rate when it ends.
/// - **One outage.** After `FleetLimits/outageThreshold` fetches in a row end as an outage, every replica's fetches are
///   held (`FleetDecision/HoldReason/outage`) but one probe every `FleetLimits/probeInterval`; a `Retry-After` holds
///   them until it has passed (`FleetDecision/HoldReason/retryAfter`), then one probe goes. The first answer of the
///   backend ends the hold.
/// - **One fetch per account** (only with `FleetLimits/sharesCredentials`). A fetch takes the account's lease; another
///   replica's fetch of the account then waits for it (`FleetDecision/awaitPeer(retryIn:)`) and is handed its
///   credential (`FleetDecision/shared(_:)`) when the replica holds a credential of the account that expires
///   earlier. A reservation stands for its account's lease until its fetch takes one: another replica's fetch of the
///   account is held (`FleetDecision/HoldReason/budget`) until then rather than queueing a second start, and the
///   reservation lapses `FleetLimits/leaseDuration` after its start if no fetch takes it. A credential is never handed out after it expires, and is dropped when its account is next asked about.
/// - **A rejection fences.** The first fetch that follows the service's rejection of a credential
///   (`FleetFetch/followsRejection`) sets the account's fence at that moment; until a day after the credentials
///   reported rejected expired, every fetch of the account is handed only a credential whose fetch started at or
///   after the fence, and waits only for such a fetch. A credential fetched before the rotation was signed with the old
///   secret, however late it expires. The fence moves only when a rejected credential expires no earlier than one
///   fetched since the fence: the secret rotated again.
///
/// Every lease lapses `FleetLimits/leaseDuration` after it was taken, so a replica that dies while it fetches holds
/// nothing for longer than that.
public struct FleetLedger: Sendable {
    /// The fleet's limits: the same as a coordinator on Redis enforces.
    public typealias Limits = FleetLimits

    private struct Lease: Sendable {
        let account: AccountID
        let startedAt: Duration
        let lapsesAt: Duration
    }

    /// A credential kept for the account's other replicas, and when its fetch started (`nil`: decided locally).
    private struct Shared: Sendable {
        let credential: IdentityCredential
        let startedAt: Duration?
    }

    /// The first report of a rejection of the account's credentials, the latest expiry of those reported since, and
    /// the earliest expiry of a credential fetched since (which carried the new secret).
    private struct Fence: Sendable {
        let at: Duration
        var rejectedExpiry: Date
        var firstSince: Date?
    }

    /// The limits the ledger decides by.
    public let limits: Limits
    private var tokens: Double
    private var refilledAt: Duration
    private var leases: [String: Lease] = [:]
    private var accountLeases: [AccountID: String] = [:]
    private var shared: [AccountID: Shared] = [:]
    private var fences: [AccountID: Fence] = [:]
    private var outagesInARow = 0
    /// Why the fleet holds, while it does.
    private var hold: FleetDecision.HoldReason?
    private var nextProbeAt = Duration.zero
    private var probe: String?
    private var leasesIssued: UInt64 = 0
    /// Counts the holds that voided every reservation; a reservation names the one it was made in.
    private var reservationEra: UInt64 = 0
    /// Per account, the start reserved for a replica's fetch of it, until that start comes.
    private var accountReservations: [AccountID: (name: String, at: Duration)] = [:]

    /// Creates a ledger with a full bucket and nothing in flight.
    ///
    /// - Parameters:
    ///   - limits: The fleet's limits.
    ///   - now: The time on the coordinator's monotonic clock.
    public init(limits: Limits, now: Duration) {
        self.limits = limits
        tokens = Double(limits.burst)
        refilledAt = now
    }

    /// Fetches in flight across the fleet, by their leases, as of the last decision (a lapsed lease counts until then).
    public var inFlight: Int { leases.count }
    /// Why the fleet holds its fetches now, if it does.
    public var holdReason: FleetDecision.HoldReason? { hold }
    /// Accounts with a shared credential kept (an expired one counts until its account is next asked about).
    public var sharedCredentials: Int { shared.count }

    /// Decides about a fetch a replica is about to start.
    ///
    /// - Parameters:
    ///   - fetch: The fetch.
    ///   - now: The time on the coordinator's monotonic clock.
    ///   - wall: The coordinator's wall clock, which credentials' expiries are compared with.
    /// - Returns: The decision.
    public mutating func decide(_ fetch: FleetFetch, now: Duration, wall: Date) -> FleetDecision {
        lapseLeases(at: now)
        if limits.sharesCredentials {
            let fence = self.fence(for: fetch, now: now, wall: wall)
            if let kept = shared[fetch.account] {
                if kept.credential.expirationDate <= wall {
                    shared[fetch.account] = nil
                } else if let held = fetch.heldExpiry, kept.credential.expirationDate > held,
                    Self.startedAfter(kept.startedAt, fence)
                {
                    return .shared(kept.credential)
                }
            }
            // A replica holding no credential of the account takes no share (it has no user to match it with), so
            // it does not wait for one either; nor for a fetch whose credential it would not be handed.
            if fetch.heldExpiry != nil, let holder = accountLeases[fetch.account], let lease = leases[holder],
                Self.startedAfter(lease.startedAt, fence)
            {
                return .awaitPeer(retryIn: min(limits.peerPollInterval, lease.lapsesAt - now))
            }
            // Another replica's fetch of the account has a start reserved: this one waits for that start rather
            // than queueing a second one, then for its fetch. Like a lease, the reservation lapses `leaseDuration`
            // after its start if its fetch never comes to take it (the replica died, the fetch was cancelled).
            if let reserved = accountReservations[fetch.account] {
                // A hold that voided it emptied the map (`beginHold`); the scripts, which keep it under the
                // account's key, check its era instead.
                if reserved.at + limits.leaseDuration <= now {
                    accountReservations[fetch.account] = nil
                } else if fetch.heldExpiry != nil, fetch.reservation?.rawValue != reserved.name, hold == nil {
                    return .hold(retryIn: max(.zero, reserved.at - now) + limits.peerPollInterval, reason: .budget)
                }
            }
        }
        if let hold {
            if probe != nil || now < nextProbeAt {
                let wait = probe != nil ? limits.probeInterval : nextProbeAt - now
                return .hold(retryIn: wait, reason: hold)
            }
            let lease = take(for: fetch.account, at: now)
            probe = lease.rawValue
            return .start(lease: lease)
        }
        refill(at: now)
        guard leases.count < limits.maximumInFlight else {
            return .hold(retryIn: .seconds(1.0 / limits.startsPerSecond), reason: .budget)
        }
        if let reservation = fetch.reservation, let at = reservedStart(reservation),
            now - at <= Self.reservationGrace
        {
            // Counted when it was reserved. One that comes later than the grace (held at the fetches in flight, a
            // replica paused) has lost its start and queues again: due starts never pile up into a burst.
            guard at <= now else { return .reserved(reservation, retryIn: at - now) }
            return .start(lease: take(for: fetch.account, at: now))
        }
        tokens -= 1
        guard tokens >= 0 else {
            // The next free start: when the bucket, refilling, has made up every start counted before it.
            let at = now + .seconds(-tokens / limits.startsPerSecond)
            let name = "reserved-\(reservationEra)-\(at.components.seconds)-\(at.components.attoseconds)"
            if limits.sharesCredentials, fetch.heldExpiry != nil {
                // The account's one holder, as the scripts keep it: a lease before it is no longer waited for.
                accountReservations[fetch.account] = (name, at)
                accountLeases[fetch.account] = nil
            }
            return .reserved(FleetReservation(name), retryIn: at - now)
        }
        return .start(lease: take(for: fetch.account, at: now))
    }

    /// When `reservation` may start, if it was made by this ledger since the last hold began.
    private func reservedStart(_ reservation: FleetReservation) -> Duration? {
        let parts = reservation.rawValue.split(separator: "-")
        guard parts.count == 4, parts[0] == "reserved", UInt64(parts[1]) == reservationEra,
            let seconds = Int64(parts[2]), let attoseconds = Int64(parts[3])
        else { return nil }
        return Duration(secondsComponent: seconds, attosecondsComponent: attoseconds)
    }

    /// Begins the fleet's hold: every reservation lapses, and the starts they counted are given back, so the fetches
    /// held meanwhile queue again at the fleet's rate when it ends.
    private mutating func beginHold(_ reason: FleetDecision.HoldReason) {
        if hold == nil {
            reservationEra += 1
            tokens = max(tokens, 0)
            accountReservations = [:]
        }
        hold = reason
    }

    /// A fetch a replica started has ended.
    ///
    /// - Parameters:
    ///   - fetch: The fetch.
    ///   - lease: Its lease; `nil` for one the replica decided on locally.
    ///   - outcome: How it ended.
    ///   - now: The time on the coordinator's monotonic clock.
    ///   - wall: The coordinator's wall clock.
    public mutating func fetchEnded(
        _ fetch: FleetFetch, lease: FleetLease?, outcome: FleetOutcome, now: Duration, wall: Date
    ) {
        // When the fetch started, if its lease was still in flight.
        var startedAt: Duration?
        if let lease, let ended = leases.removeValue(forKey: lease.rawValue) {
            startedAt = ended.startedAt
            if accountLeases[fetch.account] == lease.rawValue { accountLeases[fetch.account] = nil }
            if probe == lease.rawValue { probe = nil }
        }
        // A start reserved for a fetch that did not take it (cancelled, decided locally, given another replica's
        // credential) no longer holds the account's other replicas.
        if lease == nil, let reservation = fetch.reservation,
            accountReservations[fetch.account]?.name == reservation.rawValue
        {
            accountReservations[fetch.account] = nil
        }
        switch outcome {
        case .credential(let credential):
            backendAnswered()
            guard limits.sharesCredentials, credential.expirationDate > wall else { return }
            if let startedAt, var fence = fences[fetch.account], startedAt >= fence.at {
                fence.firstSince = min(fence.firstSince ?? credential.expirationDate, credential.expirationDate)
                fences[fetch.account] = fence
            }
            // One that expires as late replaces the kept one: it was reported later.
            if let kept = shared[fetch.account], kept.credential.expiresAt > credential.expiresAt { return }
            shared[fetch.account] = Shared(credential: credential, startedAt: startedAt)
        case .refused, .issued:
            backendAnswered()
        case .outage:
            outagesInARow += 1
            if hold != nil {
                // A failed probe waits the interval again; never less than a Retry-After still running.
                nextProbeAt = max(nextProbeAt, now + limits.probeInterval)
            } else if outagesInARow >= limits.outageThreshold {
                beginHold(.outage)
                nextProbeAt = now + limits.probeInterval
            }
        case .retryAfter(let pause):
            if hold != .outage { beginHold(.retryAfter) }
            nextProbeAt = max(nextProbeAt, now + pause)
        case .abandoned:
            break
        }
    }

    /// The fence a fetch that follows a rejection must respect; `nil` for any other fetch.
    ///
    /// The first such fetch sets it. Later ones keep it, unless the credential they report rejected expires no
    /// earlier than one fetched since the fence: that one carried the new secret, so the secret rotated again, and
    /// the fence moves to now. A fence lapses a day after the latest credential reported rejected expired (after it was
    /// reported, if it had expired by then): the queue that follows a rotation may outlast the credentials' lifetime.
    private mutating func fence(for fetch: FleetFetch, now: Duration, wall: Date) -> Duration? {
        if let fence = fences[fetch.account], fence.rejectedExpiry.addingTimeInterval(Self.fenceLinger) <= wall {
            fences[fetch.account] = nil
        }
        // A fetch that does not follow a rejection (a renewal of a replica that has not heard of it yet, a sign-in
        // naming the user) respects a fence it finds, and neither sets nor moves one.
        guard fetch.followsRejection, let held = fetch.heldExpiry else { return fences[fetch.account]?.at }
        if var fence = fences[fetch.account], fence.firstSince.map({ held < $0 }) ?? true {
            fence.rejectedExpiry = max(fence.rejectedExpiry, held)
            fences[fetch.account] = fence
            return fence.at
        }
        // A new fence, or none while the credential reported rejected has expired: the old one is gone either way.
        fences[fetch.account] =
            held < wall.addingTimeInterval(Self.longestExpiry) ? Fence(at: now, rejectedExpiry: max(held, wall)) : nil
        return now
    }

    /// How late a reserved start may still be taken: starts in any second stay within the rate's for the second and
    /// this much more, plus the bucket.
    static let reservationGrace = Duration.seconds(1)
    /// How long a fence outlasts the latest expiry reported rejected.
    static let fenceLinger: TimeInterval = 86_400
    /// The latest expiry the fleet takes a credential's for, from now: two days, as the scripts.
    static let longestExpiry: TimeInterval = 172_800

    /// Whether a fetch that started at `start` (`nil`: unknown) is after `fence` (`nil`: no fence).
    private static func startedAfter(_ start: Duration?, _ fence: Duration?) -> Bool {
        guard let fence else { return true }
        guard let start else { return false }
        return start >= fence
    }

    private mutating func backendAnswered() {
        outagesInARow = 0
        hold = nil
        probe = nil
    }

    private mutating func take(for account: AccountID, at now: Duration) -> FleetLease {
        leasesIssued += 1
        let name = "fleet-\(leasesIssued)"
        leases[name] = Lease(account: account, startedAt: now, lapsesAt: now + limits.leaseDuration)
        if limits.sharesCredentials {
            accountLeases[account] = name
            accountReservations[account] = nil
        }
        return FleetLease(name)
    }

    private mutating func lapseLeases(at now: Duration) {
        for (name, lease) in leases where lease.lapsesAt <= now {
            leases[name] = nil
            if accountLeases[lease.account] == name { accountLeases[lease.account] = nil }
            if probe == name { probe = nil }
        }
    }

    private mutating func refill(at now: Duration) {
        let elapsed = now - refilledAt
        refilledAt = now
        let seconds = Double(elapsed.components.seconds) + Double(elapsed.components.attoseconds) / 1e18
        tokens = min(Double(limits.burst), tokens + seconds * limits.startsPerSecond)
    }
}

/// A `FleetCoordinator` for replicas in one process (several pools or engines of a test, a demo, a benchmark): a
/// ``FleetLedger`` behind a lock, on a clock.
public final class InProcessFleetCoordinator: FleetCoordinator {
    private let clock: any SessionClock
    private let ledger: Locked<FleetLedger>

    /// Creates a coordinator.
    ///
    /// - Parameters:
    ///   - limits: The fleet's limits.
    ///   - clock: The coordinator's clock: the fleet's one time, whatever the replicas' clocks say.
    public init(limits: FleetLedger.Limits = FleetLedger.Limits(), clock: some SessionClock) {
        self.clock = clock
        ledger = Locked(FleetLedger(limits: limits, now: clock.uptime))
    }

    /// The ledger as it stands.
    public var state: FleetLedger { ledger.value }

    /// Decides by ``FleetLedger/decide(_:now:wall:)``.
    public func decide(_ fetch: FleetFetch) async throws -> FleetDecision {
        ledger.withLock { $0.decide(fetch, now: clock.uptime, wall: clock.now) }
    }

    /// Records by ``FleetLedger/fetchEnded(_:lease:outcome:now:wall:)``.
    public func fetchEnded(_ fetch: FleetFetch, lease: FleetLease?, outcome: FleetOutcome) async throws {
        ledger.withLock { $0.fetchEnded(fetch, lease: lease, outcome: outcome, now: clock.uptime, wall: clock.now) }
    }
}
