#!/usr/bin/env node
// Generates interop-vectors.json: verified-identity credential test vectors
// produced by the JavaScript reference handler ("Issue a credential" and
// "Add signed properties" in the verified-identity contract).
//
// Usage:
//   node generate-interop-vectors.mjs [output-path]
//
// The output path defaults to interop-vectors.json next to this script.
// The script is deterministic: it uses its own seeded PRNG (mulberry32) and
// never reads the clock, so rerunning it produces a byte-identical file.
//
// Every case is self-checked before it is written: valid cases must pass the
// validation rules, and invalid cases must break exactly one rule and report
// the declared error code (and key, for per-key rules).

import { createHmac } from "node:crypto";
import { writeFileSync } from "node:fs";
import path from "node:path";
import { fileURLToPath } from "node:url";

// ---------------------------------------------------------------------------
// Reference handler (mirrors the contract's JavaScript exactly)
// ---------------------------------------------------------------------------

const MAX_KEYS = 20;
const MAX_STRING_UNITS = 200;
const MAX_CANONICAL_BYTES = 2048;
const KEY_PATTERN = /^[A-Za-z][A-Za-z0-9_.-]{0,63}$/;
const CONTROL = /\p{Cc}/u;

function normalizeEmail(raw) {
  return raw.trim().toLowerCase();
}

function canonicalize(props) {
  return JSON.stringify(Object.fromEntries(Object.keys(props).sort().map((k) => [k, props[k]])));
}

function sign(secret, payload) {
  return createHmac("sha256", secret).update(payload).digest("hex");
}

/** Converts the schema's [key, typedValue] entries into the JS object the backend would hold. */
function toObject(entries) {
  return Object.fromEntries(entries.map(([k, v]) => [k, jsValue(v)]));
}

function jsValue(v) {
  switch (v.type) {
    case "string":
      return v.value;
    case "boolean":
      return v.value;
    case "number":
      return doubleFromBits(v.bits);
    default:
      throw new Error(`unknown property type ${v.type}`);
  }
}

/** The handler: returns the credential fields for a valid input. */
function issue({ projectId, secret, email, expiresAt, properties }) {
  const normalized = normalizeEmail(email);
  if (properties === undefined) {
    const payload = `v1\n${projectId}\n${expiresAt}\n${normalized}`;
    return { email: normalized, version: "v1", payload, signature: sign(secret, payload) };
  }
  const canonical = canonicalize(toObject(properties));
  const payload = `v2\n${projectId}\n${expiresAt}\n${normalized}\n${canonical}`;
  return {
    email: normalized,
    version: "v2",
    canonicalProperties: canonical,
    payload,
    signature: sign(secret, payload),
  };
}

/** Validation rules, in contract order; returns the FIRST failure or null. */
function validate({ email, expiresAt, properties }) {
  const normalized = normalizeEmail(email);
  if (normalized.length === 0) return { code: "emptyEmail" };
  if (CONTROL.test(normalized)) return { code: "emailControlCharacter" };
  if (properties !== undefined) {
    const props = toObject(properties);
    const keys = Object.keys(props).sort();
    if (keys.length > MAX_KEYS) return { code: "tooManyProperties" };
    for (const key of keys) {
      if (!KEY_PATTERN.test(key)) return { code: "invalidPropertyKey", key };
      if (key === "constructor") return { code: "forbiddenPropertyKey", key };
      const value = props[key];
      if (typeof value === "string" && value.length > MAX_STRING_UNITS) {
        return { code: "propertyStringTooLong", key };
      }
      if (typeof value === "number" && !Number.isFinite(value)) {
        return { code: "propertyNumberNotFinite", key };
      }
    }
    if (Buffer.byteLength(canonicalize(props), "utf8") > MAX_CANONICAL_BYTES) {
      return { code: "propertiesTooLarge" };
    }
  }
  if (expiresAt <= 0) return { code: "invalidExpiresAt" };
  return null;
}

/** Every rule evaluated independently (not first-failure); used to prove a case breaks exactly one rule. */
function allViolations({ email, expiresAt, properties }) {
  const out = [];
  const normalized = normalizeEmail(email);
  if (normalized.length === 0) out.push("emptyEmail");
  if (CONTROL.test(normalized)) out.push("emailControlCharacter");
  if (properties !== undefined) {
    const props = toObject(properties);
    const keys = Object.keys(props);
    if (keys.length > MAX_KEYS) out.push("tooManyProperties");
    for (const key of keys) {
      const value = props[key];
      if (!KEY_PATTERN.test(key)) out.push("invalidPropertyKey");
      if (key === "constructor") out.push("forbiddenPropertyKey");
      if (typeof value === "string" && value.length > MAX_STRING_UNITS) out.push("propertyStringTooLong");
      if (typeof value === "number" && !Number.isFinite(value)) out.push("propertyNumberNotFinite");
    }
    if (Buffer.byteLength(canonicalize(props), "utf8") > MAX_CANONICAL_BYTES) out.push("propertiesTooLarge");
  }
  if (expiresAt <= 0) out.push("invalidExpiresAt");
  return out;
}

// ---------------------------------------------------------------------------
// Helpers
// ---------------------------------------------------------------------------

function bitsOfDouble(x) {
  const b = Buffer.alloc(8);
  b.writeDoubleBE(x);
  return b.toString("hex");
}

function doubleFromBits(hex) {
  if (!/^[0-9a-f]{16}$/.test(hex)) throw new Error(`bad bits ${hex}`);
  return Buffer.from(hex, "hex").readDoubleBE(0);
}

const S = (value) => ({ type: "string", value });
const B = (value) => ({ type: "boolean", value });
/** Number property from a JS number. */
const N = (x) => ({ type: "number", bits: bitsOfDouble(x), text: String(x) });
/** Number property from an explicit bit pattern (keeps NaN payloads / -0 exact). */
const NB = (bits) => ({ type: "number", bits, text: String(doubleFromBits(bits)) });

const hex4 = (cp) => cp.toString(16).padStart(4, "0");
const uName = (ch) => [...ch].map((c) => "u" + hex4(c.codePointAt(0))).join("-");
const canonicalBytes = (entries) => Buffer.byteLength(canonicalize(toObject(entries)), "utf8");

// mulberry32: small, well-known 32-bit PRNG.
function mulberry32(seed) {
  let a = seed >>> 0;
  return () => {
    a = (a + 0x6d2b79f5) >>> 0;
    let t = a;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return (t ^ (t >>> 14)) >>> 0;
  };
}

const nextU32 = mulberry32(0x5e55_1011);
const rng = {
  u32: nextU32,
  int: (n) => Math.floor((nextU32() / 0x1_0000_0000) * n), // 0 ..< n
  range: (lo, hi) => lo + Math.floor((nextU32() / 0x1_0000_0000) * (hi - lo + 1)), // lo ... hi
  chance: (p) => nextU32() / 0x1_0000_0000 < p,
  pick: (arr) => arr[Math.floor((nextU32() / 0x1_0000_0000) * arr.length)],
  bits64: () => nextU32().toString(16).padStart(8, "0") + nextU32().toString(16).padStart(8, "0"),
};

// ---------------------------------------------------------------------------
// Case registry
// ---------------------------------------------------------------------------

const DEFAULTS = {
  projectId: "proj_7f3a",
  secret: "s3cr3t-interop-0001",
  email: "alice@example.com",
  expiresAt: 1767225600, // 2026-01-01T00:00:00Z
};

const cases = [];
const names = new Set();
const categoryCounts = new Map();

