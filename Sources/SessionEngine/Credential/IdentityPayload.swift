/// The exact UTF-8 text that is signed for a credential.
enum IdentityPayload {
    /// Builds `v1\n<projectId>\n<expiresAt>\n<email>` or
    /// `v2\n<projectId>\n<expiresAt>\n<email>\n<canonicalProperties>`.
    static func make(projectID: String, expiresAt: Int64, email: String, properties: IdentityProperties?) -> String {
        var payload: String
        if let properties {
            payload = "v2\n"
            payload.reserveCapacity(projectID.utf8.count + email.utf8.count + properties.canonicalJSON.utf8.count + 32)
        } else {
            payload = "v1\n"
            payload.reserveCapacity(projectID.utf8.count + email.utf8.count + 28)
        }
        payload += projectID
        payload += "\n"
        payload += String(expiresAt)
        payload += "\n"
        payload += email
        if let properties {
            payload += "\n"
            payload += properties.canonicalJSON
        }
        return payload
    }

    /// Validates a project ID: non-empty and free of line breaks, which would make payloads ambiguous.
    static func validateProjectID(_ projectID: String) throws(CredentialError) {
        guard !projectID.isEmpty else {
            throw CredentialError(.invalidProjectID, reason: "the project ID is empty")
        }
        guard !projectID.unicodeScalars.contains(where: { $0 == "\n" || $0 == "\r" }) else {
            throw CredentialError(.invalidProjectID, reason: "the project ID holds a line break")
        }
    }
}
