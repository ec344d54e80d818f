public import Foundation

extension IdentityProperties {
    /// Decodes and validates a JSON object of properties, strictly.
    ///
    /// The JSON is read as ``IdentityCredential/init(json:)`` reads it: a repeated key, a byte-order mark or invalid
    /// UTF-8 is refused, and a value must be a string, a number or a boolean.
    ///
    /// - Parameter json: The UTF-8 bytes of a JSON object.
    /// - Throws: ``CredentialError``: ``CredentialError/Code/malformedJSON`` for input that is not a JSON object,
    ///   ``CredentialError/Code/invalidPropertyValue`` for null, objects and arrays, or the broken rule.
    public init(json: Data) throws(CredentialError) {
        self = try Self.parse(Array(json))
    }

    /// Decodes the properties a `v2` header carries: they must be the canonical JSON of their own values, byte for
    /// byte, so that what the verifier accepts is exactly what was signed and what any other parser will read.
    ///
    /// - Parameter json: The decoded header text.
    /// - Returns: The validated properties.
    /// - Throws: ``CredentialError``: ``CredentialError/Code/invalidHeader`` for JSON that is valid but not
    ///   canonical (keys out of order, white space, another number form, escapes that are not needed), or what
    ///   ``init(json:)`` throws.
    static func decode(canonicalJSON json: String) throws(CredentialError) -> IdentityProperties {
        let properties = try parse(Array(json.utf8))
        guard properties.canonicalJSON.utf8.elementsEqual(json.utf8) else {
            throw CredentialError(
                .invalidHeader,
                key: IdentityHeaders.propertiesName,
                reason: "\(IdentityHeaders.propertiesName) is not the canonical JSON of its properties"
            )
        }
        return properties
    }

    private static func parse(_ bytes: [UInt8]) throws(CredentialError) -> IdentityProperties {
        let parsed: JSONValue
        do {
            parsed = try StrictJSON.parse(bytes)
        } catch {
            throw CredentialError(.malformedJSON, reason: "properties: the input is not valid JSON: \(error.problem)")
        }
        guard case .object(let members) = parsed else {
            throw CredentialError(.malformedJSON, reason: "properties must be a JSON object")
        }
        return try IdentityProperties(members: members)
    }

    /// Builds properties from the members of a parsed JSON object.
    init(members: [JSONMember]) throws(CredentialError) {
        var values: [String: IdentityProperty] = [:]
        var unpaired: [String] = []
        for member in members {
            let (key, value) = (member.key, member.value)
            switch value {
            case .string(let text, let replaced):
                values[key] = .string(text)
                if replaced { unpaired.append(key) }
            case .number(let text):
                // The grammar was checked; Double's parser rounds correctly, as JavaScript's does.
                values[key] = .number(Double(text) ?? .nan)
            case .boolean(let flag):
                values[key] = .boolean(flag)
            case .null:
                throw CredentialError(.invalidPropertyValue, reason: "a property value must not be null")
            case .object, .array:
                throw CredentialError(
                    .invalidPropertyValue,
                    reason: "a property value must be a string, a number or a boolean, not an object or an array"
                )
            }
        }
        guard values.count == members.count else {
            throw CredentialError(.malformedJSON, reason: "properties: two keys are the same text")
        }
        try self.init(values)
        if let key = unpaired.sorted(by: Self.canonicalOrder).first {
            throw CredentialError(
                .unpairedSurrogate,
                key: key,
                reason: "property \(quoted(key)) holds an escaped lone surrogate: the reference backend signs the "
                    + "escape itself, which a Swift string cannot hold, so this credential can never verify; the "
                    + "backend must not put unpaired surrogates in property values"
            )
        }
    }
}