function add(category, detail, input, expectedError) {
  const name = `${category}-${detail}`;
  if (names.has(name)) throw new Error(`duplicate case name ${name}`);
  names.add(name);
  const c = { name, ...DEFAULTS, ...input };
  for (const field of ["projectId", "secret"]) {
    if (typeof c[field] !== "string" || c[field].length === 0) throw new Error(`${name}: empty ${field}`);
  }
  for (const s of [c.projectId, c.secret, c.email, ...(c.properties ?? []).flatMap(([k, v]) => [k, v.type === "string" ? v.value : ""])]) {
    if (!s.isWellFormed()) throw new Error(`${name}: lone surrogate`);
  }
  if (!Number.isSafeInteger(c.expiresAt)) throw new Error(`${name}: expiresAt must be a safe integer`);
  if (c.properties !== undefined) {
    const keys = c.properties.map(([k]) => k);
    if (new Set(keys).size !== keys.length) throw new Error(`${name}: duplicate property key`);
    for (const [, v] of c.properties) {
      if (v.type === "number" && v.text !== String(doubleFromBits(v.bits))) throw new Error(`${name}: bad text`);
    }
  }

  const got = validate(c);
  const violations = allViolations(c);
  const out = {
    name: c.name,
    projectId: c.projectId,
    secret: c.secret,
    email: c.email,
    expiresAt: c.expiresAt,
  };
  if (c.properties !== undefined) out.properties = c.properties;
  if (expectedError === undefined) {
    if (got !== null) throw new Error(`${name}: expected valid, got ${JSON.stringify(got)}`);
    out.expected = issue(c);
  } else {
    if (violations.length !== 1) throw new Error(`${name}: breaks ${violations.length} rules: ${violations}`);
    if (JSON.stringify(got) !== JSON.stringify(expectedError)) {
      throw new Error(`${name}: expected ${JSON.stringify(expectedError)}, got ${JSON.stringify(got)}`);
    }
    out.expectedError = got;
  }
  cases.push(out);
  const counts = categoryCounts.get(category) ?? { valid: 0, invalid: 0 };
  counts[expectedError === undefined ? "valid" : "invalid"] += 1;
  categoryCounts.set(category, counts);
}

const valid = (category, detail, input) => add(category, detail, input, undefined);
const invalid = (category, detail, input, code, key) =>
  add(category, detail, input, key === undefined ? { code } : { code, key });

// ---------------------------------------------------------------------------
// basic
// ---------------------------------------------------------------------------

const EXAMPLE_PROPS = [
  ["plan", S("pro")],
  ["seats", N(10)],
  ["beta", B(true)],
];

valid("basic", "v1-plain", {});
valid("basic", "v1-mixed-case", { email: "Alice@Example.COM" });
valid("basic", "v2-empty-properties", { properties: [] });
valid("basic", "v2-example", { properties: EXAMPLE_PROPS });
valid("basic", "v2-example-raw-email", { email: "\u3000Alice@Example.COM ", properties: EXAMPLE_PROPS });
valid("basic", "v2-example-reordered", {
  properties: [EXAMPLE_PROPS[2], EXAMPLE_PROPS[0], EXAMPLE_PROPS[1]],
});
valid("basic", "v1-no-at-sign", { email: "not-an-email" });
valid("basic", "v1-single-char", { email: "A" });

// ---------------------------------------------------------------------------
// whitespace: every ECMAScript WhiteSpace / LineTerminator is trimmed
// ---------------------------------------------------------------------------

const JS_WHITESPACE = [
  0x0009, 0x000a, 0x000b, 0x000c, 0x000d, 0x0020, 0x00a0, 0x1680,
  0x2000, 0x2001, 0x2002, 0x2003, 0x2004, 0x2005, 0x2006, 0x2007, 0x2008, 0x2009, 0x200a,
  0x2028, 0x2029, 0x202f, 0x205f, 0x3000, 0xfeff,
].map((cp) => String.fromCodePoint(cp));

for (const ws of JS_WHITESPACE) {
  const u = uName(ws);
  valid("whitespace", `${u}-leading`, { email: `${ws}Alice@Example.COM` });
  valid("whitespace", `${u}-trailing`, { email: `Alice@Example.COM${ws}` });
  valid("whitespace", `${u}-both`, { email: `${ws}Alice@Example.COM${ws}` });
}
valid("whitespace", "all-both", { email: `${JS_WHITESPACE.join("")}Bob@Example.ORG${JS_WHITESPACE.join("")}` });
valid("whitespace", "all-reversed-both", {
  email: `${[...JS_WHITESPACE].reverse().join("")}Bob@Example.ORG${[...JS_WHITESPACE].reverse().join("")}`,
});
valid("whitespace", "triple-u3000-leading", { email: "\u3000\u3000\u3000Carol@Example.JP" });
valid("whitespace", "crlf-trailing", { email: "carol@example.com\r\n" });
valid("whitespace", "bom-nbsp-leading-v2", { email: "\ufeff\u00a0Dave@Example.com", properties: EXAMPLE_PROPS });
valid("whitespace", "internal-space-kept", { email: " Al ice@Example.com " });
valid("whitespace", "internal-u3000-kept", { email: "Al\u3000ice@Example.com" });
valid("whitespace", "internal-u00a0-kept", { email: "Al\u00a0ice@Example.com" });
valid("whitespace", "internal-u2028-kept", { email: "Al\u2028ice@Example.com" });
valid("whitespace", "internal-ufeff-kept", { email: "Al\ufeffice@Example.com" });
valid("whitespace", "around-internal-space", { email: "\u2003a b\u2003" });

// ---------------------------------------------------------------------------
// lookalike: characters that look like (or are elsewhere treated as) whitespace but JS trim() keeps
// ---------------------------------------------------------------------------

const KEPT_LOOKALIKES = [0x180e, 0x200b, 0x200c, 0x200d, 0x2060, 0x00ad, 0x200e, 0x200f, 0x3164, 0x2800].map((cp) =>
  String.fromCodePoint(cp),
);
for (const ch of KEPT_LOOKALIKES) {
  const u = uName(ch);
  valid("lookalike", `${u}-leading`, { email: `${ch}Alice@Example.COM` });
  valid("lookalike", `${u}-trailing`, { email: `Alice@Example.COM${ch}` });
  valid("lookalike", `${u}-both`, { email: `${ch}Alice@Example.COM${ch}` });
}
valid("lookalike", "u180e-inside-spaces", { email: " \u180e Alice@Example.COM \u180e " });
valid("lookalike", "u200b-only", { email: "\u200b" });
valid("lookalike", "u180e-only-padded", { email: "  \u180e  " });
// U+0085 NEXT LINE is Cc and not ECMAScript whitespace: kept by trim(), then rejected.
invalid("lookalike", "u0085-leading", { email: "\u0085Alice@Example.COM" }, "emailControlCharacter");
invalid("lookalike", "u0085-trailing", { email: "Alice@Example.COM\u0085" }, "emailControlCharacter");
invalid("lookalike", "u0085-both", { email: "\u0085Alice@Example.COM\u0085" }, "emailControlCharacter");
invalid("lookalike", "u0085-after-space", { email: " a\u0085" }, "emailControlCharacter");
// U+001C..U+001F are whitespace to some runtimes (e.g. Python str.strip) but not to JS.
for (const cp of [0x1c, 0x1d, 0x1e, 0x1f]) {
  const ch = String.fromCodePoint(cp);
  invalid("lookalike", `${uName(ch)}-trailing`, { email: `alice@example.com${ch}` }, "emailControlCharacter");
}

