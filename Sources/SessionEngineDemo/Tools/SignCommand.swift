import Foundation
import SessionEngine
import SessionEngineBackend

/// `SessionEngineDemo sign`: issues credentials exactly as the backend's handler does, for operators who compare
/// what their backend produces with what the contract expects.
enum SignCommand {
    static let usage = """
        USAGE: SessionEngineDemo sign --email EMAIL [--properties JSON] [--lifetime SECONDS | --expires-at UNIX]
                                      [--project-id ID]
               SessionEngineDemo sign --batch [--lifetime SECONDS] [--project-id ID] < requests.jsonl

        Signs credentials with the secret in APPNORTH_IDENTITY_SECRET (read only from the environment, never
        printed) for the project in --project-id or APPNORTH_PROJECT_ID.

          --email EMAIL        the email as the backend session holds it; it is trimmed and lowercased
          --properties JSON    a JSON object of signed properties (strings, numbers, booleans); selects v2
          --lifetime SECONDS   how long the credential lives (default 900, at most 86400)
          --expires-at UNIX    an explicit expiry in Unix seconds, at most 24 hours from now
          --batch              read JSON lines {"projectId"?, "email", "expiresAt"?, "properties"?} from standard
                               input and write one line per input, in order: the credential
                               {"email","expiresAt","signature","properties"?} or {"error": "<reason>"}; a
                               line longer than \(InputLines.maximumLength) bytes is answered with an error and
                               not shown

        Exit status: 0 when every credential was issued, 1 when any input broke a rule, 2 for a usage error or
        unreadable input.
        """

    static func run(_ arguments: [String]) -> Int32 {
        do {
            let options = try Options(
                command: arguments,
                valued: ["email", "properties", "lifetime", "expires-at", "project-id"],
                flags: ["batch"]
            )
            if options.has("help") {
                print(usage)
                return 0
            }
            let secret = try IdentityEnvironment.secret()
            let lifetime = try options.integer("lifetime", in: 1...86_400, default: 900)
            var signers = Signers(secret: secret, lifetime: .seconds(lifetime))
            if options.has("batch") {
                for name in ["email", "properties", "expires-at"] where options[name] != nil {
                    throw Options.UsageError(description: "--\(name) cannot be combined with --batch")
                }
                return runBatch(defaultProjectID: IdentityEnvironment.projectID(options), signers: &signers)
            }
            return try runSingle(options, signers: &signers)
        } catch {
            FileHandle.standardError.write(Data("error: \(error)\nRun SessionEngineDemo sign --help for usage.\n".utf8))
            return 2
        }
    }

    private static func runSingle(_ options: Options, signers: inout Signers) throws(Options.UsageError) -> Int32 {
        guard let email = options["email"] else { throw Options.UsageError(description: "--email is required") }
        let projectID = try IdentityEnvironment.requiredProjectID(options)
        var expiresAt: Int64?
        if let text = options["expires-at"] {
            guard options["lifetime"] == nil else {
                throw Options.UsageError(description: "pass either --lifetime or --expires-at")
            }
            guard let value = Int64(text) else {
                throw Options.UsageError(description: "--expires-at must be whole Unix seconds")
            }
            expiresAt = value
        }
        do {
            var properties: IdentityProperties?
            if let json = options["properties"] {
                properties = try IdentityProperties(json: Data(json.utf8))
            }
            let credential = try signers.sign(
                projectID: projectID,
                email: email,
                properties: properties,
                expiresAt: expiresAt
            )
            print(credentialLine(credential))
            return 0
        } catch {
            FileHandle.standardError.write(Data("error: \(reason(error))\n".utf8))
            return 1
        }
    }

