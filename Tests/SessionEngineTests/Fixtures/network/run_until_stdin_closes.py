#!/usr/bin/env python3
"""Runs a server (the command line given) until this program's standard input closes, then stops it.

The network tests start nginx and tinyproxy through it, so a server never outlives the test process that started
it, even one that crashed: the test holds the write end of this program's standard input. On end of input the
server gets SIGTERM and is waited for. When the server has ended, by itself (a port already taken) or when stopped,
its exit status is written to STATUS_FILE, and this program exits with it.

Usage:
    run_until_stdin_closes.py STATUS_FILE COMMAND [ARGUMENT...]

A child of a test process may inherit a signal mask that blocks SIGCHLD (the threads that start processes there
block most signals), which makes a shell's `wait` hang for ever; this program clears the mask first, for itself and
for the server, and waits with waitpid, which needs no signal. The server's standard input is /dev/null and it
inherits no descriptor but the standard three.
"""

import signal
import subprocess
import sys
import threading


def main():
    signal.pthread_sigmask(signal.SIG_SETMASK, [])
    status_file, command = sys.argv[1], sys.argv[2:]
    server = subprocess.Popen(command, stdin=subprocess.DEVNULL, close_fds=True)

    def stop_at_end_of_input():
        sys.stdin.buffer.read()
        if server.poll() is None:
            server.terminate()

    threading.Thread(target=stop_at_end_of_input, daemon=True).start()
    status = server.wait()
    with open(status_file, "w") as file:
        file.write("%d\n" % status)
    sys.exit(status if status >= 0 else 128 - status)


if __name__ == "__main__":
    main()
