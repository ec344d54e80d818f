import Foundation
public import SessionEngine

/// Issues credentials on a Swift backend, exactly as the contract's JavaScript handler does.
///
/// The signer normalizes the email (`trim()` then `toLowerCase()`, see `IdentityEmail`), stamps `expiresAt` from
/// its clock plus ``lifetime``, builds the `v1` or `v2` payload and signs it with HMAC-SHA256. The secret's HMAC
/// state is computed once at creation, so signing a credential costs two SHA-256 compressions plus the payload.
///
/// Obtain the email from your authenticated backend session, never from the caller. Return the credential over
/// HTTPS with `Cache-Control: no-store`, and never log it. The signer's ``description``, ``debugDescription`` and
/// mirror never show the secret or its HMAC key state, which would forge a signature for any email as well as the
/// secret itself.
public struct IdentitySigner: Sendable, CustomStringConvertible, CustomDebugStringConvertible, CustomReflectable {
    /// The longest lifetime the contract allows: 24 hours (`IdentityCredential.maximumLifetime`).
    public static let maximumLifetime: Duration = IdentityCredential.maximumLifetime
    /// ``maximumLifetime`` in seconds, converted once rather than on every signature.
    private static let maximumLifetimeSeconds = maximumLifetime.timeInterval
    /// The default lifetime: 15 minutes.
    public static let defaultLifetime: Duration = .seconds(15 * 60)

    /// The internal project ID signed into every payload.
    public let projectID: String
    /// How long an issued credential lives.
    public let lifetime: Duration
    private let hmac: HMACSHA256
    private let clock: any SessionClock
    /// Reads the clock for the lifetime check, cheaply on the system clock.
    private let wallClock: WallClockCheck

    /// Creates a signer.
    ///
    /// - Parameters:
    ///   - projectID: The internal project ID (not the public App ID).
    ///   - secret: The project's identity secret, as the UTF-8 string stored in the backend's environment.
    ///   - lifetime: How long issued credentials live; whole seconds, at most 24 hours.
    ///   - clock: The source of wall time for `expiresAt`.
    /// - Throws: `CredentialError` for an empty or multi-line project ID, an empty secret, or a lifetime that is
    ///   not positive or exceeds 24 hours.
    public init(
        projectID: String,
        secret: String,
        lifetime: Duration = IdentitySigner.defaultLifetime,
        clock: any SessionClock = SystemClock()
    ) throws(CredentialError) {
        try IdentityPayload.validateProjectID(projectID)
        guard !secret.isEmpty else {
            throw CredentialError(.emptySecret, reason: "the signing secret is empty")
        }
        guard lifetime >= .seconds(1) else {
            throw CredentialError(.invalidExpiresAt, reason: "the lifetime must be at least one second")
        }
        guard lifetime <= Self.maximumLifetime else {
            throw CredentialError(.lifetimeTooLong, reason: "the lifetime exceeds the 24-hour maximum")
        }
        self.projectID = projectID
        self.lifetime = lifetime
        self.hmac = HMACSHA256(key: Array(secret.utf8))
        self.clock = clock
        self.wallClock = WallClockCheck(clock)
    }

    /// Issues a credential that expires ``lifetime`` from now.
    ///
    /// - Parameters:
    ///   - email: The email from the authenticated backend session; it is normalized before signing.
    ///   - properties: Signed properties; `nil` issues `v1`, a set (even empty) issues `v2`.
    /// - Returns: The signed credential.
    /// - Throws: `CredentialError` for an email that is empty after normalization or holds a control character.
    public func sign(email: String, properties: IdentityProperties? = nil) throws(CredentialError) -> IdentityCredential
    {
        let now = Int64(clock.now.timeIntervalSince1970.rounded(.down))
        return try sign(email: email, properties: properties, expiresAt: now + lifetime.components.seconds)
    }

    /// Issues a credential with an explicit expiry.
    ///
    /// An expiry in the past is allowed (it issues an already-expired credential, useful in tests); one more than
    /// 24 hours from now is refused.
    ///
    /// - Parameters:
    ///   - email: The email from the authenticated backend session; it is normalized before signing.
    ///   - properties: Signed properties; `nil` issues `v1`, a set (even empty) issues `v2`.
    ///   - expiresAt: The expiry in integer Unix seconds.
    /// - Returns: The signed credential.
    /// - Throws: `CredentialError` for a bad email, a non-positive expiry or one beyond the 24-hour maximum.
    public func sign(
        email: String,
        properties: IdentityProperties?,
        expiresAt: Int64
    ) throws(CredentialError) -> IdentityCredential {
        let normalized = try IdentityEmail.normalizeForSigning(email)
        guard expiresAt > 0 else {
            throw CredentialError(.invalidExpiresAt, reason: "expiresAt must be a positive number of Unix seconds")
        }
        // expiresAt ≤ now + 24 h, that is now ≥ expiresAt − 24 h.
        guard wallClock.isAtOrAfter(TimeInterval(expiresAt) - Self.maximumLifetimeSeconds) else {
            throw CredentialError(.lifetimeTooLong, reason: "expiresAt is more than 24 hours from now")
        }
        let digest = IdentityPayload.withUTF8(
            projectID: projectID,
            expiresAt: expiresAt,
            email: normalized,
            properties: properties
        ) { hmac.authenticate($0) }
        return IdentityCredential(
            validatedEmail: normalized,
            expiresAt: expiresAt,
            signature: digest.signature,
            properties: properties
        )
    }

    /// The project ID and lifetime; never the secret.
    public var description: String {
        "IdentitySigner(projectID: \(projectID), lifetime: \(lifetime), secret: <redacted>)"
    }

    /// The same as ``description``.
    public var debugDescription: String { description }

    /// A mirror with the project ID and lifetime only: the key state is secret-equivalent, so `dump(_:)` must not
    /// reach it.
    public var customMirror: Mirror {
        Mirror(
            self,
            children: ["projectID": projectID, "lifetime": lifetime, "secret": "<redacted>"],
            displayStyle: .struct
        )
    }

    /// The HMAC-SHA256 of `payload` under this signer's secret, as a credential's signature.
    package func signature(of payload: String) -> IdentityCredential.Signature {
        hmac.authenticate(payload).signature
    }
}
