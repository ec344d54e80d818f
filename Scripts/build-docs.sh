#!/usr/bin/env bash
# Builds the DocC documentation of the four library products with the toolchain's own docc, no package plugin:
#
#   .build/docs/SessionEngine.doccarchive
#   .build/docs/SessionEngineBackend.doccarchive
#   .build/docs/SessionEngineTestKit.doccarchive
#   .build/docs/SessionEngineRedis.doccarchive
#
# Steps: `swift build --target` of each library (nothing else of the package, so a broken demo or test target does
# not stop the docs), public symbol graphs per module with swift-symbolgraph-extract (with extension blocks, so the
# test kit's `SessionEngine` extension gets pages), then `docc convert --warnings-as-errors` per module with only
# that module's graphs and its extension graphs. Any DocC warning fails, and so does a public symbol or an article
# that the module's landing page does not curate in its Topics. Every step runs under a timeout; the script prints
# how long each took.
#
# Usage: Scripts/build-docs.sh
# Environment: DOCC, SYMBOLGRAPH_EXTRACT to use other tools; DOCS_BUILD_TIMEOUT (seconds, default 1200) bounds each
# `swift build` (it may first wait for another build of the shared .build), DOCS_STEP_TIMEOUT (default 300) bounds
# each extraction and conversion.
#
# Exit status: 0 when all four archives were built without a warning, 1 otherwise.
set -euo pipefail
cd "$(dirname "$0")/.."

modules=(SessionEngine SessionEngineBackend SessionEngineTestKit SessionEngineRedis)
build_timeout=${DOCS_BUILD_TIMEOUT:-1200}
step_timeout=${DOCS_STEP_TIMEOUT:-300}
out=.build/docs
started=$(date +%s)
step_started=$started

fail() {
    echo "build-docs: $*" >&2
    echo "build-docs: FAILED after $(($(date +%s) - started)) s" >&2
    exit 1
}

# Prints how long the step that just ended took.
lap() {
    local now
    now=$(date +%s)
    printf '    (%s: %d s)\n' "$1" $((now - step_started))
    step_started=$now
}

# The toolchain's tools: next to swiftc, on PATH, or through xcrun.
find_tool() {
    local name=$1 variable=$2 override=$3 swift_bin
    if [[ -n $override ]]; then
        echo "$override"
        return
    fi
    swift_bin=$(dirname "$(readlink -f "$(command -v swiftc)")")
    if [[ -x $swift_bin/$name ]]; then
        echo "$swift_bin/$name"
    elif command -v "$name" > /dev/null; then
        command -v "$name"
    elif command -v xcrun > /dev/null && xcrun --find "$name" > /dev/null 2>&1; then
        xcrun --find "$name"
    else
        fail "cannot find $name in the toolchain (set $variable or put it on PATH)"
    fi
}
docc=$(find_tool docc DOCC "${DOCC:-}")
extract=$(find_tool swift-symbolgraph-extract SYMBOLGRAPH_EXTRACT "${SYMBOLGRAPH_EXTRACT:-}")
echo "==> tools: $docc, $extract"

echo "==> swift build of ${modules[*]}"
mkdir -p "$out"
for module in "${modules[@]}"; do
    if ! timeout "$build_timeout" swift build --target "$module" > "$out/build.log" 2>&1; then
        cat "$out/build.log" >&2
        fail "swift build --target $module failed or took longer than $build_timeout s"
    fi
    echo "    $module: $(tail -n 1 "$out/build.log")"
done
bin=$(swift build --show-bin-path)
lap "build"

echo "==> public symbol graphs"
triple=$(swiftc -print-target-info | python3 -c 'import json, sys; print(json.load(sys.stdin)["target"]["triple"])')
clang_modules=()
for map in "$bin"/*.build/module.modulemap; do
    [[ -e $map ]] && clang_modules+=(-Xcc "-fmodule-map-file=$map")
done
sdk=()
if command -v xcrun > /dev/null; then
    sdk=(-sdk "$(xcrun --show-sdk-path)")
fi
rm -rf "$out/symbol-graphs"
mkdir -p "$out/symbol-graphs/all" "$out/module-cache"
for module in "${modules[@]}"; do
    timeout "$step_timeout" "$extract" -module-name "$module" -target "$triple" "${sdk[@]}" -I "$bin/Modules" \
        "${clang_modules[@]}" -module-cache-path "$out/module-cache" -minimum-access-level public \
        -emit-extension-block-symbols -output-dir "$out/symbol-graphs/all" \
        || fail "swift-symbolgraph-extract failed for $module"
    # Only the module's own graph and its extensions of other modules (Module@Other), nothing of its dependencies.
    mkdir -p "$out/symbol-graphs/$module"
    mv "$out/symbol-graphs/all/$module.symbols.json" "$out/symbol-graphs/$module/"
    shopt -s nullglob
    extensions=("$out/symbol-graphs/all/$module@"*.symbols.json)
    shopt -u nullglob
    if ((${#extensions[@]})); then
        mv "${extensions[@]}" "$out/symbol-graphs/$module/"
    fi
    echo "    $module: $(cd "$out/symbol-graphs/$module" && echo *.symbols.json)"
done
lap "symbol graphs"

for module in "${modules[@]}"; do
    echo "==> docc convert $module"
    catalog=Sources/$module/$module.docc
    [[ -d $catalog ]] || fail "no catalog at $catalog"
    archive=$out/$module.doccarchive
    log=$out/$module.docc.log
    rm -rf "$archive"
    if ! timeout "$step_timeout" "$docc" convert "$catalog" \
        --fallback-display-name "$module" \
        --fallback-bundle-identifier "com.appnorth.$module" \
        --additional-symbol-graph-dir "$out/symbol-graphs/$module" \
        --output-path "$archive" \
        --warnings-as-errors > "$log" 2>&1; then
        cat "$log" >&2
        fail "docc convert $module failed (warnings count as errors); its log: $log"
    fi
    if grep -qiE '(^|: )(warning|error):' "$log"; then
        cat "$log" >&2
        fail "docc convert $module printed diagnostics"
    fi
    # A landing page curates every public symbol and every article: DocC adds automatic topic groups for the rest.
    page=$archive/data/documentation/$(tr '[:upper:]' '[:lower:]' <<< "$module").json
    python3 - "$page" "$module" << 'EOF' || fail "the landing page of $module does not curate everything"
import json, sys
page, module = sys.argv[1], sys.argv[2]
with open(page) as file:
    sections = json.load(file).get("topicSections", [])
missing = [(s.get("title", ""), i.rsplit("/", 1)[-1]) for s in sections if s.get("generated") for i in s["identifiers"]]
for title, name in missing:
    print(f"    not curated in Sources/{module}/{module}.docc/{module}.md: {name} (DocC put it under {title!r})")
sys.exit(1 if missing or not sections else 0)
EOF
    lap "$module"
done

echo "==> documentation in $out: $(cd "$out" && echo *.doccarchive), built in $(($(date +%s) - started)) s"