// ---------------------------------------------------------------------------
// empty email
// ---------------------------------------------------------------------------

invalid("empty-email", "empty-string", { email: "" }, "emptyEmail");
invalid("empty-email", "single-space", { email: " " }, "emptyEmail");
invalid("empty-email", "tab-lf-cr", { email: "\t\n\r" }, "emptyEmail");
invalid("empty-email", "all-js-whitespace", { email: JS_WHITESPACE.join("") }, "emptyEmail");
invalid("empty-email", "u3000-ufeff", { email: "\u3000\ufeff" }, "emptyEmail");
invalid("empty-email", "u2028-u2029", { email: "\u2028\u2029" }, "emptyEmail");
invalid("empty-email", "whitespace-with-properties", { email: "\u00a0\u1680", properties: EXAMPLE_PROPS }, "emptyEmail");
invalid("empty-email", "empty-with-empty-properties", { email: "", properties: [] }, "emptyEmail");

// ---------------------------------------------------------------------------
// control characters in the normalized email (general category Cc)
// ---------------------------------------------------------------------------

for (let cp = 0x00; cp <= 0x1f; cp++) {
  const ch = String.fromCodePoint(cp);
  invalid("control", `${uName(ch)}-internal`, { email: `al${ch}ice@example.com` }, "emailControlCharacter");
}
for (const cp of [0x7f, 0x80, 0x85, 0x8a, 0x9b, 0x9f]) {
  const ch = String.fromCodePoint(cp);
  invalid("control", `${uName(ch)}-internal`, { email: `al${ch}ice@example.com` }, "emailControlCharacter");
}
invalid("control", "u0000-leading", { email: "\u0000alice@example.com" }, "emailControlCharacter");
invalid("control", "u001b-trailing", { email: "alice@example.com\u001b" }, "emailControlCharacter");
invalid("control", "u007f-trailing", { email: "alice@example.com\u007f" }, "emailControlCharacter");
invalid("control", "u009f-leading-after-space", { email: " \u009falice@example.com" }, "emailControlCharacter");
invalid("control", "u0009-internal-padded", { email: "\t al\tice@example.com \t" }, "emailControlCharacter");
invalid("control", "u0000-with-properties", { email: "a\u0000b", properties: EXAMPLE_PROPS }, "emailControlCharacter");
// Not Cc: format / private-use / noncharacter code points stay valid.
valid("control", "u00ad-soft-hyphen-valid", { email: "al\u00adice@example.com" });
valid("control", "ue000-private-use-valid", { email: "al\ue000ice@example.com" });
valid("control", "uffff-noncharacter-valid", { email: "al\uffffice@example.com" });
valid("control", "u00a0-internal-valid", { email: "al\u00a0ice@example.com" });

// ---------------------------------------------------------------------------
// lowercase: String.prototype.toLowerCase (Unicode default, locale-independent)
// ---------------------------------------------------------------------------

const LOWERCASE = [
  ["ascii-upper", "ALICE@EXAMPLE.COM"],
  ["ascii-mixed", "aLiCe.BoB+Tag@Sub.Example.Org"],
  ["ascii-digits-symbols", "J.R.R_Tolkien-99+Rings@Middle-Earth.NZ"],
  ["latin1-upper", "\u00c0\u00c1\u00c2\u00c3\u00c4\u00c5\u00c6\u00c7\u00c8\u00c9\u00ca\u00cb\u00cc\u00cd\u00ce\u00cf@x.com"],
  ["latin1-upper-2", "\u00d0\u00d1\u00d2\u00d3\u00d4\u00d5\u00d6\u00d8\u00d9\u00da\u00db\u00dc\u00dd\u00de@x.com"],
  ["latin1-unchanged", "\u00b5\u00df\u00d7\u00f7\u00ff\u00aa\u00ba@x.com"],
  ["latin-y-diaeresis", "\u0178VES@x.fr"],
  ["turkish-dotted-capital-i", "\u0130STANBUL@Example.TR"],
  ["turkish-dotted-capital-i-alone", "\u0130"],
  ["turkish-dotless-i", "\u0131I\u0130i@x.tr"],
  ["turkish-i-combining-dot", "I\u0307@x.tr"],
  ["lithuanian-grave-i", "\u00cc\u00cd\u0128@x.lt"],
  ["german-sharp-s", "Stra\u00dfe@Example.DE"],
  ["german-capital-sharp-s", "STRA\u1e9eE@EXAMPLE.DE"],
  ["german-masse", "MASSE-Ma\u00dfe@x.de"],
  ["greek-accented", "\u0386\u0388\u0389\u038a\u038c\u038e\u038f@x.gr"],
  ["greek-dialytika", "\u03aa\u03ab\u0390\u03b0@x.gr"],
  ["greek-theta-symbol", "\u03f4\u03d2@x.gr"],
  ["greek-prosgegrammeni", "\u1fbc\u1f88\u1fcc\u1ffc@x.gr"],
  ["cyrillic", "\u041f\u0420\u0418\u0412\u0415\u0422@\u041f\u0440\u0438\u043c\u0435\u0440.\u0420\u0424"],
  ["cyrillic-extended", "\u0401\u0416\u0407\u0404\u0490\u040e\u04c0\u0460@x.ua"],
  ["armenian", "\u0532\u0531\u0550\u0535\u054e@x.am"],
  ["armenian-ligature-unchanged", "\u0587\ufb13@x.am"],
  ["georgian-mtavruli", "\u1c92\u1c90\u1c9b\u1c90\u1ca0\u1caf\u1c9d\u1c91\u1c90@x.ge"],
  ["georgian-asomtavruli", "\u10a0\u10a1\u10c5\u10c7\u10cd@x.ge"],
  ["cherokee", "\u13e3\u13b3\u13a9\u13f0\u13f5@x.us"],
  ["glagolitic-coptic", "\u2c00\u2c01\u2c80\u2c82@x.org"],
  ["latin-cross-block", "\u023a\u023e\u2c6f\u2c7e\ua7b0\ua7c4@x.org"],
  ["titlecase-digraphs", "\u01c4\u01c5\u01c7\u01c8\u01ca\u01cb\u01f1\u01f2@x.hr"],
  ["letterlike", "\u212a\u212b\u2126@x.com"],
  ["roman-numerals-circled", "\u216b\u2160\u24b6\u24e9@x.com"],
  ["fullwidth", "\uff21\uff2c\uff29\uff23\uff25\uff20\uff25\uff38.\uff23\uff2f\uff2d"],
  ["deseret", "\u{10400}\u{10401}\u{10402}@x.com"],
  ["osage", "\u{104b0}\u{104b1}@x.com"],
  ["old-hungarian", "\u{10c80}\u{10c81}@x.hu"],
  ["warang-citi", "\u{118a0}\u{118a1}@x.in"],
  ["medefaidrin", "\u{16e40}\u{16e41}@x.ng"],
  ["adlam", "\u{1e900}\u{1e901}@x.sn"],
  ["vithkuqi", "\u{10570}\u{10571}@x.al"],
  ["mathematical-bold-unchanged", "\u{1d400}\u{1d401}@x.com"],
  ["emoji", "\u{1f600}Bob@Example.COM"],
  ["emoji-zwj-skin-tone", "\u{1f469}\u{1f3fd}\u200d\u{1f4bb}@X.IO"],
  ["emoji-flag-keycap", "\u{1f1e9}\u{1f1ea}1\ufe0f\u20e3@X.de"],
  ["combining-acute-decomposed", "E\u0301MILE@Example.FR"],
  ["combining-acute-precomposed", "\u00c9MILE@Example.FR"],
  ["combining-stack", "A\u030a\u0323Z\u0335\u0336@x.com"],
  ["combining-ypogegrammeni", "\u0391\u0345@x.gr"],
  ["hangul-jamo-unchanged", "\u1100\u1161\u11a8@X.KR"],
  ["cjk-unchanged", "\u5c71\u7530@\u4f8b\u3048.JP"],
  ["rtl-unchanged", "\u05e9\u05dc\u05d5\u05dd@\u0645\u062b\u0627\u0644.COM"],
  ["mixed-scripts", "Jos\u00c9\u0130\u03a3\u0414\u{10400}@Mix.ES"],
  ["idn-domain", "User@B\u00dcCHER.Example"],
];
for (const [detail, email] of LOWERCASE) valid("lowercase", detail, { email });

