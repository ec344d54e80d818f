"""The serving loop the loopback backends share: print the port, serve, and stop when told to."""

import sys
import threading


def serve(server, exit_on_stdin_eof):
    """Prints the server's port on the first line of standard output, then serves until interrupted.

    With exit_on_stdin_eof the server stops when standard input closes, so it never outlives the process that
    started it.
    """
    sys.stdout.write("%d\n" % server.server_address[1])
    sys.stdout.flush()

    def stop_when_stdin_closes():
        try:
            while sys.stdin.buffer.read(4096):
                pass
        finally:
            server.shutdown()

    if exit_on_stdin_eof:
        threading.Thread(target=stop_when_stdin_closes, daemon=True).start()
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        pass
    finally:
        server.server_close()
    return 0
