import Foundation
import SessionEngine

/// What the daemon needs to run, read from its arguments and environment.
///
/// Nothing here is ever printed back: an endpoint can carry a token in its query, and a stray argument is often a
/// secret pasted in the wrong place, so errors say what is wrong without quoting it.
struct DaemonOptions {
    /// A problem with the command line or the environment, printed with the usage text.
    struct UsageError: Error, CustomStringConvertible {
        let description: String
    }

    static let usage = """
        USAGE: SessionDaemon [--endpoint URL] [--account ID]

        Keeps one account's verified identity alive until SIGTERM or SIGINT, then shuts down gracefully.

        OPTIONS:
          --endpoint URL  the backend's credential endpoint: https, or plain http to a loopback host
                          (default: $SESSION_DAEMON_ENDPOINT)
          --account ID    the account to sign in (default: $SESSION_DAEMON_ACCOUNT, else "default")

        ENVIRONMENT:
          SESSION_DAEMON_TOKEN  the bearer token of the account's backend session (required; never an argument)
        """

    /// The backend's credential endpoint.
    var endpoint: URL
    /// The account to sign in.
    var account: AccountID
    /// The bearer token that authenticates the account's backend session. Never printed.
    var token: String

    /// Reads the options, or returns `nil` when help was asked for.
    ///
    /// - Parameters:
    ///   - arguments: The arguments after the program's name.
    ///   - environment: The process's environment.
    /// - Throws: ``UsageError`` for an unknown or stray argument, a missing value or a bad endpoint or token.
    static func parse(_ arguments: [String], environment: [String: String]) throws(UsageError) -> DaemonOptions? {
        var endpoint = environment["SESSION_DAEMON_ENDPOINT"]
        var account = environment["SESSION_DAEMON_ACCOUNT"] ?? "default"
        var remaining = arguments[...]
        while let argument = remaining.popFirst() {
            switch argument {
            case "--help", "-h":
                return nil
            case "--endpoint", "--account":
                guard let value = remaining.popFirst() else {
                    throw UsageError(description: "\(argument) needs a value")
                }
                if argument == "--endpoint" { endpoint = value } else { account = value }
            default:
                let position = arguments.count - remaining.count
                throw UsageError(description: "unexpected argument at position \(position) (its text is not shown)")
            }
        }
        guard let endpoint, !endpoint.isEmpty else {
            throw UsageError(description: "no endpoint: pass --endpoint URL or set SESSION_DAEMON_ENDPOINT")
        }
        guard let url = URL(string: endpoint), ["http", "https"].contains(url.scheme?.lowercased()),
            url.host?.isEmpty == false, url.user == nil, url.password == nil
        else {
            throw UsageError(
                description: "the endpoint is not an http or https URL with a host and no user:password (not shown)"
            )
        }
        // The fetcher refuses plain http to another machine (the token would cross the network in clear), and the
        // engine would retry that refusal for ever: say so now.
        guard url.scheme?.lowercased() == "https" || isLoopback(url.host ?? "") else {
            throw UsageError(description: "the endpoint must be https (plain http only to 127.0.0.0/8, ::1, localhost)")
        }
        guard !account.isEmpty else { throw UsageError(description: "the account is empty") }
        guard let token = environment["SESSION_DAEMON_TOKEN"], !token.isEmpty else {
            throw UsageError(description: "SESSION_DAEMON_TOKEN is not set")
        }
        guard token.unicodeScalars.allSatisfy({ (0x21...0x7E).contains($0.value) }) else {
            throw UsageError(description: "SESSION_DAEMON_TOKEN must be printable ASCII without spaces (not shown)")
        }
        return DaemonOptions(endpoint: url, account: AccountID(account), token: token)
    }

    /// Whether a URL's host is this machine, as the fetcher decides for plain http.
    private static func isLoopback(_ host: String) -> Bool {
        let octets = host.split(separator: ".", omittingEmptySubsequences: false).compactMap { UInt8($0) }
        return ["localhost", "::1", "[::1]"].contains(host.lowercased()) || (octets.count == 4 && octets[0] == 127)
    }

    /// The endpoint's scheme, host and port, safe to print (no path or query, which may carry a token).
    var endpointOrigin: String {
        let host = endpoint.host ?? "?"
        return "\(endpoint.scheme ?? "?")://\(host.contains(":") && !host.hasPrefix("[") ? "[\(host)]" : host)"
            + (endpoint.port.map { ":\($0)" } ?? "")
    }
}
