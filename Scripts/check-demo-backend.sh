#!/usr/bin/env bash
# Runs the demo's scenario twice against one loopback backend (tests/Fixtures/backend/identity_backend.py): the first
# run rotates the backend's secret, so the second passes only if the demo follows the backend's secret generation.
# Then a run with the wrong secret must fail, and each failed check must say what went wrong. A demo built with
# --sanitize=thread must report no race in any run.
#
#   Scripts/check-demo-backend.sh [DEMO]    # DEMO: the demo binary (default: built with `swift build`)
#
# Bounded: every run has a time limit; the backend stops with this script.
set -euo pipefail
cd "$(dirname "$0")/.."

demo=${1:-}
if [ -z "$demo" ]; then
    swift build --product SessionEngineDemo >/dev/null
    demo="$(swift build --show-bin-path)/SessionEngineDemo"
fi
logs=$(mktemp -d)
export APPNORTH_PROJECT_ID=proj_demo
secret="demo-backend-check-$(od -An -N8 -tx8 /dev/urandom | tr -d ' ')"

# The backend stops when its standard input closes, that is when this script exits.
exec 3> >(APPNORTH_IDENTITY_SECRET=$secret exec python3 Tests/SessionEngineTests/Fixtures/backend/identity_backend.py \
    --exit-on-stdin-eof >"$logs/port" 2>"$logs/backend.log")
for _ in $(seq 1 100); do [ -s "$logs/port" ] && break; sleep 0.1; done
port=$(head -1 "$logs/port")
[ -n "$port" ] || { echo "the loopback backend did not start" >&2; cat "$logs/backend.log" >&2; exit 1; }
url="http://127.0.0.1:$port/identity"

for run in 1 2; do
    if ! APPNORTH_IDENTITY_SECRET=$secret timeout 120 "$demo" --backend "$url" >"$logs/run-$run.log" 2>&1; then
        echo "run $run against one backend failed:" >&2
        cat "$logs/run-$run.log" >&2
        exit 1
    fi
    echo "run $run: $(grep -c '^VERIFY [0-9] PASS' "$logs/run-$run.log") of 4 Verify checks passed"
done
grep -q "secret generation 1" "$logs/run-2.log" || { echo "run 2 did not follow the backend's secret" >&2; exit 1; }

# The wrong secret: the service stand-in refuses every credential; the demo exits 1 and says what went wrong.
if APPNORTH_IDENTITY_SECRET=not-the-backends-secret timeout 120 "$demo" --backend "$url" >"$logs/wrong.log" 2>&1; then
    echo "the demo passed with the wrong secret" >&2
    exit 1
fi
grep -q "check 1 FAILED: the service did not accept" "$logs/wrong.log" || {
    echo "a failed check does not say what went wrong:" >&2
    grep "FAILED" "$logs/wrong.log" >&2 || cat "$logs/wrong.log" >&2
    exit 1
}
if grep -q "not-the-backends-secret\|$secret" "$logs"/run-*.log "$logs/wrong.log"; then
    echo "a secret reached the demo's output" >&2
    exit 1
fi
if grep -l "WARNING: ThreadSanitizer" "$logs"/run-*.log "$logs/wrong.log"; then
    echo "the thread sanitizer reported a race in the demo" >&2
    exit 1
fi
echo "demo against one backend: 2 runs passed, the wrong secret failed with its reasons"
