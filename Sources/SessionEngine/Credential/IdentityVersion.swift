/// The version of a credential's signing payload.
public enum IdentityVersion: String, Sendable, Hashable, Codable, CustomStringConvertible {
    /// `v1\n<projectId>\n<expiresAt>\n<email>`: a credential without properties.
    case v1
    /// `v2\n<projectId>\n<expiresAt>\n<email>\n<canonicalProperties>`: a credential with properties, even empty.
    case v2

    /// `"v1"` or `"v2"`.
    public var description: String { rawValue }
}
