/// The `X-AppNorth-Identity-*` headers that carry a credential on an identified request.
///
/// Credentials travel only in these headers, never in a query or a body. Every value is printable ASCII, so CR,
/// LF or NUL can never reach a header, and every value decodes back to exactly what was encoded:
///
/// | Header | Value |
/// |---|---|
/// | `X-AppNorth-Identity-Version` | `v1` or `v2` |
/// | `X-AppNorth-Identity-Email` | the normalized email's UTF-8, with every byte outside `!`…`~` and every `%` written as `%XX` (uppercase hex) |
/// | `X-AppNorth-Identity-Expires-At` | decimal Unix seconds |
/// | `X-AppNorth-Identity-Signature` | 64 lowercase hex characters |
/// | `X-AppNorth-Identity-Properties` | `v2` only: the canonical properties JSON, as unpadded base64url of its UTF-8 |
///
/// ``description``, ``debugDescription`` and the mirror redact the signature and the properties, and so do those of
/// each ``Field``.
public struct IdentityHeaders: Sendable, Hashable, Sequence, CustomStringConvertible, CustomDebugStringConvertible,
    CustomReflectable
{
    /// One header: a name and a printable-ASCII value.
    ///
    /// ``description``, ``debugDescription`` and the mirror show the value of every header but the signature and
    /// the properties, which they show as `<redacted>`.
    public struct Field: Sendable, Hashable, CustomStringConvertible, CustomDebugStringConvertible,
        CustomReflectable
    {
        /// The header name, such as `X-AppNorth-Identity-Email`.
        public let name: String
        /// The header value; printable ASCII only.
        public let value: String

        /// Creates a header field.
        ///
        /// - Parameters:
        ///   - name: The header name.
        ///   - value: The header value.
        public init(name: String, value: String) {
            self.name = name
            self.value = value
        }

        /// Whether the value is secret-equivalent (the signature) or may be personal data (the properties).
        var isRedacted: Bool {
            let lowered = name.lowercased()
            return lowered != IdentityHeaders.versionName.lowercased()
                && lowered != IdentityHeaders.emailName.lowercased()
                && lowered != IdentityHeaders.expiresAtName.lowercased()
        }

        /// The value as it may be shown: `<redacted>` for the signature, the properties and any unknown header.
        var shownValue: String { isRedacted ? "<redacted>" : value }

        /// `Name: value`, with the signature and properties redacted.
        public var description: String { "\(name): \(shownValue)" }

        /// The same as ``description``.
        public var debugDescription: String { description }

        /// A mirror that redacts the value as ``description`` does.
        public var customMirror: Mirror {
            Mirror(self, children: ["name": name, "value": shownValue], displayStyle: .struct)
        }
    }

    /// `X-AppNorth-Identity-Version`.
    public static let versionName = "X-AppNorth-Identity-Version"
    /// `X-AppNorth-Identity-Email`.
    public static let emailName = "X-AppNorth-Identity-Email"
    /// `X-AppNorth-Identity-Expires-At`.
    public static let expiresAtName = "X-AppNorth-Identity-Expires-At"
    /// `X-AppNorth-Identity-Signature`.
    public static let signatureName = "X-AppNorth-Identity-Signature"
    /// `X-AppNorth-Identity-Properties`.
    public static let propertiesName = "X-AppNorth-Identity-Properties"

    private static let prefix = "x-appnorth-identity-"

    /// The header fields in a fixed order: version, email, expiry, signature, then properties for `v2`.
    public let fields: [Field]

    /// Encodes a credential as identity headers.
    ///
    /// - Parameter credential: The credential to send.
    public init(_ credential: IdentityCredential) {
        var fields = [
            Field(name: Self.versionName, value: credential.version.rawValue),
            Field(name: Self.emailName, value: HeaderEncoding.percentEncode(credential.email)),
            Field(name: Self.expiresAtName, value: String(credential.expiresAt)),
            Field(name: Self.signatureName, value: credential.signature),
        ]
        if let properties = credential.properties {
            fields.append(
                Field(name: Self.propertiesName, value: HeaderEncoding.base64URLEncode(properties.canonicalJSON))
            )
        }
        self.fields = fields
    }

    /// Collects the identity headers out of a request's headers.
    ///
    /// Names are matched case-insensitively; headers that are not `X-AppNorth-Identity-*` are ignored. Nothing is
    /// decoded until ``credential()`` is called.
    ///
    /// - Parameter requestHeaders: All of a request's header names and values.
    public init(requestHeaders: some Sequence<(name: String, value: String)>) {
        fields = requestHeaders.filter { $0.name.lowercased().hasPrefix(Self.prefix) }
            .map { Field(name: $0.name, value: $0.value) }
    }

    /// The value of the header with this name (matched case-insensitively), or `nil`.
    ///
    /// - Parameter name: A header name.
    public subscript(name: String) -> String? {
        let lowered = name.lowercased()
        return fields.first { $0.name.lowercased() == lowered }?.value
    }

    /// Iterates over the header fields.
    public func makeIterator() -> IndexingIterator<[Field]> {
        fields.makeIterator()
    }

    /// Decodes and validates the credential the headers carry.
    ///
    /// Decoding is canonical-only: every header must be exactly what ``init(_:)`` writes for some credential. The
    /// expiry must be the canonical decimal (no sign, no leading zero) and the properties the canonical JSON of
    /// their own values, byte for byte (sorted keys, no white space, JavaScript's number form, no repeated key), so
    /// a client cannot make the verifier accept one text while a service behind it reads another.
    ///
    /// - Returns: The credential.
    /// - Throws: ``CredentialError``: ``CredentialError/Code/missingHeader``,
    ///   ``CredentialError/Code/invalidHeader`` (a repeated header, a value that is not printable ASCII, does not
    ///   decode or is not canonical), ``CredentialError/Code/unsupportedVersion``, or the credential's broken rule.
    public func credential() throws(CredentialError) -> IdentityCredential {
        let version = try value(Self.versionName)
        let email = try HeaderEncoding.percentDecode(try value(Self.emailName), header: Self.emailName)
        let expiresText = try value(Self.expiresAtName)
        // Only the canonical decimal: no sign, no leading zero, so one expiry has one spelling.
        guard expiresText.utf8.allSatisfy({ $0 >= 0x30 && $0 <= 0x39 }), let expiresAt = Int64(expiresText),
            String(expiresAt) == expiresText
        else {
            throw CredentialError(
                .invalidHeader,
                key: Self.expiresAtName,
                reason: "\(Self.expiresAtName) must be canonical decimal Unix seconds"
            )
        }
        let signature = try value(Self.signatureName)
        let propertiesText = try optionalValue(Self.propertiesName)
        let properties: IdentityProperties?
        switch (version, propertiesText) {
        case ("v1", nil):
            properties = nil
        case ("v2", let text?):
            let json = try HeaderEncoding.base64URLDecode(text, header: Self.propertiesName)
            properties = try IdentityProperties.decode(canonicalJSON: json)
        case ("v1", _?):
            throw CredentialError(
                .unsupportedVersion,
                key: Self.propertiesName,
                reason: "a v1 credential must not carry \(Self.propertiesName)"
            )
        case ("v2", nil):
            throw CredentialError(.missingHeader, key: Self.propertiesName, reason: "\(Self.propertiesName) is missing")
        default:
            throw CredentialError(
                .unsupportedVersion,
                key: Self.versionName,
                reason: "\(Self.versionName) must be v1 or v2"
            )
        }
        return try IdentityCredential(email: email, expiresAt: expiresAt, signature: signature, properties: properties)
    }

    /// The headers with the signature and the properties redacted.
    public var description: String {
        "IdentityHeaders(\(fields.map(\.description).joined(separator: ", ")))"
    }

    /// The same as ``description``.
    public var debugDescription: String { description }

    /// A mirror over the fields, each redacted as ``Field/description`` is.
    public var customMirror: Mirror {
        Mirror(self, children: ["fields": fields], displayStyle: .struct)
    }

    private func value(_ name: String) throws(CredentialError) -> String {
        guard let value = try optionalValue(name) else {
            throw CredentialError(.missingHeader, key: name, reason: "\(name) is missing")
        }
        return value
    }

    private func optionalValue(_ name: String) throws(CredentialError) -> String? {
        let lowered = name.lowercased()
        let matches = fields.filter { $0.name.lowercased() == lowered }
        guard matches.count <= 1 else {
            throw CredentialError(.invalidHeader, key: name, reason: "\(name) appears more than once")
        }
        guard let value = matches.first?.value else { return nil }
        guard !value.isEmpty, value.utf8.allSatisfy({ $0 >= 0x21 && $0 <= 0x7E }) else {
            throw CredentialError(
                .invalidHeader,
                key: name,
                reason: "\(name) must be non-empty printable ASCII without spaces"
            )
        }
        return value
    }
}
