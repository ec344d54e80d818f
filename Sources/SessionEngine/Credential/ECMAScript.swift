/// ECMAScript-compatible string and number primitives.
///
/// The backend computes credentials and signatures in JavaScript, so every string that feeds a signature
/// must be produced exactly as a JavaScript engine would produce it. This namespace reproduces the handful
/// of built-ins the signing code relies on — `String.prototype.trim`, `String.prototype.toLowerCase`,
/// `String.prototype.length`, `Number::toString` and the string quoting of `JSON.stringify` — so that the
/// Swift output is byte-identical with the JavaScript reference implementation.
///
/// All functions work on Unicode scalars or UTF-8 code units, never on `Character`s, so grapheme clustering
/// never merges or reorders anything, and all-ASCII input takes dedicated fast paths.
package enum ECMAScript {}
