import Foundation
import SessionEngine
import SessionEngineRedis

/// The options of the daemon scenario.
struct ScenarioOptions: Sendable {
    static let usage = """
        USAGE: SessionEngineDemo [--accounts N] [--hours H] [--seed S] [--json] [--pool N]
                                 [--fleet R [--redis URL [--key-prefix P] [--redis-timeout MS] [--redis-ca FILE]
                                 [--redis-certificate FILE [--redis-key FILE]]]]
                                 [--backend URL [--project-id ID] [--ca-file PEM]]
               SessionEngineDemo sign ...      (see SessionEngineDemo sign --help)
               SessionEngineDemo verify ...    (see SessionEngineDemo verify --help)
               SessionEngineDemo replica ...   (see SessionEngineDemo replica --help)

        Runs a daemon for H simulated hours in a few seconds: a backend issues 15-minute credentials, the session
        engine keeps the signed-in account's credential fresh, and a stand-in for the service checks every
        identified request and keeps each account's private reports and chat. Along the way it shows proactive
        renewals, a backend outage with backoff and recovery, account switches that cancel the previous account's
        poll, and a secret rotation. It ends with the four Verify checks of the verified-identity contract, each
        PASS or FAIL, and exits 1 if any fails.

          --accounts N     accounts to sign in, one after another (2 to 1000, default 3); the first
                           change signs out and in, later ones switch directly
          --hours H        simulated duration (3 to 8760, default 24)
          --seed S         seed of the engine's jitter, for a reproducible timeline (default 1)
          --json           one JSON object per line (events, notes, checks, verdicts), for other tools
          --pool N         first run a simulated day of a daemon acting for N people at once through one
                           SessionPool (2 to 100000): an outage at hour 12, a rotation at hour 18, and the
                           backend's requests per second printed by hour; then the scenario as usual
          --fleet R        first run that day for R replicas of the daemon (2 to 16), each holding the same
                           people (--pool N of them, default 200): each on its own, then over one in-process
                           fleet coordinator sharing their budget, outage and credentials; the backend's requests
                           per second by hour for both; then the scenario as usual
          With --fleet R, over a Redis server instead of the in-process coordinator, each replica with a
          connection of its own; the day then runs in real time, shortened to 96 s (12 "hours" of 8 s, 1-minute
          credentials, an outage at hour 5, a rotation at hour 8), the two runs at once:
        \(RedisOptions.usage(defaultPrefix: "session-engine-demo-day"))
          --backend URL    fetch credentials over HTTP from URL instead of the embedded backend, for example the
                           loopback backend: python3 Tests/SessionEngineTests/Fixtures/backend/identity_backend.py
                           It needs APPNORTH_IDENTITY_SECRET and --project-id or APPNORTH_PROJECT_ID, set as for
                           the backend, so the service stand-in can check its credentials.
          --ca-file PEM    with an https --backend: trust the certificate authorities in the PEM file instead of
                           the system's, as curl's --cacert does (a private CA, or a self-signed certificate)
        """

    var accounts = 3
    var hours = 24
    var seed: UInt64 = 1
    var json = false
    var backend: BackendTarget?
    var projectID: String?
    var help = false
    /// `--pool N`: the people of the pool day, if asked for.
    var pool: Int?
    /// `--fleet R`: the replicas of the fleet day, if asked for.
    var fleet: Int?
    /// `--redis URL` with `--fleet`: the server the fleet day's replicas coordinate over.
    var redis: RedisFleetCoordinator.Configuration?

    init(_ arguments: [String]) throws(Options.UsageError) {
        let options = try Options(
            command: arguments,
            valued: Set(["accounts", "hours", "seed", "backend", "project-id", "ca-file", "pool", "fleet"])
                .union(RedisOptions.valued),
            flags: ["json"])
        help = options.has("help")
        json = options.has("json")
        accounts = try options.integer("accounts", in: 2...DemoAccounts.maximumCount, default: 3)
        hours = try options.integer("hours", in: 3...8760, default: 24)
        seed = try options.integer("seed", in: 0...UInt64.max, default: 1)
        if options["pool"] != nil { pool = try options.integer("pool", in: 2...100_000, default: 1000) }
        if options["fleet"] != nil {
            fleet = try options.integer("fleet", in: 2...16, default: 3)
            redis = try RedisOptions.configuration(
                options, limits: FleetLimits(), defaultPrefix: "session-engine-demo-day")
        } else if let stray = RedisOptions.valued.first(where: { options[$0] != nil }) {
            throw Options.UsageError(description: "--\(stray) applies only with --fleet")
        }
        if let text = options["backend"] {
            guard let url = URL(string: text), let scheme = url.scheme?.lowercased(),
                ["http", "https"].contains(scheme),
                url.host != nil
            else {
                throw Options.UsageError(description: "--backend must be an http or https URL")
            }
            var trust = CertificateTrust.system
            if let path = options["ca-file"] {
                guard scheme == "https" else {
                    throw Options.UsageError(description: "--ca-file applies only to an https --backend")
                }
                do {
                    trust = .authorities([try CertificateAuthorities(pemFile: path)])
                } catch {
                    throw Options.UsageError(description: "--ca-file: \(error.reason)")
                }
            }
            backend = BackendTarget(url: url, trust: trust)
            projectID = IdentityEnvironment.projectID(options)
        } else if options["project-id"] != nil || options["ca-file"] != nil {
            throw Options.UsageError(description: "--project-id and --ca-file apply only with --backend")
        }
    }
}

/// Where `--backend` points, and which certificate authorities its certificate must chain to.
struct BackendTarget: Sendable {
    /// The credential endpoint.
    let url: URL
    /// The system's authorities, or those of `--ca-file`.
    let trust: CertificateTrust
}

/// When each phase of the scenario happens, as simulated time since the start.
struct ScenarioPlan: Sendable {
    /// The pause between two polls of the account's private data.
    static let pollInterval: Duration = .seconds(300)
    /// How long the backend outage lasts: longer than a credential's 15-minute lifetime, so it expires.
    static let outageLength: Duration = .seconds(20 * 60)

    let outage: Duration
    let switches: [Duration]
    let rotation: Duration
    let end: Duration

    init(hours: Int, accounts: Int) {
        let total = Double(hours) * 3600
        let outage = max(0.15 * total, 20 * 60)
        let firstSwitch = max(0.35 * total, outage + 35 * 60)
        let lastSwitch = max(0.6 * total, firstSwitch)
        let switches = (0..<(accounts - 1)).map { index in
            accounts == 2
                ? firstSwitch : firstSwitch + (lastSwitch - firstSwitch) * Double(index) / Double(accounts - 2)
        }
        let rotation = max(0.75 * total, (switches.last ?? firstSwitch) + 20 * 60)
        self.outage = .seconds(Int64(outage.rounded()))
        self.switches = switches.map { .seconds(Int64($0.rounded())) }
        self.rotation = .seconds(Int64(rotation.rounded()))
        self.end = .seconds(Int64(max(total, rotation + 30 * 60).rounded()))
    }
}
