internal import CSessionEngineCurl
internal import CSessionEngineRedis
import Foundation
public import SessionEngine

/// A fleet's coordinator on a Redis server that every replica reaches: one budget of fetch starts and fetches in
/// flight, one outage hold and one `Retry-After` for the whole fleet, and one fetch per account per renewal, its
/// credential shared with the other replicas when the limits allow it.
///
/// Every decision and every report is one script on the server (`EVALSHA`), atomic there and timed by the server's
/// clock, so replicas whose clocks differ still share one budget. The rules are the test kit's `FleetLedger`'s, and
/// Design/fleet.md describes them with the keys the scripts keep.
///
/// The protocol comes from the system's hiredis 0.14 (`libhiredis.so.0.14`, Debian's `libhiredis0.14`), loaded at run
/// time: the package builds without it, and ``init(configuration:)`` throws
/// ``RedisCoordinatorError/Code/libraryMissing`` where it is missing. hiredis writes the commands and reads the
/// replies; the bytes go over the system's libcurl, as the engine's HTTPS transport does, on a plain connection or on
/// TLS (``Configuration/TLS``, `rediss://`) with the server's certificate and name verified and, when the server asks
/// for one, a client certificate. Commands go over one connection, on a thread of its own, each bounded by
/// ``Configuration/commandTimeout``; the connection is made at the first command and again after one fails.
///
/// Give it to replicas with `FleetCoordination`; a replica whose call throws or passes the coordination's deadline
/// decides locally:
///
/// ```swift
/// let coordinator = try RedisFleetCoordinator(
///     configuration: .init(host: "10.0.0.5", password: redisPassword, keyPrefix: "billing"))
/// let pool = SessionPool(fetcher: fetcher, coordination: FleetCoordination(coordinator))
/// ```
public final class RedisFleetCoordinator: FleetCoordinator {
    /// Where the server is, how to log in, and the fleet's limits.
    public struct Configuration: Sendable, CustomStringConvertible, CustomReflectable {
        /// How the coordinator proves the server, and itself, over TLS.
        ///
        /// The server's certificate must chain to an authority of ``trust`` and name the configured host (its DNS
        /// name or IP address among the subject alternative names); the fetcher's `CertificateTrust` says which
        /// authorities, the same way. A server started with `tls-auth-clients yes`, Redis's default, also asks for a
        /// client certificate.
        ///
        /// ```swift
        /// let tls = try RedisFleetCoordinator.Configuration.TLS(
        ///     trust: .authorities([CertificateAuthorities(pemFile: "/etc/billing/redis-ca.pem")]),
        ///     certificateFile: "/etc/billing/replica.pem", keyFile: "/etc/billing/replica.key")
        /// ```
        public struct TLS: Sendable, Hashable {
            /// The authorities the server's certificate must chain to; `CertificateTrust.system` by default.
            public let trust: CertificateTrust
            /// The PEM file of the client's certificate, presented when the server asks; `nil` presents none.
            public let certificateFile: String?
            /// The PEM file of the client certificate's private key; `nil` when ``certificateFile`` holds it. libcurl
            /// reads it at each connection; the coordinator never holds the key.
            public let keyFile: String?

            /// Creates the TLS options, checking that the trust can be used and that every file named can be read.
            ///
            /// - Parameters:
            ///   - trust: The authorities to trust; the system's by default.
            ///   - certificateFile: The client certificate's PEM file, or `nil`.
            ///   - keyFile: The client key's PEM file, or `nil`; it needs `certificateFile`.
            /// - Throws: ``RedisCoordinatorError`` with ``RedisCoordinatorError/Code/invalidConfiguration`` naming the
            ///   file that cannot be read, a key without a certificate, or a trust libcurl cannot take.
            public init(trust: CertificateTrust = .system, certificateFile: String? = nil, keyFile: String? = nil)
                throws(RedisCoordinatorError)
            {
                if let problem = trust.problem {
                    throw RedisCoordinatorError(.invalidConfiguration, reason: "the trust: \(problem.reason)")
                }
                for (name, path) in [("client certificate's", certificateFile), ("client key's", keyFile)] {
                    guard let path else { continue }
                    guard !path.isEmpty, path.utf8.count <= 4096, !path.utf8.contains(0) else {
                        throw RedisCoordinatorError(
                            .invalidConfiguration, reason: "the \(name) file's path must be 1 to 4096 bytes without NUL"
                        )
                    }
                    guard FileManager.default.isReadableFile(atPath: path) else {
                        throw RedisCoordinatorError(
                            .invalidConfiguration, reason: "the \(name) file \(path) cannot be read")
                    }
                }
                if keyFile != nil, certificateFile == nil {
                    throw RedisCoordinatorError(
                        .invalidConfiguration, reason: "a client key needs a client certificate")
                }
                self.trust = trust
                self.certificateFile = certificateFile
                self.keyFile = keyFile
            }
        }

