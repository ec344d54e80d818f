#!/usr/bin/env bash
# Fails when the public API of the library products breaks against the last release. The release is the commit on
# the newest `<!-- api-baseline: VERSION COMMIT -->` line of CHANGELOG.md; the comparison is
# `swift package diagnose-api-breaking-changes`, whose report is printed as it is.
#
#   Scripts/check-api.sh [COMMIT]
#
# COMMIT compares against that commit instead of the recorded release (to try the check itself). Exit status: 0 when
# nothing breaks, or when there is nothing to compare (the baseline is PENDING, or it is HEAD and the sources are
# unchanged); 1 on a breaking change or a comparison that could not finish; 2 when the baseline cannot be read or its
# commit is not in this clone's history; 124 when the time limit passed.
#
# The API digester also reports `package` declarations, which are not public API (CHANGELOG.md says so). A change of
# one that it calls a breakage is listed, word for word, in Scripts/api-breakage-allowlist.txt; nothing public may be
# listed there.
#
# Environment:
#   API_CHECK_TIMEOUT  seconds the comparison may take before it is stopped (default 1800)
#   API_CHECK_SCRATCH  the check's own build directory (default .build/api-check). It has its own lock, so the check
#                      neither waits for nor disturbs the builds in .build; the release's checkout and build go in
#                      there too, and the release's API, once dumped, is kept there for later runs.
set -euo pipefail
cd "$(dirname "$0")/.."

products=(SessionEngine SessionEngineBackend SessionEngineTestKit)
timeout_seconds=${API_CHECK_TIMEOUT:-1800}
scratch=${API_CHECK_SCRATCH:-.build/api-check}
started=$SECONDS

say() { printf 'check-api: %s\n' "$*"; }
took() { say "took $((SECONDS - started)) s"; }
fail() {
    local status=$1
    shift
    printf 'check-api: %s\n' "$@" >&2
    took
    exit "$status"
}

if [[ ${1:-} == -h || ${1:-} == --help ]]; then
    sed -n '2,/^set -euo/p' "$0" | sed '$d' | sed 's/^# \{0,1\}//'
    exit 0
fi

# The baseline: the first api-baseline line of the changelog is the newest release.
if [[ $# -gt 0 ]]; then
    version=$1
    baseline=$1
else
    line=$(grep -m1 -E '^<!-- api-baseline: ' CHANGELOG.md 2>/dev/null) ||
        fail 2 "CHANGELOG.md has no '<!-- api-baseline: VERSION COMMIT -->' line"
    if [[ ! $line =~ ^\<!--\ api-baseline:\ ([^ ]+)\ ([0-9a-f]{40}|PENDING)\ --\>$ ]]; then
        fail 2 "cannot read the baseline line of CHANGELOG.md: '$line'" \
            "expected '<!-- api-baseline: VERSION COMMIT -->' with a full 40-hex commit, or PENDING"
    fi
    version=${BASH_REMATCH[1]}
    baseline=${BASH_REMATCH[2]}
    if [[ $baseline == PENDING ]]; then
        say "the API baseline of $version is PENDING: there is no released commit to compare with yet; nothing checked"
        took
        exit 0
    fi
fi

if ! commit=$(git rev-parse --verify --quiet "$baseline^{commit}"); then
    if [[ $(git rev-parse --is-shallow-repository) == true ]]; then
        fail 2 "the baseline $baseline ($version) is not in this clone, which is shallow." \
            "Fetch the full history first: git fetch --unshallow (in CI, check out with the full history)."
    fi
    fail 2 "the baseline $baseline ($version) is not a commit of this repository's history." \
        "Fetch the full history (git fetch --unshallow, or git fetch origin) or correct the commit in CHANGELOG.md."
fi
head=$(git rev-parse HEAD)
if [[ $commit == "$head" ]]; then
    if [[ -z $(git status --porcelain -- Package.swift Sources) ]]; then
        say "the baseline $version is HEAD itself ($commit) and the sources are unchanged: nothing to compare"
        took
        exit 0
    fi
    say "the baseline $version is HEAD itself: comparing the uncommitted changes of Package.swift and Sources"
fi
if ! git merge-base --is-ancestor "$commit" HEAD; then
    say "note: the baseline $commit is not an ancestor of HEAD"
fi

# Compare the products the current manifest has. A product the baseline had and the manifest lost is a break the
# tool cannot see (it compares the modules of the current products), so it is reported here.
declared=$(timeout --kill-after=30 300 swift package --scratch-path "$scratch" dump-package | python3 -c '
import json, sys
for product in json.load(sys.stdin)["products"]:
    if "library" in product["type"]:
        print(product["name"])
') || fail 1 "cannot read Package.swift (swift package dump-package failed)"
baseline_manifest=$(git show "$commit:Package.swift" 2>/dev/null) || baseline_manifest=
compared=()
removed=()
for product in "${products[@]}"; do
    if grep -qx "$product" <<<"$declared"; then
        compared+=("$product")
    elif grep -qE "\.library\(\s*name:\s*\"$product\"" <<<"$baseline_manifest"; then
        removed+=("$product")
    else
        say "$product is a library product in neither this tree nor the baseline: skipped"
    fi
done
if [[ ${#compared[@]} -eq 0 && ${#removed[@]} -eq 0 ]]; then
    fail 1 "none of ${products[*]} is a library product of Package.swift"
fi

# Baselines are kept per toolchain: the digester's dump depends on the compiler that wrote it.
toolchain=$(swift --version 2>/dev/null | sed -n 1p | tr -c 'A-Za-z0-9.\n' '-' | tr -s '-' | sed 's/-$//')
baseline_dir="$scratch/baselines/$toolchain"
mkdir -p "$baseline_dir"
log=$(mktemp)
trap 'rm -f "$log"' EXIT

status=0
if [[ ${#compared[@]} -gt 0 ]]; then
    say "comparing ${compared[*]} with $version ($commit), at most $timeout_seconds s"
    set +e
    timeout --kill-after=30 "$timeout_seconds" \
        swift package --scratch-path "$scratch" diagnose-api-breaking-changes "$commit" \
        --products "${compared[@]}" --baseline-dir "$baseline_dir" \
        --breakage-allowlist-path Scripts/api-breakage-allowlist.txt 2>&1 | tee "$log"
    status=${PIPESTATUS[0]}
    set -e
fi

echo
say "report against $version ($commit):"
grep -E 'breaking changes? detected in|💔|Skipping .* does not exist in the baseline|error:' "$log" | sed 's/^/  /' || true
for product in "${removed[@]}"; do
    printf '  💔 API breakage: the library product %s has been removed from Package.swift\n' "$product"
done

if [[ $status -eq 124 || $status -eq 137 ]]; then
    fail 124 "stopped after the time limit of $timeout_seconds s (API_CHECK_TIMEOUT)"
fi
if grep -qE '^[0-9]+ breaking changes? detected in' "$log" || [[ ${#removed[@]} -gt 0 ]]; then
    fail 1 "the public API breaks against $version: restore it, or release a new minor version (0.x) and say so" \
        "in CHANGELOG.md"
fi
if [[ $status -ne 0 ]]; then
    fail 1 "the comparison did not finish (exit status $status); its output is above"
fi
say "no breaking change against $version"
took
