/// Why certificate authorities could not be loaded from PEM: the file could not be read, or what it holds is not a
/// list of certificates.
///
/// The ``reason`` names the problem and, for one block of the PEM text, its position (the first block is 1); it
/// never quotes the text, the file's path or a certificate, so it can be logged as it is.
public struct CertificateTrustError: Error, Sendable, Hashable, CustomStringConvertible {
    /// A stable error code; new ones are added as static members without breaking callers.
    public struct Code: Hashable, Sendable, CustomStringConvertible {
        /// The stable identifier, such as `NO_CERTIFICATE`.
        public let rawValue: String

        private init(_ rawValue: String) {
            self.rawValue = rawValue
        }

        /// The file could not be opened or read.
        public static let unreadable = Code("UNREADABLE")
        /// The PEM text is larger than ``CertificateAuthorities/maximumPEMSize``.
        public static let tooLarge = Code("TOO_LARGE")
        /// The PEM text holds no `-----BEGIN CERTIFICATE-----` block.
        public static let noCertificate = Code("NO_CERTIFICATE")
        /// A block is not well-formed PEM: no matching `END` line, or its base64 does not decode.
        public static let malformed = Code("MALFORMED")
        /// A block is a private key. A trust file holds only public certificates; a key there is a mistake that
        /// spreads a secret, so the whole text is refused.
        public static let privateKey = Code("PRIVATE_KEY")
        /// A block is not a certificate: another kind of PEM block, or DER that is not an X.509 certificate.
        public static let notACertificate = Code("NOT_A_CERTIFICATE")

        /// The raw value.
        public var description: String { rawValue }
    }

    /// The stable error code.
    public let code: Code
    /// A sentence that explains the error; it never quotes the PEM text or the file's path.
    public let reason: String

    /// Creates an error.
    ///
    /// - Parameters:
    ///   - code: The stable error code.
    ///   - reason: A sentence that quotes nothing of the PEM text.
    public init(_ code: Code, reason: String) {
        self.code = code
        self.reason = reason
    }

    /// `CODE: reason`.
    public var description: String { "\(code): \(reason)" }
}