        /// The server's host name or address.
        public let host: String
        /// The server's port.
        public let port: Int
        /// The ACL user (Redis 6 and later); `nil` authenticates as the default user when there is a password.
        public let username: String?
        /// The password; `nil` sends no `AUTH`. Never part of a description, an error or a log.
        public let password: String?
        /// TLS to the server; `nil` speaks plain TCP, for a server on the host or a network the fleet trusts.
        public let tls: TLS?
        /// The prefix of every key, set in braces so all of them share one hash slot; one per fleet.
        public let keyPrefix: String
        /// The limits every replica is held to together.
        public let limits: FleetLimits
        /// How long a connection may take to open.
        public let connectTimeout: Duration
        /// How long a command may wait for the connection and for its reply.
        public let commandTimeout: Duration

        /// Creates a configuration, checking every value.
        ///
        /// - Parameters:
        ///   - host: The server's host name or address: 1 to 253 letters, digits, `-`, `_`, `.` or, for an IPv6
        ///     address, `:` (without brackets).
        ///   - port: The server's port, 1 to 65535.
        ///   - username: The ACL user, if any: 1 to 256 characters, no spaces or control characters.
        ///   - password: The password, if any: 1 to 512 bytes.
        ///   - tls: TLS to the server, or `nil` for plain TCP.
        ///   - keyPrefix: The keys' prefix: 1 to 64 characters of letters, digits, `-`, `_`, `.` and `:`.
        ///   - limits: The fleet's limits.
        ///   - connectTimeout: How long a connection may take to open: 1 ms to 60 s.
        ///   - commandTimeout: How long a command may take: 1 ms to 60 s.
        /// - Throws: ``RedisCoordinatorError`` with ``RedisCoordinatorError/Code/invalidConfiguration`` naming the value.
        public init(
            host: String = "127.0.0.1", port: Int = 6379, username: String? = nil, password: String? = nil,
            keyPrefix: String = "session-engine", limits: FleetLimits = FleetLimits(),
            connectTimeout: Duration = .milliseconds(250), commandTimeout: Duration = .milliseconds(250),
            tls: TLS? = nil
        ) throws(RedisCoordinatorError) {
            func invalid(_ reason: String) -> RedisCoordinatorError {
                RedisCoordinatorError(.invalidConfiguration, reason: reason)
            }
            func isPlain(_ text: String, limit: Int) -> Bool {
                !text.isEmpty && text.count <= limit
                    && text.unicodeScalars.allSatisfy { $0.value > 0x20 && $0.value != 0x7F }
            }
            // The host becomes part of the URL the stream connects to: nothing in it may read as a user, a path or a
            // port there.
            let hostCharacters = Set("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-_.:")
            guard !host.isEmpty, host.count <= 253, host.allSatisfy(hostCharacters.contains),
                !host.contains(":") || host.allSatisfy(Set("0123456789abcdefABCDEF:.").contains)
            else {
                throw invalid(
                    "the host must be 1 to 253 letters, digits, '-', '_', '.', or an IPv6 address without brackets")
            }
            guard (1...65_535).contains(port) else { throw invalid("the port \(port) is not in 1...65535") }
            if let username, !isPlain(username, limit: 256) {
                throw invalid("the username must be 1 to 256 characters without spaces or control characters")
            }
            if let password, password.utf8.isEmpty || password.utf8.count > 512 {
                throw invalid("the password must be 1 to 512 bytes")
            }
            let allowed = Set("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-_.:")
            guard !keyPrefix.isEmpty, keyPrefix.count <= 64, keyPrefix.allSatisfy(allowed.contains) else {
                throw invalid("the key prefix must be 1 to 64 letters, digits, '-', '_', '.' or ':'")
            }
            for (name, timeout) in [("connect", connectTimeout), ("command", commandTimeout)]
            where timeout < .milliseconds(1) || timeout > .seconds(60) {
                throw invalid("the \(name) timeout must be 1 ms to 60 s")
            }
            if username != nil, password == nil { throw invalid("a username needs a password") }
            self.host = host
            self.port = port
            self.username = username
            self.password = password
            self.tls = tls
            self.keyPrefix = keyPrefix
            self.limits = limits
            self.connectTimeout = connectTimeout
            self.commandTimeout = commandTimeout
        }