// ---------------------------------------------------------------------------
// sigma: Greek capital sigma uses the Final_Sigma context in toLowerCase()
// ---------------------------------------------------------------------------

const SIGMA = [
  ["odysseus", "\u039f\u0394\u03a5\u03a3\u03a3\u0395\u03a5\u03a3@x.gr"],
  ["alone", "\u03a3"],
  ["alone-at", "\u03a3@x"],
  ["start", "\u03a3\u0391@x"],
  ["middle", "\u0391\u03a3\u0391@x"],
  ["end-of-string", "\u0391\u03a3"],
  ["before-at", "\u0391\u03a3@x"],
  ["before-period-then-letter", "\u0391\u03a3.\u0392@x"],
  ["before-period-end", "\u0391\u03a3."],
  ["before-two-periods-then-letter", "\u0391\u03a3..\u0392@x"],
  ["before-apostrophe-then-letter", "\u0391\u03a3'\u0392@x"],
  ["before-colon-then-letter", "\u0391\u03a3:\u0392@x"],
  ["before-middle-dot-then-letter", "\u0391\u03a3\u00b7\u0392@x"],
  ["before-soft-hyphen-then-letter", "\u0391\u03a3\u00ad\u0392@x"],
  ["before-hyphen-then-letter", "\u0391\u03a3-\u0392@x"],
  ["before-space-then-letter", "\u0391\u03a3 \u0392@x"],
  ["before-digit", "\u0391\u03a31@x"],
  ["after-digit", "1\u03a3@x"],
  ["combining-after", "\u0391\u03a3\u0301"],
  ["combining-after-then-letter", "\u0391\u03a3\u0301\u0392"],
  ["combining-before", "\u0391\u0301\u03a3@x"],
  ["before-zwsp", "\u0391\u03a3\u200b@x"],
  ["before-u180e", "\u0391\u03a3\u180e@x"],
  ["double", "\u0391\u03a3\u03a3@x"],
  ["after-latin", "a\u03a3@x"],
  ["after-deseret", "\u{10400}\u03a3@x"],
  ["after-titlecase", "\u01c5\u03a3@x"],
  ["several-words", "\u0391\u03a3.\u0392\u03a3@\u03a7\u03a3.gr"],
  ["trimmed-whitespace-after", "\u0391\u03a3\u3000"],
  ["lowercase-input-unchanged", "\u03b1\u03c3@x"],
  ["already-final-unchanged", "\u03c3\u03c2\u03a3"],
];
for (const [detail, email] of SIGMA) valid("sigma", detail, { email });

// ---------------------------------------------------------------------------
// props-string: JSON.stringify escaping of string values
// ---------------------------------------------------------------------------

for (let cp = 0x00; cp <= 0x1f; cp++) {
  const ch = String.fromCodePoint(cp);
  valid("props-string", `control-${uName(ch)}`, { properties: [["note", S(`a${ch}b`)]] });
}
let allControls = "";
for (let cp = 0x00; cp <= 0x1f; cp++) allControls += String.fromCodePoint(cp);
const STRINGS = [
  ["all-c0-controls", allControls],
  ["u007f", "del\u007fete"],
  ["c1-controls", "\u0080\u0085\u009f"],
  ["double-quote", 'say "hi"'],
  ["backslash", "C:\\path\\to\\file"],
  ["slash-script", "a/b</script>"],
  ["backslash-u-literal", "\\u0041 is not A"],
  ["line-paragraph-separators", "x\u2028y\u2029z"],
  ["bom-and-noncharacters", "\ufeff\ufffe\uffff"],
  ["emoji", "\u{1f600}\u{1f389}"],
  ["emoji-family-zwj", "\u{1f468}\u200d\u{1f469}\u200d\u{1f467}\u200d\u{1f466}"],
  ["flag", "\u{1f1ef}\u{1f1f5}"],
  ["cjk", "\u65e5\u672c\u8a9e\u30c6\u30ad\u30b9\u30c8"],
  ["combining-decomposed", "e\u0301"],
  ["combining-precomposed", "\u00e9"],
  ["empty", ""],
  ["single-space", " "],
  ["untrimmed-whitespace", "\u3000 padded \t"],
  ["json-looking", '{"a":1,"b":[null]}'],
  ["null-word", "null"],
  ["true-word", "true"],
  ["number-word", "0"],
  ["mixed-everything", 'A"\\/\b\f\n\r\t\u0000\u001f\u007f\u0085\u2028\u00e9\u{1f600}\u{10400}z'],
];
for (const [detail, value] of STRINGS) valid("props-string", detail, { properties: [["note", S(value)]] });
valid("props-string", "several-keys", {
  properties: [
    ["z", S("last")],
    ["a", S("first\nline")],
    ["m", S("\u00fcmlaut")],
  ],
});

// ---------------------------------------------------------------------------
// props-length: string limit is 200 UTF-16 code units (String.prototype.length)
// ---------------------------------------------------------------------------

const EMOJI = "\u{1f600}";
valid("props-length", "ascii-200", { properties: [["bio", S("a".repeat(200))]] });
invalid("props-length", "ascii-201", { properties: [["bio", S("a".repeat(201))]] }, "propertyStringTooLong", "bio");
valid("props-length", "ascii-198-plus-emoji-200-units", { properties: [["bio", S("a".repeat(198) + EMOJI)]] });
invalid(
  "props-length",
  "ascii-199-plus-emoji-201-units-200-scalars",
  { properties: [["bio", S("a".repeat(199) + EMOJI)]] },
  "propertyStringTooLong",
  "bio",
);
valid("props-length", "emoji-100-200-units", { properties: [["bio", S(EMOJI.repeat(100))]] });
invalid(
  "props-length",
  "emoji-100-plus-a-201-units-101-scalars",
  { properties: [["bio", S(EMOJI.repeat(100) + "a")]] },
  "propertyStringTooLong",
  "bio",
);
valid("props-length", "precomposed-e-acute-200", { properties: [["bio", S("\u00e9".repeat(200))]] });
invalid(
  "props-length",
  "precomposed-e-acute-201",
  { properties: [["bio", S("\u00e9".repeat(201))]] },
  "propertyStringTooLong",
  "bio",
);
valid("props-length", "decomposed-e-acute-100-graphemes-200-units", { properties: [["bio", S("e\u0301".repeat(100))]] });
invalid(
  "props-length",
  "decomposed-e-acute-101-graphemes-202-units",
  { properties: [["bio", S("e\u0301".repeat(101))]] },
  "propertyStringTooLong",
  "bio",
);
valid("props-length", "cjk-200", { properties: [["bio", S("\u6f22".repeat(200))]] });
valid("props-length", "controls-200", { properties: [["bio", S("\u0001".repeat(200))]] });
invalid(
  "props-length",
  "family-emoji-19-graphemes-209-units",
  { properties: [["bio", S("\u{1f468}\u200d\u{1f469}\u200d\u{1f467}\u200d\u{1f466}".repeat(19))]] },
  "propertyStringTooLong",
  "bio",
);
invalid(
  "props-length",
  "second-key-too-long",
  {
    properties: [
      ["a", S("ok")],
      ["b", S("x".repeat(250))],
      ["c", N(3)],
    ],
  },
  "propertyStringTooLong",
  "b",
);