    /// Signs standard input line by line as it arrives, holding one line at a time; a line over the bound is
    /// answered with an error that does not show it.
    private static func runBatch(defaultProjectID: String?, signers: inout Signers) -> Int32 {
        var failed = false
        var input = InputLines()
        while true {
            let line: InputLines.Line
            do {
                guard let next = try input.next() else { break }
                line = next
            } catch {
                FileHandle.standardError.write(Data("error: \(error.describedReason)\n".utf8))
                return 2
            }
            do {
                guard case .text(let line) = line else {
                    throw InputProblem(describedReason: "lineTooLong: \(InputLines.tooLongReason)")
                }
                guard !line.allSatisfy(\.isWhitespace) else { continue }
                let request = try JSONDecoder().decode(SignRequest.self, from: Data(line.utf8))
                guard let projectID = request.projectId ?? defaultProjectID else {
                    throw InputProblem(
                        describedReason: "invalidProjectID: the line has no projectId and no default was given "
                            + "(--project-id or \(IdentityEnvironment.projectVariable))"
                    )
                }
                let credential = try signers.sign(
                    projectID: projectID,
                    email: request.email,
                    properties: request.properties,
                    expiresAt: request.expiresAt
                )
                print(credentialLine(credential))
            } catch {
                failed = true
                var object = JSONObject()
                object.add("error", reason(error))
                print(object.json)
            }
        }
        return failed ? 1 : 0
    }

    /// The credential as the backend returns it: `{"email","expiresAt","signature","properties"?}`, with the
    /// properties in their canonical form, numbers written as JavaScript writes them.
    static func credentialLine(_ credential: IdentityCredential) -> String {
        var object = JSONObject()
        object.add("email", credential.email)
        object.add("expiresAt", credential.expiresAt)
        object.add("signature", credential.signature)
        if let properties = credential.properties {
            object.add("properties", json: properties.canonicalJSON)
        }
        return object.json
    }

    private static func reason(_ error: any Error) -> String {
        if let error = error as? CredentialError { return error.description }
        return describeDecodingFailure(error)
    }
}

/// The signers used so far, one per project ID.
private struct Signers {
    let secret: String
    let lifetime: Duration
    private var byProject: [String: IdentitySigner] = [:]

    init(secret: String, lifetime: Duration) {
        self.secret = secret
        self.lifetime = lifetime
    }

    mutating func sign(
        projectID: String,
        email: String,
        properties: IdentityProperties?,
        expiresAt: Int64?
    ) throws(CredentialError) -> IdentityCredential {
        let signer: IdentitySigner
        if let existing = byProject[projectID] {
            signer = existing
        } else {
            signer = try IdentitySigner(projectID: projectID, secret: secret, lifetime: lifetime)
            byProject[projectID] = signer
        }
        if let expiresAt {
            return try signer.sign(email: email, properties: properties, expiresAt: expiresAt)
        }
        return try signer.sign(email: email, properties: properties)
    }
}

/// One line of `sign --batch` input.
private struct SignRequest: Decodable {
    private enum CodingKeys: String, CodingKey {
        case projectId, email, expiresAt, properties
    }

    private struct AnyKey: CodingKey {
        let stringValue: String
        var intValue: Int? { nil }
        init(stringValue: String) { self.stringValue = stringValue }
        init?(intValue: Int) { nil }
    }

    let projectId: String?
    let email: String
    let expiresAt: Int64?
    let properties: IdentityProperties?

    init(from decoder: any Decoder) throws {
        // An unknown field is most likely a misspelt one ("expires_at"); ignoring it would sign something else.
        for key in try decoder.container(keyedBy: AnyKey.self).allKeys
        where CodingKeys(stringValue: key.stringValue) == nil {
            throw InputProblem(describedReason: "malformedJSON: unknown field \(Self.quote(key.stringValue))")
        }
        let container = try decoder.container(keyedBy: CodingKeys.self)
        projectId = try container.decodeIfPresent(String.self, forKey: .projectId)
        email = try container.decode(String.self, forKey: .email)
        expiresAt = try container.decodeIfPresent(Int64.self, forKey: .expiresAt)
        if container.contains(.properties) {
            if try container.decodeNil(forKey: .properties) {
                throw InputProblem(
                    describedReason: "malformedJSON: properties must be a JSON object; omit it for a v1 credential"
                )
            }
            properties = try container.decode(IdentityProperties.self, forKey: .properties)
        } else {
            properties = nil
        }
    }

    private static func quote(_ key: String) -> String {
        var text = ""
        for scalar in key.unicodeScalars.prefix(64) {
            text += scalar.escaped(asASCII: true)
        }
        return "'\(text)\(key.unicodeScalars.count > 64 ? "..." : "")'"
    }
}
