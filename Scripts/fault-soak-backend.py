#!/usr/bin/env python3
"""The loopback backend of SessionEngineBench's fault-soak: it signs real credentials and plays faults on command.

It binds 127.0.0.1 only (port 0, so the system picks a free one), prints "port N" on the first line of standard
output, then reads one command a line from standard input and answers each with one line:

    phase calm          answer every request with a fresh credential
    phase refused       stop listening: connections are refused until the next phase
    phase retry-after   answer every request 503 with "Retry-After: <retry-after>" (seconds)
    phase slow          answer every request after <slow> seconds
    phase hung          accept requests and never answer them; they are closed unanswered when the phase ends
    rotate              sign with the next secret from now on ("<secret>:rotated:<n>"); answers the generation
    stats               {"requests": total, "perSecond": [[unix second, requests], ...]} for the seconds counted
                        since the last stats, the current second excluded

It stops when its standard input closes, so it never outlives the benchmark that started it.

A request authenticates with "Authorization: Bearer session-<account>"; the credential is for
"<account>@example.com" (lowercased, so it is normalized as the contract says), a v1 payload signed with
HMAC-SHA256 under APPNORTH_IDENTITY_SECRET (or its rotation), and lives <lifetime> seconds. Every response carries
Cache-Control: no-store and Connection: close, so every fetch opens a connection and a refused phase refuses it.
Nothing is logged: credentials act as bearer credentials until they expire.

Usage:
    APPNORTH_PROJECT_ID=proj APPNORTH_IDENTITY_SECRET=... python3 fault-soak-backend.py [--lifetime 60]
        [--retry-after 10] [--slow 2]
"""

import argparse
import hashlib
import hmac
import json
import os
import socketserver
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler


class State:
    def __init__(self, project_id, secret, lifetime, retry_after, slow):
        self.lock = threading.Lock()
        self.project_id = project_id
        self.base_secret = secret
        self.generation = 0
        self.lifetime = lifetime
        self.retry_after = retry_after
        self.slow = slow
        self.phase = "calm"
        # Set while no request is held: a hung request waits for it.
        self.released = threading.Event()
        self.released.set()
        self.requests = 0
        self.per_second = {}

    def secret(self):
        if self.generation == 0:
            return self.base_secret
        return "%s:rotated:%d" % (self.base_secret, self.generation)

    def count(self):
        second = int(time.time())
        with self.lock:
            self.requests += 1
            self.per_second[second] = self.per_second.get(second, 0) + 1
            return self.phase

    def stats(self):
        current = int(time.time())
        with self.lock:
            done = sorted(second for second in self.per_second if second < current)
            counts = [[second, self.per_second.pop(second)] for second in done]
            return {"requests": self.requests, "perSecond": counts}


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    disable_nagle_algorithm = True
    server_version = "FaultSoakBackend/1"

    def log_message(self, format, *args):
        pass

    def send_json(self, status, body, extra_headers=()):
        data = json.dumps(body).encode("utf-8")
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.send_header("Cache-Control", "no-store")
        self.send_header("Connection", "close")
        for name, value in extra_headers:
            self.send_header(name, value)
        self.end_headers()
        self.wfile.write(data)
        self.close_connection = True

    def do_GET(self):
        state = self.server.state
        phase = state.count()
        if not self.path.startswith("/identity"):
            self.send_json(404, {"error": "not found"})
            return
        authorization = self.headers.get("Authorization", "")
        prefix = "Bearer session-"
        if not authorization.startswith(prefix) or len(authorization) == len(prefix):
            self.send_json(401, {"error": "no session"})
            return
        account = authorization[len(prefix):].strip()
        if phase == "retry-after":
            self.send_json(503, {"error": "unavailable"}, [("Retry-After", str(state.retry_after))])
            return
        if phase == "hung":
            state.released.wait()
            self.close_connection = True
            return
        if phase == "slow":
            time.sleep(state.slow)
        with state.lock:
            secret = state.secret()
        email = ("%s@example.com" % account).lower()
        expires_at = int(time.time()) + state.lifetime
        payload = "v1\n%s\n%d\n%s" % (state.project_id, expires_at, email)
        signature = hmac.new(secret.encode("utf-8"), payload.encode("utf-8"), hashlib.sha256).hexdigest()
        self.send_json(200, {"email": email, "expiresAt": expires_at, "signature": signature})


class Server(socketserver.ThreadingMixIn, socketserver.TCPServer):
    allow_reuse_address = True
    daemon_threads = True
    request_queue_size = 256


class Listener:
    """Listens on one port, and can stop listening and listen again on the same port."""

    def __init__(self, state):
        self.state = state
        self.server = None
        self.thread = None
        self.port = 0

    def start(self):
        self.server = Server(("127.0.0.1", self.port), Handler)
        self.server.state = self.state
        self.port = self.server.server_address[1]
        self.thread = threading.Thread(target=self.server.serve_forever, kwargs={"poll_interval": 0.1}, daemon=True)
        self.thread.start()

    def stop(self):
        if self.server is not None:
            self.server.shutdown()
            self.server.server_close()
            self.server = None


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--lifetime", type=int, default=60)
    parser.add_argument("--retry-after", type=int, default=10)
    parser.add_argument("--slow", type=float, default=2)
    arguments = parser.parse_args()
    state = State(
        os.environ["APPNORTH_PROJECT_ID"],
        os.environ["APPNORTH_IDENTITY_SECRET"],
        arguments.lifetime,
        arguments.retry_after,
        arguments.slow,
    )
    listener = Listener(state)
    listener.start()
    print("port %d" % listener.port, flush=True)
    for line in sys.stdin:
        command = line.split()
        if not command:
            continue
        if command[0] == "phase" and len(command) == 2:
            phase = command[1]
            if phase == "refused" and state.phase != "refused":
                listener.stop()
            elif phase != "refused" and state.phase == "refused":
                listener.start()
            with state.lock:
                state.phase = phase
            if phase == "hung":
                state.released.clear()
            else:
                state.released.set()
            answer = "ok"
        elif command[0] == "rotate":
            with state.lock:
                state.generation += 1
                answer = "ok %d" % state.generation
        elif command[0] == "stats":
            answer = json.dumps(state.stats())
        else:
            answer = "unknown"
        print(answer, flush=True)
    state.released.set()
    listener.stop()


if __name__ == "__main__":
    main()
