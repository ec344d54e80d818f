#!/usr/bin/env python3
"""A hostile loopback backend: it answers a credential request with a body built to exhaust the client.

The HTTP fetcher's tests start it to prove that every such answer fails within the fetcher's timeout and with a
bounded memory growth. Each path is one attack:

    /huge          200 OK, Content-Length: 209715200, and that many bytes sent as fast as the socket takes them.
    /huge-unsized  200 OK, no Content-Length (the body ends when the connection closes), 200 MB sent that way.
    /endless       200 OK, Transfer-Encoding: chunked, 64 KiB chunks for ever.
    /gzip-bomb     200 OK, Content-Encoding: gzip, a 1 MB gzip body that expands to 1 GiB of zeros.
    /trickle       200 OK, Content-Length: 200, then one byte per second. With ?arrival=TAG it first prints the line
                   "arrived TAG" on standard output, so that a test knows the request reached the server.
    /slow-headers  the status line, then one header byte per second, never finishing the head; ?arrival=TAG as for
                   /trickle.
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
import urllib.parse
import zlib
from http.server import BaseHTTPRequestHandler

import loopback_server

BLOCK = b"x" * (1 << 20)
# One report of an arrival at a time, so that two lines never interleave.
ARRIVALS = threading.Lock()


def _apply(matrix, vector):
    """The 32x32 matrix over GF(2) (a list of its columns, each an int) times the 32-bit vector."""
    result = 0
    for column in matrix:
        if vector & 1:
            result ^= column
        vector >>= 1
    return result


def _square(matrix):
    return [_apply(matrix, column) for column in matrix]


def crc32_of_zeros(length):
    """zlib.crc32(bytes(length)), in about 30 matrix squarings instead of a pass over length bytes.

    CRC-32 is linear over GF(2): one zero bit fed to the (reflected, pre-inverted) register multiplies it by a fixed
    32x32 matrix. Squaring that matrix gives the operator for 2, 4, 8, ... zero bits, and the binary digits of the
    length pick which powers to apply; it is the method of zlib's crc32_combine, which Python's zlib does not
    expose. 1 GiB takes about 5 ms; zlib.crc32 over a reused 1 MiB block, 1024 times, takes 0.25 s on an idle core.
    """
    operator = [0xEDB88320] + [1 << n for n in range(31)]
    for _ in range(3):
        operator = _square(operator)
    register = 0xFFFFFFFF
    while length:
        if length & 1:
            register = _apply(operator, register)
        length >>= 1
        if length:
            operator = _square(operator)
    return register ^ 0xFFFFFFFF


def gzip_bomb():
    """A gzip body of about 1 MB that expands to 1 GiB of zeros, with a valid CRC-32 and length in its trailer.

    Compressing 1 GiB would take seconds, so one 1 MiB block of zeros is compressed and ended with a full flush
    (which resets the dictionary, so the block stands alone), repeated 1024 times behind a gzip header, and the
    stream closed with an empty final block. It takes about 10 ms; main builds it before the port is printed.
    """
    zeros = bytes(1 << 20)
    compressor = zlib.compressobj(9, zlib.DEFLATED, -15)
    block = compressor.compress(zeros) + compressor.flush(zlib.Z_FULL_FLUSH)
    # The arithmetic must agree with zlib itself, here on the block's own length (0.3 ms), or the trailer is wrong.
    if crc32_of_zeros(len(zeros)) != zlib.crc32(zeros):
        raise AssertionError("crc32_of_zeros disagrees with zlib.crc32")
    header = b"\x1f\x8b\x08\x00\x00\x00\x00\x00\x02\xff"
    trailer = struct.pack("<II", crc32_of_zeros(1 << 30), (1 << 30) & 0xFFFFFFFF)
    return header + block * 1024 + compressor.flush() + trailer


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

    def report_arrival(self):
        query = urllib.parse.parse_qs(self.path.partition("?")[2])
        for tag in query.get("arrival", [])[:1]:
            if tag.isalnum() and len(tag) <= 64:
                with ARRIVALS:
                    sys.stdout.write("arrived %s\n" % tag)
                    sys.stdout.flush()

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
            body = self.server.bomb
            self.head([("Content-Encoding", "gzip"), ("Content-Length", str(len(body)))])
            self.wfile.write(body)
        elif path == "/trickle":
            self.report_arrival()
            self.head([("Content-Length", "200")])
            for _ in range(200):
                self.wfile.write(b" ")
                self.wfile.flush()
                time.sleep(1)
        elif path == "/slow-headers":
            self.report_arrival()
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
    # Everything a request needs is built before the port is printed, so no answer waits for it.
    bomb = gzip_bomb()
    server = loopback_server.Server(("127.0.0.1", 0), Handler)
    server.bomb = bomb
    return loopback_server.serve(server, arguments)


if __name__ == "__main__":
    sys.exit(main())
