/// A credential, property set, header set or signer configuration that breaks a rule of the identity contract.
///
/// Every rule of the contract has its own ``Code``, so callers can branch on the reason without parsing text.
/// ``key`` names the property key or header involved when there is one. ``reason`` is a human-readable sentence.
/// Neither ever contains a secret, a signature or a property value.
public struct CredentialError: Error, Sendable, Hashable, CustomStringConvertible {
    /// The rule that was broken.
    ///
    /// Codes are open-ended: new rules add new static members without breaking existing callers.
    public struct Code: Hashable, Sendable, CustomStringConvertible {
        /// The stable identifier of the rule, such as `"propertyStringTooLong"`.
        public let rawValue: String

        private init(_ rawValue: String) {
            self.rawValue = rawValue
        }

        /// The email is empty after normalization.
        public static let emptyEmail = Code("emptyEmail")
        /// The email is not in its normalized form (`trim()` then `toLowerCase()`).
        public static let emailNotNormalized = Code("emailNotNormalized")
        /// The email holds a control character.
        public static let emailControlCharacter = Code("emailControlCharacter")
        /// The signature is not 64 lowercase hexadecimal characters.
        public static let invalidSignature = Code("invalidSignature")
        /// `expiresAt` is zero or negative.
        public static let invalidExpiresAt = Code("invalidExpiresAt")
        /// The credential's lifetime exceeds the 24-hour maximum.
        public static let lifetimeTooLong = Code("lifetimeTooLong")
        /// More than 20 property keys.
        public static let tooManyProperties = Code("tooManyProperties")
        /// A property key does not match `^[A-Za-z][A-Za-z0-9_.-]{0,63}$`.
        public static let invalidPropertyKey = Code("invalidPropertyKey")
        /// The property key `constructor` is forbidden.
        public static let forbiddenPropertyKey = Code("forbiddenPropertyKey")
        /// A string property is longer than 200 UTF-16 code units.
        public static let propertyStringTooLong = Code("propertyStringTooLong")
        /// A number property is NaN or infinite.
        public static let propertyNumberNotFinite = Code("propertyNumberNotFinite")
        /// A property value is an object, an array or null.
        public static let invalidPropertyValue = Code("invalidPropertyValue")
        /// The canonical properties JSON is larger than 2048 UTF-8 bytes.
        public static let propertiesTooLarge = Code("propertiesTooLarge")
        /// The input is not the JSON the contract describes.
        public static let malformedJSON = Code("malformedJSON")
        /// A required identity header is absent.
        public static let missingHeader = Code("missingHeader")
        /// An identity header is present but its value cannot be decoded.
        public static let invalidHeader = Code("invalidHeader")
        /// The identity version is neither `v1` nor `v2`, or does not match the presence of properties.
        public static let unsupportedVersion = Code("unsupportedVersion")
        /// The project ID is empty or holds a line break.
        public static let invalidProjectID = Code("invalidProjectID")
        /// The signing secret is empty.
        public static let emptySecret = Code("emptySecret")
        /// A property value holds an escaped lone surrogate (`\\udc00`), which the reference backend signs as the
        /// escape itself and a Swift string cannot hold: such a credential can never verify, so it is refused for
        /// good rather than retried.
        public static let unpairedSurrogate = Code("unpairedSurrogate")

        /// The ``rawValue``.
        public var description: String { rawValue }
    }

    /// The rule that was broken.
    public let code: Code
    /// The property key or header name involved, when the rule concerns one.
    public let key: String?
    /// A sentence that explains the failure. Never contains a secret, a signature or a property value.
    public let reason: String

    /// Creates an error.
    ///
    /// - Parameters:
    ///   - code: The rule that was broken.
    ///   - key: The property key or header name involved, if any.
    ///   - reason: A sentence that explains the failure; it must not contain secret material.
    public init(_ code: Code, key: String? = nil, reason: String) {
        self.code = code
        self.key = key
        self.reason = reason
    }

    /// `code: reason`.
    public var description: String { "\(code): \(reason)" }
}
