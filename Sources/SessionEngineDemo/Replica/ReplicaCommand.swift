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
                                         [--burst B] [--in-flight N] [--project-id ID]

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
          --redis URL             coordinate over the Redis server at redis://host[:port], or rediss://
                                  for TLS; a URL with a password goes in SESSION_ENGINE_REDIS_URL instead,
                                  never in an argument (arguments show in ps); without either the replica
                                  decides alone
          --key-prefix P          the fleet's key prefix on Redis (default session-engine-demo)
          --share-credentials     hand fetched credentials to the other replicas through Redis (bearer
                                  credentials in Redis until they expire: see the article Many replicas)
          --redis-timeout MS      how long one Redis command may take (1 to 60000, default 250); a call to the
                                  coordinator may take twice that before the replica decides locally
          --redis-ca FILE         with rediss://, the PEM file of the authorities that sign the server's
                                  certificate (default: the system's)
          --redis-certificate FILE  with rediss://, the PEM file of the client certificate the server asks for
          --redis-key FILE        its private key's PEM file, when the certificate's file does not hold it
          --starts-per-second R   the budget's fetch starts per second, the replica's and the fleet's
                                  (1 to 10000, default 20)
          --burst B               the budget's burst (1 to 10000, default 1)
          --in-flight N           the budget's fetches in flight (1 to 10000, default 32)

        Standard input takes one command a line and answers each with one JSON line on standard output:
          status   {"identified", "installed", "renewals", "fetches", "generation", "fleet": {...} or null}:
                   the accounts whose credential the service accepts now, the credentials installed (renewals
                   among them) and the fetches started over every account, the service's secret generation, and
                   the coordinator's counts
          rotate   the service moves to the next secret, "<secret>:rotated:<n>" as the backend's rotate does;
                   answers {"generation": n}
        At the end of standard input the pool shuts down and the replica exits 0.
        """

    static func run(_ arguments: [String]) async -> Int32 {
        let settings: ReplicaSettings
        do {
            let options = try Options(
                command: arguments,
                valued: [
                    "backend", "accounts", "redis", "key-prefix", "redis-timeout", "redis-ca", "redis-certificate",
                    "redis-key", "starts-per-second", "burst", "in-flight", "project-id",
                ],
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
    /// The environment variable that may hold the Redis URL, password included.
    static let redisVariable = "SESSION_ENGINE_REDIS_URL"

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
        let burst = try options.integer("burst", in: 1...10_000, default: 1)
        let inFlight = try options.integer("in-flight", in: 1...10_000, default: 32)
        budget = SessionPoolConfiguration.Budget(
            maximumInFlight: inFlight, startsPerSecond: Double(startsPerSecond), burst: burst)
        sharesCredentials = options.has("share-credentials")
        if options["redis"].flatMap({ URLComponents(string: $0) })?.password != nil {
            throw Options.UsageError(
                description: "--redis holds a password, which every user of the machine can read in the process "
                    + "list: put the URL in \(Self.redisVariable) instead (not shown)")
        }
        if let url = options["redis"] ?? ProcessInfo.processInfo.environment[Self.redisVariable] {
            let timeout = try options.integer("redis-timeout", in: 1...60_000, default: 250)
            let limits = FleetLimits(
                startsPerSecond: Double(startsPerSecond), burst: burst, maximumInFlight: inFlight,
                sharesCredentials: sharesCredentials)
            var trust = CertificateTrust.system
            if let file = options["redis-ca"] {
                do {
                    trust = try CertificateTrust(authorities: [CertificateAuthorities(pemFile: file)])
                } catch {
                    throw Options.UsageError(description: "--redis-ca: \(error.reason)")
                }
            }
            do {
                let files = (options["redis-ca"], options["redis-certificate"], options["redis-key"])
                let tls =
                    files == (nil, nil, nil)
                    ? nil
                    : try RedisFleetCoordinator.Configuration.TLS(
                        trust: trust, certificateFile: files.1, keyFile: files.2)
                let parsed = try RedisFleetCoordinator.Configuration(
                    url: url, keyPrefix: options["key-prefix"] ?? "session-engine-demo", limits: limits, tls: tls)
                redis = try RedisFleetCoordinator.Configuration(
                    host: parsed.host, port: parsed.port, username: parsed.username, password: parsed.password,
                    keyPrefix: parsed.keyPrefix, limits: limits, connectTimeout: .milliseconds(timeout),
                    commandTimeout: .milliseconds(timeout), tls: parsed.tls)
            } catch {
                throw Options.UsageError(description: "--redis: \(error.reason)")
            }
        } else if sharesCredentials
            || ["key-prefix", "redis-timeout", "redis-ca", "redis-certificate", "redis-key"].contains(where: {
                options[$0] != nil
            })
        {
            throw Options.UsageError(
                description: "--key-prefix, --share-credentials, --redis-timeout and the --redis TLS files apply "
                    + "only with --redis")
        }
        secret = try IdentityEnvironment.secret()
        projectID = try IdentityEnvironment.requiredProjectID(options)
    }
}
