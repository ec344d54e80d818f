import Foundation

extension IdentityProperties {
    /// Decodes and validates a JSON object of properties from text.
    ///
    /// - Parameter json: A JSON object whose values are strings, numbers or booleans.
    /// - Returns: The validated properties.
    /// - Throws: ``CredentialError``: ``CredentialError/Code/malformedJSON`` for text that is not a JSON object,
    ///   ``CredentialError/Code/invalidPropertyValue`` for null, objects and arrays, or the broken rule.
    static func decode(json: String) throws(CredentialError) -> IdentityProperties {
        do {
            return try JSONDecoder().decode(IdentityProperties.self, from: Data(json.utf8))
        } catch let error as CredentialError {
            throw error
        } catch {
            throw CredentialError(.malformedJSON, reason: "properties: " + IdentityCredential.describe(error))
        }
    }
}
