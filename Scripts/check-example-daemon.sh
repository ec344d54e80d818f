#!/usr/bin/env bash
# Builds the example daemon (Examples/SessionDaemon, its own package) with any compiler warning failing the run,
# runs it against the loopback backend with 3-second credentials, sends SIGTERM and checks what it printed: signed
# in, identified work done, the expired identity handled as INVALID_IDENTITY and recovered from, the graceful
# shutdown, exit status 0, and no secret, token or signature in the output. Every wait is bounded and anything left
# running is killed on exit.
#
# Usage: Scripts/check-example-daemon.sh [--sanitize=thread]
#        SANITIZE=thread Scripts/check-example-daemon.sh
# Under the thread sanitizer any "WARNING: ThreadSanitizer" fails the run (and halt_on_error=1 stops the daemon).
set -euo pipefail
cd "$(dirname "$0")/.."

sanitize="${SANITIZE:-}"
case "${1:-}" in
    "") ;;
    --sanitize=thread) sanitize=thread ;;
    *) echo "usage: $0 [--sanitize=thread]" >&2; exit 2 ;;
esac
package=Examples/SessionDaemon
build_flags=(--package-path "$package")
[[ -n $sanitize ]] && build_flags+=("--sanitize=$sanitize")

work=$(mktemp -d)
backend_pid=""
daemon_pid=""
cleanup() {
    if [[ -n $daemon_pid ]]; then kill -KILL "$daemon_pid" 2>/dev/null || true; fi
    if [[ -n $backend_pid ]]; then
        exec 3>&-  # end of its standard input: the backend stops by itself
        for _ in 1 2 3 4 5 6 7 8 9 10; do kill -0 "$backend_pid" 2>/dev/null && sleep 0.1; done
        kill -KILL "$backend_pid" 2>/dev/null || true
    fi
    wait 2>/dev/null || true
    rm -rf "$work"
}
trap cleanup EXIT

fail() {
    if grep -qs "WARNING: ThreadSanitizer" "$work/daemon.log"; then
        set -- "ThreadSanitizer reported a data race ($*)"
    fi
    echo "check-example-daemon: FAIL: $*" >&2
    if [[ -s $work/daemon.log ]]; then
        echo "--- daemon output" >&2
        cat "$work/daemon.log" >&2
    fi
    exit 1
}

step() { printf '\n==> %s\n' "$*"; }

step "swift build ${build_flags[*]} (any compiler warning fails the run)"
build_start=$SECONDS
if ! timeout 1800 swift build "${build_flags[@]}" >"$work/build.log" 2>&1; then
    cat "$work/build.log" >&2
    fail "the build failed"
fi
if grep -E "(warning|error):" "$work/build.log" >&2; then
    fail "the build printed warnings or errors"
fi
binary="$(swift build "${build_flags[@]}" --show-bin-path)/SessionDaemon"
build_seconds=$((SECONDS - build_start))
echo "built $binary in $build_seconds s"

step "loopback backend"
export APPNORTH_PROJECT_ID=proj_example
APPNORTH_IDENTITY_SECRET=$(python3 -c 'import secrets; print(secrets.token_hex(32))')
export APPNORTH_IDENTITY_SECRET
token=session-alice
# The backend stops when its standard input closes, so it never outlives this script, even one killed with -9.
mkfifo "$work/backend.stdin"
python3 Tests/SessionEngineTests/Fixtures/backend/identity_backend.py --exit-on-stdin-eof \
    <"$work/backend.stdin" >"$work/backend.out" 2>"$work/backend.err" &
backend_pid=$!
exec 3>"$work/backend.stdin"
deadline=$((SECONDS + 15))
until port=$(head -n 1 "$work/backend.out" 2>/dev/null) && [[ $port =~ ^[0-9]+$ ]]; do
    kill -0 "$backend_pid" 2>/dev/null || { cat "$work/backend.err" >&2; fail "the backend exited"; }
    ((SECONDS < deadline)) || fail "the backend printed no port within 15 s"
    sleep 0.1
done
echo "backend on 127.0.0.1:$port"

step "run the daemon, then SIGTERM"
run_start=$SECONDS
# 3-second credentials with the engine's 5-second minimum between fetches: each one expires before it is renewed,
# so the daemon must handle INVALID_IDENTITY and recover within a few seconds.
SESSION_DAEMON_TOKEN=$token TSAN_OPTIONS="halt_on_error=1${TSAN_OPTIONS:+ $TSAN_OPTIONS}" \
    "$binary" --endpoint "http://127.0.0.1:$port/identity?lifetime=3" --account alice \
    >"$work/daemon.log" 2>&1 &
daemon_pid=$!

# Waits until the daemon has done identified work after handling an expired identity (at most 60 s).
recovered() {
    awk '/identified action skipped: INVALID_IDENTITY/ { expired = 1 }
         expired && /identified action [0-9]+ done/ { recovered = 1 }
         END { exit !recovered }' "$work/daemon.log"
}
deadline=$((SECONDS + 60))
until grep -q "signed in as" "$work/daemon.log" && recovered; do
    kill -0 "$daemon_pid" 2>/dev/null || fail "the daemon exited before it recovered from an expired identity"
    ((SECONDS < deadline)) || fail "no identified work after INVALID_IDENTITY within 60 s"
    sleep 0.2
done
kill -TERM "$daemon_pid"
# The grace period is 10 s; the daemon's work takes 50 ms, so it should stop at once.
deadline=$((SECONDS + 20))
while kill -0 "$daemon_pid" 2>/dev/null; do
    ((SECONDS < deadline)) || fail "the daemon did not exit within 20 s of SIGTERM"
    sleep 0.1
done
status=0
wait "$daemon_pid" || status=$?
daemon_pid=""
echo "the daemon ran $((SECONDS - run_start)) s and exited with status $status"

step "check the output"
cat "$work/daemon.log"
log="$work/daemon.log"
grep -q "WARNING: ThreadSanitizer" "$log" && fail "ThreadSanitizer reported a data race"
((status == 0)) || fail "exit status $status, expected 0"
for expected in \
    "signed in as alice@example.com" \
    "identified action [0-9]+ done as alice@example.com" \
    "identified action skipped: INVALID_IDENTITY" \
    "SIGTERM: shutting down" \
    "identified actions stopped: the engine is shutting down" \
    "event: state signedOut" \
    "shut down gracefully"; do
    grep -Eq "$expected" "$log" || fail "no line matching: $expected"
done
grep -q "shut down gracefully" <(tail -n 1 "$log") || fail "the last line is not the graceful shutdown"
grep -qF "$APPNORTH_IDENTITY_SECRET" "$log" && fail "the backend's secret appeared in the output"
grep -qF "$token" "$log" && fail "the session token appeared in the output"
grep -Eq "[0-9a-fA-F]{64}" "$log" && fail "something like a signature appeared in the output"
echo "check-example-daemon: PASS${sanitize:+ (sanitize=$sanitize)}: build $build_seconds s, run $((SECONDS - run_start)) s"
