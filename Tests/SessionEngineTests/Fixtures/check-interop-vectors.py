#!/usr/bin/env python3
"""Second opinion on interop-vectors.json, using only the Python standard library.

Usage:
    python3 check-interop-vectors.py [path/to/interop-vectors.json]

For every case this script independently:
  * checks the JSON shape (field names, types, unique names, 64-hex signatures);
  * re-implements the validation rules (ECMAScript trim() set, general category Cc,
    UTF-16 key order, UTF-16 string lengths, UTF-8 canonical size) and checks that
    valid cases pass and invalid cases report the recorded error code and key and
    break exactly one rule;
  * for valid cases, rebuilds canonicalProperties with its own JSON.stringify and
    Number::toString re-implementation, checks payload == the documented layout,
    and recomputes the signature with hmac.new(secret.encode(), payload.encode(), sha256).

Failures (any of the above) make the script exit with status 1.

It also prints INFORMATIONAL comparisons against Python's own built-ins, which do not
decide anything: json.dumps(..., ensure_ascii=False) for string/boolean-only property
sets, and str.strip()/str.lower() versus JavaScript trim()/toLowerCase().
"""

import hashlib
import hmac
import json
import os
import re
import struct
import sys
import unicodedata
from collections import Counter
from decimal import Decimal

MAX_KEYS = 20
MAX_STRING_UNITS = 200
MAX_CANONICAL_BYTES = 2048
KEY_PATTERN = re.compile(r"[A-Za-z][A-Za-z0-9_.-]{0,63}")  # used with fullmatch (Python's $ accepts a trailing \n)

# ECMAScript WhiteSpace + LineTerminator code points, i.e. what String.prototype.trim() removes.
JS_WHITESPACE = "".join(
    chr(cp)
    for cp in [
        0x0009, 0x000A, 0x000B, 0x000C, 0x000D, 0x0020, 0x00A0, 0x1680,
        *range(0x2000, 0x200B), 0x2028, 0x2029, 0x202F, 0x205F, 0x3000, 0xFEFF,
    ]
)

ERROR_CODES = {
    "emptyEmail",
    "emailControlCharacter",
    "tooManyProperties",
    "invalidPropertyKey",
    "forbiddenPropertyKey",
    "propertyStringTooLong",
    "propertyNumberNotFinite",
    "propertiesTooLarge",
    "invalidExpiresAt",
}
PER_KEY_CODES = {"invalidPropertyKey", "forbiddenPropertyKey", "propertyStringTooLong", "propertyNumberNotFinite"}


def js_normalize_email(raw):
    # str.lower() implements the Unicode default full lowercase mapping including Final_Sigma,
    # like ECMAScript toLowerCase(); only the whitespace set needs to be JavaScript's.
    return raw.strip(JS_WHITESPACE).lower()


def utf16_units(s):
    return len(s.encode("utf-16-le")) // 2


def utf16_sort_key(s):
    return s.encode("utf-16-be")  # bytewise order of UTF-16BE == code unit order


def has_control(s):
    return any(unicodedata.category(ch) == "Cc" for ch in s)


def js_number_to_string(x):
    """ECMAScript Number::toString(x) for radix 10 (also what JSON.stringify emits for finite x)."""
    if x != x:
        return "NaN"
    if x == 0:
        return "0"  # includes -0
    if x < 0:
        return "-" + js_number_to_string(-x)
    if x == float("inf"):
        return "Infinity"
    # repr() gives the shortest round-tripping decimal digits (closest to x), as the spec requires.
    sign, digits, exponent = Decimal(repr(x)).as_tuple()
    s = "".join(map(str, digits)).rstrip("0")
    exponent += len(digits) - len(s)
    s = s.lstrip("0")
    k = len(s)
    n = exponent + k  # x = 0.s * 10^n
    if k <= n <= 21:
        return s + "0" * (n - k)
    if 0 < n <= 21:
        return s[:n] + "." + s[n:]
    if -6 < n <= 0:
        return "0." + "0" * (-n) + s
    e = n - 1
    e_str = ("+" if e >= 0 else "-") + str(abs(e))
    if k == 1:
        return s + "e" + e_str
    return s[0] + "." + s[1:] + "e" + e_str


def js_quote(s):
    """ECMAScript QuoteJSONString for well-formed strings."""
    out = ['"']
    named = {"\b": "\\b", "\t": "\\t", "\n": "\\n", "\f": "\\f", "\r": "\\r", '"': '\\"', "\\": "\\\\"}
    for ch in s:
        if ch in named:
            out.append(named[ch])
        elif ord(ch) < 0x20:
            out.append("\\u%04x" % ord(ch))
        elif 0xD800 <= ord(ch) <= 0xDFFF:
            out.append("\\u%04x" % ord(ch))
        else:
            out.append(ch)
    out.append('"')
    return "".join(out)


