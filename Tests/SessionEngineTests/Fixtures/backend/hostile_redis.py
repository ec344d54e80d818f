#!/usr/bin/env python3
"""A hostile loopback Redis server: it answers the coordinator's first command with a reply built to hold it.

The coordinator's tests start it to prove that every such reply fails within the command's timeout, with a typed
error and a bounded buffer. Each attack lasts a minute, so that a call it held would be told from one slowed by a
busy machine. The attack is chosen by the key prefix the command names, `{MODE}`:

    {huge}      a bulk string that declares 100 MB, then its bytes as fast as the socket takes them.
    {garbage}   a line that is not the protocol.
    {trickle}   a status reply, one byte every 50 ms, for a minute.
    {deep}      arrays nested deeper than any script's reply.
    {silent}    nothing; the connection stays open.

Usage: python3 hostile_redis.py [--exit-on-stdin-eof]. It binds 127.0.0.1 on a free port, prints the port on the first
line of standard output and, with --exit-on-stdin-eof, stops when standard input closes. Nothing is logged.
"""

import argparse
import socketserver
import time

import loopback_server

MODES = [b"{huge}", b"{garbage}", b"{trickle}", b"{deep}", b"{silent}"]
BLOCK = b"x" * (1 << 16)


class Handler(socketserver.BaseRequestHandler):
    def handle(self):
        received = b""
        deadline = time.monotonic() + 10
        mode = None
        while mode is None and time.monotonic() < deadline:
            chunk = self.request.recv(65536)
            if not chunk:
                return
            received += chunk
            mode = next((candidate for candidate in MODES if candidate in received), None)
        try:
            if mode == b"{huge}":
                self.request.sendall(b"$104857600\r\n")
                for _ in range(1600):
                    self.request.sendall(BLOCK)
            elif mode == b"{garbage}":
                self.request.sendall(b"hello, this is not redis\r\n")
                time.sleep(60)
            elif mode == b"{trickle}":
                for index in range(1200):
                    self.request.sendall(b"+" if index == 0 else b"a")
                    time.sleep(0.05)
            elif mode == b"{deep}":
                self.request.sendall(b"*1\r\n" * 8 + b":1\r\n")
                time.sleep(60)
            else:
                time.sleep(60)
        except OSError:
            pass


def main():
    parser = argparse.ArgumentParser()
    loopback_server.add_arguments(parser)
    arguments = parser.parse_args()
    server = loopback_server.Server(("127.0.0.1", 0), Handler)
    loopback_server.serve(server, arguments)


if __name__ == "__main__":
    main()
