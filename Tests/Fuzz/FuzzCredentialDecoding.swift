// A libFuzzer target for every decoder of untrusted credential data. It is compiled together with the library's
// sources into one module (so it can reach internal API), never by SwiftPM; Scripts/fuzz.sh builds and runs it:
//
//     swiftc -sanitize=fuzzer,address -parse-as-library -O -module-name SessionEngine -package-name SessionEngine \
//         $(find Sources/SessionEngine -name '*.swift') Tests/Fuzz/FuzzCredentialDecoding.swift -o .build/fuzz-credential
//
// Every input is decoded as a credential response, as a properties object, as a canonical properties header and as
// a set of identity headers. A crash, a sanitizer report or a broken invariant (`precondition`) is a finding.

import Foundation

@_cdecl("LLVMFuzzerTestOneInput")
func fuzzCredentialDecoding(_ start: UnsafePointer<UInt8>, _ count: Int) -> Int32 {
    let bytes = Array(UnsafeBufferPointer(start: start, count: count))
    if let credential = try? IdentityCredential(json: Data(bytes)) {
        checkRoundTrips(credential)
    }
    if let properties = try? IdentityProperties(json: Data(bytes)) {
        precondition(properties.canonicalJSON.utf8.count <= IdentityProperties.maximumCanonicalByteCount)
        precondition((try? IdentityProperties.decode(canonicalJSON: properties.canonicalJSON)) == properties)
    }
    let text = String(decoding: bytes, as: UTF8.self)
    if let properties = try? IdentityProperties.decode(canonicalJSON: text) {
        precondition(properties.canonicalJSON == text, "a non-canonical properties header was accepted")
    }
    // Five header values separated by newlines: version, email, expiry, signature, properties.
    let values = text.split(separator: "\n", omittingEmptySubsequences: false).map(String.init)
    let names = [
        IdentityHeaders.versionName, IdentityHeaders.emailName, IdentityHeaders.expiresAtName,
        IdentityHeaders.signatureName, IdentityHeaders.propertiesName,
    ]
    let headers = IdentityHeaders(requestHeaders: zip(names, values).map { (name: $0, value: $1) })
    if let credential = try? headers.credential() {
        checkRoundTrips(credential)
        // Canonical-only: what was accepted is exactly what the encoder writes.
        let written = IdentityHeaders(credential).fields.map(\.value)
        precondition(Array(values.prefix(written.count)) == written, "non-canonical headers were accepted")
    }
    return 0
}

private func checkRoundTrips(_ credential: IdentityCredential) {
    precondition(IdentityEmail.normalize(credential.email) == credential.email)
    precondition(credential.expiresAt > 0 && credential.signature.utf8.count == 64)
    precondition((try? IdentityHeaders(credential).credential()) == credential)
    let json = try? JSONEncoder().encode(credential)
    precondition(json.flatMap { try? IdentityCredential(json: $0) } == credential)
}
