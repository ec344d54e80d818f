extension IdentityCredential {
    /// A credential's public facts, the part a ``SessionIdentity`` shares: the expiry, the version and the email, in
    /// one allocation, and never the signature or a property's value, so a state or an event that keeps an identity
    /// keeps no secret alive.
    ///
    /// The email's UTF-8 bytes follow the expiry and the version in the allocation, where a `String` of more than 15
    /// bytes would be an allocation of its own (80 bytes with the allocator's for a 25-byte email): for such an email
    /// the facts take the allocator's 64 bytes. ``email`` makes the text from the bytes each time it is asked for.
    ///
    /// Unchecked: the standard library marks a managed buffer as not sendable, and this one is written only while
    /// ``init(email:expiresAt:version:)`` makes it.
    package struct Facts: @unchecked Sendable, Equatable {
        /// The facts' one allocation: the header, then the email's bytes.
        private final class Storage: ManagedBuffer<Header, UInt8> {}

        private struct Header {
            let expiresAt: Int64
            /// How many bytes of the email follow the header: four bytes, so that the version and a 25-byte email fit
            /// the allocator's 64 with them.
            let emailCount: UInt32
            let version: IdentityVersion
        }

        private let storage: Storage

        /// Facts with `email`'s bytes copied in.
        ///
        /// - Precondition: The email is shorter than 4 GiB (a credential's JSON comes through a fetcher that bounds it
        ///   far below).
        init(email: String, expiresAt: Int64, version: IdentityVersion) {
            var email = email
            storage = email.withUTF8 { utf8 in
                guard let count = UInt32(exactly: utf8.count) else {
                    preconditionFailure("a credential's email of 4 GiB or more")
                }
                let made = Storage.create(minimumCapacity: utf8.count) { _ in
                    Header(expiresAt: expiresAt, emailCount: count, version: version)
                }
                made.withUnsafeMutablePointerToElements { bytes in
                    if let base = utf8.baseAddress { bytes.initialize(from: base, count: utf8.count) }
                }
                return unsafeDowncast(made, to: Storage.self)
            }
        }

        /// The email, made from its bytes.
        var email: String { emailBytes { String(decoding: $0, as: UTF8.self) } }

        /// The expiry, in integer Unix seconds.
        var expiresAt: Int64 { storage.header.expiresAt }

        /// The payload's version.
        var version: IdentityVersion { storage.header.version }

        /// Whether two facts are the same: one allocation, or equal expiry, version and email (as strings compare, so
        /// two spellings of one text are equal; equal bytes are compared without making the strings).
        package static func == (lhs: Facts, rhs: Facts) -> Bool {
            if lhs.storage === rhs.storage { return true }
            guard lhs.expiresAt == rhs.expiresAt && lhs.version == rhs.version else { return false }
            return lhs.emailBytes { one in rhs.emailBytes { one.elementsEqual($0) } } || lhs.email == rhs.email
        }

        /// Calls `body` with the email's bytes.
        private func emailBytes<T>(_ body: (UnsafeBufferPointer<UInt8>) -> T) -> T {
            storage.withUnsafeMutablePointers { header, bytes in
                body(UnsafeBufferPointer(start: bytes, count: Int(header.pointee.emailCount)))
            }
        }
    }
}
