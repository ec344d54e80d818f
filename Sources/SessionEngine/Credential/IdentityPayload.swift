/// The exact UTF-8 text that is signed for a credential.
package enum IdentityPayload {
    /// Builds `v1\n<projectId>\n<expiresAt>\n<email>` or
    /// `v2\n<projectId>\n<expiresAt>\n<email>\n<canonicalProperties>`.
    package static func make(projectID: String, expiresAt: Int64, email: String, properties: IdentityProperties?)
        -> String
    {
        withUTF8(projectID: projectID, expiresAt: expiresAt, email: email, properties: properties) { bytes in
            String(decoding: bytes, as: UTF8.self)
        }
    }

    /// Calls `body` with the UTF-8 bytes of the payload ``make(projectID:expiresAt:email:properties:)`` builds, in a
    /// temporary buffer, so a signer can authenticate them without building a `String`.
    ///
    /// The buffer is valid only for the duration of the call.
    package static func withUTF8<R>(
        projectID: String,
        expiresAt: Int64,
        email: String,
        properties: IdentityProperties?,
        _ body: (UnsafeRawBufferPointer) -> R
    ) -> R {
        let version = properties == nil ? "v1" : "v2"
        let canonicalJSON = properties?.canonicalJSON
        // 20 bytes hold any Int64 in decimal, sign included.
        var count = version.utf8.count + projectID.utf8.count + 20 + email.utf8.count + 3
        if let canonicalJSON { count += canonicalJSON.utf8.count + 1 }
        return withUnsafeTemporaryAllocation(of: UInt8.self, capacity: count) { buffer in
            var cursor = buffer.baseAddress!
            cursor = append(version, newline: true, at: cursor)
            cursor = append(projectID, newline: true, at: cursor)
            cursor = appendDecimal(expiresAt, at: cursor)
            cursor = append(email, newline: canonicalJSON != nil, at: cursor)
            if let canonicalJSON { cursor = append(canonicalJSON, newline: false, at: cursor) }
            return body(UnsafeRawBufferPointer(start: buffer.baseAddress!, count: cursor - buffer.baseAddress!))
        }
    }

    /// Writes `value` in decimal, as `String(value)` spells it, and a line feed after it to `destination`; returns
    /// the end.
    private static func appendDecimal(_ value: Int64, at destination: UnsafeMutablePointer<UInt8>)
        -> UnsafeMutablePointer<UInt8>
    {
        var cursor = destination
        if value < 0 {
            cursor.initialize(to: UInt8(ascii: "-"))
            cursor += 1
        }
        var magnitude = value.magnitude
        var digits = 1
        var rest = magnitude / 10
        while rest > 0 {
            digits += 1
            rest /= 10
        }
        var position = cursor + digits
        repeat {
            position -= 1
            position.initialize(to: UInt8(ascii: "0") + UInt8(truncatingIfNeeded: magnitude % 10))
            magnitude /= 10
        } while magnitude > 0
        cursor += digits
        cursor.initialize(to: UInt8(ascii: "\n"))
        return cursor + 1
    }

    /// Copies a part's UTF-8 bytes, and a line feed after it if asked, to `destination`; returns the end.
    private static func append(
        _ part: String,
        newline: Bool,
        at destination: UnsafeMutablePointer<UInt8>
    ) -> UnsafeMutablePointer<UInt8> {
        var part = part
        var end = part.withUTF8 { bytes in
            if let source = bytes.baseAddress { destination.initialize(from: source, count: bytes.count) }
            return destination + bytes.count
        }
        if newline {
            end.initialize(to: UInt8(ascii: "\n"))
            end += 1
        }
        return end
    }

    /// Validates a project ID: non-empty and free of line breaks, which would make payloads ambiguous.
    package static func validateProjectID(_ projectID: String) throws(CredentialError) {
        guard !projectID.isEmpty else {
            throw CredentialError(.invalidProjectID, reason: "the project ID is empty")
        }
        guard !projectID.unicodeScalars.contains(where: { $0 == "\n" || $0 == "\r" }) else {
            throw CredentialError(.invalidProjectID, reason: "the project ID holds a line break")
        }
    }
}