// ---------------------------------------------------------------------------
// props-keys: key grammar, forbidden key, UTF-16 code unit ordering
// ---------------------------------------------------------------------------

const keySet = (keys) => keys.map((k, i) => [k, N(i)]);
valid("props-keys", "order-punctuation-digits-case", { properties: keySet(["ab", "aB", "a_b", "a0", "a.b", "a-b"]) });
valid("props-keys", "order-uppercase-before-lowercase", { properties: keySet(["b", "B", "a", "A", "Z", "z"]) });
valid("props-keys", "order-prefixes", { properties: keySet(["abcd", "ab", "abc", "a"]) });
valid("props-keys", "order-digits-lexicographic", { properties: keySet(["a10", "a9", "a1", "a2", "a100"]) });
valid("props-keys", "order-trailing-punctuation", { properties: keySet(["a_", "aZ", "aa", "a.", "a-", "a9"]) });
valid("props-keys", "order-underscore-vs-letters", { properties: keySet(["Z_", "Za", "ZZ", "z_", "zA"]) });
valid("props-keys", "order-dotted-paths", {
  properties: keySet(["user.name", "user-name", "user_name", "user.Name", "userName", "user0"]),
});
valid("props-keys", "single-letter", { properties: [["x", S("y")]] });
const KEY64 = "k" + "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_.-".slice(0, 63);
valid("props-keys", "length-64", { properties: [[KEY64, S("max key")]] });
valid("props-keys", "length-64-all-punctuation", { properties: [["Q" + "_.-".repeat(21), B(false)]] });
valid("props-keys", "prototype-names", {
  properties: keySet(["toString", "prototype", "hasOwnProperty", "valueOf", "isPrototypeOf", "proto"]),
});
valid("props-keys", "constructor-lookalikes", {
  properties: keySet(["Constructor", "CONSTRUCTOR", "constructor_", "constructors", "constructo", "xconstructor"]),
});

const KEY65 = KEY64 + "z";
const INVALID_KEYS = [
  ["length-65", KEY65],
  ["empty", ""],
  ["leading-digit", "1a"],
  ["digit-only", "9"],
  ["leading-underscore", "_a"],
  ["leading-hyphen", "-a"],
  ["leading-period", ".a"],
  ["proto", "__proto__"],
  ["space", "a b"],
  ["at-sign", "a@b"],
  ["slash", "a/b"],
  ["colon", "a:b"],
  ["dollar", "a$"],
  ["latin1-letter", "caf\u00e9"],
  ["leading-non-ascii", "\u00e9t\u00e9"],
  ["fullwidth-letter", "\uff41"],
  ["kelvin-sign", "\u212a"],
  ["dotted-capital-i", "\u0130d"],
  ["trailing-newline", "ab\n"],
  ["leading-newline", "\nab"],
  ["trailing-nul", "ab\u0000"],
  ["non-bmp-letter", "\u{10400}"],
  ["emoji", "a\u{1f600}"],
];
for (const [detail, key] of INVALID_KEYS) {
  invalid(
    "props-keys",
    `invalid-${detail}`,
    {
      properties: [
        ["plan", S("pro")],
        [key, S("v")],
        ["seats", N(1)],
      ],
    },
    "invalidPropertyKey",
    key,
  );
}
invalid("props-keys", "forbidden-constructor-string", { properties: [["constructor", S("x")]] }, "forbiddenPropertyKey", "constructor");
invalid("props-keys", "forbidden-constructor-number", { properties: [["constructor", N(1)]] }, "forbiddenPropertyKey", "constructor");
invalid(
  "props-keys",
  "forbidden-constructor-among-others",
  { properties: [["z", B(true)], ["constructor", B(false)], ["a", S("a")]] },
  "forbiddenPropertyKey",
  "constructor",
);

// ---------------------------------------------------------------------------
// props-count: at most 20 keys; [] is a valid v2 set
// ---------------------------------------------------------------------------

const manyKeys = (n) =>
  Array.from({ length: n }, (_, i) => {
    const k = `key${String(n - i).padStart(2, "0")}`;
    const v = i % 3 === 0 ? S(`v${i}`) : i % 3 === 1 ? N(i * 1.5) : B(i % 2 === 0);
    return [k, v];
  });
valid("props-count", "0-keys", { properties: [] });
valid("props-count", "0-keys-with-unicode-email", { email: " \u00c9MILE@Example.FR ", properties: [] });
valid("props-count", "1-key", { properties: manyKeys(1) });
valid("props-count", "19-keys", { properties: manyKeys(19) });
valid("props-count", "20-keys", { properties: manyKeys(20) });
invalid("props-count", "21-keys", { properties: manyKeys(21) }, "tooManyProperties");
invalid("props-count", "30-keys", { properties: manyKeys(30) }, "tooManyProperties");
invalid("props-count", "21-keys-empty-values", {
  properties: Array.from({ length: 21 }, (_, i) => [String.fromCharCode(97 + i), S("")]),
}, "tooManyProperties");

// ---------------------------------------------------------------------------
// props-size: canonical JSON limit is 2048 UTF-8 bytes (after escaping)
// ---------------------------------------------------------------------------

/**
 * Builds string properties whose canonical JSON is exactly `target` UTF-8 bytes.
 * `unit` is repeated into each value (respecting the 200-unit limit), then ASCII "x"
 * fills the remainder one byte at a time.
 */
function sized(target, keys, unit, extra = []) {
  const entries = keys.map((k) => [k, ""]);
  const build = () => [...extra, ...entries.map(([k, v]) => [k, S(v)])];
  for (const e of entries) {
    for (;;) {
      const before = e[1];
      if (before.length + unit.length > MAX_STRING_UNITS) break;
      e[1] = before + unit;
      if (canonicalBytes(build()) > target) {
        e[1] = before;
        break;
      }
    }
  }
  for (const e of entries) {
    while (canonicalBytes(build()) < target && e[1].length < MAX_STRING_UNITS) e[1] += "x";
  }
  const result = build();
  if (canonicalBytes(result) !== target) throw new Error(`could not size canonical to ${target}`);
  return result;
}
const sizeKeys = (n) => Array.from({ length: n }, (_, i) => `f${String(i).padStart(2, "0")}`);
const utf16Length = (entries) => canonicalize(toObject(entries)).length;

