import Foundation

#if canImport(Glibc)
    import Glibc
#elseif canImport(Musl)
    import Musl
#elseif canImport(Darwin)
    import Darwin
#endif

/// The backend configuration that `sign` and `verify` read, as the contract's handler does: the secret only from
/// `APPNORTH_IDENTITY_SECRET`, the project ID from `--project-id` or `APPNORTH_PROJECT_ID`.
enum IdentityEnvironment {
    static let secretVariable = "APPNORTH_IDENTITY_SECRET"
    static let projectVariable = "APPNORTH_PROJECT_ID"

    /// The secret from the environment; never printed.
    ///
    /// The raw bytes are read, not `ProcessInfo`'s decoded string, which silently turns invalid UTF-8 into U+FFFD:
    /// a secret that is not valid UTF-8 would then sign with a different key than the backend's. It is refused.
    static func secret() throws(Options.UsageError) -> String {
        guard let raw = getenv(secretVariable), raw.pointee != 0 else {
            throw Options.UsageError(
                description: "set \(secretVariable) in the environment (it is never read from arguments)")
        }
        guard let secret = String(validatingCString: raw) else {
            throw Options.UsageError(
                description: "\(secretVariable) is not valid UTF-8; the contract keys HMAC with the secret's UTF-8 "
                    + "bytes, so it would sign with another key than the backend's"
            )
        }
        return secret
    }

    /// The project ID from `--project-id`, else from the environment.
    static func projectID(_ options: Options) -> String? {
        if let value = options["project-id"], !value.isEmpty { return value }
        if let value = ProcessInfo.processInfo.environment[projectVariable], !value.isEmpty { return value }
        return nil
    }

    /// The project ID, or a usage error naming both sources.
    static func requiredProjectID(_ options: Options) throws(Options.UsageError) -> String {
        guard let projectID = projectID(options) else {
            throw Options.UsageError(description: "pass --project-id or set \(projectVariable)")
        }
        return projectID
    }
}

/// Describes a JSON decoding failure by its path and kind, never by the offending value.
func describeDecodingFailure(_ error: any Error) -> String {
    switch error {
    case let error as InputProblem:
        return error.describedReason
    case let error as DecodingError:
        func path(_ context: DecodingError.Context) -> String {
            let path = context.codingPath.map(\.stringValue).joined(separator: ".")
            return path.isEmpty ? "the input" : "'\(path)'"
        }
        switch error {
        case .keyNotFound(let key, _):
            return "malformedJSON: the required field '\(key.stringValue)' is missing"
        case .typeMismatch(_, let context), .valueNotFound(_, let context):
            return "malformedJSON: \(path(context)) has the wrong type"
        case .dataCorrupted(let context):
            return context.codingPath.isEmpty
                ? "malformedJSON: the input is not valid JSON" : "malformedJSON: \(path(context)) is not valid"
        @unknown default:
            return "malformedJSON: the input is not valid JSON"
        }
    default:
        return "malformedJSON: the input is not valid JSON"
    }
}

/// A rule of an input format that the input breaks. The reason is safe to print: it names the rule, never a
/// secret or a value.
struct InputProblem: Error {
    let describedReason: String
}
