public import Foundation

/// Coordinates the fetches of replicas of one process (several daemons, or several pools) toward one backend: one
/// budget, one outage and, where credentials may be shared, one fetch per account per renewal across them.
///
/// An engine or a pool given a coordinator (``FleetCoordination``) asks it, for every fetch its own budget has let go,
/// what to do (``decide(_:)``), and tells it how every fetch it started ended (``fetchEnded(_:lease:outcome:)``).
/// Coordination is a load optimisation and never costs an identity: every call has a deadline
/// (``FleetCoordination/callTimeout``), and an error or a call past it means that the replica decides locally, as
/// it would without a coordinator (it fails open). No rule of the engine is relaxed by it: a shared credential is
/// installed through the same validation as a fetched one, and only if it is the same user's and expires later
/// than the one the account holds.
///
/// Implementations must be safe to call from many tasks at once and should answer in well under the deadline. The
/// requests name accounts and times; an outcome carries a credential only when the replica shares its credentials
/// (``FleetCoordination/sharesCredentials``), and then the coordinator holds bearer credentials and must keep them as
/// such (the DocC article *Many replicas*).
public protocol FleetCoordinator: Sendable {
    /// What the replica should do about a fetch it is about to start.
    ///
    /// - Parameter fetch: The fetch: its account, how urgently it is needed, and the expiry of the credential the
    ///   replica holds for the account.
    /// - Returns: The fleet's decision.
    /// - Throws: Any error; the replica then decides locally.
    func decide(_ fetch: FleetFetch) async throws -> FleetDecision

    /// A fetch the replica started has ended: one the coordinator admitted with `lease`, or one the replica started on
    /// its own when the coordinator did not answer (`lease` is `nil`).
    ///
    /// A fetch that holds a reserved start (``FleetFetch/reservation``) and does not go to the backend (it was
    /// cancelled, or took another replica's credential) is reported too, `abandoned` and without a lease: the
    /// reservation then no longer holds the account's other replicas.
    ///
    /// - Parameters:
    ///   - fetch: The fetch, as ``decide(_:)`` was asked about it.
    ///   - lease: The lease of the ``FleetDecision/start(lease:)`` that admitted it; `nil` for a fetch the replica
    ///     decided on locally.
    ///   - outcome: How it ended.
    /// - Throws: Any error; the replica goes on, and counts it as a call that failed.
    func fetchEnded(_ fetch: FleetFetch, lease: FleetLease?, outcome: FleetOutcome) async throws
}

/// A fetch a replica is about to start, as its ``FleetCoordinator`` is asked about it.
public struct FleetFetch: Sendable, Hashable, CustomStringConvertible {
    /// The account the fetch is for.
    public let account: AccountID
    /// Whether the account needs the fetch now (a caller waits for it, or it holds no usable credential), rather than
    /// renewing a credential that is still usable.
    public let isNeeded: Bool
    /// When the credential the replica holds for the account expires, by its `expiresAt`; `nil` when it holds none
    /// and takes no shared credential (a sign-in that names no user). A sign-in that names the user holds none yet
    /// and gives the time it asks: any credential that has not expired will do. A credential shared with the replica
    /// must expire later than this.
    public let heldExpiry: Date?
    /// Whether the service rejected the held credential (a secret rotation): a credential shared with the replica
    /// must then come from a fetch that started after the fleet first heard of that rejection, so that it was signed
    /// with the new secret. A credential fetched before it may expire later and still be signed with the old one.
    public let followsRejection: Bool
    /// The start the fleet's budget reserved for the fetch when it last asked (``FleetDecision/reserved(_:retryIn:)``),
    /// if it did: once its time has come the fetch starts without waiting its turn again.
    public var reservation: FleetReservation?

    /// Creates a fetch.
    ///
    /// - Parameters:
    ///   - account: The account the fetch is for.
    ///   - isNeeded: Whether the account needs it now.
    ///   - heldExpiry: The expiry of the credential the replica holds for the account.
    ///   - followsRejection: Whether the service rejected the held credential.
    ///   - reservation: The start the fleet's budget reserved for the fetch, if it did.
    public init(
        account: AccountID, isNeeded: Bool, heldExpiry: Date?, followsRejection: Bool = false,
        reservation: FleetReservation? = nil
    ) {
        self.account = account
        self.isNeeded = isNeeded
        self.heldExpiry = heldExpiry
        self.followsRejection = followsRejection && heldExpiry != nil
        self.reservation = reservation
    }

    /// The account, the urgency and the held credential's expiry; never a credential.
    public var description: String {
        var expiry = heldExpiry.map { "holding one until \(Int($0.timeIntervalSince1970))" } ?? "holding none"
        if followsRejection { expiry += ", rejected" }
        if reservation != nil { expiry += ", a start reserved" }
        return "fetch for \(account) (\(isNeeded ? "needed" : "proactive"), \(expiry))"
    }
}

/// Names a fetch the coordinator admitted, so that its end releases what it took (a place in the fleet's budget,
/// the account's lease).
public struct FleetLease: Sendable, Hashable, CustomStringConvertible {
    /// The coordinator's name for the fetch.
    public let rawValue: String

    /// Creates a lease.
    ///
    /// - Parameter rawValue: The coordinator's name for the fetch.
    public init(_ rawValue: String) {
        self.rawValue = rawValue
    }

    /// The lease's name.
    public var description: String { rawValue }
}

