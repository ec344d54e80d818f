"""The serving loop the loopback backends share: print the port, serve over HTTP or TLS, and stop when told to."""

import os
import ssl
import subprocess
import sys
import threading
from http.server import ThreadingHTTPServer


def add_arguments(parser):
    """Adds the options every loopback backend takes."""
    parser.add_argument("--exit-on-stdin-eof", action="store_true")
    parser.add_argument(
        "--tls",
        metavar="DIRECTORY",
        help="serve HTTPS with a fresh self-signed certificate for localhost and 127.0.0.1, written to "
        "DIRECTORY/certificate.pem for the client to trust",
    )


def tls_context(directory):
    """A server context with a new P-256 key and a self-signed certificate valid for a day, made by openssl."""
    certificate = os.path.join(directory, "certificate.pem")
    key = os.path.join(directory, "key.pem")
    subprocess.run(
        [
            "openssl", "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes",
            "-keyout", key, "-out", certificate, "-days", "1", "-subj", "/CN=localhost",
            "-addext", "subjectAltName=DNS:localhost,IP:127.0.0.1",
        ],
        check=True,
        capture_output=True,
    )
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(certificate, key)
    return context


class Server(ThreadingHTTPServer):
    """The server every loopback backend runs: a thread per connection, and with --tls each accepted connection
    wrapped in TLS, its handshake on the connection's own thread. A client that gives up (a timeout in a test) closes
    its socket; that is expected, so connection errors are not reported.

    It also lengthens the listen queue from socketserver's 5: a client that opens dozens of connections at once
    would otherwise see its connection attempts dropped and retried a second later.
    """

    tls = None
    request_queue_size = 128
    daemon_threads = True

    def handle_error(self, request, client_address):
        pass

    def get_request(self):
        connection, address = super().get_request()
        if self.tls is None:
            return connection, address
        return self.tls.wrap_socket(connection, server_side=True, do_handshake_on_connect=False), address

    def finish_request(self, request, client_address):
        if self.tls is not None:
            try:
                request.settimeout(10)
                request.do_handshake()
                request.settimeout(None)
            except (ssl.SSLError, OSError):
                return
        super().finish_request(request, client_address)


def serve(server, arguments):
    """Prints the server's port on the first line of standard output, then serves until interrupted.

    The port line is the backend's readiness signal, and a client may send its first request the moment it reads it,
    on a machine busy enough to stretch any work a request would do first. So it is printed only when every request
    can be answered without delay: the server's constructor has already bound and listened (a connection made now
    waits in the listen queue until serve_forever accepts it), the caller has built anything expensive a request
    needs before calling this, and with --tls the certificate has been written and loaded here first.

    With --tls the server speaks HTTPS. With --exit-on-stdin-eof it stops when standard input
    closes, so it never outlives the process that started it.
    """
    if arguments.tls:
        server.tls = tls_context(arguments.tls)
    exit_on_stdin_eof = arguments.exit_on_stdin_eof
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
