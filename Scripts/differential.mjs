// Differential test of the Swift signer against the contract's JavaScript handler, and of the loopback test
// backend's email normalization (Python) against JavaScript's.
//
//   swift build && node Scripts/differential.mjs [cases=20000] [seed=1]
//
// Each case is a random raw email (ASCII, ECMAScript and non-ECMAScript white space, capital sigmas, dotted I,
// astral letters, control characters) with random properties (keys from the allowed alphabet, strings, numbers of
// every magnitude, booleans). Node computes the reference credential exactly as the contract's handler does;
// `SessionEngineDemo sign --batch` signs the same inputs; the two must agree on every email, property encoding and
// signature, and on which inputs are refused. Exit status 1 on any difference.
import { createHmac } from "node:crypto";
import { spawnSync } from "node:child_process";
import { fileURLToPath } from "node:url";
import path from "node:path";

const root = path.resolve(path.dirname(fileURLToPath(import.meta.url)), "..");
const count = Number(process.argv[2] ?? 20000);
let state = BigInt(process.argv[3] ?? 1);
const projectId = "proj_differential";
const secret = "differential-secret-0001";

function next() {
  // SplitMix64, as the Swift tests use.
  state = (state + 0x9e3779b97f4a7c15n) & 0xffffffffffffffffn;
  let z = state;
  z = ((z ^ (z >> 30n)) * 0xbf58476d1ce4e5b9n) & 0xffffffffffffffffn;
  z = ((z ^ (z >> 27n)) * 0x94d049bb133111ebn) & 0xffffffffffffffffn;
  return z ^ (z >> 31n);
}
const below = (n) => Number(next() % BigInt(n));
const pick = (items) => items[below(items.length)];

const pieces = [
  "a", "Z", "Dave", "@", ".", "example", "COM", "\u00a0", "\ufeff", "\u3000", "\u2028", "\u0085", "\u180e",
  "\u001c", " ", "\t", "\u03a3", "\u039f\u0394\u03a5\u03a3", "\u0130", "\u00df", "\u1e9e", "\u{10400}", "\u{1F600}",
  "\u0345", "\u02b0", "\u00c9", "e\u0301", "\u212a", "\u0000", "\u007f", "x", "-", "+",
];
function rawEmail() {
  let text = "";
  for (let i = 1 + below(8); i > 0; i--) text += pick(pieces);
  return text;
}
const keyFirst = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ";
const keyRest = keyFirst + "0123456789_.-";
function properties() {
  if (below(3) === 0) return undefined;
  const result = {};
  for (let i = below(6); i > 0; i--) {
    let key = keyFirst[below(keyFirst.length)];
    for (let j = below(10); j > 0; j--) key += keyRest[below(keyRest.length)];
    switch (below(4)) {
      case 0: result[key] = rawEmail().replace(/\u0000/g, "n"); break;
      case 1: result[key] = below(2) === 0; break;
      case 2: result[key] = Number(`${below(2) ? "-" : ""}${below(100000)}e${below(60) - 30}`); break;
      default: result[key] = new Float64Array(new BigUint64Array([next()]).buffer)[0] || 0.5;
    }
    if (typeof result[key] === "number" && !Number.isFinite(result[key])) result[key] = 1.5;
  }
  return result;
}

// The contract's handler, with the rules the Swift signer checks spelled out.
function reference(raw, props, expiresAt) {
  const email = raw.trim().toLowerCase();
  if (email.length === 0 || /[\u0000-\u001f\u007f-\u009f]/.test(email)) return { error: true };
  let payload = `v1\n${projectId}\n${expiresAt}\n${email}`;
  if (props !== undefined) {
    const sorted = {};
    for (const key of Object.keys(props).sort()) sorted[key] = props[key];
    const canonical = JSON.stringify(sorted);
    if (Buffer.byteLength(canonical) > 2048) return { error: true };
    payload = `v2\n${projectId}\n${expiresAt}\n${email}\n${canonical}`;
  }
  return { email, signature: createHmac("sha256", secret).update(payload).digest("hex") };
}

const expiresAt = Math.floor(Date.now() / 1000) + 600;
const cases = [];
for (let i = 0; i < count; i++) cases.push({ email: rawEmail(), properties: properties() });
const input = cases.map((c) => JSON.stringify({ email: c.email, expiresAt, properties: c.properties })).join("\n");
const demo = spawnSync("swift", ["run", "--skip-build", "SessionEngineDemo", "sign", "--batch"], {
  cwd: root, input, maxBuffer: 1 << 30,
  env: { ...process.env, APPNORTH_PROJECT_ID: projectId, APPNORTH_IDENTITY_SECRET: secret },
});
const lines = demo.stdout.toString().trimEnd().split("\n");
let differences = 0;
let refused = 0;
cases.forEach((c, index) => {
  const expected = reference(c.email, c.properties, expiresAt);
  const actual = JSON.parse(lines[index] ?? '{"error":"missing"}');
  if (expected.error) refused++;
  const same = expected.error ? actual.error !== undefined
    : actual.email === expected.email && actual.signature === expected.signature;
  if (!same && differences++ < 10) {
    console.log(`difference in case ${index}: ${JSON.stringify(c)}\n  node:  ${JSON.stringify(expected)}\n  swift: ${lines[index]}`);
  }
});

// The loopback test backend's normalization against JavaScript's.
const emails = cases.map((c) => c.email);
const python = spawnSync("python3", ["-c", [
  "import json, sys",
  `sys.path.insert(0, ${JSON.stringify(path.join(root, "Tests/SessionEngineTests/Fixtures/backend"))})`,
  "from identity_backend import normalize_email",
  "print(json.dumps([normalize_email(e) for e in json.load(sys.stdin)]))",
].join("\n")], { input: JSON.stringify(emails), maxBuffer: 1 << 30 });
const normalized = JSON.parse(python.stdout.toString());
let pythonDifferences = 0;
emails.forEach((email, index) => {
  if (normalized[index] !== email.trim().toLowerCase() && pythonDifferences++ < 10) {
    console.log(`python normalizes ${JSON.stringify(email)} to ${JSON.stringify(normalized[index])}`);
  }
});
console.log(`differential: ${count} cases (${refused} refused by both), ${differences} Swift differences, ${pythonDifferences} Python differences`);
process.exit(differences + pythonDifferences === 0 ? 0 : 1);
