import Foundation
public import SessionEngine

/// Checks credentials as the service does, so the contract can be proven end to end in one process.
///
/// The verifier reads a credential from its identity headers (never from a query or a body), then checks, in
/// order: that the headers decode to a valid credential, that the signature matches the payload under the current
/// secret, that the credential has not expired by the verifier's clock, and that it expires no more than 24 hours
/// from now. The result names the first check that failed.
///
/// ``rotateSecret(to:)`` replaces the secret, after which every earlier signature fails, as a rotation in the
/// service does. The verifier's ``description``, ``debugDescription`` and mirror never show the secret or its HMAC
/// key state.
public struct IdentityVerifier: Sendable, CustomStringConvertible, CustomDebugStringConvertible, CustomReflectable {
    /// The internal project ID expected in every payload.
    public let projectID: String
    /// The longest remaining lifetime accepted.
    public let maximumLifetime: Duration
    private var hmac: HMACSHA256
    private let clock: any SessionClock

    /// Creates a verifier.
    ///
    /// - Parameters:
    ///   - projectID: The internal project ID.
    ///   - secret: The project's identity secret.
    ///   - maximumLifetime: The longest remaining lifetime accepted; 24 hours by default.
    ///   - clock: The source of wall time for the expiry checks.
    /// - Throws: `CredentialError` for an empty or multi-line project ID or an empty secret.
    public init(
        projectID: String,
        secret: String,
        maximumLifetime: Duration = IdentitySigner.maximumLifetime,
        clock: any SessionClock = SystemClock()
    ) throws(CredentialError) {
        try IdentityPayload.validateProjectID(projectID)
        self.projectID = projectID
        self.maximumLifetime = maximumLifetime
        self.hmac = try Self.key(secret)
        self.clock = clock
    }

    /// Replaces the secret; every signature made with an earlier secret fails from now on.
    ///
    /// - Parameter secret: The new secret.
    /// - Throws: `CredentialError` with `CredentialError.Code.emptySecret` for an empty secret.
    public mutating func rotateSecret(to secret: String) throws(CredentialError) {
        hmac = try Self.key(secret)
    }

    /// Verifies the credential carried by identity headers.
    ///
    /// - Parameter headers: The request's identity headers.
    /// - Returns: ``IdentityVerification/valid(_:)`` with the credential, or the first failed check.
    public func verify(headers: IdentityHeaders) -> IdentityVerification {
        do {
            return verify(try headers.credential())
        } catch {
            return .invalid(IdentityVerificationFailure(check: .malformed, reason: error.reason))
        }
    }

    /// Verifies a credential.
    ///
    /// - Parameter credential: A decoded credential.
    /// - Returns: ``IdentityVerification/valid(_:)``, or the first failed check.
    public func verify(_ credential: IdentityCredential) -> IdentityVerification {
        let payload = credential.signingPayload(projectID: projectID)
        let expected = hmac.authenticate(payload).signature
        guard ConstantTime.equals(expected, credential.signatureBytes) else {
            return .invalid(
                IdentityVerificationFailure(
                    check: .signatureMismatch,
                    reason: "the signature does not match the payload under the current secret",
                    signedPayload: payload
                )
            )
        }
        let now = clock.now
        guard credential.isValid(at: now) else {
            return .invalid(IdentityVerificationFailure(check: .expired, reason: "the credential has expired"))
        }
        guard TimeInterval(credential.expiresAt) - now.timeIntervalSince1970 <= maximumLifetime.timeInterval else {
            return .invalid(
                IdentityVerificationFailure(
                    check: .lifetimeTooLong,
                    reason: "the credential expires more than \(maximumLifetime) from now"
                )
            )
        }
        return .valid(credential)
    }

    /// The project ID; never the secret.
    public var description: String { "IdentityVerifier(projectID: \(projectID), secret: <redacted>)" }

    /// The same as ``description``.
    public var debugDescription: String { description }

    /// A mirror with the project ID and maximum lifetime only: the key state is secret-equivalent, so `dump(_:)`
    /// must not reach it.
    public var customMirror: Mirror {
        Mirror(
            self,
            children: ["projectID": projectID, "maximumLifetime": maximumLifetime, "secret": "<redacted>"],
            displayStyle: .struct
        )
    }

    private static func key(_ secret: String) throws(CredentialError) -> HMACSHA256 {
        guard !secret.isEmpty else {
            throw CredentialError(.emptySecret, reason: "the signing secret is empty")
        }
        return HMACSHA256(key: Array(secret.utf8))
    }
}

/// The outcome of ``IdentityVerifier`` checking a credential.
public enum IdentityVerification: Sendable, Hashable {
    /// Every check passed.
    case valid(IdentityCredential)
    /// A check failed; the service answers `INVALID_IDENTITY`.
    case invalid(IdentityVerificationFailure)

    /// Whether every check passed.
    public var isValid: Bool {
        if case .valid = self { return true }
        return false
    }
}

/// Which check of ``IdentityVerifier`` failed, and why.
///
/// ``signedPayload`` holds the email and the canonical properties, which may be personal data: ``description``,
/// ``debugDescription`` and the mirror leave it out. Print it deliberately, as the `verify` tool does, when
/// comparing payloads.
public struct IdentityVerificationFailure: Error, Sendable, Hashable, CustomStringConvertible,
    CustomDebugStringConvertible, CustomReflectable
{
    /// A check the verifier performs.
    public enum Check: String, Sendable, Hashable, CustomStringConvertible {
        /// The headers are missing or do not decode to a valid credential.
        case malformed
        /// The signature does not match the payload under the current secret.
        case signatureMismatch
        /// The credential has expired.
        case expired
        /// The credential expires further ahead than the maximum lifetime allows.
        case lifetimeTooLong

        /// The raw value.
        public var description: String { rawValue }
    }

    /// The service's error code for every failed check.
    public static let serviceCode = "INVALID_IDENTITY"

    /// The check that failed.
    public let check: Check
    /// A sentence that explains the failure, without secrets or signatures.
    public let reason: String
    /// For ``Check/signatureMismatch``: the exact payload the verifier signed, which holds no secret.
    public let signedPayload: String?

    /// Creates a failure.
    ///
    /// - Parameters:
    ///   - check: The check that failed.
    ///   - reason: A sentence without secrets or signatures.
    ///   - signedPayload: The payload the verifier signed, for a signature mismatch.
    public init(check: Check, reason: String, signedPayload: String? = nil) {
        self.check = check
        self.reason = reason
        self.signedPayload = signedPayload
    }

    /// `INVALID_IDENTITY (check): reason`.
    public var description: String { "\(Self.serviceCode) (\(check)): \(reason)" }

    /// The same as ``description``.
    public var debugDescription: String { description }

    /// A mirror with the check and the reason; the signed payload is shown as `<redacted>`.
    public var customMirror: Mirror {
        Mirror(
            self,
            children: [
                "check": check, "reason": reason, "signedPayload": signedPayload == nil ? "none" : "<redacted>",
            ],
            displayStyle: .struct
        )
    }
}