def js_value_json(value):
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float):
        return js_number_to_string(value) if value == value and abs(value) != float("inf") else "null"
    return js_quote(value)


def js_canonical(props):
    keys = sorted(props, key=utf16_sort_key)
    return "{" + ",".join(js_quote(k) + ":" + js_value_json(props[k]) for k in keys) + "}"


class Failures:
    def __init__(self):
        self.items = []

    def add(self, name, message):
        self.items.append(f"{name}: {message}")


def decode_properties(case, fail):
    """Returns (props dict in insertion order, string_or_bool_only flag) or None if malformed."""
    props = {}
    simple = True
    for entry in case["properties"]:
        if not (isinstance(entry, list) and len(entry) == 2 and isinstance(entry[0], str) and isinstance(entry[1], dict)):
            fail.add(case["name"], f"malformed property entry {entry!r}")
            return None
        key, v = entry
        if key in props:
            fail.add(case["name"], f"duplicate property key {key!r}")
        t = v.get("type")
        if t == "string" and set(v) == {"type", "value"} and isinstance(v["value"], str):
            props[key] = v["value"]
        elif t == "boolean" and set(v) == {"type", "value"} and isinstance(v["value"], bool):
            props[key] = v["value"]
        elif t == "number" and set(v) == {"type", "bits", "text"}:
            bits = v["bits"]
            if not (isinstance(bits, str) and re.fullmatch(r"[0-9a-f]{16}", bits)):
                fail.add(case["name"], f"bad number bits {bits!r}")
                return None
            x = struct.unpack(">d", bytes.fromhex(bits))[0]
            if v["text"] != js_number_to_string(x):
                fail.add(case["name"], f"number text {v['text']!r} != Number::toString {js_number_to_string(x)!r}")
            props[key] = x
            simple = False
        else:
            fail.add(case["name"], f"malformed property value {v!r}")
            return None
    return props, simple


def violations(case, props):
    """All broken rules, evaluated independently (with keys for per-key rules)."""
    out = []
    email = js_normalize_email(case["email"])
    if email == "":
        out.append(("emptyEmail", None))
    if has_control(email):
        out.append(("emailControlCharacter", None))
    if props is not None:
        if len(props) > MAX_KEYS:
            out.append(("tooManyProperties", None))
        for key in sorted(props, key=utf16_sort_key):
            value = props[key]
            if not KEY_PATTERN.fullmatch(key):
                out.append(("invalidPropertyKey", key))
            if key == "constructor":
                out.append(("forbiddenPropertyKey", key))
            if isinstance(value, str) and utf16_units(value) > MAX_STRING_UNITS:
                out.append(("propertyStringTooLong", key))
            if isinstance(value, float) and (value != value or abs(value) == float("inf")):
                out.append(("propertyNumberNotFinite", key))
        if len(js_canonical(props).encode("utf-8")) > MAX_CANONICAL_BYTES:
            out.append(("propertiesTooLarge", None))
    if case["expiresAt"] <= 0:
        out.append(("invalidExpiresAt", None))
    return out


