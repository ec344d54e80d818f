#!/usr/bin/env bash
# Type-checks every ```swift block of README.md, Design/*.md and the DocC articles (every .md under
# Sources/SessionEngine/SessionEngine.docc) against the package, so the docs' code stays true.
#
# Each block is compiled on its own, as the main.swift of an executable target (top-level code, Swift 6 language
# mode), or as a test target when it imports Testing, in a scratch package under .build/snippets/ that depends on
# this checkout by path under the package's identity `swift-session-engine` (through a symlink of that name, so the
# checkout's folder name does not matter) and on all three library products. One debug `swift build` compiles and
# links the blocks (none is run). Any error or warning fails its block, and every diagnostic names the document's
# own file and line.
#
# What a document may say about a block, in an HTML comment on the last non-blank lines before its fence:
#
#   <!-- snippet-prelude:
#   let engine = SessionEngine(fetcher: …)        Swift compiled in front of the block: the host-side names the
#   -->                                           block assumes. Keep it short; readers of the raw file see it.
#
#   <!-- fragment: why -->                        The block cannot compile on its own; it is skipped, and its
#                                                 location and reason are printed. Keep fragments rare.
#
#   <!-- snippet-manifest -->                     The block is a host's Package.swift. Its
#                                                 `.package(url: "…/swift-session-engine.git", from: …)` (or
#                                                 `branch:`, `exact:`, `revision:`) is pointed at this checkout and
#                                                 SwiftPM loads the package graph, so a wrong `package:` identity or
#                                                 product name fails.
#
#   <!-- snippet-c-module: NAME -->               Before a ```c block: the block is the header of a C target NAME
#                                                 (-Wall -Wextra -Werror), a dependency of each Swift block that
#                                                 imports NAME.
#
# Blocks in other languages, and ```c blocks without that comment, are not checked. The stub modules Logging,
# Metrics, UnixSignals and ServiceLifecycle (in Scripts/check-snippets.py) declare, with the real signatures, what
# the blocks use of swift-log, swift-metrics and swift-service-lifecycle, which cannot be fetched here; a block that
# needs more of them needs the stub extended.
#
# Usage: Scripts/check-snippets.sh [--verbose] [--timeout SECONDS]
# Prints each block's file:line and verdict and a closing line `snippets: N checked, K fragments, F failed (S s)`.
# Exit status: 0 all good; 1 a block failed; 2 the check could not judge (the package itself or a stub failed to
# build, or the time ran out: a build broken elsewhere is retried once it builds again).
# The first run builds the package into the scratch package's own .build (about 30 s on two cores); later runs
# rebuild only what changed.
set -euo pipefail
cd "$(dirname "$0")/.."

exec timeout --kill-after=30 1500 python3 Scripts/check-snippets.py "$@"
