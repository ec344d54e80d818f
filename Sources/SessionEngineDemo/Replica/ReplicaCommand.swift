import Foundation
import SessionEngine
import SessionEngineRedis

/// `SessionEngineDemo replica`: one replica of a daemon's pool in real time, a process of a fleet.
///
/// Several replicas started against one backend and, with `--redis`, one Redis server form a fleet: each keeps every
/// account identified through its own `SessionPool`, and the coordinator on Redis shares their budget, their outage
/// and, with `--share-credentials`, their credentials. `SessionEngineBench --filter fleet-replicas` and
/// `FleetReplicaTests` run four of them and count the backend's requests.
enum ReplicaCommand {
    static let usage = """
        USAGE: SessionEngineDemo replica --backend URL [--accounts N] [--redis URL [--key-prefix P]
                                         [--share-credentials] [--redis-timeout MS] [--redis-ca FILE]
                                         [--redis-certificate FILE [--redis-key FILE]]] [--starts-per-second R]
                                         [--burst B] [--fleet-burst B] [--in-flight N] [--project-id ID]

        Runs one replica of a daemon in real time: a SessionPool signs in N accounts (account-00000, ...) and keeps
        them identified against the backend at URL, authenticating each request with "Authorization: Bearer
        session-<account>", as the loopback backend Scripts/fault-soak-backend.py expects. Start several against
        one backend and one Redis server and they form a fleet that shares one budget, one outage and, with
        --share-credentials, one fetch per account per renewal.

        The replica also plays the service: it checks every account's credential four times a second with the
        secret in APPNORTH_IDENTITY_SECRET (read only from the environment, never printed) and the project in
        --project-id or APPNORTH_PROJECT_ID, and reports a credential signed with an old secret as rejected, as the
        service would on the account's next request.

          --backend URL           the credential endpoint: https, or plain http to a loopback host
          --accounts N            accounts to keep identified (1 to 100000, default 100)
          --share-credentials     hand fetched credentials to the other replicas through Redis (bearer
                                  credentials in Redis until they expire: see the article Many replicas)
        \(RedisOptions.usage(defaultPrefix: "session-engine-demo"))
          --starts-per-second R   the budget's fetch starts per second, the replica's and the fleet's
                                  (1 to 10000, default 20)
          --burst B               the replica's own burst (1 to 10000, default 2)
          --fleet-burst B         the fleet's burst (1 to 10000, default: --burst). A replica takes its starts in
                                  time for the fleet's reserved ones only with a burst of its own of at least 2
                                  and at least the fleet's
          --in-flight N           the budget's fetches in flight (1 to 10000, default 32)

        Standard input takes one command a line and answers each with one JSON line on standard output:
          status   {"identified", "installed", "renewals", "fetches", "generation", "fleet": {...} or null,
                   "sentPerSecond": [[second, requests], ...]}: the accounts whose credential the service accepts
                   now, the credentials installed (renewals among them) and the fetches started over every
                   account, the service's secret generation, the coordinator's counts, and the requests sent to
                   the backend in each Unix second since the last status, counted as they leave
          rotate   the service moves to the next secret, "<secret>:rotated:<n>" as the backend's rotate does;
                   answers {"generation": n}
        At the end of standard input the pool shuts down and the replica exits 0.
        """

    static func run(_ arguments: [String]) async -> Int32 {
        let settings: ReplicaSettings
        do {
            let options = try Options(
                command: arguments,
                valued: Set([
                    "backend", "accounts", "starts-per-second", "burst", "fleet-burst", "in-flight", "project-id",
                ])
                .union(RedisOptions.valued),
                flags: ["share-credentials"])
            if options.has("help") {
                print(usage)
                return 0
            }
            settings = try ReplicaSettings(options)
        } catch {
            FileHandle.standardError.write(
                Data("error: \(error)\nRun SessionEngineDemo replica --help for usage.\n".utf8))
            return 2
        }
        do {
            let replica = try Replica(settings)
            await replica.run()
            return 0
        } catch {
            FileHandle.standardError.write(Data("error: \(error)\n".utf8))
            return 1
        }
    }
}

/// The replica's options, each checked.
struct ReplicaSettings {
    var backend: URL
    var accounts: Int
    var redis: RedisFleetCoordinator.Configuration?
    var sharesCredentials: Bool
    var budget: SessionPoolConfiguration.Budget
    var projectID: String
    /// The service's secret, from the environment; never printed.
    var secret: String

    init(_ options: Options) throws(Options.UsageError) {
        guard let text = options["backend"] else { throw Options.UsageError(description: "pass --backend URL") }
        guard let url = URL(string: text), let scheme = url.scheme?.lowercased(), ["http", "https"].contains(scheme),
            let host = url.host, !host.isEmpty
        else {
            throw Options.UsageError(description: "--backend must be an http or https URL with a host (not shown)")
        }
        guard scheme == "https" || ["127.0.0.1", "localhost", "::1", "[::1]"].contains(host.lowercased()) else {
            throw Options.UsageError(description: "--backend must be https (plain http only to a loopback host)")
        }
        backend = url
        accounts = try options.integer("accounts", in: 1...100_000, default: 100)
        let startsPerSecond = try options.integer("starts-per-second", in: 1...10_000, default: 20)
        let burst = try options.integer("burst", in: 1...10_000, default: 2)
        let fleetBurst = try options.integer("fleet-burst", in: 1...10_000, default: burst)
        let inFlight = try options.integer("in-flight", in: 1...10_000, default: 32)
        budget = SessionPoolConfiguration.Budget(
            maximumInFlight: inFlight, startsPerSecond: Double(startsPerSecond), burst: burst)
        sharesCredentials = options.has("share-credentials")
        redis = try RedisOptions.configuration(
            options,
            limits: FleetLimits(
                startsPerSecond: Double(startsPerSecond), burst: fleetBurst, maximumInFlight: inFlight,
                sharesCredentials: sharesCredentials),
            defaultPrefix: "session-engine-demo")
        if sharesCredentials, redis == nil {
            throw Options.UsageError(description: "--share-credentials applies only with --redis")
        }
        if options["fleet-burst"] != nil, redis == nil {
            throw Options.UsageError(description: "--fleet-burst applies only with --redis")
        }
        secret = try IdentityEnvironment.secret()
        projectID = try IdentityEnvironment.requiredProjectID(options)
    }
}
