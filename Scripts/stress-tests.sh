#!/usr/bin/env bash
# Runs the engine's model tests N times in a row, each with a fresh random seed, while the other cores are kept busy
# by a load this script starts and stops itself. Any failure is a bug in the engine or its harness: the failing run's
# whole output is kept, with the seed to replay it.
#
#   Scripts/stress-tests.sh [N] [FILTER]
#
# N defaults to 30, FILTER to EngineModelTests. LOAD sets how many busy processes run beside the tests (default: one
# fewer than the cores, at least one). Logs go to STRESS_LOGS (default: a new temporary directory).
set -euo pipefail
cd "$(dirname "$0")/.."

runs=${1:-30}
filter=${2:-EngineModelTests}
cores=$(nproc 2>/dev/null || echo 2)
load=${LOAD:-$((cores > 1 ? cores - 1 : 1))}
logs=${STRESS_LOGS:-$(mktemp -d)}
mkdir -p "$logs"

burners=()
stop_load() {
    for pid in "${burners[@]}"; do kill "$pid" 2>/dev/null || true; done
    wait 2>/dev/null || true
}
trap stop_load EXIT INT TERM

echo "building the tests"
swift build --build-tests >"$logs/build.log" 2>&1 || { cat "$logs/build.log"; exit 1; }

echo "starting $load busy processes beside the tests"
for _ in $(seq 1 "$load"); do
    ( while :; do :; done ) &
    burners+=("$!")
done

failures=0
start=$(date +%s)
for run in $(seq 1 "$runs"); do
    seed=$(od -An -N8 -tu8 /dev/urandom | tr -d ' ')
    log="$logs/run-$run.log"
    if SESSIONENGINE_PROPERTY_SEED=$seed swift test --skip-build --filter "$filter" >"$log" 2>&1; then
        printf 'run %2d/%d  seed %-20s  passed\n' "$run" "$runs" "$seed"
        rm -f "$log"
    else
        failures=$((failures + 1))
        printf 'run %2d/%d  seed %-20s  FAILED (%s)\n' "$run" "$runs" "$seed" "$log"
    fi
done
elapsed=$(($(date +%s) - start))

echo "$((runs - failures)) passed, $failures failed"
echo "($runs runs of '$filter' with $load busy processes on $cores cores in ${elapsed}s; logs in $logs)"
[ "$failures" -eq 0 ]
