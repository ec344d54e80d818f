#!/usr/bin/env bash
# Applies each race mutant in Tests/Mutants/ to a fresh clone of the current HEAD and reports which check catches it:
# the random model tests of the engine and the pool (`swift test --filter 'EngineModelTests|PoolPropertyTests'`, fresh
# seed), the schedule explorer (`SessionEngineSchedules`, release build, fresh seed) and, for a mutant whose patch
# names one on a `Stress: FILTER` line, the real-thread stress test `swift test --filter FILTER` (debug build, where
# the package's assertions hold): the net for a window between two lock steps of one job, which lies inside one job
# of the explorer.
#
# usage: Scripts/check-mutants.sh [--only NN] [--minutes M] [--baseline] [--keep]
#   --only NN     only the mutant whose file name starts with NN (01 … 17); may be repeated
#   --minutes M   the explorer's budget per mutant (default 3, its CI budget; regressions, then races run first, and
#                 they take 70 s of it, so 2 is the least that reaches every named race)
#   --baseline    first run every check on the unmodified engine: all must pass, or every "caught" would be noise
#   --keep        keep the clone (its path is printed) instead of deleting it
#
# Prints one line per mutant,
#   NN name: model test caught|missed, explorer caught|missed, stress test caught|missed|none (first failure: ...)
# and a summary line, and exits non-zero when no check catches a mutant (a mutant that does not apply or does not
# build, or an explorer run that hangs past its time limit, counts as missed: nothing proved it caught).
#
# Time: the clone reuses one build directory, kept between runs in $MUTANTS_WORKDIR (default
# ${TMPDIR:-/tmp}/sessionengine-mutants/build), so after the first run only the engine and its dependents rebuild. Each
# mutant is bounded: debug build 20 min, model test 6 min, stress test 10 min, release build 20 min, explorer M minutes
# plus 4. Measured on 2 cores with warm builds and other work running: 4-9 min per mutant (a stress test that finds a
# round stuck takes 90 s of it), so about 1 h 50 min for all seventeen with the default 3; the bounds cap it at about
# 63 min per mutant.
set -uo pipefail

root=$(git -C "$(dirname "$0")/.." rev-parse --show-toplevel)
only=()
minutes=3
baseline=false
keep=false
while [ $# -gt 0 ]; do
    case "$1" in
        --only) only+=("$2"); shift 2 ;;
        --minutes) minutes="$2"; shift 2 ;;
        --baseline) baseline=true; shift ;;
        --keep) keep=true; shift ;;
        -h | --help) sed -n '2,25p' "$0" | grep '^#'; exit 0 ;;
        *) echo "unknown argument $1" >&2; exit 2 ;;
    esac
done

workdir="${MUTANTS_WORKDIR:-${TMPDIR:-/tmp}/sessionengine-mutants}"
mkdir -p "$workdir"
clone="$workdir/clone"
logs="$workdir/logs"
rm -rf "$clone" "$logs"
mkdir -p "$logs"
git clone -q "$root" "$clone" || exit 2
head=$(git -C "$clone" rev-parse --short HEAD)
# The build directory always sits at the same path, so the compiler's module cache stays valid between runs.
if [ -d "$workdir/build" ]; then mv "$workdir/build" "$clone/.build"; fi
# shellcheck disable=SC2317 # called by the EXIT trap
finish() {
    if [ -d "$clone/.build" ]; then mv "$clone/.build" "$workdir/build"; fi
    if [ "$keep" = true ]; then echo "clone kept at $clone, logs at $logs"; else rm -rf "$clone"; fi
}
trap finish EXIT

seed() { od -An -N8 -tu8 /dev/urandom | tr -d ' '; }

# Restores the clone's sources to HEAD, leaving .build alone.
restore() {
    git -C "$clone" checkout -q HEAD -- . && git -C "$clone" clean -fdq -e .build
}

# Runs a command in the background, bounded by `timeout`, so that an interrupted script stops it too.
child=""
# shellcheck disable=SC2317 # called by the INT and TERM traps
stop() {
    if [ -n "$child" ]; then kill -TERM "$child" 2>/dev/null; wait "$child" 2>/dev/null; fi
    exit 130
}
trap stop INT TERM
bounded() { # bounded SECONDS LOG COMMAND...
    local limit="$1" log="$2"
    shift 2
    timeout "$limit" "$@" >"$log" 2>&1 &
    child=$!
    wait "$child"
    local result=$?
    child=""
    return "$result"
}

