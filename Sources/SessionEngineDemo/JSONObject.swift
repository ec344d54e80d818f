import SessionEngine

/// Builds one JSON object as text, keeping its fields in the order they are added.
struct JSONObject {
    private var text = "{"

    /// Adds a string field, or `null` for `nil`.
    mutating func add(_ key: String, _ value: String?) {
        appendKey(key)
        if let value {
            ECMAScript.appendJSONString(value, to: &text)
        } else {
            text += "null"
        }
    }

    /// Adds an integer field.
    mutating func add(_ key: String, _ value: Int64) {
        appendKey(key)
        text += String(value)
    }

    /// Adds an integer field.
    mutating func add(_ key: String, _ value: Int) {
        add(key, Int64(value))
    }

    /// Adds a number field, written as JavaScript writes it.
    mutating func add(_ key: String, _ value: Double) {
        appendKey(key)
        text += value.isFinite ? ECMAScript.numberToString(value) : "null"
    }

    /// Adds a boolean field.
    mutating func add(_ key: String, _ value: Bool) {
        appendKey(key)
        text += value ? "true" : "false"
    }

    /// Adds a field whose value is already JSON text.
    mutating func add(_ key: String, json: String) {
        appendKey(key)
        text += json
    }

    /// The object's JSON text.
    var json: String { text + "}" }

    private mutating func appendKey(_ key: String) {
        if text.utf8.count > 1 { text += "," }
        ECMAScript.appendJSONString(key, to: &text)
        text += ":"
    }

    /// `value` as a JSON string literal: quoted, with `\n` and every other escape `JSON.stringify` writes.
    static func quoted(_ value: String) -> String {
        var text = ""
        ECMAScript.appendJSONString(value, to: &text)
        return text
    }
}
