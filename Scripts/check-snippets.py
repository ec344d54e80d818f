#!/usr/bin/env python3
"""Type-checks the Swift blocks of README.md, Design/*.md and the DocC catalog's articles
(Sources/SessionEngine/SessionEngine.docc/**/*.md) against the package; see Scripts/check-snippets.sh.

The helper reads every fenced block whose info string is exactly `swift` (and `c` blocks that declare a module),
with the HTML comment on the last non-blank lines before the fence, if any:

- `<!-- fragment: why -->`: the block is not checked; its location and the reason are printed.
- `<!-- snippet-prelude: SWIFT -->`, on one line or several: SWIFT declares the host-side names the block assumes
  and is compiled in front of it, at its own lines of the document.
- `<!-- snippet-manifest -->`: the block is a host's Package.swift. Its `.package(url: ".../swift-session-engine.git",
  from: ...)` (or `branch:`, `exact:`, `revision:`) is pointed at this checkout, and SwiftPM must load the package
  graph: a wrong `package:` or product name fails.
- `<!-- snippet-c-module: NAME -->` before a ```c block: the block is the header of a C target NAME (compiled with
  -Wall -Wextra -Werror), a dependency of each Swift block that imports NAME.

It writes a scratch package (default .build/snippets/) with one target per Swift block, named after its document
and position (README_01, engine_01, ...): an executable target whose main.swift is the block, so top-level code
is checked as in a host's main.swift, or a test target when the block imports Testing. Stub modules Logging,
Metrics, UnixSignals and ServiceLifecycle declare, with the real signatures, the part of swift-log, swift-metrics
and swift-service-lifecycle the blocks use. The scratch package depends on this one by path through the symlink
`swift-session-engine` inside it, so the dependency's identity is `swift-session-engine`, as for the repository's
URL, whatever the checkout's folder is called. Each block compiles under `#sourceLocation` (or `#line`) of its
document, so every diagnostic names the document's file and line, and with `-warnings-as-errors`, so a warning
fails even when an unchanged block is not recompiled.

"Type-checks" is a debug `swift build` of the scratch package: each block is compiled and linked, never run.

Exit status: 0 when every checked block builds without a warning; 1 when a block does not; 2 when the check could
not judge the blocks (the package itself or a stub failed to build, or the time ran out).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

PACKAGE_IDENTITY = "swift-session-engine"
PRODUCTS = ["SessionEngine", "SessionEngineBackend", "SessionEngineTestKit", "SessionEngineRedis"]

FENCE_OPEN = re.compile(r"^(?P<indent> {0,3})(?P<fence>`{3,})(?P<language>swift|c)\s*$")
OTHER_FENCE = re.compile(r"^ {0,3}(?P<fence>`{3,}|~{3,})")
COMMENT_FRAGMENT = re.compile(r"^<!--\s*fragment\b:?(?P<why>.*?)-->$", re.S)
COMMENT_PRELUDE = re.compile(r"^<!--\s*snippet-prelude:(?P<code>.*?)-->$", re.S)
COMMENT_MANIFEST = re.compile(r"^<!--\s*snippet-manifest\s*-->$")
COMMENT_C_MODULE = re.compile(r"^<!--\s*snippet-c-module:\s*(?P<name>[A-Za-z_][A-Za-z0-9_]*)\s*-->$")
# The manifest block's dependency on this package, which the check points at the checkout.
PACKAGE_URL_DEPENDENCY = re.compile(
    r'\.package\(\s*url:\s*"[^"]*/'
    + re.escape(PACKAGE_IDENTITY)
    + r'(?:\.git)?"\s*,\s*(?:from|branch|exact|revision):\s*"[^"]*"\s*\)'
)
# The documents whose blocks are checked, relative to the package root: the README, the design notes, and every
# article of the DocC catalog, which readers copy from as much as from the README.
DOCC_CATALOG = "Sources/SessionEngine/SessionEngine.docc"
DIAGNOSTIC = re.compile(
    r"^(?P<path>/[^:]*|[^\s:\[][^:]*):(?P<line>\d+):(?:(?P<column>\d+):)?\s*(?P<kind>error|warning|note):"
)
IMPORT = re.compile(r"^\s*(?:@testable\s+|@preconcurrency\s+|(?:public|package|internal)\s+)*import\s+(\w+)")
PROGRESS = re.compile(r"^\[\d+/\d+\] ")


@dataclasses.dataclass
class Block:
    """One checked or skipped block of a document."""

    document: str  # the document's path relative to the package root
    line: int  # the line of the opening fence, from 1
    kind: str  # "swift", "manifest" or "c-module"
    body: list[str]
    body_line: int  # the document line of the block's first line
    prelude: list[str] = dataclasses.field(default_factory=list)
    prelude_line: int = 0  # the document line of the prelude's first line
    fragment: str | None = None  # why the block is not checked, or None
    module: str = ""  # the C module's name
    target: str = ""  # the scratch package's target for a Swift block
    is_test: bool = False
    diagnostics: list[str] = dataclasses.field(default_factory=list)
    checked: bool = False  # the build (or graph load) got to the block
    c_modules: list[str] = dataclasses.field(default_factory=list)  # the C modules a Swift block imports
    blocked_by: list[str] = dataclasses.field(default_factory=list)  # failed blocks this one could not build without

    @property
    def location(self) -> str:
        return f"{self.document}:{self.line}"

    def owns(self, line: int) -> bool:
        if self.body_line <= line < self.body_line + max(1, len(self.body)):
            return True
        return bool(self.prelude) and self.prelude_line <= line < self.prelude_line + len(self.prelude)


def comment_before(lines: list[str], fence: int) -> tuple[str, int] | None:
    """The HTML comment on the last non-blank lines before line index `fence`, and its first line's index."""
    end = fence - 1
    while end >= 0 and not lines[end].strip():
        end -= 1
    if end < 0 or not lines[end].rstrip().endswith("-->"):
        return None
    start = end
    while start >= 0 and "<!--" not in lines[start]:
        start -= 1
    if start < 0:
        return None
    return "\n".join(lines[start : end + 1]).strip(), start