        /// Reads a `redis://[[user]:password@]host[:port]` or `rediss://…` (TLS) URL, the form Redis clients share;
        /// the limits and timeouts are the defaults, and the key prefix is `keyPrefix`.
        ///
        /// - Parameters:
        ///   - url: The URL.
        ///   - keyPrefix: The keys' prefix.
        ///   - limits: The fleet's limits.
        ///   - tls: The TLS options of a `rediss://` URL; `nil` trusts the system's authorities and presents no
        ///     client certificate. A `redis://` URL with TLS options is refused.
        /// - Throws: ``RedisCoordinatorError`` with ``RedisCoordinatorError/Code/invalidConfiguration``; the reason
        ///   never repeats the URL, which may hold the password.
        public init(
            url: String, keyPrefix: String = "session-engine", limits: FleetLimits = FleetLimits(), tls: TLS? = nil
        ) throws(RedisCoordinatorError) {
            guard url.utf8.count <= 2048, let components = URLComponents(string: url) else {
                throw RedisCoordinatorError(.invalidConfiguration, reason: "the Redis URL is not a URL")
            }
            guard components.scheme == "redis" || components.scheme == "rediss" else {
                throw RedisCoordinatorError(.invalidConfiguration, reason: "the URL's scheme is not redis or rediss")
            }
            if components.scheme == "redis", tls != nil {
                throw RedisCoordinatorError(
                    .invalidConfiguration, reason: "TLS options were given for a redis:// URL; use rediss://")
            }
            guard var host = components.host, !host.isEmpty else {
                throw RedisCoordinatorError(.invalidConfiguration, reason: "the Redis URL names no host")
            }
            if host.hasPrefix("["), host.hasSuffix("]") { host = String(host.dropFirst().dropLast()) }
            var secure = tls
            if components.scheme == "rediss", secure == nil { secure = try TLS() }
            let user = components.user.flatMap { $0.isEmpty ? nil : $0 }
            try self.init(
                host: host, port: components.port ?? 6379, username: user, password: components.password,
                keyPrefix: keyPrefix, limits: limits,
                tls: secure)
        }

        /// The configuration's parts for `dump` and debuggers, without the password.
        public var customMirror: Mirror {
            Mirror(
                self,
                children: [
                    "host": host, "port": port, "username": username as Any, "hasPassword": password != nil,
                    "tls": tls as Any,
                    "keyPrefix": keyPrefix, "limits": limits, "connectTimeout": connectTimeout,
                    "commandTimeout": commandTimeout,
                ],
                displayStyle: .struct)
        }

        /// The server and the prefix, without the password.
        public var description: String {
            let login = username.map { "\($0)@" } ?? (password != nil ? "(password)@" : "")
            let address = host.contains(":") ? "[\(host)]" : host
            return "\(tls == nil ? "redis" : "rediss")://\(login)\(address):\(port) prefix \(keyPrefix)"
        }
    }

    /// The configuration it was made with.
    public let configuration: Configuration
    private let connection: RedisConnection
    /// The scripts' SHA-1 digests as the server reported them, once it has.
    private let digests = SanitizedMutex<(decide: String, ended: String)?>(nil)

