/// The limits a fleet's coordinator holds every replica to together: one budget of fetch starts and fetches in flight,
/// one outage hold, one lease per account, and whether credentials are shared.
///
/// The test kit's in-process coordinator (`FleetLedger`) and the coordinator on Redis (`SessionEngineRedis`) decide by
/// the same limits; Design/fleet.md describes the rules.
public struct FleetLimits: Sendable, Hashable {
    /// Fetch starts a second across the fleet.
    public var startsPerSecond: Double
    /// The most starts the bucket holds.
    ///
    /// Give each replica's own budget (``SessionPoolConfiguration/Budget/burst``) a burst of at least two and at least
    /// this one: the fleet may reserve several starts in a row for one replica, which with a bucket of one start takes
    /// its own a little later each time, past the reserved ones.
    public var burst: Int
    /// The most fetches in flight across the fleet.
    public var maximumInFlight: Int
    /// How long a lease lasts unless its fetch ends first: longer than a fetch's deadline.
    public var leaseDuration: Duration
    /// Outages in a row that begin the fleet's hold.
    public var outageThreshold: Int
    /// The time between two probes while the fleet holds for an outage.
    public var probeInterval: Duration
    /// Whether a credential one replica fetched is handed to the others (a bearer credential kept until it
    /// expires: see `Design/fleet.md`).
    public var sharesCredentials: Bool
    /// How often a replica waiting for another's fetch asks again.
    public var peerPollInterval: Duration

    /// Creates limits.
    ///
    /// - Parameters:
    ///   - startsPerSecond: Fetch starts a second across the fleet.
    ///   - burst: The most starts the bucket holds.
    ///   - maximumInFlight: The most fetches in flight across the fleet.
    ///   - leaseDuration: How long a lease lasts unless its fetch ends first.
    ///   - outageThreshold: Outages in a row that begin the hold.
    ///   - probeInterval: The time between two probes in an outage.
    ///   - sharesCredentials: Whether credentials are shared between replicas.
    ///   - peerPollInterval: How often a replica waiting for another's fetch asks again.
    public init(
        startsPerSecond: Double = 10, burst: Int = 10, maximumInFlight: Int = 16,
        leaseDuration: Duration = .seconds(35), outageThreshold: Int = 5, probeInterval: Duration = .seconds(5),
        sharesCredentials: Bool = false, peerPollInterval: Duration = .milliseconds(100)
    ) {
        self.startsPerSecond = max(0.001, startsPerSecond)
        self.burst = max(1, burst)
        self.maximumInFlight = max(1, maximumInFlight)
        self.leaseDuration = max(.milliseconds(1), leaseDuration)
        self.outageThreshold = max(1, outageThreshold)
        self.probeInterval = max(.milliseconds(1), probeInterval)
        self.sharesCredentials = sharesCredentials
        self.peerPollInterval = max(.milliseconds(1), peerPollInterval)
    }
}