const size2048ascii = sized(2048, sizeKeys(12), "a");
valid("props-size", "2048-bytes-ascii", { properties: size2048ascii });
valid("props-size", "2047-bytes-ascii", { properties: sized(2047, sizeKeys(12), "a") });
invalid("props-size", "2049-bytes-ascii", { properties: sized(2049, sizeKeys(12), "a") }, "propertiesTooLarge");
const size2048latin = sized(2048, sizeKeys(8), "\u00e9");
valid("props-size", "2048-bytes-two-byte-chars", { properties: size2048latin });
const size2049latin = sized(2049, sizeKeys(8), "\u00e9");
if (utf16Length(size2049latin) > 2048) throw new Error("size2049latin should be <= 2048 UTF-16 units");
invalid("props-size", "2049-bytes-two-byte-chars-under-2048-units", { properties: size2049latin }, "propertiesTooLarge");
valid("props-size", "2048-bytes-three-byte-chars", { properties: sized(2048, sizeKeys(6), "\u6f22") });
invalid("props-size", "2049-bytes-three-byte-chars", { properties: sized(2049, sizeKeys(6), "\u6f22") }, "propertiesTooLarge");
valid("props-size", "2048-bytes-emoji", { properties: sized(2048, sizeKeys(6), EMOJI) });
invalid("props-size", "2049-bytes-emoji", { properties: sized(2049, sizeKeys(6), EMOJI) }, "propertiesTooLarge");
// \u0001 is one UTF-16 unit in the value but six bytes ("\u0001") in the canonical JSON.
const size2048esc = sized(2048, sizeKeys(4), "\u0001");
valid("props-size", "2048-bytes-escaped-controls", { properties: size2048esc });
const size2049esc = sized(2049, sizeKeys(4), "\u0001");
invalid("props-size", "2049-bytes-escaped-controls-raw-values-small", { properties: size2049esc }, "propertiesTooLarge");
valid("props-size", "2048-bytes-escaped-quotes", { properties: sized(2048, sizeKeys(7), '"') });
invalid("props-size", "2049-bytes-escaped-newlines", { properties: sized(2049, sizeKeys(7), "\n") }, "propertiesTooLarge");
const mixedExtra = [
  ["n1", N(-1.5e300)],
  ["n2", N(0.1 + 0.2)],
  ["n3", N(5e-324)],
  ["t", B(true)],
  ["u", B(false)],
];
valid("props-size", "2048-bytes-20-keys-mixed-types", {
  properties: sized(2048, sizeKeys(15), "\u00fc", mixedExtra),
});
invalid(
  "props-size",
  "2049-bytes-20-keys-mixed-types",
  { properties: sized(2049, sizeKeys(15), "\u00fc", mixedExtra) },
  "propertiesTooLarge",
);
invalid("props-size", "far-over", { properties: sized(4000, sizeKeys(20), "\u6f22") }, "propertiesTooLarge");

// ---------------------------------------------------------------------------
// props-bool
// ---------------------------------------------------------------------------

valid("props-bool", "true", { properties: [["beta", B(true)]] });
valid("props-bool", "false", { properties: [["beta", B(false)]] });
valid("props-bool", "mixed-with-look-alike-strings", {
  properties: [
    ["t", B(true)],
    ["ts", S("true")],
    ["f", B(false)],
    ["fs", S("false")],
    ["one", N(1)],
    ["zero", N(0)],
  ],
});

// ---------------------------------------------------------------------------
// number: Number::toString / JSON.stringify formatting of finite doubles
// ---------------------------------------------------------------------------

const NUMBERS = [
  ["zero", N(0)],
  ["negative-zero", NB("8000000000000000")],
  ["one", N(1)],
  ["minus-one", N(-1)],
  ["one-tenth", N(0.1)],
  ["point-one-plus-point-two", N(0.1 + 0.2)],
  ["one-third", N(1 / 3)],
  ["two-thirds", N(2 / 3)],
  ["half", N(0.5)],
  ["four-point-three-five", N(4.35)],
  ["hundred", N(100)],
  ["ten", N(10)],
  ["1e20", N(1e20)],
  ["1e21", N(1e21)],
  ["1e21-minus-one-ulp", N(1e21 - 131072)],
  ["largest-below-1e21", N(999999999999999900000)],
  ["123456789012345680000", N(123456789012345680000)],
  ["1e22", N(1e22)],
  ["1e23", N(1e23)],
  ["1e-6", N(0.000001)],
  ["1e-7", N(1e-7)],
  ["1.5e-7", N(1.5e-7)],
  ["1.2345e-6", N(1.2345e-6)],
  ["123e-20", N(123e-20)],
  ["min-subnormal", N(5e-324)],
  ["negative-min-subnormal", N(-5e-324)],
  ["max-subnormal", N(2.225073858507201e-308)],
  ["min-normal", N(2.2250738585072014e-308)],
  ["max-value", N(Number.MAX_VALUE)],
  ["negative-max-value", N(-Number.MAX_VALUE)],
  ["max-safe-integer", N(Number.MAX_SAFE_INTEGER)],
  ["min-safe-integer", N(Number.MIN_SAFE_INTEGER)],
  ["2-pow-53", N(2 ** 53)],
  ["2-pow-53-plus-2", N(2 ** 53 + 2)],
  ["2-pow-64", N(2 ** 64)],
  ["1e16", N(1e16)],
  ["minus-1.5e300", N(-1.5e300)],
  ["1e300", N(1e300)],
  ["epsilon", N(Number.EPSILON)],
  ["pi", N(Math.PI)],
  ["minus-e", N(-Math.E)],
  ["literal-9007199254740.993-rounds", N(9007199254740.993)],
  ["5e-7", N(5e-7)],
  ["123.456", N(123.456)],
  ["0.000123", N(0.000123)],
  ["max-value-minus-ulp", NB("7feffffffffffffe")],
  ["2-pow-31", N(2 ** 31)],
];
for (const [detail, value] of NUMBERS) valid("number", detail, { properties: [["n", value]] });
valid("number", "many-in-one-set", {
  properties: [
    ["a", N(0)],
    ["b", NB("8000000000000000")],
    ["c", N(1e21)],
    ["d", N(1e-7)],
    ["e", N(0.1)],
    ["f", N(-1.5e300)],
    ["g", N(5e-324)],
    ["h", N(123456789012345680000)],
  ],
});
const NON_FINITE = [
  ["nan", "7ff8000000000000"],
  ["negative-nan", "fff8000000000000"],
  ["signalling-nan", "7ff0000000000001"],
  ["nan-all-payload-bits", "7fffffffffffffff"],
  ["infinity", "7ff0000000000000"],
  ["negative-infinity", "fff0000000000000"],
];
for (const [detail, bits] of NON_FINITE) {
  invalid("number", `not-finite-${detail}`, { properties: [["score", NB(bits)]] }, "propertyNumberNotFinite", "score");
}
invalid(
  "number",
  "not-finite-among-finite",
  { properties: [["a", N(1)], ["m", NB("7ff0000000000000")], ["z", N(2)]] },
  "propertyNumberNotFinite",
  "m",
);

// ---------------------------------------------------------------------------
// number-random: doubles from seeded random bit patterns (finite only)
// ---------------------------------------------------------------------------

function randomFiniteBits(kind) {
  for (;;) {
    let bits = rng.bits64();
    const hi = parseInt(bits.slice(0, 8), 16);
    const sign = hi & 0x8000_0000;
    const mantissaHi = hi & 0x000f_ffff;
    let exp = (hi >>> 20) & 0x7ff;
    if (kind === "fixed") exp = rng.range(0x3e7, 0x445); // ~6e-8 .. ~2.4e21: around the fixed-notation range [1e-6, 1e21)
    if (kind === "subnormal") exp = 0;
    if (kind === "fixed" || kind === "subnormal") {
      const newHi = (sign | (exp << 20) | mantissaHi) >>> 0;
      bits = newHi.toString(16).padStart(8, "0") + bits.slice(8);
    }
    if (exp === 0x7ff) continue; // NaN / Infinity
    if (kind === "subnormal" && bits.slice(1) === "000000000000000") continue;
    return bits;
  }
}
for (let i = 0; i < 100; i++) {
  const kind = i < 60 ? "any" : i < 90 ? "fixed" : "subnormal";
  const bits = randomFiniteBits(kind);
  valid("number-random", `${String(i).padStart(3, "0")}-${kind}-${bits}`, { properties: [["x", NB(bits)]] });
}

