#!/bin/sh
# Regenerates interop-vectors.json with the JavaScript reference handler and
# cross-checks it with an independent Python implementation.
#
# Usage (from any directory):
#   Tests/SessionEngineTests/Fixtures/generate-interop-vectors.sh
#
# Requirements: node >= 20 and python3 (standard library only) on PATH.
# Steps:
#   1. node generate-interop-vectors.mjs   -> writes interop-vectors.json
#   2. runs the generator a second time into a temporary file and requires a
#      byte-identical result (the generator is seeded and clock-free)
#   3. python3 check-interop-vectors.py    -> recomputes every signature; exits
#      non-zero on any disagreement
# The script stops at the first failing step and exits non-zero.
set -eu

here=$(CDPATH= cd -- "$(dirname -- "$0")" && pwd)
cd "$here"

node generate-interop-vectors.mjs interop-vectors.json

tmp=$(mktemp "${TMPDIR:-/tmp}/interop-vectors.XXXXXX")
trap 'rm -f "$tmp"' EXIT INT TERM
node generate-interop-vectors.mjs "$tmp" >/dev/null
if ! cmp -s interop-vectors.json "$tmp"; then
    echo "error: generator output is not deterministic" >&2
    exit 1
fi
echo "determinism: second run is byte-identical"

python3 check-interop-vectors.py interop-vectors.json