def parse_document(root: Path, document: str) -> list[Block]:
    lines = (root / document).read_text(encoding="utf-8").split("\n")
    blocks: list[Block] = []
    index = 0
    while index < len(lines):
        opening = FENCE_OPEN.match(lines[index])
        if not opening:
            other = OTHER_FENCE.match(lines[index])
            if other:  # skip any other fenced block whole, so nothing inside it is taken for a fence
                fence = other.group("fence")
                closing = re.compile(r"^ {0,3}" + re.escape(fence[0]) + "{" + str(len(fence)) + r",}\s*$")
                index += 1
                while index < len(lines) and not closing.match(lines[index]):
                    index += 1
            index += 1
            continue
        fence, indent = opening.group("fence"), len(opening.group("indent"))
        closing = re.compile(r"^ {0,3}" + fence + r"`*\s*$")
        start = index
        index += 1
        body: list[str] = []
        while index < len(lines) and not closing.match(lines[index]):
            line = lines[index]
            body.append(line[indent:] if not line[:indent].strip() else line)
            index += 1
        if index >= len(lines):
            raise SystemExit(f"{document}:{start + 1}: a fenced block is never closed")
        index += 1

        block = Block(document=document, line=start + 1, kind="swift", body=body, body_line=start + 2)
        comment = comment_before(lines, start)
        text, comment_start = comment if comment else ("", 0)
        if opening.group("language") == "c":
            match = COMMENT_C_MODULE.match(text)
            if not match:
                continue  # a C block that declares no module is not a snippet
            block.kind, block.module = "c-module", match.group("name")
        elif match := COMMENT_FRAGMENT.match(text):
            block.fragment = match.group("why").strip() or "marked as a fragment"
        elif COMMENT_MANIFEST.match(text):
            block.kind = "manifest"
        elif match := COMMENT_PRELUDE.match(text):
            prelude = match.group("code").split("\n")
            block.prelude_line = comment_start + 1
            if not prelude[0].strip():  # the code starts on the line after `<!-- snippet-prelude:`
                prelude = prelude[1:]
                block.prelude_line += 1
            while prelude and not prelude[-1].strip():
                prelude.pop()
            block.prelude = prelude
        elif text.startswith("<!--") and re.match(r"<!--\s*(snippet|fragment)", text):
            raise SystemExit(f"{document}:{comment_start + 1}: unknown snippet annotation: {text.splitlines()[0]}")
        blocks.append(block)
    return blocks


def quoted(path: Path) -> str:
    return '"' + str(path).replace("\\", "\\\\").replace('"', '\\"') + '"'