// ---------------------------------------------------------------------------
// expires
// ---------------------------------------------------------------------------

const EXPIRES = [
  ["typical-2026", 1767225600],
  ["typical-2023", 1700000900],
  ["one", 1],
  ["2-pow-31-minus-1", 2 ** 31 - 1],
  ["2-pow-31", 2 ** 31],
  ["2-pow-32-minus-1", 2 ** 32 - 1],
  ["2-pow-32", 2 ** 32],
  ["2-pow-40", 2 ** 40],
  ["year-9999", 253402300799],
];
for (const [detail, expiresAt] of EXPIRES) {
  valid("expires", `${detail}-v1`, { expiresAt });
  valid("expires", `${detail}-v2`, { expiresAt, properties: EXAMPLE_PROPS });
}
invalid("expires", "zero", { expiresAt: 0 }, "invalidExpiresAt");
invalid("expires", "minus-five", { expiresAt: -5 }, "invalidExpiresAt");
invalid("expires", "minus-one-v2", { expiresAt: -1, properties: EXAMPLE_PROPS }, "invalidExpiresAt");
invalid("expires", "minus-2-pow-31", { expiresAt: -(2 ** 31) }, "invalidExpiresAt");
invalid("expires", "zero-empty-properties", { expiresAt: 0, properties: [] }, "invalidExpiresAt");

// ---------------------------------------------------------------------------
// secret: HMAC key is the UTF-8 bytes of the secret string (keys > 64 bytes are hashed first)
// ---------------------------------------------------------------------------

const ALNUM = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789";
const asciiSecret = (n) => Array.from({ length: n }, (_, i) => ALNUM[(i * 7 + 3) % ALNUM.length]).join("");
const SECRETS = [
  ["1-byte", "k"],
  ["32-bytes", asciiSecret(32)],
  ["63-bytes", asciiSecret(63)],
  ["64-bytes", asciiSecret(64)],
  ["65-bytes", asciiSecret(65)],
  ["100-bytes", asciiSecret(100)],
  ["200-bytes", asciiSecret(200)],
  ["1000-bytes", asciiSecret(1000)],
  ["hex-text-not-decoded", "00112233445566778899aabbccddeeff00112233445566778899aabbccddeeff"],
  ["base64-text-not-decoded", "c2VjcmV0LWtleS1ub3QtZGVjb2RlZA=="],
  ["two-byte-chars-32-chars-64-bytes", "\u00e9".repeat(32)],
  ["two-byte-chars-33-chars-66-bytes", "\u00fc".repeat(33)],
  ["cjk", "\u79d8\u5bc6\u306e\u9375"],
  ["emoji", "\u{1f511}key\u{1f510}"],
  ["whitespace-and-newline", " line1\nline2\t "],
  ["punctuation", "!@#$%^&*()_+-=[]{};':\",./<>?`~|\\"],
  ["ascii-63-plus-two-byte-char-65-bytes", asciiSecret(63) + "\u00e9"],
];
for (const [detail, secret] of SECRETS) {
  valid("secret", `${detail}-v1`, { secret });
  valid("secret", `${detail}-v2`, { secret, properties: EXAMPLE_PROPS });
}

// ---------------------------------------------------------------------------
// project
// ---------------------------------------------------------------------------

const PROJECTS = [
  ["short", "p"],
  ["uuid", "3f2b9c1e-8d4a-4e6f-9b2a-1c3d5e7f9a0b"],
  ["digits", "1234567890"],
  ["long", "proj_" + asciiSecret(120)],
  ["with-space", "my project"],
  ["non-ascii-latin", "projekt_\u00fc"],
  ["cjk", "\u30d7\u30ed\u30b8\u30a7\u30af\u30c8"],
  ["emoji", "proj\u{1f680}"],
];
for (const [detail, projectId] of PROJECTS) {
  valid("project", `${detail}-v1`, { projectId });
  valid("project", `${detail}-v2`, { projectId, properties: [["plan", S("team")]] });
}

// ---------------------------------------------------------------------------
// random: seeded mixes of everything above
// ---------------------------------------------------------------------------

const ASCII_LOCAL = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789._+-";
const UNICODE_LETTERS = [
  ..."\u00c0\u00c9\u00d6\u00dc\u00df\u00e9\u00f1\u0130\u0131\u1e9e\u0178",
  ..."\u0391\u0392\u0393\u03a3\u03a3\u03a3\u03c3\u03c2\u0386\u03aa",
  ..."\u0414\u0416\u042f\u0434\u0401\u0531\u0532\u0561\u1c90\u1c91\u10d0\u13a0\u13f0",
  ..."\u01c5\u212a\u212b\u2126\u216b\u24b6\uff21\uff41\u5c71\u05e9\u0645",
  "\u{10400}", "\u{10428}", "\u{104b0}", "\u{1e900}", "\u{1f600}", "\u{1f469}\u{1f3fd}", "e\u0301", "E\u0301", "\u0301",
];
const DOMAINS = [
  "example.com", "Example.COM", "Sub.Example.Org", "mail.co.uk", "\u0395\u039b\u039b\u0391\u0394\u0391.gr",
  "B\u00fccher.DE", "\u4f8b\u3048.jp", "\u043f\u0440\u0438\u043c\u0435\u0440.\u0420\u0424", "X.IO", "localhost",
];
const PADDING = [...JS_WHITESPACE, ...JS_WHITESPACE, "\u200b", "\u180e"]; // lookalikes survive trim() (not Cc)

function randomEmail() {
  let local = "";
  const len = rng.range(1, 14);
  const unicodeRate = rng.chance(0.5) ? 0.35 : 0;
  for (let i = 0; i < len; i++) {
    local += rng.chance(unicodeRate) ? rng.pick(UNICODE_LETTERS) : rng.pick([...ASCII_LOCAL]);
  }
  let email = `${local}@${rng.pick(DOMAINS)}`;
  if (rng.chance(0.5)) {
    const pad = () => Array.from({ length: rng.range(1, 3) }, () => rng.pick(PADDING)).join("");
    const where = rng.int(3);
    if (where !== 1) email = pad() + email;
    if (where !== 0) email = email + pad();
  }
  return email;
}

const KEY_FIRST = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz";
const KEY_REST = KEY_FIRST + "0123456789_.-";
function randomKey() {
  const len = rng.chance(0.05) ? rng.range(40, 64) : rng.range(1, 12);
  let key = rng.pick([...KEY_FIRST]);
  for (let i = 1; i < len; i++) key += rng.pick([...KEY_REST]);
  return key;
}

const STRING_POOL = [
  ...ASCII_LOCAL, ..." \"\\/'<>&{}[]:,", "\u0000", "\u0001", "\u0008", "\t", "\n", "\u000b", "\u000c", "\r", "\u001b", "\u001f",
  "\u007f", "\u0085", "\u00a0", "\u00e9", "\u00df", "\u0130", "\u03a3", "\u2028", "\u2029", "\u200b", "\ufeff", "\u6f22",
  "\u{1f600}", "\u{1f1ef}\u{1f1f5}", "\u{10400}", "e\u0301", "\u{1f468}\u200d\u{1f469}",
];
function randomString() {
  const target = rng.chance(0.08) ? rng.range(150, 200) : rng.range(0, 30);
  let s = "";
  for (;;) {
    const piece = rng.pick(STRING_POOL);
    if (s.length + piece.length > target) break;
    s += piece;
  }
  return s;
}