/// A start the fleet's budget counted for one fetch ahead of its time: the coordinator's name for it.
///
/// The budget hands out its starts in the order fetches ask for them: a fetch that finds no start left is given the
/// next free one (``FleetDecision/reserved(_:retryIn:)``) and asks again when it comes, carrying the reservation
/// (``FleetFetch/reservation``), so that a queue of fetches costs the coordinator about two questions each rather than
/// one every time a start frees. A reservation lapses when the fleet's hold begins (an outage, a `Retry-After`); one
/// its fetch does not take is reported abandoned (``FleetCoordinator/fetchEnded(_:lease:outcome:)``).
public struct FleetReservation: Sendable, Hashable, CustomStringConvertible {
    /// The coordinator's name for the reservation.
    public let rawValue: String

    /// Creates a reservation.
    ///
    /// - Parameter rawValue: The coordinator's name for it.
    public init(_ rawValue: String) {
        self.rawValue = rawValue
    }

    /// The reservation's name.
    public var description: String { rawValue }
}

/// What a replica should do about a fetch, as its ``FleetCoordinator`` decides.
public enum FleetDecision: Sendable, Hashable {
    /// Why the fleet holds a fetch.
    public enum HoldReason: String, Sendable, Hashable {
        /// The fleet's budget has no start left now (its rate, or its fetches in flight).
        case budget
        /// The fleet's fetches fail as an outage; another replica probes the backend.
        case outage
        /// The backend asked the fleet to wait (`Retry-After`).
        case retryAfter
    }

    /// Fetch now; report its end with `lease`.
    case start(lease: FleetLease)
    /// Another replica is fetching for the account; ask again after `retryIn`, when its credential may be shared.
    /// The replica waits for a peer at most ``FleetCoordination/maximumPeerWait`` in all, then fetches itself.
    case awaitPeer(retryIn: Duration)
    /// A credential another replica fetched for the account: installed through the engine's own validation when it is
    /// the held credential's user's and expires later than the held one; the replica fetches itself otherwise.
    case shared(IdentityCredential)
    /// The fleet holds fetches for now; ask again after `retryIn` (at most ``SessionConfiguration/maximumRetryAfter``).
    case hold(retryIn: Duration, reason: HoldReason)
    /// The fleet's budget reserved a start for the fetch `retryIn` from now: ask again then, carrying the reservation
    /// (``FleetFetch/reservation``), and it starts without waiting its turn again.
    case reserved(FleetReservation, retryIn: Duration)
}

/// How a fetch a replica started ended, as its ``FleetCoordinator`` hears it.
public enum FleetOutcome: Sendable, Hashable {
    /// The backend issued this credential, which the replica shares (``FleetCoordination/sharesCredentials``): a
    /// coordinator may hand it to the other replicas until it expires.
    case credential(IdentityCredential)
    /// The backend issued a credential expiring at `expiresAt`, which the replica does not share.
    case issued(expiresAt: Date)
    /// The fetch failed as an outage of the backend (``SessionError/FailureClass/outage``).
    case outage
    /// The backend asked to be left alone for this long (`Retry-After`).
    case retryAfter(Duration)
    /// The backend answered without a credential (a refusal that is not an outage).
    case refused
    /// The fetch was abandoned before the backend answered (an account change, a sign-out, shutdown).
    case abandoned
}

/// A coordinator and the bounds a replica keeps on it: given to a ``SessionEngine`` or a ``SessionPool`` at creation.
public struct FleetCoordination: Sendable {
    /// The fleet's coordinator.
    public var coordinator: any FleetCoordinator
    /// How long one call to the coordinator may take before the replica decides locally; at least a millisecond.
    public var callTimeout: Duration {
        get { callTimeoutValue }
        set { callTimeoutValue = max(.milliseconds(1), newValue) }
    }
    private var callTimeoutValue: Duration = .milliseconds(250)
    /// After a call fails or passes its deadline, how long the replica decides locally without asking, before one
    /// call tries the coordinator again; at least a millisecond.
    public var retryInterval: Duration {
        get { retryIntervalValue }
        set { retryIntervalValue = max(.milliseconds(1), newValue) }
    }
    private var retryIntervalValue: Duration = .seconds(1)
    /// The longest one fetch waits in all for another replica's credential (``FleetDecision/awaitPeer(retryIn:)``)
    /// before it fetches itself; `nil` waits up to the fetch's own deadline, ``SessionConfiguration/fetchTimeout``.
    public var maximumPeerWait: Duration?
    /// Whether the replica hands the credentials it fetches to the coordinator (``FleetOutcome/credential(_:)``),
    /// for it to share with the other replicas until they expire; off, it tells only their expiry
    /// (``FleetOutcome/issued(expiresAt:)``). Sharing puts bearer credentials in the coordinator's store: turn it on
    /// only where that store is protected as the credentials are (the DocC article *Many replicas*).
    public var sharesCredentials: Bool

    /// Creates the coordination of a replica.
    ///
    /// - Parameters:
    ///   - coordinator: The fleet's coordinator.
    ///   - callTimeout: How long one call may take before the replica decides locally.
    ///   - retryInterval: How long the replica decides locally after a call failed, before it asks again.
    ///   - maximumPeerWait: The longest one fetch waits for another replica's credential; `nil` for the fetch's
    ///     deadline.
    ///   - sharesCredentials: Whether the replica hands the credentials it fetches to the coordinator.
    public init(
        _ coordinator: any FleetCoordinator, callTimeout: Duration = .milliseconds(250),
        retryInterval: Duration = .seconds(1), maximumPeerWait: Duration? = nil, sharesCredentials: Bool = false
    ) {
        self.coordinator = coordinator
        self.maximumPeerWait = maximumPeerWait
        self.sharesCredentials = sharesCredentials
        self.callTimeout = callTimeout
        self.retryInterval = retryInterval
    }
}