def swift_source(block: Block, root: Path) -> str:
    """A Swift block as a file that compiles at the document's own lines."""
    document = quoted(root / block.document)
    parts = [f"// Generated by Scripts/check-snippets.py from {block.location}; do not edit."]
    if block.prelude:
        parts.append(f"#sourceLocation(file: {document}, line: {block.prelude_line})")
        parts.extend(block.prelude)
    parts.append(f"#sourceLocation(file: {document}, line: {block.body_line})")
    parts.extend(block.body)
    parts.append("#sourceLocation()")
    return "\n".join(parts) + "\n"


def c_header(block: Block, root: Path) -> str:
    return f"#line {block.body_line} {quoted(root / block.document)}\n" + "\n".join(block.body) + "\n"


def manifest_source(block: Block, root: Path) -> str | None:
    """The manifest block with its dependency pointed at the checkout, or None if it has no such dependency."""
    text = "\n".join(block.body)
    match = PACKAGE_URL_DEPENDENCY.search(text)
    if not match or not block.body or not block.body[0].startswith("// swift-tools-version:"):
        return None
    replacement = f'.package(path: "../{PACKAGE_IDENTITY}")' + "\n" * match.group(0).count("\n")
    lines = (text[: match.start()] + replacement + text[match.end() :]).split("\n")
    location = f"#sourceLocation(file: {quoted(root / block.document)}, line: {block.body_line + 1})"
    return "\n".join([lines[0], location, *lines[1:], "#sourceLocation()"]) + "\n"


