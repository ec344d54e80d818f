#!/usr/bin/env bash
# Builds the libFuzzer target in Tests/Fuzz with the library's sources and runs it.
#
#   Scripts/fuzz.sh                 # 1,000,000 runs from the seed corpus
#   Scripts/fuzz.sh -runs=5000000   # any libFuzzer option
#
# Needs a Swift toolchain with libFuzzer (the Linux toolchains from swift.org have it; Xcode's does not).
set -euo pipefail
cd "$(dirname "$0")/.."
binary=.build/fuzz-credential
corpus=.build/fuzz-corpus
mkdir -p .build "$corpus"
swiftc -sanitize=fuzzer,address -parse-as-library -O -swift-version 6 -module-name SessionEngine \
    -package-name SessionEngine \
    -enable-upcoming-feature ExistentialAny -enable-upcoming-feature InternalImportsByDefault \
    -enable-upcoming-feature MemberImportVisibility \
    $(find Sources/SessionEngine -name '*.swift') Tests/Fuzz/FuzzCredentialDecoding.swift -o "$binary"
# Seeds: valid responses and header sets in the shape the target reads.
printf '%s' '{"email":"a@b.c","expiresAt":1800000900,"signature":"5f3ae979a81609517add3c3a3dd51a0e329f35d504cb2c5f40a0ae746b46ef9a","properties":{"plan":"pro","seats":10}}' > "$corpus/response"
printf '%s' '{"beta":true,"plan":"pro","seats":10}' > "$corpus/properties"
printf 'v2\ndave@example.com\n1767225600\n4095ae68b2cc5e53b047ce4838116ac0b4ce111953da32feec9522ab3229b49e\neyJiZXRhIjp0cnVlLCJwbGFuIjoicHJvIiwic2VhdHMiOjEwfQ' > "$corpus/headers"
if [ "$#" -eq 0 ]; then set -- -runs=1000000; fi
"$binary" -max_len=4096 "$@" "$corpus"
