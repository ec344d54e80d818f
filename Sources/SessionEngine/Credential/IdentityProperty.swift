/// One signed property value of a credential.
///
/// The contract allows strings of at most 200 UTF-16 code units, finite numbers and booleans. Objects, arrays and
/// null are not representable; decoding them from JSON fails with ``CredentialError/Code/invalidPropertyValue``.
/// The limits are enforced by ``IdentityProperties``, which holds a validated set of them.
///
/// A value may be personal data: ``description``, ``debugDescription`` and the mirror show its kind only.
public enum IdentityProperty: Sendable, Hashable, Codable, CustomStringConvertible, CustomDebugStringConvertible,
    CustomReflectable
{
    /// A string of at most 200 UTF-16 code units.
    case string(String)
    /// A finite number, serialized as JavaScript serializes it.
    case number(Double)
    /// A boolean.
    case boolean(Bool)

    /// Decodes a JSON string, number or boolean.
    ///
    /// - Throws: ``CredentialError`` with code ``CredentialError/Code/invalidPropertyValue`` for null, an object or
    ///   an array.
    public init(from decoder: any Decoder) throws {
        let container = try decoder.singleValueContainer()
        if container.decodeNil() {
            throw CredentialError(.invalidPropertyValue, reason: "a property value must not be null")
        }
        if let value = try? container.decode(Bool.self) {
            self = .boolean(value)
        } else if let value = try? container.decode(Double.self) {
            self = .number(value)
        } else if let value = try? container.decode(String.self) {
            self = .string(value)
        } else {
            throw CredentialError(
                .invalidPropertyValue,
                reason: "a property value must be a string, a number or a boolean, not an object or an array"
            )
        }
    }

    /// Encodes the value as a JSON string, number or boolean.
    public func encode(to encoder: any Encoder) throws {
        var container = encoder.singleValueContainer()
        switch self {
        case .string(let value): try container.encode(value)
        case .number(let value): try container.encode(value)
        case .boolean(let value): try container.encode(value)
        }
    }

    /// The kind of value, never the value: `string(<redacted>)`, `number(<redacted>)` or `boolean(<redacted>)`.
    public var description: String {
        switch self {
        case .string: "string(<redacted>)"
        case .number: "number(<redacted>)"
        case .boolean: "boolean(<redacted>)"
        }
    }

    /// The same as ``description``.
    public var debugDescription: String { description }

    /// A mirror that shows the kind of value only.
    public var customMirror: Mirror {
        Mirror(self, children: ["value": description], displayStyle: .enum)
    }
}
