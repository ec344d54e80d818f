/// Email normalization as the reference backend performs it.
///
/// The backend signs `authenticatedUser.email.trim().toLowerCase()`. ``normalize(_:)`` reproduces that byte for
/// byte: ECMAScript's white space and line terminators are trimmed (U+FEFF and every `Zs` character included,
/// U+0085 not), and lowercasing is the full, locale-independent Unicode mapping including the context-sensitive
/// final sigma (`ΟΔΥΣΣΕΥΣ` becomes `οδυσσευς`), which Swift's `lowercased()` does not apply.
public enum IdentityEmail {
    /// Returns `email.trim().toLowerCase()` as JavaScript computes it.
    ///
    /// - Parameter email: The email as the backend session holds it.
    /// - Returns: The normalized email that is signed.
    public static func normalize(_ email: String) -> String {
        ECMAScript.toLowerCase(ECMAScript.trim(email))
    }

    /// Checks that an email is fit to be signed or installed.
    ///
    /// - Parameter email: A normalized email.
    /// - Throws: ``CredentialError`` with ``CredentialError/Code/emptyEmail`` or
    ///   ``CredentialError/Code/emailControlCharacter``.
    static func validateNormalized(_ email: String) throws(CredentialError) {
        guard !email.isEmpty else {
            throw CredentialError(.emptyEmail, reason: "the email is empty")
        }
        // Among ASCII scalars exactly U+0000–U+001F and U+007F are controls, so printable ASCII needs no property
        // lookup; anything else takes the general-category check below.
        var contiguous = email
        guard !contiguous.withUTF8({ $0.allSatisfy { $0 &- 0x20 < 0x5F } }) else { return }
        for scalar in email.unicodeScalars where scalar.properties.generalCategory == .control {
            throw CredentialError(
                .emailControlCharacter,
                reason: "the email holds the control character U+\(hex4(scalar.value))"
            )
        }
    }

    /// Normalizes and validates an email, as a signer does before signing.
    package static func normalizeForSigning(_ email: String) throws(CredentialError) -> String {
        let normalized = normalize(email)
        try validateNormalized(normalized)
        return normalized
    }

    /// Validates an email received in a credential: it must already be normalized.
    static func validateReceived(_ email: String) throws(CredentialError) {
        try validateNormalized(email)
        guard normalize(email).utf8.elementsEqual(email.utf8) else {
            throw CredentialError(
                .emailNotNormalized,
                reason: "the email is not normalized (trimmed and lowercased as the backend signs it)"
            )
        }
    }
}

/// Four uppercase hexadecimal digits, or more for values above U+FFFF.
func hex4(_ value: UInt32) -> String {
    let digits = String(value, radix: 16, uppercase: true)
    return String(repeating: "0", count: max(0, 4 - digits.count)) + digits
}