    /// Creates a coordinator; it connects at its first call.
    ///
    /// - Parameter configuration: The server, the login and the limits.
    /// - Throws: ``RedisCoordinatorError`` with ``RedisCoordinatorError/Code/libraryMissing`` when hiredis 0.14 or
    ///   libcurl is not installed.
    public init(configuration: Configuration) throws(RedisCoordinatorError) {
        var why = [CChar](repeating: 0, count: 160)
        guard se_redis_load(&why, why.count) != 0 else {
            throw RedisCoordinatorError(.libraryMissing, reason: RedisConnection.text(of: why))
        }
        guard se_curl_is_available() != 0 else {
            throw RedisCoordinatorError(.libraryMissing, reason: "libcurl.so.4 is not installed (Debian: libcurl4)")
        }
        self.configuration = configuration
        connection = RedisConnection(
            endpoint: .init(
                host: configuration.host, port: configuration.port, username: configuration.username,
                password: configuration.password, tls: configuration.tls, connectTimeout: configuration.connectTimeout,
                commandTimeout: configuration.commandTimeout))
    }

    /// Decides a fetch by the fleet's rules, on the server.
    ///
    /// - Parameter fetch: The fetch a replica is about to start.
    /// - Returns: The decision.
    /// - Throws: ``RedisCoordinatorError`` when the server cannot be reached or answers otherwise than the script
    ///   does; a shared credential that does not decode is one too.
    public func decide(_ fetch: FleetFetch) async throws -> FleetDecision {
        let limits = configuration.limits
        let held = fetch.heldExpiry.map { String(Self.unixSeconds($0)) } ?? ""
        let reply = try await evaluate(
            \.decide, RedisScripts.decide, account: fetch.account,
            arguments: [
                held, String(limits.startsPerSecond), String(limits.burst), String(limits.maximumInFlight),
                String(Self.milliseconds(limits.leaseDuration)), String(Self.milliseconds(limits.probeInterval)),
                limits.sharesCredentials ? "1" : "0", String(Self.milliseconds(limits.peerPollInterval)),
                fetch.followsRejection ? "1" : "0", fetch.reservation?.rawValue ?? "",
            ])
        return try Self.decision(from: reply)
    }

    /// Records how a fetch ended, on the server: the lease is released, the hold begins or ends, and a credential is
    /// kept for the other replicas when the limits share credentials and it expires later than the one kept.
    ///
    /// - Parameters:
    ///   - fetch: The fetch.
    ///   - lease: Its lease; `nil` for one the replica decided on locally.
    ///   - outcome: How it ended.
    /// - Throws: ``RedisCoordinatorError`` when the server cannot be reached.
    public func fetchEnded(_ fetch: FleetFetch, lease: FleetLease?, outcome: FleetOutcome) async throws {
        let limits = configuration.limits
        var kind = ""
        var expiresAt = ""
        var json = ""
        var pause = "0"
        switch outcome {
        case .credential(let credential):
            kind = "credential"
            expiresAt = String(credential.expiresAt)
            if limits.sharesCredentials { json = String(decoding: try JSONEncoder().encode(credential), as: UTF8.self) }
        case .issued(let expiry):
            kind = "issued"
            expiresAt = String(Self.unixSeconds(expiry))
        case .outage: kind = "outage"
        case .retryAfter(let duration):
            kind = "retryAfter"
            pause = String(Self.milliseconds(duration))
        case .refused: kind = "refused"
        case .abandoned: kind = "abandoned"
        }
        let reply = try await evaluate(
            \.ended, RedisScripts.ended, account: fetch.account,
            arguments: [
                lease?.rawValue ?? "", kind, expiresAt, json, pause, String(limits.outageThreshold),
                String(Self.milliseconds(limits.probeInterval)), limits.sharesCredentials ? "1" : "0",
                fetch.reservation?.rawValue ?? "",
            ])
        guard case .integer(1) = reply else {
            throw RedisCoordinatorError(.unexpectedReply, reason: "the report's script answered otherwise")
        }
    }

    /// Asks the server whether it answers, as a readiness check.
    ///
    /// - Throws: ``RedisCoordinatorError`` when it does not.
    public func ping() async throws(RedisCoordinatorError) {
        let reply = try await connection.run([Array("PING".utf8)], before: deadline())
        guard case .status("PONG") = reply else {
            throw RedisCoordinatorError(.unexpectedReply, reason: "PING was not answered with PONG")
        }
    }

