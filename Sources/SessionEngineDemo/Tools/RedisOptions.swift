import Foundation
import SessionEngine
import SessionEngineRedis

/// The options that name a Redis server for a fleet's coordinator, shared by `replica` and the fleet day.
enum RedisOptions {
    /// The options' names.
    static let valued = ["redis", "key-prefix", "redis-timeout", "redis-ca", "redis-certificate", "redis-key"]
    /// The environment variable that may hold the Redis URL, password included.
    static let variable = "SESSION_ENGINE_REDIS_URL"

    /// The options' lines of a usage text.
    static func usage(defaultPrefix: String) -> String {
        """
          --redis URL             the Redis server at redis://host[:port], or rediss:// for TLS; a URL with a
                                  password goes in \(variable) instead, never in an argument (arguments
                                  show in ps)
          --key-prefix P          the fleet's key prefix on Redis (default \(defaultPrefix))
          --redis-timeout MS      how long one Redis command may take (1 to 60000, default 250); a call to the
                                  coordinator may take twice that before the replica decides locally
          --redis-ca FILE         with rediss://, the PEM file of the authorities that sign the server's
                                  certificate (default: the system's)
          --redis-certificate FILE  with rediss://, the PEM file of the client certificate the server asks for
          --redis-key FILE        its private key's PEM file, when the certificate's file does not hold it
        """
    }

    /// The coordinator's configuration the options name, from `--redis URL` or, without it, the URL in
    /// ``variable``; `nil` with neither.
    ///
    /// - Throws: A usage error for a URL with a password in the arguments, a value out of range, a file that cannot be
    ///   read, or one of the other options without a URL; it never repeats the URL.
    static func configuration(_ options: Options, limits: FleetLimits, defaultPrefix: String) throws(Options.UsageError)
        -> RedisFleetCoordinator.Configuration?
    {
        if options["redis"].flatMap({ URLComponents(string: $0) })?.password != nil {
            throw Options.UsageError(
                description: "--redis holds a password, which every user of the machine can read in the process "
                    + "list: put the URL in \(variable) instead (not shown)")
        }
        guard let url = options["redis"] ?? ProcessInfo.processInfo.environment[variable] else {
            if let stray = valued.first(where: { options[$0] != nil }) {
                throw Options.UsageError(description: "--\(stray) applies only with --redis")
            }
            return nil
        }
        let timeout = try options.integer("redis-timeout", in: 1...60_000, default: 250)
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
                : try RedisFleetCoordinator.Configuration.TLS(trust: trust, certificateFile: files.1, keyFile: files.2)
            let parsed = try RedisFleetCoordinator.Configuration(
                url: url, keyPrefix: options["key-prefix"] ?? defaultPrefix, limits: limits, tls: tls)
            return try RedisFleetCoordinator.Configuration(
                host: parsed.host, port: parsed.port, username: parsed.username, password: parsed.password,
                keyPrefix: parsed.keyPrefix, limits: limits, connectTimeout: .milliseconds(timeout),
                commandTimeout: .milliseconds(timeout), tls: parsed.tls)
        } catch {
            throw Options.UsageError(description: "--redis: \(error.reason)")
        }
    }
}