STUBS: dict[str, str] = {
    # swift-log 1.x: the part of `Logging` the blocks use, with its real signatures.
    "Logging": '''
public struct Logger: Sendable {
    public enum Level: String, Codable, CaseIterable, Sendable, Comparable {
        case trace, debug, info, notice, warning, error, critical
        public static func < (lhs: Level, rhs: Level) -> Bool {
            allCases.firstIndex(of: lhs)! < allCases.firstIndex(of: rhs)!
        }
    }
    public enum MetadataValue: Sendable, ExpressibleByStringLiteral, ExpressibleByStringInterpolation {
        case string(String)
        case stringConvertible(any CustomStringConvertible & Sendable)
        case dictionary(Metadata)
        case array([Metadata.Value])
        public init(stringLiteral value: String) { self = .string(value) }
    }
    public typealias Metadata = [String: MetadataValue]
    public struct Message: ExpressibleByStringLiteral, ExpressibleByStringInterpolation, CustomStringConvertible,
        Sendable
    {
        public var description: String
        public init(stringLiteral value: String) { description = value }
    }
    public let label: String
    public var logLevel: Level = .info
    public init(label: String) { self.label = label }
    public func log(
        level: Level, _ message: @autoclosure () -> Message, metadata: @autoclosure () -> Metadata? = nil,
        source: @autoclosure () -> String? = nil, file: String = #fileID, function: String = #function,
        line: UInt = #line
    ) {}
    public func trace(
        _ message: @autoclosure () -> Message, metadata: @autoclosure () -> Metadata? = nil,
        source: @autoclosure () -> String? = nil, file: String = #fileID, function: String = #function,
        line: UInt = #line
    ) {}
    public func debug(
        _ message: @autoclosure () -> Message, metadata: @autoclosure () -> Metadata? = nil,
        source: @autoclosure () -> String? = nil, file: String = #fileID, function: String = #function,
        line: UInt = #line
    ) {}
    public func info(
        _ message: @autoclosure () -> Message, metadata: @autoclosure () -> Metadata? = nil,
        source: @autoclosure () -> String? = nil, file: String = #fileID, function: String = #function,
        line: UInt = #line
    ) {}
    public func notice(
        _ message: @autoclosure () -> Message, metadata: @autoclosure () -> Metadata? = nil,
        source: @autoclosure () -> String? = nil, file: String = #fileID, function: String = #function,
        line: UInt = #line
    ) {}
    public func warning(
        _ message: @autoclosure () -> Message, metadata: @autoclosure () -> Metadata? = nil,
        source: @autoclosure () -> String? = nil, file: String = #fileID, function: String = #function,
        line: UInt = #line
    ) {}
    public func error(
        _ message: @autoclosure () -> Message, metadata: @autoclosure () -> Metadata? = nil,
        source: @autoclosure () -> String? = nil, file: String = #fileID, function: String = #function,
        line: UInt = #line
    ) {}
}
''',
    # swift-metrics 2.x: Counter, Gauge and Timer as `import Metrics` declares them (final classes, Sendable).
    "Metrics": '''
public final class Counter: Sendable {
    public convenience init(label: String, dimensions: [(String, String)] = []) { self.init() }
    private init() {}
    public func increment<DataType: BinaryInteger>(by amount: DataType) {}
    public func increment() {}
    public func reset() {}
}
public class Recorder: @unchecked Sendable {
    public convenience init(label: String, dimensions: [(String, String)] = [], aggregate: Bool = true) { self.init() }
    init() {}
    public func record<DataType: BinaryInteger>(_ value: DataType) {}
    public func record<DataType: BinaryFloatingPoint>(_ value: DataType) {}
}
public final class Gauge: Recorder, @unchecked Sendable {
    public convenience init(label: String, dimensions: [(String, String)] = []) { self.init() }
}
public final class Timer: Sendable {
    public convenience init(label: String, dimensions: [(String, String)] = []) { self.init() }
    private init() {}
    public func recordNanoseconds(_ duration: Int64) {}
    public func recordNanoseconds<DataType: BinaryInteger>(_ duration: DataType) {}
    public func recordMilliseconds<DataType: BinaryInteger>(_ duration: DataType) {}
    public func recordMilliseconds<DataType: BinaryFloatingPoint>(_ duration: DataType) {}
    public func recordSeconds<DataType: BinaryInteger>(_ duration: DataType) {}
    public func recordSeconds<DataType: BinaryFloatingPoint>(_ duration: DataType) {}
    public func record(duration: Duration) {}
}
''',
    # swift-service-lifecycle 2.x: UnixSignal lives in a module of its own, which ServiceLifecycle does not
    # re-export.
    "UnixSignals": '''
public struct UnixSignal: Hashable, Sendable, CustomStringConvertible {
    private let name: String
    public var description: String { name }
    public static let sighup = Self(name: "SIGHUP")
    public static let sigint = Self(name: "SIGINT")
    public static let sigterm = Self(name: "SIGTERM")
    public static let sigusr1 = Self(name: "SIGUSR1")
    public static let sigusr2 = Self(name: "SIGUSR2")
    public static let sigquit = Self(name: "SIGQUIT")
}
''',
    "ServiceLifecycle": '''
public import Logging
public import UnixSignals

public protocol Service: Sendable {
    func run() async throws
}
public actor ServiceGroup: Service {
    public init(
        services: [any Service], gracefulShutdownSignals: [UnixSignal] = [], cancellationSignals: [UnixSignal] = [],
        logger: Logger
    ) {}
    public func run() async throws {}
    public func triggerGracefulShutdown() async {}
}
public func withGracefulShutdownHandler<T>(
    isolation: isolated (any Actor)? = #isolation,
    operation: () async throws -> T,
    onGracefulShutdown handler: @Sendable @escaping () -> Void
) async rethrows -> T {
    try await operation()
}
public func cancelWhenGracefulShutdown<T: Sendable>(_ operation: @Sendable @escaping () async throws -> T)
    async rethrows -> T
{
    try await operation()
}
''',
}
STUB_DEPENDENCIES = {"ServiceLifecycle": ["Logging", "UnixSignals"]}


def scratch_manifest(blocks: list[Block]) -> str:
    c_modules = [b.module for b in blocks if b.kind == "c-module"]
    dependencies = [f'.product(name: "{p}", package: "{PACKAGE_IDENTITY}")' for p in PRODUCTS]
    dependencies += [f'"{name}"' for name in STUBS]
    lines = [
        "// swift-tools-version: 6.0",
        "// Generated by Scripts/check-snippets.py; do not edit.",
        "import PackageDescription",
        "",
        f"let dependencies: [Target.Dependency] = [{', '.join(dependencies)}]",
        'let blockSettings: [SwiftSetting] = [.unsafeFlags(["-warnings-as-errors", "-diagnostic-style", "llvm"])]',
        "",
        "let package = Package(",
        '    name: "SessionEngineSnippets",',
        "    platforms: [.macOS(.v15), .iOS(.v18), .tvOS(.v18), .watchOS(.v11), .visionOS(.v2)],",
        f'    dependencies: [.package(path: "{PACKAGE_IDENTITY}")],',
        "    targets: [",
    ]
    for stub in STUBS:
        stub_dependencies = ", ".join(f'"{d}"' for d in STUB_DEPENDENCIES.get(stub, []))
        lines.append(f'        .target(name: "{stub}", dependencies: [{stub_dependencies}], path: "Stubs/{stub}"),')
    for name in c_modules:
        lines.append(
            f'        .target(name: "{name}", path: "CModules/{name}", '
            'cSettings: [.unsafeFlags(["-Wall", "-Wextra", "-Werror"])]),'
        )
    for block in blocks:
        if block.kind != "swift":
            continue
        kind = "testTarget" if block.is_test else "executableTarget"
        own = "".join(f' + ["{name}"]' for name in block.c_modules)
        lines.append(
            f'        .{kind}(name: "{block.target}", dependencies: dependencies{own}, path: "Blocks/{block.target}", '
            "swiftSettings: blockSettings),"
        )
    lines += ["    ],", "    swiftLanguageModes: [.v6]", ")", ""]
    return "\n".join(lines)


