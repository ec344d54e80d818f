#!/usr/bin/env python3
"""A hostile loopback backend: it answers a credential request with a body built to exhaust the client.

The HTTP fetcher's tests start it to prove that every such answer fails within the fetcher's timeout and with a
bounded memory growth. Each path is one attack:

    /huge          200 OK, Content-Length: 209715200, and that many bytes sent as fast as the socket takes them.
    /huge-unsized  200 OK, no Content-Length (the body ends when the connection closes), 200 MB sent that way.
    /endless       200 OK, Transfer-Encoding: chunked, 64 KiB chunks for ever.
    /gzip-bomb     200 OK, Content-Encoding: gzip, a 1 MB gzip body that expands to 1 GiB of zeros.
    /trickle       200 OK, Content-Length: 200, then one byte per second.
    /slow-headers  the status line, then one header byte per second, never finishing the head.
    /big-chunk     200 OK, chunked, one chunk that declares 1 TiB.
    /ok            a small, valid-looking JSON body (not a valid credential), for a control measurement.

Usage: python3 hostile_backend.py [--exit-on-stdin-eof] [--tls DIRECTORY]. It binds 127.0.0.1 on a free port,
prints the port on the first line of standard output and, with --exit-on-stdin-eof, stops when standard input
closes, so it never outlives the process that started it. With --tls it speaks HTTPS with a fresh self-signed
certificate, written to DIRECTORY/certificate.pem for the client to trust. Nothing is logged.
"""

import argparse
import socket
import struct
import sys
import threading
import time
import zlib
from http.server import BaseHTTPRequestHandler

import loopback_server

BLOCK = b"x" * (1 << 20)
_bomb = None
_bomb_lock = threading.Lock()


def gzip_bomb():
    """A gzip body of about 1 MB that expands to 1 GiB of zeros, built once and kept for later requests.

    Compressing 1 GiB takes seconds, so one 16 MiB block is compressed after a full flush (which resets the
    dictionary, so the block stands alone) and repeated 64 times behind a gzip header, with the real CRC-32.
    """
    global _bomb
    with _bomb_lock:
        if _bomb is None:
            zeros = bytes(1 << 24)
            compressor = zlib.compressobj(9, zlib.DEFLATED, -15)
            block = compressor.compress(zeros) + compressor.flush(zlib.Z_FULL_FLUSH)
            crc = 0
            for _ in range(64):
                crc = zlib.crc32(zeros, crc)
            header = b"\x1f\x8b\x08\x00\x00\x00\x00\x00\x02\xff"
            trailer = struct.pack("<II", crc, (1 << 30) & 0xFFFFFFFF)
            _bomb = header + block * 64 + compressor.flush() + trailer
        return _bomb


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    disable_nagle_algorithm = True

    def log_message(self, format, *args):
        pass

    def head(self, headers):
        self.send_response(200)
        self.send_header("Cache-Control", "no-store")
        self.send_header("Content-Type", "application/json")
        for name, value in headers:
            self.send_header(name, value)
        self.end_headers()
        self.wfile.flush()

    def do_GET(self):
        try:
            self.serve()
        except (BrokenPipeError, ConnectionResetError, socket.timeout, OSError):
            pass

    def serve(self):
        path = self.path.split("?", 1)[0]
        if path == "/huge":
            total = 200 * (1 << 20)
            self.head([("Content-Length", str(total))])
            for _ in range(total // len(BLOCK)):
                self.wfile.write(BLOCK)
        elif path == "/huge-unsized":
            self.close_connection = True
            self.head([("Connection", "close")])
            for _ in range(200):
                self.wfile.write(BLOCK)
        elif path == "/endless":
            self.head([("Transfer-Encoding", "chunked")])
            chunk = b"%x\r\n" % (1 << 16) + BLOCK[: 1 << 16] + b"\r\n"
            while True:
                self.wfile.write(chunk)
        elif path == "/gzip-bomb":
            body = gzip_bomb()
            self.head([("Content-Encoding", "gzip"), ("Content-Length", str(len(body)))])
            self.wfile.write(body)
        elif path == "/trickle":
            self.head([("Content-Length", "200")])
            for _ in range(200):
                self.wfile.write(b" ")
                self.wfile.flush()
                time.sleep(1)
        elif path == "/slow-headers":
            self.wfile.write(b"HTTP/1.1 200 OK\r\n")
            self.wfile.flush()
            while True:
                self.wfile.write(b"X")
                self.wfile.flush()
                time.sleep(1)
        elif path == "/big-chunk":
            self.head([("Transfer-Encoding", "chunked")])
            self.wfile.write(b"10000000000\r\n")
            while True:
                self.wfile.write(BLOCK)
        else:
            body = b'{"ok":true}'
            self.head([("Content-Length", str(len(body)))])
            self.wfile.write(body)


def main():
    parser = argparse.ArgumentParser(description="Hostile loopback credential backend.")
    loopback_server.add_arguments(parser)
    arguments = parser.parse_args()
    server = loopback_server.Server(("127.0.0.1", 0), Handler)
    threading.Thread(target=gzip_bomb, daemon=True).start()
    return loopback_server.serve(server, arguments)


if __name__ == "__main__":
    sys.exit(main())
