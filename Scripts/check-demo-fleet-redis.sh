#!/usr/bin/env bash
# Runs the demo's fleet day over a real Redis server: `SessionEngineDemo --fleet 3 --redis URL` against a
# redis-server this script starts on a free loopback port with nothing saved to disk. The day runs in real time (96 s,
# the replicas on their own and coordinated over Redis at once, each against a backend of its own), then the scenario
# as usual. It passes when the demo exits 0, every identity ended identified in both runs, the four Verify checks
# passed, no coordinator call failed, and the coordinated run sent the backend fewer requests than the replicas on
# their own.
#
#   Scripts/check-demo-fleet-redis.sh [DEMO]    # DEMO: the demo binary (default: built with `swift build`)
#
# Skips, with the reason, where redis-server is not installed. Bounded: the demo has a time limit of 8 minutes, and
# the server stops with this script.
set -euo pipefail
cd "$(dirname "$0")/.."

server=$(PATH="$PATH:/usr/sbin:/sbin" command -v redis-server || true)
if [ -z "$server" ]; then
    echo "skipped: redis-server is not installed (Scripts/install-test-servers.sh installs it)"
    exit 0
fi
demo=${1:-}
if [ -z "$demo" ]; then
    swift build --product SessionEngineDemo >/dev/null
    demo="$(swift build --show-bin-path)/SessionEngineDemo"
fi
logs=$(mktemp -d)
port=$(python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
"$server" --port "$port" --bind 127.0.0.1 --save "" --appendonly no --dir "$logs" --loglevel warning \
    >"$logs/redis.log" 2>&1 &
redis_pid=$!
trap 'kill "$redis_pid" 2>/dev/null || true' EXIT
for _ in $(seq 1 100); do
    (exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null && break
    sleep 0.1
done

# A command timeout far above a loopback round trip on a busy machine: the check is of the coordination, not of how
# fast the machine answers (a call past its deadline decides locally, and would count as failed).
if ! timeout 480 "$demo" --fleet 3 --redis "redis://127.0.0.1:$port" --redis-timeout 2000 >"$logs/demo.log" 2>&1; then
    echo "the demo's fleet day over Redis failed:" >&2
    cat "$logs/demo.log" >&2
    exit 1
fi
fail() {
    echo "$1" >&2
    cat "$logs/demo.log" >&2
    exit 1
}
[ "$(grep -c '600 of 600 identities' "$logs/demo.log")" -eq 2 ] || fail "not every identity ended identified"
[ "$(grep -c '^VERIFY [0-9] PASS' "$logs/demo.log")" -eq 4 ] || fail "not every Verify check passed"
grep -q 'callsFailed: 0,' "$logs/demo.log" || fail "a call to the coordinator on Redis failed"
alone=$(sed -n 's/^Fleet, alone: .*; \([0-9]*\) backend requests.*/\1/p' "$logs/demo.log")
coordinated=$(sed -n 's/^Fleet, coordinated: .*; \([0-9]*\) backend requests.*/\1/p' "$logs/demo.log")
[ -n "$alone" ] && [ -n "$coordinated" ] && [ "$coordinated" -lt "$alone" ] ||
    fail "the coordinated day did not send fewer requests ($coordinated) than the replicas alone ($alone)"
grep '^  h' "$logs/demo.log"
echo "demo's fleet day over Redis: $coordinated backend requests coordinated against $alone alone, 4 of 4 Verify checks"