def write_if_changed(path: Path, text: str) -> None:
    """Writes a file only when its content changes, so an unchanged block is not rebuilt."""
    if path.exists() and path.read_text(encoding="utf-8") == text:
        return
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text, encoding="utf-8")


def keep_only(directory: Path, names: set[str]) -> None:
    """Removes what a previous run generated in `directory` and this one does not."""
    if directory.exists():
        for entry in directory.iterdir():
            if entry.name not in names:
                shutil.rmtree(entry) if entry.is_dir() and not entry.is_symlink() else entry.unlink()


def link_package(scratch: Path, root: Path) -> None:
    """The symlink through which the scratch packages depend on the checkout under the package's identity."""
    link = scratch / PACKAGE_IDENTITY
    target = os.path.relpath(root, scratch)  # relative, so the scratch package survives a moved checkout
    if link.is_symlink() and os.readlink(link) != target:
        link.unlink()
    if not link.is_symlink():
        if link.exists():
            shutil.rmtree(link)
        link.symlink_to(target, target_is_directory=True)


def write_scratch(root: Path, scratch: Path, blocks: list[Block]) -> None:
    scratch.mkdir(parents=True, exist_ok=True)
    link_package(scratch, root)
    for stub, text in STUBS.items():
        write_if_changed(scratch / "Stubs" / stub / f"{stub}.swift", text.lstrip("\n"))
    keep_only(scratch / "Stubs", set(STUBS))
    c_modules = [b for b in blocks if b.kind == "c-module"]
    for block in c_modules:
        directory = scratch / "CModules" / block.module
        write_if_changed(directory / "include" / f"{block.module}.h", c_header(block, root))
        write_if_changed(directory / f"{block.module}.c", f'#include "{block.module}.h"\n')
    keep_only(scratch / "CModules", {b.module for b in c_modules})
    swift = [b for b in blocks if b.kind == "swift"]
    for block in swift:
        name = f"{block.target}.swift" if block.is_test else "main.swift"
        directory = scratch / "Blocks" / block.target
        keep_only(directory, {name})
        write_if_changed(directory / name, swift_source(block, root))
    keep_only(scratch / "Blocks", {b.target for b in swift})
    write_if_changed(scratch / "Package.swift", scratch_manifest(blocks))


def run(command: list[str], deadline: float, cwd: Path | None = None) -> tuple[int | None, str]:
    """Runs a command with the time left; None as the status when it ran out of time."""
    remaining = deadline - time.monotonic()
    if remaining <= 0:
        return None, ""
    try:
        result = subprocess.run(
            command,
            cwd=cwd,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            text=True,
            timeout=remaining,
            check=False,
        )
    except subprocess.TimeoutExpired as expired:
        output = expired.output or ""
        return None, output if isinstance(output, str) else output.decode("utf-8", "replace")
    return result.returncode, result.stdout


def diagnostics(output: str) -> list[tuple[str, int, str]]:
    """Each diagnostic of a build's output: its file, line, and text with the source lines under it."""
    found: list[tuple[str, int, str]] = []
    lines = output.split("\n")
    for index, line in enumerate(lines):
        match = DIAGNOSTIC.match(line)
        if not match or match.group("kind") == "note":
            continue
        excerpt = [line]
        for follow in lines[index + 1 : index + 20]:
            note = DIAGNOSTIC.match(follow)
            if PROGRESS.match(follow) or follow.startswith("error: ") or (note and note.group("kind") != "note"):
                break
            excerpt.append(follow)
        found.append((match.group("path"), int(match.group("line")), "\n".join(excerpt).rstrip()))
    return found