# Runs the model test, the stress test named by `stress_filter` (if any) and the explorer on the clone as it is; sets
# model_verdict, stress_verdict, explorer_verdict and first_failure.
check() {
    local log="$logs/$1"
    model_verdict=missed
    explorer_verdict=missed
    stress_verdict=none
    first_failure=""
    if ! bounded 1200 "$log.debug-build" swift build --package-path "$clone" --build-tests; then
        model_verdict="not built"
        explorer_verdict="not built"
        first_failure="the debug build failed, see $log.debug-build"
        return
    fi
    if [ -n "$stress_filter" ]; then
        stress_verdict=missed
        bounded 600 "$log.stress" swift test --package-path "$clone" --skip-build --filter "$stress_filter"
        case $? in
            0) if grep -q 'Test run with 0 tests' "$log.stress"; then stress_verdict="no test named $stress_filter"; fi ;;
            124) stress_verdict="caught (hung past 10 min)" ;;
            *) stress_verdict=caught ;;
        esac
        case "$stress_verdict" in caught*) first_failure="the stress test, see $log.stress" ;; esac
    fi
    local model_seed
    model_seed=$(seed)
    bounded 360 "$log.model" env SESSIONENGINE_PROPERTY_SEED="$model_seed" \
        swift test --package-path "$clone" --skip-build --filter 'EngineModelTests|PoolPropertyTests'
    local model_status=$?
    if [ "$model_status" -eq 124 ]; then
        model_verdict="caught (hung past 6 min)"
    elif [ "$model_status" -ne 0 ]; then
        model_verdict=caught
    fi
    model_verdict="$model_verdict (seed $model_seed)"
    if ! bounded 1200 "$log.release-build" swift build --package-path "$clone" -c release \
        --product SessionEngineSchedules; then
        explorer_verdict="not built"
        first_failure="the release build failed, see $log.release-build"
        return
    fi
    local explorer_seed limit
    explorer_seed=$(seed)
    limit=$(awk -v m="$minutes" 'BEGIN { printf "%d", m * 60 + 240 }')
    bounded "$limit" "$log.explorer" "$clone/.build/release/SessionEngineSchedules" --minutes "$minutes" \
        --seed "$explorer_seed" --quiet
    local explorer_status=$?
    if [ "$explorer_status" -eq 124 ]; then
        explorer_verdict="hung"
        first_failure="no answer within ${limit}s"
    elif [ "$explorer_status" -ne 0 ]; then
        explorer_verdict=caught
        first_failure=$(grep -v '^schedules: ' "$log.explorer" | grep -m1 -iE 'fail|violation|deadlock|invariant' |
            cut -c1-240)
        [ -n "$first_failure" ] || first_failure=$(grep -v '^$' "$log.explorer" | tail -n1 | cut -c1-240)
    fi
    first_failure="${first_failure:-none}; explorer seed $explorer_seed"
}

status=0
caught=0
model_caught=0
stress_caught=0
any_caught=0
total=0
if [ "$baseline" = true ]; then
    # Every mutant's stress test at once.
    stress_filter=$(sed -n 's/^Stress: //p' "$root"/Tests/Mutants/*.patch | paste -sd'|' -)
    check baseline
    echo "baseline (HEAD $head, no mutant): model test $model_verdict, explorer $explorer_verdict," \
        "stress tests $stress_verdict (first failure: $first_failure)"
    case "$model_verdict $explorer_verdict $stress_verdict" in
        *caught* | *"not built"* | *hung* | *"no test named"*)
            echo "the unmodified engine does not pass every check: no verdict on the mutants would mean anything"
            exit 1
            ;;
    esac
fi

for patch in "$root"/Tests/Mutants/*.patch; do
    file=$(basename "$patch" .patch)
    number=${file%%-*}
    if [ ${#only[@]} -gt 0 ]; then
        wanted=false
        for n in "${only[@]}"; do [ "$n" = "$number" ] && wanted=true; done
        [ "$wanted" = true ] || continue
    fi
    total=$((total + 1))
    restore
    started=$(date +%s)
    if ! git -C "$clone" apply "$patch" 2>"$logs/$file.apply"; then
        echo "$number ${file#*-}: does not apply to HEAD $head (see $logs/$file.apply)"
        status=1
        continue
    fi
    stress_filter=$(sed -n 's/^Stress: //p' "$patch" | head -n1)
    check "$file"
    elapsed=$(($(date +%s) - started))
    echo "$number ${file#*-}: model test $model_verdict, explorer $explorer_verdict, stress test $stress_verdict" \
        "(first failure: $first_failure) [${elapsed}s]"
    any=false
    case "$model_verdict" in caught*) model_caught=$((model_caught + 1)) any=true ;; esac
    case "$stress_verdict" in caught*) stress_caught=$((stress_caught + 1)) any=true ;; esac
    if [ "$explorer_verdict" = caught ]; then caught=$((caught + 1)) any=true; fi
    if [ "$any" = true ]; then any_caught=$((any_caught + 1)); else status=1; fi
done
restore

echo "mutants: $total checked on HEAD $head, caught by some check $any_caught: explorer $caught, model test" \
    "$model_caught, stress test $stress_caught (logs in $logs)"
if [ "$total" -eq 0 ]; then
    echo "no mutant matched" >&2
    exit 2
fi
exit "$status"
