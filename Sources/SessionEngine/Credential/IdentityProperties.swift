/// A validated set of signed properties, with its canonical JSON computed once.
///
/// Construction enforces every rule of the contract, in this order, reporting the first failure:
/// at most 20 keys; then, for each key in canonical order, the key matches `^[A-Za-z][A-Za-z0-9_.-]{0,63}$`,
/// is not `constructor`, a string value has at most 200 UTF-16 code units and a number is finite; last, the
/// canonical JSON fits in 2048 UTF-8 bytes.
///
/// The canonical JSON is byte-identical to the reference backend's `JSON.stringify` of the object with its keys
/// sorted by UTF-16 code units. An empty set is valid and still selects the `v2` payload (`{}`).
///
/// Property values may be personal data: ``description``, ``debugDescription`` and the mirror show the keys only.
public struct IdentityProperties: Sendable, Hashable, Codable, CustomStringConvertible, CustomDebugStringConvertible,
    CustomReflectable
{
    /// The largest number of keys a set may hold.
    public static let maximumCount = 20
    /// The longest key, in characters.
    public static let maximumKeyLength = 64
    /// The longest string value, in UTF-16 code units (JavaScript's `length`).
    public static let maximumStringLength = 200
    /// The largest canonical JSON, in UTF-8 bytes.
    public static let maximumCanonicalByteCount = 2048
    /// The empty set, which still selects the `v2` payload.
    public static let empty = IdentityProperties(validated: [:], canonicalJSON: "{}")

    /// The properties by key.
    public let values: [String: IdentityProperty]
    /// The canonical JSON that is signed and sent: keys sorted by UTF-16 code units, `JSON.stringify` formatting.
    public let canonicalJSON: String

    /// Validates a set of properties.
    ///
    /// - Parameter values: The properties by key.
    /// - Throws: ``CredentialError`` naming the first broken rule and, for per-key rules, the key.
    public init(_ values: [String: IdentityProperty]) throws(CredentialError) {
        guard values.count <= Self.maximumCount else {
            throw CredentialError(
                .tooManyProperties,
                reason: "\(values.count) property keys; at most \(Self.maximumCount) are allowed"
            )
        }
        let keys = values.keys.sorted(by: Self.canonicalOrder)
        var json = "{"
        json.reserveCapacity(64 * values.count + 2)
        for (index, key) in keys.enumerated() {
            let value = values[key]!
            try Self.validate(key: key, value: value)
            if index > 0 { json.append(",") }
            ECMAScript.appendJSONString(key, to: &json)
            json.append(":")
            switch value {
            case .string(let string): ECMAScript.appendJSONString(string, to: &json)
            case .number(let number): json.append(ECMAScript.numberToString(number))
            case .boolean(let bool): json.append(bool ? "true" : "false")
            }
        }
        json.append("}")
        guard json.utf8.count <= Self.maximumCanonicalByteCount else {
            throw CredentialError(
                .propertiesTooLarge,
                reason: "canonical properties JSON is \(json.utf8.count) bytes; at most "
                    + "\(Self.maximumCanonicalByteCount) are allowed"
            )
        }
        self.init(validated: values, canonicalJSON: json)
    }

    private init(validated values: [String: IdentityProperty], canonicalJSON: String) {
        self.values = values
        self.canonicalJSON = canonicalJSON
    }

    /// The number of properties.
    public var count: Int { values.count }

    /// Whether the set is empty.
    public var isEmpty: Bool { values.isEmpty }

    /// The value for a key, if present.
    public subscript(key: String) -> IdentityProperty? { values[key] }

    /// The keys in canonical order.
    public var keys: [String] { values.keys.sorted(by: Self.canonicalOrder) }

    /// The keys in canonical order. Values are left out, as they may be personal data.
    public var description: String { "IdentityProperties(keys: \(keys))" }

    /// The same as ``description``: values are left out.
    public var debugDescription: String { description }

    /// A mirror that shows the keys only, so `dump(_:)` does not reveal the values or the canonical JSON.
    public var customMirror: Mirror {
        Mirror(self, children: ["keys": keys], displayStyle: .struct)
    }

    /// Decodes and validates a JSON object of properties.
    ///
    /// - Throws: ``CredentialError`` for a value that is not a string, number or boolean, or a broken rule.
    public init(from decoder: any Decoder) throws {
        let container = try decoder.singleValueContainer()
        let values = try container.decode([String: IdentityProperty].self)
        try self.init(values)
    }

    /// Encodes the properties as a JSON object.
    public func encode(to encoder: any Encoder) throws {
        var container = encoder.singleValueContainer()
        try container.encode(values)
    }

    /// Two property sets are equal when they hold the same keys and values.
    public static func == (lhs: IdentityProperties, rhs: IdentityProperties) -> Bool {
        lhs.canonicalJSON.utf8.elementsEqual(rhs.canonicalJSON.utf8)
    }

    /// Hashes the canonical JSON.
    ///
    /// Equality compares bytes, not canonical equivalence: `é` and `e` + U+0301 sign differently.
    public func hash(into hasher: inout Hasher) {
        hasher.combine(canonicalJSON)
    }

    /// Orders keys by UTF-16 code units, as JavaScript's default `Array.prototype.sort` does.
    static func canonicalOrder(_ lhs: String, _ rhs: String) -> Bool {
        lhs.utf16.lexicographicallyPrecedes(rhs.utf16)
    }

    private static func validate(key: String, value: IdentityProperty) throws(CredentialError) {
        guard isValidKey(key) else {
            // The key is not quoted: it may come from a response, and an invalid key can hold anything.
            throw CredentialError(
                .invalidPropertyKey,
                reason: "a property key must start with a letter and hold only letters, digits, "
                    + "'_', '.' or '-', up to \(maximumKeyLength) characters"
            )
        }
        guard key != "constructor" else {
            throw CredentialError(.forbiddenPropertyKey, key: key, reason: "property key 'constructor' is forbidden")
        }
        switch value {
        case .string(let string):
            let length = ECMAScript.utf16Length(string)
            guard length <= maximumStringLength else {
                throw CredentialError(
                    .propertyStringTooLong,
                    key: key,
                    reason: "property \(quoted(key)) is \(length) UTF-16 code units long; at most "
                        + "\(maximumStringLength) are allowed"
                )
            }
        case .number(let number):
            guard number.isFinite else {
                throw CredentialError(
                    .propertyNumberNotFinite,
                    key: key,
                    reason: "property \(quoted(key)) must be a finite number"
                )
            }
        case .boolean:
            break
        }
    }

    private static func isValidKey(_ key: String) -> Bool {
        let utf8 = key.utf8
        guard let first = utf8.first, utf8.count <= maximumKeyLength, isASCIILetter(first) else { return false }
        return utf8.allSatisfy { byte in
            isASCIILetter(byte) || (byte >= 0x30 && byte <= 0x39) || byte == 0x5F || byte == 0x2E || byte == 0x2D
        }
    }

    private static func isASCIILetter(_ byte: UInt8) -> Bool {
        (byte >= 0x41 && byte <= 0x5A) || (byte >= 0x61 && byte <= 0x7A)
    }
}

/// Quotes a property key that passed the key rule (`^[A-Za-z][A-Za-z0-9_.-]{0,63}$`) for an error message.
func quoted(_ key: String) -> String {
    "'\(key)'"
}
