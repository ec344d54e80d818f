#!/usr/bin/env python3
"""Fails when a release binary locks with a thread ID read before an `await`.

On Linux, `Synchronization.Mutex` locks with the calling thread's ID, cached in a thread-local variable. The optimizer
may compute that variable's address once in an `async` function and keep it in the task's frame across a suspension;
a lock inlined after the `await` then uses the ID of the thread the task ran on before, and its unlock fails with
"Call to unlock Mutex on a thread which hasn't acquired the lock". `SanitizedMutex.withLock` is never inlined for that
reason (see its documentation); this check proves no lock of the package's binaries escaped it.

How: an async function is split into one machine function per resumption (symbols ending in `TY<n>_` or `TQ<n>_`).
Each resumption may run on another thread, so one that reads the cached ID (the `gettid` fallback, `mov $0xba,%edi`
on x86-64) must have computed a thread-local address itself (`%fs:`) before it; one that has not took the address
from the frame. The check names each such resumption. x86-64 Linux only; elsewhere it says so and passes.

Usage: Scripts/check-thread-ids.py BINARY...
"""

import platform
import re
import subprocess
import sys


def suspicious_resumptions(binary):
    disassembly = subprocess.run(
        ["objdump", "-d", "--no-show-raw-insn", binary], capture_output=True, text=True, check=True
    ).stdout.splitlines()
    function, computed_thread_local, found = None, False, set()
    for line in disassembly:
        header = re.match(r"^[0-9a-f]+ <(.*)>:$", line)
        if header:
            function, computed_thread_local = header.group(1), False
            continue
        if function is None or not re.search(r"T[YQ]\d+_$", function):
            continue
        if "%fs:" in line:
            computed_thread_local = True
        if "mov    $0xba,%edi" in line and not computed_thread_local:
            found.add(function)
    return sorted(found)


def demangled(symbol):
    result = subprocess.run(["swift", "demangle", "--simplified", symbol], capture_output=True, text=True)
    return result.stdout.strip().split("---> ")[-1] if result.returncode == 0 else symbol


def main(binaries):
    if platform.system() != "Linux" or platform.machine() != "x86_64":
        print(f"check-thread-ids: skipped on {platform.system()} {platform.machine()} (the pattern is x86-64 Linux's)")
        return 0
    failures = 0
    for binary in binaries:
        found = suspicious_resumptions(binary)
        for symbol in found:
            print(f"{binary}: {demangled(symbol)} ({symbol}) locks with a thread ID from before a suspension")
        failures += len(found)
        print(f"check-thread-ids: {binary}: {len(found)} resumptions lock with a stale thread ID")
    return 1 if failures else 0


if __name__ == "__main__":
    if len(sys.argv) < 2:
        print(__doc__.strip().splitlines()[-1])
        sys.exit(2)
    sys.exit(main(sys.argv[1:]))