    /// Runs a script by its digest, loading it first when the server does not know it (a first call, a server
    /// restarted empty, a flushed script cache).
    private func evaluate(
        _ digest: KeyPath<(decide: String, ended: String), String>, _ script: String, account: AccountID,
        arguments: [String]
    ) async throws(RedisCoordinatorError) -> RedisValue {
        let prefix = "{\(configuration.keyPrefix)}"
        let keys = [
            "\(prefix):fleet", "\(prefix):inflight", "\(prefix):lease:\(account)", "\(prefix):shared:\(account)",
            "\(prefix):fence:\(account)",
        ]
        let tail = [String(keys.count)] + keys + arguments
        if let known = digests.withLock({ $0 })?[keyPath: digest] {
            let reply = try await connection.run(Self.command(["EVALSHA", known] + tail), before: deadline())
            guard case .error(let message) = reply, message.hasPrefix("NOSCRIPT") else {
                return try Self.checked(reply)
            }
        }
        let reply = try await connection.run(Self.command(["EVAL", script] + tail), before: deadline())
        if case .error = reply { return try Self.checked(reply) }
        // The script ran (a decision may hold a lease now): a failure to learn the digests must not hide its reply.
        try? await learnDigests()
        return reply
    }

    /// Loads both scripts and keeps the digests the server reports.
    private func learnDigests() async throws(RedisCoordinatorError) {
        var learned: [String] = []
        for script in [RedisScripts.decide, RedisScripts.ended] {
            let reply = try await connection.run(Self.command(["SCRIPT", "LOAD", script]), before: deadline())
            guard let digest = reply.text, digest.count == 40 else { return }
            learned.append(digest)
        }
        digests.withLock { $0 = (learned[0], learned[1]) }
    }

    private func deadline() -> ContinuousClock.Instant { .now + configuration.commandTimeout }

    private static func command(_ parts: [String]) -> [[UInt8]] { parts.map { Array($0.utf8) } }

    /// The reply, or the error it is.
    private static func checked(_ reply: RedisValue) throws(RedisCoordinatorError) -> RedisValue {
        guard case .error(let message) = reply else { return reply }
        throw RedisCoordinatorError(.serverError, reason: message)
    }

    /// The decision a script's reply stands for.
    private static func decision(from reply: RedisValue) throws(RedisCoordinatorError) -> FleetDecision {
        let unexpected = RedisCoordinatorError(.unexpectedReply, reason: "the decision's script answered otherwise")
        guard case .array(let parts) = reply, let kind = parts.first?.text else { throw unexpected }
        func milliseconds(_ index: Int) throws(RedisCoordinatorError) -> Duration {
            guard parts.count > index, case .integer(let value) = parts[index], value >= 0 else { throw unexpected }
            return .milliseconds(value)
        }
        switch kind {
        case "start":
            guard parts.count == 2, let name = parts[1].text, !name.isEmpty else { throw unexpected }
            return .start(lease: FleetLease(name))
        case "await":
            return .awaitPeer(retryIn: try milliseconds(1))
        case "hold":
            guard parts.count == 3, let reason = parts[2].text.flatMap(FleetDecision.HoldReason.init(rawValue:)) else {
                throw unexpected
            }
            return .hold(retryIn: try milliseconds(1), reason: reason)
        case "reserved":
            guard parts.count == 3, let name = parts[1].text, !name.isEmpty else { throw unexpected }
            return .reserved(FleetReservation(name), retryIn: try milliseconds(2))
        case "shared":
            guard parts.count == 2, case .string(let json) = parts[1] else { throw unexpected }
            do {
                return .shared(try IdentityCredential(json: Data(json)))
            } catch {
                throw RedisCoordinatorError(
                    .unexpectedReply, reason: "the shared credential does not decode: \(error.code)")
            }
        default:
            throw unexpected
        }
    }

    /// A duration in whole milliseconds, at least one and at most a year.
    private static func milliseconds(_ duration: Duration) -> Int64 {
        RedisConnection.milliseconds(duration, atMost: 31_536_000_000)
    }

    /// A date in whole Unix seconds, clamped to ±10^12 (a date from a hostile backend never traps).
    private static func unixSeconds(_ date: Date) -> Int64 {
        let seconds = date.timeIntervalSince1970.rounded(.down)
        guard seconds.isFinite else { return 0 }
        return Int64(min(max(seconds, -1e12), 1e12))
    }
}