def main():
    here = os.path.dirname(os.path.abspath(__file__))
    path = sys.argv[1] if len(sys.argv) > 1 else os.path.join(here, "interop-vectors.json")
    with open(path, encoding="utf-8") as f:
        doc = json.load(f)

    fail = Failures()
    info = []
    agree = disagree = 0
    valid_count = invalid_count = 0
    json_dumps_compared = json_dumps_agree = 0
    py_native_email_diffs = []
    js_email_diffs = []
    error_codes = Counter()

    if set(doc) != {"description", "cases"} or not isinstance(doc["description"], str):
        fail.add("<root>", "top level must be {description, cases}")
    names = set()
    for case in doc["cases"]:
        name = case.get("name")
        if not isinstance(name, str) or not name or name in names:
            fail.add(repr(name), "missing or duplicate name")
            continue
        names.add(name)
        allowed = {"name", "projectId", "secret", "email", "expiresAt", "properties", "expected", "expectedError"}
        if not set(case) <= allowed or ("expected" in case) == ("expectedError" in case):
            fail.add(name, f"bad field set {sorted(case)}")
            continue
        if not (isinstance(case["projectId"], str) and case["projectId"]):
            fail.add(name, "projectId must be a non-empty string")
        if not (isinstance(case["secret"], str) and case["secret"]):
            fail.add(name, "secret must be a non-empty string")
        if not isinstance(case["email"], str):
            fail.add(name, "email must be a string")
        if not (isinstance(case["expiresAt"], int) and not isinstance(case["expiresAt"], bool)):
            fail.add(name, "expiresAt must be an integer")
            continue

        props = None
        simple = False
        if "properties" in case:
            decoded = decode_properties(case, fail)
            if decoded is None:
                continue
            props, simple = decoded

        broken = violations(case, props)
        js_email = js_normalize_email(case["email"])
        native = case["email"].strip().lower()
        if native != js_email:
            py_native_email_diffs.append((name, case["email"], js_email, native))
        if "expectedError" in case:
            invalid_count += 1
            err = case["expectedError"]
            code = err.get("code")
            error_codes[code] += 1
            if code not in ERROR_CODES:
                fail.add(name, f"unknown error code {code!r}")
            if ("key" in err) != (code in PER_KEY_CODES) or not set(err) <= {"code", "key"}:
                fail.add(name, f"expectedError key presence wrong: {err!r}")
            if len(broken) != 1:
                fail.add(name, f"invalid case should break exactly one rule, breaks {broken}")
            elif broken[0] != (code, err.get("key")):
                fail.add(name, f"python says {broken[0]}, vectors say {(code, err.get('key'))}")
            continue

        valid_count += 1
        if broken:
            fail.add(name, f"valid case breaks rules {broken}")
        exp = case["expected"]
        email = exp.get("email")
        version = "v1" if props is None else "v2"
        want_fields = {"email", "version", "payload", "signature"} | ({"canonicalProperties"} if props is not None else set())
        extra = set(exp) - want_fields
        if set(exp) - {"canonicalProperties"} != want_fields - {"canonicalProperties"} or (
            extra and not (extra == {"canonicalProperties"} and exp["canonicalProperties"] is None)
        ):
            fail.add(name, f"bad expected field set {sorted(exp)}")
        if exp.get("version") != version:
            fail.add(name, f"version {exp.get('version')!r}, want {version!r}")

        # Email: JavaScript semantics re-implemented in Python (trim set + default lowercasing).
        if js_email != email:
            js_email_diffs.append((name, case["email"], email, js_email))

        if props is None:
            payload = f"v1\n{case['projectId']}\n{case['expiresAt']}\n{email}"
        else:
            canonical = exp.get("canonicalProperties")
            mine = js_canonical(props)
            if canonical != mine:
                fail.add(name, f"canonicalProperties differs from python re-implementation:\n  node:   {canonical!r}\n  python: {mine!r}")
            if simple:
                json_dumps_compared += 1
                dumped = json.dumps(dict(sorted(props.items())), separators=(",", ":"), ensure_ascii=False)
                if dumped == canonical:
                    json_dumps_agree += 1
                else:
                    info.append(f"{name}: json.dumps differs: {dumped!r} vs {canonical!r}")
            payload = f"v2\n{case['projectId']}\n{case['expiresAt']}\n{email}\n{canonical}"
        if exp.get("payload") != payload:
            fail.add(name, f"payload differs from the documented layout:\n  vectors: {exp.get('payload')!r}\n  layout:  {payload!r}")

        sig = exp.get("signature")
        if not (isinstance(sig, str) and re.fullmatch(r"[0-9a-f]{64}", sig)):
            fail.add(name, f"signature is not 64 lowercase hex digits: {sig!r}")
        mac = hmac.new(case["secret"].encode("utf-8"), exp.get("payload", "").encode("utf-8"), hashlib.sha256).hexdigest()
        if mac == sig:
            agree += 1
        else:
            disagree += 1
            fail.add(name, f"signature mismatch: node {sig}, python {mac}")

    total = len(doc["cases"])
    print(f"unicode data (python): {unicodedata.unidata_version}")
    print(f"valid cases: {valid_count}, invalid cases: {invalid_count}")
    print("expected errors: " + ", ".join(f"{c}={n}" for c, n in sorted(error_codes.items())))
    print(f"informational: json.dumps(sorted, separators=(',', ':'), ensure_ascii=False) agrees with canonicalProperties "
          f"in {json_dumps_agree}/{json_dumps_compared} string/boolean-only property sets")
    for line in info:
        print("  " + line)
    print(f"informational: python strip(JS whitespace).lower() differs from the JS-normalized email in {len(js_email_diffs)} cases")
    for n, raw, want, got in js_email_diffs:
        print(f"  {n}: {raw!r} -> js {want!r}, python {got!r}")
    print(f"informational: python's native str.strip().lower() differs from JS trim().toLowerCase() in "
          f"{len(py_native_email_diffs)} cases (python strips U+001C..U+001F and U+0085, keeps U+FEFF)")
    for n, raw, want, got in py_native_email_diffs:
        print(f"  {n}: {raw!r} -> js {want!r}, python {got!r}")
    if fail.items:
        print(f"FAILURES ({len(fail.items)}):")
        for item in fail.items:
            print("  " + item)
    print(f"checked {total} cases: {agree} signatures agree, {disagree} disagree")
    return 1 if fail.items or disagree else 0


if __name__ == "__main__":
    sys.exit(main())