def attribute(output: str, root: Path, scratch: Path, blocks: list[Block]) -> tuple[list[str], list[Block]]:
    """Files each diagnostic under its block; returns those of no block (the package's or a stub's), and the blocks
    that got one."""
    unowned: list[str] = []
    owners: list[Block] = []
    for path, line, text in diagnostics(output):
        text = text.replace(str(root) + os.sep, "")
        owner = None
        resolved = Path(path).resolve() if os.path.isabs(path) else (root / path).resolve()
        for block in blocks:
            if block.fragment is None and resolved == (root / block.document).resolve() and block.owns(line):
                owner = block
                break
        if owner is None:  # a diagnostic in a generated file outside the document's lines
            for block in blocks:
                generated = scratch / "Blocks" / block.target if block.target else None
                if generated and str(resolved).startswith(str(generated.resolve()) + os.sep):
                    owner = block
                    break
        if owner is not None:
            if text not in owner.diagnostics:
                owner.diagnostics.append(text)
            if owner not in owners:
                owners.append(owner)
        elif text not in unowned:
            unowned.append(text)
    return unowned, owners


def check_manifest(block: Block, root: Path, scratch: Path, deadline: float) -> str | None:
    """Loads the manifest block's package graph; returns the failure, or None when the graph loads."""
    source = manifest_source(block, root)
    if source is None:
        return (
            f'the manifest must start with "// swift-tools-version:" and depend on .package(url: '
            f'".../{PACKAGE_IDENTITY}.git", from: "...") (or branch: "...")'
        )
    directory = scratch / "Manifest"
    write_if_changed(directory / "Package.swift", source)
    status, output = run(["swift", "package", "--package-path", str(directory), "dump-package"], deadline)
    if status != 0:
        return output.strip() or "swift package dump-package ran out of time"
    wanted = set()
    for target in json.loads(output).get("targets", []):
        kind, name = target.get("type"), target["name"]
        folder = target.get("path") or ("Tests/" if kind == "test" else "Sources/") + name
        wanted.add(folder.split("/")[0])
        placeholder = "main.swift" if kind == "executable" else "Placeholder.swift"
        write_if_changed(directory / folder / placeholder, "// Generated by Scripts/check-snippets.py.\n")
    keep_only(directory, {"Package.swift", "Package.resolved", ".build", *wanted})
    status, output = run(["swift", "package", "--package-path", str(directory), "show-dependencies"], deadline)
    if status != 0:
        return output.strip() or "swift package show-dependencies ran out of time"
    return None