const NICE_NUMBERS = [0, 1, -1, 0.1, 0.5, 2.5, 100, 1e21, 1e-7, 123.456, -0.001, 42, 3.14159, 1e100, -2e-300];
function randomNumber() {
  const r = rng.int(4);
  if (r === 0) return NB(randomFiniteBits("any"));
  if (r === 1) return NB(randomFiniteBits("fixed"));
  if (r === 2) return N(rng.pick(NICE_NUMBERS));
  return N((rng.u32() - 0x8000_0000) / 10 ** rng.int(6));
}

function randomValue() {
  const r = rng.int(20);
  if (r < 9) return S(randomString());
  if (r < 15) return randomNumber();
  return B(rng.chance(0.5));
}

function randomProperties() {
  if (rng.chance(0.2)) return undefined;
  for (;;) {
    const count = rng.range(0, 20);
    const entries = [];
    const seen = new Set();
    while (entries.length < count) {
      const key = randomKey();
      if (key === "constructor" || seen.has(key)) continue;
      seen.add(key);
      entries.push([key, randomValue()]);
    }
    if (canonicalBytes(entries) <= MAX_CANONICAL_BYTES) return entries;
  }
}

function randomProjectId() {
  const r = rng.int(5);
  if (r === 0) return `proj_${rng.u32().toString(16)}`;
  if (r === 1) {
    const h = () => rng.u32().toString(16).padStart(8, "0");
    const u = h() + h() + h() + h();
    return `${u.slice(0, 8)}-${u.slice(8, 12)}-${u.slice(12, 16)}-${u.slice(16, 20)}-${u.slice(20)}`;
  }
  if (r === 2) return `${rng.pick(["acme", "Acme", "north", "demo"])}-${rng.pick(["prod", "staging", "dev"])}-${rng.range(1, 99)}`;
  if (r === 3) return String(rng.range(1, 2 ** 31));
  return `proj_${rng.pick(["\u00fc", "\u00e9", "\u6f22", "\u{1f680}", "\u03a3"])}${rng.range(0, 999)}`;
}

const SECRET_CHARS = ALNUM + "!#$%&()*+,-./:;<=>?@[]^_{|}~ ";
const SECRET_UNICODE = ["\u00e9", "\u00fc", "\u00df", "\u6f22", "\u79d8", "\u{1f511}", "\u03a3", "\u0416"];
function randomSecret() {
  const r = rng.int(5);
  if (r === 0) return Array.from({ length: 64 }, () => "0123456789abcdef"[rng.int(16)]).join("");
  const len = r === 1 ? rng.range(65, 130) : rng.range(1, 64);
  const unicodeRate = r === 2 ? 0.3 : 0;
  let s = "";
  for (let i = 0; i < len; i++) s += rng.chance(unicodeRate) ? rng.pick(SECRET_UNICODE) : SECRET_CHARS[rng.int(SECRET_CHARS.length)];
  return s;
}

function randomExpiresAt() {
  const r = rng.int(10);
  if (r === 0) return rng.range(1, 2 ** 31);
  if (r === 1) return rng.range(2 ** 31, 2 ** 40);
  return rng.range(1_700_000_000, 1_900_000_000);
}

for (let i = 0; i < 200; i++) {
  const input = {
    projectId: randomProjectId(),
    secret: randomSecret(),
    email: randomEmail(),
    expiresAt: randomExpiresAt(),
  };
  const properties = randomProperties();
  if (properties !== undefined) input.properties = properties;
  valid("random", String(i).padStart(3, "0"), input);
}

// ---------------------------------------------------------------------------
// Output: stable, ASCII-only JSON (every non-ASCII / DEL code unit is written as \uXXXX)
// ---------------------------------------------------------------------------

const q = (s) => JSON.stringify(s).replace(/[\u007f-\uffff]/g, (c) => "\\u" + hex4(c.charCodeAt(0)));

function formatValue(v) {
  switch (v.type) {
    case "string":
      return `{"type": "string", "value": ${q(v.value)}}`;
    case "boolean":
      return `{"type": "boolean", "value": ${v.value}}`;
    case "number":
      return `{"type": "number", "bits": ${q(v.bits)}, "text": ${q(v.text)}}`;
  }
  throw new Error("unreachable");
}

function formatCase(c) {
  const lines = [];
  lines.push(`      "name": ${q(c.name)}`);
  lines.push(`      "projectId": ${q(c.projectId)}`);
  lines.push(`      "secret": ${q(c.secret)}`);
  lines.push(`      "email": ${q(c.email)}`);
  lines.push(`      "expiresAt": ${c.expiresAt}`);
  if (c.properties !== undefined) {
    if (c.properties.length === 0) {
      lines.push(`      "properties": []`);
    } else {
      const entries = c.properties.map(([k, v]) => `        [${q(k)}, ${formatValue(v)}]`);
      lines.push(`      "properties": [\n${entries.join(",\n")}\n      ]`);
    }
  }
  if (c.expected !== undefined) {
    const e = c.expected;
    const fields = [`        "email": ${q(e.email)}`, `        "version": ${q(e.version)}`];
    if (e.canonicalProperties !== undefined) fields.push(`        "canonicalProperties": ${q(e.canonicalProperties)}`);
    fields.push(`        "payload": ${q(e.payload)}`, `        "signature": ${q(e.signature)}`);
    lines.push(`      "expected": {\n${fields.join(",\n")}\n      }`);
  } else {
    const e = c.expectedError;
    const key = e.key === undefined ? "" : `, "key": ${q(e.key)}`;
    lines.push(`      "expectedError": {"code": ${q(e.code)}${key}}`);
  }
  return `    {\n${lines.join(",\n")}\n    }`;
}

const DESCRIPTION =
  "Verified-identity credential interop vectors generated by the JavaScript reference handler " +
  "(node:crypto createHmac sha256; email = raw.trim().toLowerCase(); v1 payload " +
  "v1\\n<projectId>\\n<expiresAt>\\n<email>; v2 payload adds \\n<canonicalProperties>, the JSON.stringify " +
  "of the properties with keys sorted by UTF-16 code units). Cases with expectedError break exactly one " +
  "validation rule. Regenerate with generate-interop-vectors.sh; do not edit by hand.";

const text = `{\n  "description": ${q(DESCRIPTION)},\n  "cases": [\n${cases.map(formatCase).join(",\n")}\n  ]\n}\n`;

// Round-trip sanity check: the ASCII-only text must parse back to the exact same data.
{
  const parsed = JSON.parse(text);
  const expectedData = {
    description: DESCRIPTION,
    cases,
  };
  if (JSON.stringify(parsed) !== JSON.stringify(expectedData)) throw new Error("output does not round-trip");
}

const here = path.dirname(fileURLToPath(import.meta.url));
const outPath = path.resolve(process.argv[2] ?? path.join(here, "interop-vectors.json"));
writeFileSync(outPath, text);

const total = cases.length;
const invalidCount = cases.filter((c) => c.expectedError !== undefined).length;
console.log(`wrote ${outPath}`);
for (const [category, counts] of categoryCounts) {
  console.log(`  ${category.padEnd(14)} ${String(counts.valid + counts.invalid).padStart(4)} (${counts.valid} valid, ${counts.invalid} invalid)`);
}
console.log(`  ${"total".padEnd(14)} ${String(total).padStart(4)} (${total - invalidCount} valid, ${invalidCount} invalid)`);
