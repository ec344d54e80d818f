// Generates ecmascript-vectors.json: reference results of the JavaScript built-ins that ECMAScript.swift
// reproduces, computed by the running JavaScript engine.
//
// Usage: node generate-ecmascript-vectors.mjs
//
// The case selection is driven by a fixed-seed SplitMix64 generator, so rerunning with the same engine
// (same Unicode version) rewrites an identical file. Non-ASCII characters are written as \u escapes so the
// file is plain ASCII.
import { writeFileSync } from 'node:fs';

const MASK = (1n << 64n) - 1n;
let state = 0x5e551011e6c1a5e5n;
function next64() {
  state = (state + 0x9e3779b97f4a7c15n) & MASK;
  let z = state;
  z = ((z ^ (z >> 30n)) * 0xbf58476d1ce4e5b9n) & MASK;
  z = ((z ^ (z >> 27n)) * 0x94d049bb133111ebn) & MASK;
  return z ^ (z >> 31n);
}
const below = (n) => Number(next64() % BigInt(n));
const pick = (array) => array[below(array.length)];
const randomString = (pool, maxLength) => {
  let s = '';
  const length = 1 + below(maxLength);
  for (let i = 0; i < length; i++) s += pick(pool);
  return s;
};

const scalars = [];
for (let c = 0; c <= 0x10ffff; c++) if (c < 0xd800 || c > 0xdfff) scalars.push(c);
const fromCode = (c) => String.fromCodePoint(c);

// toLowerCase: notable scalars, a sample of every scalar that changes, Final_Sigma contexts and random mixes.
const lowerInputs = [];
for (const c of [0x41, 0x5a, 0x61, 0xb5, 0xc0, 0xdf, 0x130, 0x131, 0x178, 0x1c4, 0x1c5, 0x3a3, 0x3c2, 0x1e9e,
  0x2126, 0x212a, 0x212b, 0x2160, 0x24b6, 0xa7cb, 0xa7dc, 0x10400, 0x10d50, 0x16ea0, 0x1e900, 0x1f88, 0x345]) {
  lowerInputs.push(fromCode(c));
}
const changing = scalars.filter((c) => fromCode(c).toLowerCase() !== fromCode(c));
for (let i = 0; i < 60; i++) lowerInputs.push(fromCode(pick(changing)));
lowerInputs.push(
  'Σ', 'AΣ', 'AΣB', 'AΣ.', 'A.Σ', "AΣ'B", "A'Σ", 'ΑΣ\u0301', 'ΑΣ\u0301Α', '𐐀Σ', 'ΣΑ', '1Σ', 'Σ1', 'A1Σ',
  'AΣ1', 'ΟΔΥΣΣΕΥΣ', 'ΌΣΟΣ ΣΑΣ', '\u02b0Σ', 'A\u02b0Σ', 'AΣ\u02b0B', 'AΣ\u0345', '\u0345Σ', 'ǅΣ', 'ⅠΣ',
  'A\u00adΣ', 'AΣ\u00adB', 'A\u200dΣ', 'A Σ', 'ΣΣ', 'AΣΣ', 'AΣΣB');
const lowerPool = ['Σ', 'A', 'a', 'Z', '.', "'", '\u0301', '\u0345', '\u02b0', '𐐀', '𐐨', '1', ' ', '\u00ad', ':',
  '\u00b7', '\u0130', '\u01c5', '\u1f88', 'ß', '\u1e9e', '\u2160', 'Ω', '\u05d0', 'é', 'É', '😀'];
for (let i = 0; i < 40; i++) lowerInputs.push(randomString(lowerPool, 7));
const toLowerCase = lowerInputs.map((s) => [s, s.toLowerCase()]);

// trim: every white space and line terminator, scalars that are not, and random mixes.
const whiteSpace = scalars.filter((c) => (fromCode(c) + 'x').trim() === 'x');
const notWhiteSpace = [0x85, 0x180e, 0x200b, 0x200c, 0x2060, 0x0, 0x1c, 0x1f, 0x7f, 0x301, 0x61];
const trimInputs = ['', 'a', ' a ', 'a b', ' \t\n\r\u000b\u000c', 'e\u0301 ', ' \u0301', '\u00a0\ufeffa\u2028\u2029'];
for (const c of [...whiteSpace, ...notWhiteSpace]) {
  const s = fromCode(c);
  trimInputs.push(s + 'x' + s, 'x' + s + 'x');
}
const trimPool = [...whiteSpace.map(fromCode), ...notWhiteSpace.map(fromCode), 'a', 'é', '😀'];
for (let i = 0; i < 30; i++) trimInputs.push(randomString(trimPool, 6));
const trim = trimInputs.map((s) => [s, s.trim()]);