def main() -> int:
    parser = argparse.ArgumentParser(
        description="Type-checks the Swift blocks of README.md, Design/*.md and the DocC catalog's articles."
    )
    parser.add_argument("--root", type=Path, default=Path(__file__).resolve().parent.parent)
    parser.add_argument("--scratch", type=Path, help="the scratch directory (default: ROOT/.build/snippets)")
    parser.add_argument("--timeout", type=float, default=1200, help="seconds for the whole check (default: 1200)")
    parser.add_argument("--verbose", action="store_true", help="print the build's output")
    options = parser.parse_args()
    root: Path = options.root.resolve()
    scratch: Path = (options.scratch or root / ".build" / "snippets").absolute()
    started = time.monotonic()
    deadline = started + options.timeout

    documents = (
        ["README.md"]
        + sorted(str(p.relative_to(root)) for p in (root / "Design").glob("*.md"))
        + sorted(str(p.relative_to(root)) for p in (root / DOCC_CATALOG).rglob("*.md"))
    )
    blocks = [block for document in documents for block in parse_document(root, document)]
    counters: dict[str, int] = {}
    for block in blocks:
        if block.fragment is None and block.kind == "swift":
            stem = re.sub(r"[^A-Za-z0-9]", "_", Path(block.document).stem)
            counters[stem] = counters.get(stem, 0) + 1
            block.target = f"{stem}_{counters[stem]:02d}"
    checked = [block for block in blocks if block.fragment is None]
    modules = [b.module for b in checked if b.kind == "c-module"]
    for block in checked:
        if block.kind == "swift":
            imported = {
                m.group(1)
                for line in block.prelude + block.body
                if (m := IMPORT.match(line))
            }
            block.is_test = "Testing" in imported
            block.c_modules = [name for name in modules if name in imported]
    if len(set(modules)) != len(modules) or set(modules) & set(STUBS):
        print("check-snippets: two C modules, or a C module and a stub, share a name", file=sys.stderr)
        return 2
    write_scratch(root, scratch, checked)

    unowned: list[str] = []
    timed_out = False
    for block in checked:
        if block.kind == "manifest":
            failure = check_manifest(block, root, scratch, deadline)
            block.checked = True
            if failure:
                block.diagnostics.append(failure.replace(str(root) + os.sep, ""))

    built = [b for b in checked if b.kind in ("swift", "c-module")]
    log: list[str] = []
    if built:
        status, output = run(["swift", "build", "--package-path", str(scratch), "--build-tests"], deadline)
        if status not in (0, None) and "because of missing inputs" in output:
            # The scratch package's build plan, kept between runs, still names a source file the checkout has
            # deleted since: SwiftPM does not plan the path dependency again by itself. Plan it afresh, once.
            shutil.rmtree(scratch / ".build", ignore_errors=True)
            status, output = run(["swift", "build", "--package-path", str(scratch), "--build-tests"], deadline)
        log.append(output)
        unowned, _ = attribute(output, root, scratch, built)
        timed_out = status is None
        if status == 0:
            for block in built:
                block.checked = True
        elif not timed_out and not unowned:
            # The build stops starting jobs after a failure: build alone each Swift block it did not report on.
            for block in built:
                if block.diagnostics or block.kind != "swift":
                    continue
                command = ["swift", "build", "--package-path", str(scratch), "--target", block.target]
                status, output = run(command, deadline)
                log.append(output)
                if status is None:
                    timed_out = True
                    break
                more, owners = attribute(output, root, scratch, built)
                unowned += [d for d in more if d not in unowned]
                if status == 0:
                    block.checked = True
                elif block in owners:
                    block.checked = True
                elif owners:
                    block.blocked_by = [other.location for other in owners]
                elif not unowned:
                    block.checked = True
                    block.diagnostics.append(f"swift build --target {block.target} failed:\n{output.strip()[-3000:]}")
            for block in built:  # a C module that no failure names compiled with a block that imports it
                if block.kind == "c-module" and not block.diagnostics:
                    block.checked = any(b.checked and block.module in b.c_modules for b in built)
    if options.verbose:
        print("\n".join(log))

    failed = 0
    for block in blocks:
        what = {"swift": block.target + (", a test" if block.is_test else ""), "manifest": "Package.swift",
                "c-module": f"C module {block.module}"}[block.kind]
        if block.fragment is not None:
            print(f"{block.location}: fragment, not checked: {block.fragment}")
        elif block.diagnostics:
            failed += 1
            print(f"{block.location}: FAIL ({what})")
            for diagnostic in block.diagnostics:
                print("    " + diagnostic.replace("\n", "\n    "))
        elif block.checked:
            print(f"{block.location}: ok ({what})")
        elif block.blocked_by:
            print(f"{block.location}: not checked ({what}): it needs {', '.join(block.blocked_by)}, which failed")
        else:
            print(f"{block.location}: not checked ({what})")

    if timed_out:
        print(f"check-snippets: the build did not finish within {options.timeout:.0f} s", file=sys.stderr)
    if unowned:
        print("check-snippets: the package or a stub failed to build (no block is to blame):", file=sys.stderr)
        for diagnostic in unowned:
            print("    " + diagnostic.replace("\n", "\n    "), file=sys.stderr)
    unjudged = [b for b in checked if not b.checked and not b.diagnostics and not b.blocked_by]
    if unjudged and not timed_out and not unowned:
        print("check-snippets: the build failed without a diagnostic; its output:", file=sys.stderr)
        print("\n".join(log).strip()[-4000:], file=sys.stderr)
    fragments = sum(1 for block in blocks if block.fragment is not None)
    seconds = time.monotonic() - started
    judged = sum(1 for block in checked if block.checked or block.diagnostics)
    unjudged_note = f", {len(checked) - judged} not checked" if judged < len(checked) else ""
    print(f"snippets: {judged} checked, {fragments} fragments, {failed} failed{unjudged_note} ({seconds:.0f} s)")
    if timed_out or unowned or unjudged:
        return 2
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
