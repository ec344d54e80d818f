public import Foundation

/// A short-lived identity credential signed by the host's backend.
///
/// A credential is validated when it is created or decoded: the email is non-empty, already normalized and free of
/// control characters, the signature is 64 lowercase hexadecimal characters, `expiresAt` is positive and the
/// properties obey every rule of ``IdentityProperties``. The signature itself is not checked here: only the service
/// (or the backend product's `IdentityVerifier`) holds the secret.
///
/// A credential acts as a bearer credential until it expires, so its ``description``, ``debugDescription`` and
/// mirror show the signature as `<redacted>`. Keep it in memory only.
public struct IdentityCredential: Sendable, Hashable, Codable, CustomStringConvertible,
    CustomDebugStringConvertible, CustomReflectable
{
    /// The normalized email the credential identifies.
    ///
    /// The credential keeps the email's UTF-8 bytes, so each call makes the text anew.
    public var email: String { fields.facts.email }
    /// The expiry, in integer Unix seconds.
    public var expiresAt: Int64 { fields.facts.expiresAt }
    /// The HMAC-SHA256 signature as 64 lowercase hexadecimal characters.
    ///
    /// The credential keeps the signature's 32 bytes, so each call makes the text anew.
    public var signature: String { fields.signature.text }
    /// The signature's bytes, which the engine compares and keeps instead of the text.
    package var signatureBytes: Signature { fields.signature }
    /// The signed properties, or `nil` for a `v1` credential.
    public var properties: IdentityProperties? { fields.properties?.value }
    /// The public facts, which a ``SessionIdentity`` keeps instead of the credential.
    package var facts: Facts { fields.facts }

    /// The fields, held once for every copy: a copy of a credential is one reference, not one per string, so a
    /// credential handed to thousands of callers or pieces of work at once is one reference count they share, and the
    /// engine's machine and store each hold a word for it.
    private let fields: Fields

    /// The facts (the expiry, the version and the email), the signature's bytes and the properties.
    private final class Fields: Sendable {
        let facts: Facts
        let signature: Signature
        /// The properties, boxed: a `v1` credential has none and pays one word for them, where the optional itself
        /// takes three.
        let properties: PropertiesBox?

        init(facts: Facts, signature: Signature, properties: IdentityProperties?) {
            self.facts = facts
            self.signature = signature
            self.properties = properties.map(PropertiesBox.init)
        }
    }

    /// A `v2` credential's properties, in a box of their own.
    private final class PropertiesBox: Sendable {
        let value: IdentityProperties

        init(_ value: IdentityProperties) {
            self.value = value
        }
    }

    /// The longest lifetime the contract allows a credential: 24 hours from when it was issued.
    ///
    /// The engine refuses a fetched or handed-over credential whose remaining lifetime is longer (beyond the
    /// configured clock-skew tolerance), as the service does.
    public static let maximumLifetime: Duration = .seconds(24 * 60 * 60)

    /// Creates a credential from its fields, validating them.
    ///
    /// - Parameters:
    ///   - email: The normalized email the backend signed.
    ///   - expiresAt: The expiry, in integer Unix seconds.
    ///   - signature: The HMAC-SHA256 signature as 64 lowercase hexadecimal characters.
    ///   - properties: The signed properties; `nil` for a `v1` credential, a set (even empty) for `v2`.
    /// - Throws: ``CredentialError`` naming the broken rule.
    public init(
        email: String,
        expiresAt: Int64,
        signature: String,
        properties: IdentityProperties? = nil
    ) throws(CredentialError) {
        try IdentityEmail.validateReceived(email)
        guard expiresAt > 0 else {
            throw CredentialError(.invalidExpiresAt, reason: "expiresAt must be a positive number of Unix seconds")
        }
        guard let signature = Signature(lowercaseHex: signature) else {
            throw CredentialError(
                .invalidSignature, reason: "the signature must be 64 lowercase hexadecimal characters")
        }
        self.init(validatedEmail: email, expiresAt: expiresAt, signature: signature, properties: properties)
    }

    /// Creates a credential from its fields and a dictionary of properties, validating them.
    ///
    /// - Parameters:
    ///   - email: The normalized email the backend signed.
    ///   - expiresAt: The expiry, in integer Unix seconds.
    ///   - signature: The HMAC-SHA256 signature as 64 lowercase hexadecimal characters.
    ///   - properties: The signed properties; an empty dictionary still selects `v2`.
    /// - Throws: ``CredentialError`` naming the broken rule.
    public init(
        email: String,
        expiresAt: Int64,
        signature: String,
        properties: [String: IdentityProperty]
    ) throws(CredentialError) {
        try self.init(
            email: email,
            expiresAt: expiresAt,
            signature: signature,
            properties: IdentityProperties(properties)
        )
    }

    /// A credential from fields already validated: a normalized email, a positive expiry and properties that obey
    /// their rules.
    package init(
        validatedEmail email: String, expiresAt: Int64, signature: Signature, properties: IdentityProperties?
    ) {
        fields = Fields(
            facts: Facts(email: email, expiresAt: expiresAt, version: properties == nil ? .v1 : .v2),
            signature: signature, properties: properties)
    }

    /// Whether two credentials have the same fields; copies of one credential compare without reading them.
    public static func == (lhs: IdentityCredential, rhs: IdentityCredential) -> Bool {
        if lhs.fields === rhs.fields { return true }
        return lhs.signatureBytes == rhs.signatureBytes && lhs.facts == rhs.facts && lhs.properties == rhs.properties
    }

    /// Hashes the fields that ``==(_:_:)`` compares.
    public func hash(into hasher: inout Hasher) {
        hasher.combine(email)
        hasher.combine(expiresAt)
        hasher.combine(signatureBytes)
        hasher.combine(properties)
    }

    /// `v1` without properties, `v2` with properties (an empty set included).
    public var version: IdentityVersion { fields.facts.version }

    /// The expiry as a date.
    public var expirationDate: Date { Date(timeIntervalSince1970: TimeInterval(expiresAt)) }

    /// Whether the credential has not yet expired at `date`.
    ///
    /// This checks local expiry only; it never checks the signature. A credential is valid strictly before
    /// `expiresAt` and expired from that second on.
    ///
    /// - Parameter date: The moment to check.
    /// - Returns: `true` when `date` is before ``expiresAt``.
    public func isValid(at date: Date) -> Bool {
        date.timeIntervalSince1970 < TimeInterval(expiresAt)
    }

    /// The exact text the backend signed for this credential.
    ///
    /// - Parameter projectID: The internal project ID the backend signs with.
    /// - Returns: The `v1` or `v2` payload; it holds no secret.
    public func signingPayload(projectID: String) -> String {
        IdentityPayload.make(projectID: projectID, expiresAt: expiresAt, email: email, properties: properties)
    }

    /// Decodes and validates the backend's JSON response `{"email","expiresAt","signature","properties"?}`.
    ///
    /// The JSON is read strictly (see the contract's "Security" section): a key repeated in any object, a
    /// byte-order mark, invalid UTF-8 or an `expiresAt` that is not an integer is refused, so the credential cannot
    /// mean one thing here and another to a JavaScript service, whose `JSON.parse` keeps the last of two equal keys.
    /// Unknown fields are ignored. An escaped lone surrogate in the email is decoded as U+FFFD, as the reference
    /// backend's UTF-8 encoder signs it; in a property value it is refused with
    /// ``CredentialError/Code/unpairedSurrogate``, because the reference backend signs the escape itself.
    ///
    /// - Parameter json: The UTF-8 JSON bytes.
    /// - Throws: ``CredentialError``: ``CredentialError/Code/malformedJSON`` for input that is not that object, or
    ///   the broken rule.
    public init(json: Data) throws(CredentialError) {
        let parsed: JSONValue
        do {
            parsed = try StrictJSON.parse(Array(json))
        } catch {
            throw CredentialError(.malformedJSON, reason: "the input is not valid JSON: \(error.problem)")
        }
        guard case .object(let members) = parsed else {
            throw CredentialError(.malformedJSON, reason: "the top level is not a JSON object")
        }
        var email: String?
        var expiresAt: Int64?
        var signature: String?
        var properties: IdentityProperties?
        for member in members {
            let (key, value) = (member.key, member.value)
            switch (key, value) {
            case ("email", .string(let text, _)):
                email = text
            case ("expiresAt", .number(let text)):
                guard let seconds = Int64(text) else {
                    throw CredentialError(.malformedJSON, reason: "'expiresAt' must be an integer that fits Int64")
                }
                expiresAt = seconds
            case ("signature", .string(let text, _)):
                signature = text
            case ("properties", .object(let object)):
                properties = try IdentityProperties(members: object)
            case ("email", _), ("expiresAt", _), ("signature", _), ("properties", _):
                throw CredentialError(.malformedJSON, reason: "'\(key)' has the wrong type")
            default:
                continue
            }
        }
        guard let email else { throw Self.missing("email") }
        guard let expiresAt else { throw Self.missing("expiresAt") }
        guard let signature else { throw Self.missing("signature") }
        try self.init(email: email, expiresAt: expiresAt, signature: signature, properties: properties)
    }

    private static func missing(_ field: String) -> CredentialError {
        CredentialError(.malformedJSON, reason: "the required field '\(field)' is missing")
    }

    private enum CodingKeys: String, CodingKey {
        case email, expiresAt, signature, properties
    }

    /// Decodes and validates a credential.
    ///
    /// - Throws: ``CredentialError`` for a broken rule, or a `DecodingError` for JSON of the wrong shape.
    public init(from decoder: any Decoder) throws {
        let container = try decoder.container(keyedBy: CodingKeys.self)
        let email = try container.decode(String.self, forKey: .email)
        let expiresAt = try container.decode(Int64.self, forKey: .expiresAt)
        let signature = try container.decode(String.self, forKey: .signature)
        // An absent `properties` selects v1; a present one must be an object (`null` is not a property set).
        let properties =
            container.contains(.properties)
            ? try container.decode(IdentityProperties.self, forKey: .properties) : nil
        try self.init(email: email, expiresAt: expiresAt, signature: signature, properties: properties)
    }

    /// Encodes the credential as the backend's JSON response.
    public func encode(to encoder: any Encoder) throws {
        var container = encoder.container(keyedBy: CodingKeys.self)
        try container.encode(email, forKey: .email)
        try container.encode(expiresAt, forKey: .expiresAt)
        try container.encode(signature, forKey: .signature)
        try container.encodeIfPresent(properties, forKey: .properties)
    }

    /// The credential with its signature redacted.
    public var description: String {
        var text = "IdentityCredential(\(version), email: \(email), expiresAt: \(expiresAt), signature: <redacted>"
        if let properties {
            text += ", properties: \(properties.keys)"
        }
        return text + ")"
    }

    /// The same as ``description``: the signature is redacted.
    public var debugDescription: String { description }

    /// A mirror that redacts the signature, so `dump(_:)` does not reveal it.
    public var customMirror: Mirror {
        Mirror(
            self,
            children: [
                "email": email, "expiresAt": expiresAt, "signature": "<redacted>",
                "properties": properties.map { "keys \($0.keys)" } ?? "none",
            ],
            displayStyle: .struct
        )
    }

    /// Describes a decoding failure by its path and kind, never by the offending value.
    static func describe(_ error: any Error) -> String {
        guard let error = error as? DecodingError else { return "the input is not valid JSON" }
        func path(_ context: DecodingError.Context) -> String {
            let path = context.codingPath.map(\.stringValue).joined(separator: ".")
            return path.isEmpty ? "the top level" : "'\(path)'"
        }
        switch error {
        case .keyNotFound(let key, _):
            return "the required field '\(key.stringValue)' is missing"
        case .typeMismatch(_, let context), .valueNotFound(_, let context):
            return "\(path(context)) has the wrong type"
        case .dataCorrupted(let context):
            return context.codingPath.isEmpty ? "the input is not valid JSON" : "\(path(context)) is not valid"
        @unknown default:
            return "the input is not valid JSON"
        }
    }
}