// utf16Length.
const lengthInputs = ['', 'abc', 'é', 'e\u0301', '😀', '👨‍👩‍👧', '\u{10ffff}', '\ud7ff\ue000', 'a😀b'];
const lengthPool = ['a', 'é', '€', '😀', '\u{10ffff}', '\u0301'];
for (let i = 0; i < 10; i++) lengthInputs.push(randomString(lengthPool, 8));
const utf16Length = lengthInputs.map((s) => [s, s.length]);

// numberToString: named values, format boundaries, subnormals, integers near 2^53 and random bit patterns.
const view = new DataView(new ArrayBuffer(8));
const bitsOf = (x) => { view.setFloat64(0, x); return view.getBigUint64(0); };
const valueOf = (bits) => { view.setBigUint64(0, bits & MASK); return view.getFloat64(0); };
const numbers = [0, -0, NaN, Infinity, -Infinity, 1, -1, 0.1, 0.2, 0.1 + 0.2, 100, 1 / 3, -2 / 3, 4.35, 0.5,
  123e-20, 5e-324, -5e-324, 2.2250738585072014e-308, 2.225073858507201e-308, 1.7976931348623157e308,
  2 ** 53, 2 ** 53 - 1, 2 ** 53 + 2, -(2 ** 53), 2 ** 63, 2 ** 64, 123456789012345680000, 999999999999999900000];
for (const [low, high] of [[1e-7, -7], [1e21, 21], [1e-6, -6], [1e15, 15], [1e16, 16], [1e17, 17]]) {
  for (let k = -2n; k <= 2n; k++) numbers.push(valueOf(bitsOf(low) + k));
  numbers.push(Number('1e' + high), Number('1.5e' + high), Number('9.999999999999999e' + (high - 1)));
}
for (let k = -3; k <= 3; k++) numbers.push(2 ** 53 + k);
for (let e = -324; e <= 308; e += 1 + below(40)) numbers.push(Number(1 + below(9) + 'e' + e));
for (let i = 0; i < 25; i++) numbers.push(valueOf(next64() & ((1n << 52n) - 1n)));
for (let i = 0; i < 25; i++) numbers.push(Number(next64() % (1n << BigInt(1 + below(70)))));
for (let i = 0; i < 25; i++) numbers.push(below(2000000) / 1000 - 1000);
for (let i = 0; i < 120; i++) numbers.push(valueOf(next64()));
const numberToString = numbers.map((x) => ['0x' + bitsOf(x).toString(16).padStart(16, '0'), String(x)]);

// JSON.stringify string quoting.
const jsonInputs = [''];
for (let c = 0; c <= 0x7f; c++) jsonInputs.push(fromCode(c));
for (const c of [0x80, 0x85, 0xa0, 0xad, 0xe9, 0xff, 0x2028, 0x2029, 0xfeff, 0xfffd, 0x1f600, 0x10ffff]) {
  jsonInputs.push(fromCode(c));
}
jsonInputs.push('"\u0301', '\\\u0301', '\n\u0301', 'a\u0000b', '👨‍👩‍👧', 'say "hi"\n', 'C:\\path\\to');
const jsonPool = ['"', '\\', '\n', '\u0000', '\u001f', '\u0301', 'a', 'é', '😀', '\u2028', '/', '\u007f', '\t', ' '];
for (let i = 0; i < 30; i++) jsonInputs.push(randomString(jsonPool, 8));
const jsonString = jsonInputs.map((s) => [s, JSON.stringify(s)]);

const vectors = {
  generator: 'generate-ecmascript-vectors.mjs',
  unicodeVersion: process.versions.unicode,
  toLowerCase,
  trim,
  utf16Length,
  numberToString,
  jsonString,
};
const asciiOnly = (text) => text.replace(/[\u0080-\uffff]/g, (unit) =>
  '\\u' + unit.charCodeAt(0).toString(16).padStart(4, '0'));
const lines = ['{'];
const entries = Object.entries(vectors);
entries.forEach(([key, value], index) => {
  const comma = index + 1 < entries.length ? ',' : '';
  if (Array.isArray(value)) {
    lines.push(`  ${JSON.stringify(key)}: [`);
    value.forEach((pair, row) => lines.push(`    ${asciiOnly(JSON.stringify(pair))}${row + 1 < value.length ? ',' : ''}`));
    lines.push(`  ]${comma}`);
  } else {
    lines.push(`  ${JSON.stringify(key)}: ${JSON.stringify(value)}${comma}`);
  }
});
lines.push('}');
writeFileSync(new URL('./ecmascript-vectors.json', import.meta.url), lines.join('\n') + '\n');
