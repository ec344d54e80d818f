#!/usr/bin/env python3
"""A loopback backend that issues verified-identity credentials, for tests and the demo.

It implements the contract's "Authenticated backend identity handler" with the Python standard library only:
the email comes from the authenticated session (never from the caller), is normalized exactly as the
contract's JavaScript does (trim() with ECMAScript's white-space set, then toLowerCase()), and the v1 or v2 payload is signed with HMAC-SHA256 under APPNORTH_IDENTITY_SECRET. Every response
carries Cache-Control: no-store. An unknown or missing session gets 401.

Usage:
    APPNORTH_PROJECT_ID=proj_demo APPNORTH_IDENTITY_SECRET=... python3 identity_backend.py [--port N]
        [--exit-on-stdin-eof] [--tls DIRECTORY]

The server binds 127.0.0.1 (port 0 by default, so the system picks a free one) and prints the port on the
first line of standard output. With --exit-on-stdin-eof it stops when standard input closes, so it never
outlives the process that started it (the tests use this). With --tls it speaks HTTPS with a fresh self-signed
certificate for localhost and 127.0.0.1, written to DIRECTORY/certificate.pem for the client to trust.

Endpoints:
    GET /identity            the handler; authenticate with "Authorization: Bearer session-<name>" or
                             "Cookie: session=session-<name>"; requires "Accept: application/json" (else 406).
    POST /admin/outage?on=1  every /identity request answers 503 with "Retry-After: 120" until ?on=0.
    POST /admin/rotate       rotates the secret: generation n signs with "<secret>:rotated:<n>"; answers
                             {"generation": n}.
    GET /admin/generation    the secret's current generation, {"generation": n}, so a client that follows the
                             rotations (the demo's service stand-in) can start where an earlier run left off.

Behaviour per request, for tests (query parameters of /identity):
    mode=slow&delay=S        wait S seconds (default 3) before answering.
    mode=status&code=C       answer status C with a JSON error body, {"error": E} (error=E, default
                             "requested status"; error=session_ended is how the endpoint says a 403 ends the
                             session); retry=S adds "Retry-After: S", retry_date=S a Retry-After HTTP date S
                             seconds after the backend's clock.
    mode=html&code=C         answer status C with an HTML page, as a proxy or firewall in front of the backend does.
    mode=flaky&key=K         answer 500 to the first request with key K, then behave normally.
    mode=cacheable           answer without no-store (Cache-Control: private, max-age=60).
    mode=malformed           answer 200 with a body that is not JSON.
    mode=redirect            answer 302 to /identity.
    lifetime=S               issue a credential that lives S seconds (default 900, the contract's 15 minutes).

A test-only header, X-Demo-Clock: <unix seconds>, replaces the backend's clock for one request, so a caller
running on a simulated clock gets credentials that are valid on that clock; the response's Date header then
carries that clock too, as a real backend's Date carries its own.

Nothing is logged: credentials act as bearer credentials until they expire.
"""

import argparse
import hashlib
import hmac
import json
import os
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler
from urllib.parse import parse_qs, urlparse

import loopback_server

NAMES = ["alice", "bob", "carol", "dave", "erin", "frank", "grace", "heidi"]

# The emails the backend's sessions hold, raw: the handler normalizes them before signing.
SESSIONS = {
    "session-alice": ("  Alice@Example.com ", None),
    "session-bob": ("Bob@Example.com", {"plan": "pro", "seats": 3, "beta": True}),
    "session-carol": ("carol@example.com", None),
    "session-dave": ("Dave@Example.com", {"team": "ops"}),
    "session-erin": ("erin@example.com", None),
    "session-frank": ("frank@example.com", {"plan": "free"}),
    "session-grace": ("grace@example.com", None),
    "session-heidi": ("heidi@example.com", None),
    # White space only ECMAScript trims (U+FEFF, U+3000) around letters only full Unicode lowercases.
    "session-zoe": ("\ufeff\u00a0Zo\u00cb@Ex\u00c4mple.COM\u3000", None),
    # A final sigma: toLowerCase writes U+03C2 for the last capital sigma, U+03C3 for the others.
    "session-odysseus": ("\u039f\u0394\u03a5\u03a3\u03a3\u0395\u03a5\u03a3@Example.com", None),
}
for number in range(len(NAMES) + 1, 1001):
    SESSIONS["session-user%d" % number] = ("user%d@example.com" % number, None)


class State:
    def __init__(self, project_id, secret):
        self.lock = threading.Lock()
        self.project_id = project_id
        self.base_secret = secret
        self.generation = 0
        self.outage = False
        self.flaky_seen = set()

    def secret(self):
        with self.lock:
            if self.generation == 0:
                return self.base_secret
            return "%s:rotated:%d" % (self.base_secret, self.generation)


def canonical_properties(properties):
    # JSON.stringify of the object with its keys sorted; the demo sessions hold only strings, integers and
    # booleans, whose Python and JavaScript serializations agree.
    return json.dumps(properties, sort_keys=True, separators=(",", ":"), ensure_ascii=False)


# ECMAScript's WhiteSpace and LineTerminator code points: exactly what String.prototype.trim() removes. Python's
# own strip() differs: it also strips U+001C-U+001F and U+0085, and keeps U+FEFF.
ECMASCRIPT_WHITE_SPACE = (
    "\u0009\u000a\u000b\u000c\u000d\u0020\u00a0\u1680"
    + "".join(chr(code) for code in range(0x2000, 0x200B))
    + "\u2028\u2029\u202f\u205f\u3000\ufeff"
)


def normalize_email(raw_email):
    """email.trim().toLowerCase() as JavaScript computes it.

    str.lower() applies the same full lowercase mapping as toLowerCase(), Final_Sigma included (Python treats a
    scalar that is both cased and case-ignorable as ignorable, as ICU does); Scripts/differential.mjs checks this
    function against Node.
    """
    return raw_email.strip(ECMASCRIPT_WHITE_SPACE).lower()


def issue(state, raw_email, properties, now, lifetime):
    email = normalize_email(raw_email)
    expires_at = int(now) + lifetime
    if properties is None:
        payload = "v1\n%s\n%d\n%s" % (state.project_id, expires_at, email)
    else:
        payload = "v2\n%s\n%d\n%s\n%s" % (state.project_id, expires_at, email, canonical_properties(properties))
    signature = hmac.new(state.secret().encode("utf-8"), payload.encode("utf-8"), hashlib.sha256).hexdigest()
    credential = {"email": email, "expiresAt": expires_at, "signature": signature}
    if properties is not None:
        credential["properties"] = properties
    return credential


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    # Headers and body go out in separate writes; without TCP_NODELAY each response waits for a delayed ACK.
    disable_nagle_algorithm = True
    server_version = "IdentityBackend/1"

    def log_message(self, format, *args):
        pass

    def date_time_string(self, timestamp=None):
        # The Date header follows the backend's clock, simulated or not.
        if timestamp is None:
            timestamp = getattr(self, "backend_now", None)
        return super().date_time_string(timestamp)

    def send_json(self, status, body, cache_control="no-store", extra_headers=()):
        data = body if isinstance(body, bytes) else json.dumps(body).encode("utf-8")
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        if cache_control is not None:
            self.send_header("Cache-Control", cache_control)
        for name, value in extra_headers:
            self.send_header(name, value)
        self.end_headers()
        self.wfile.write(data)

    def session(self):
        authorization = self.headers.get("Authorization", "")
        if authorization.startswith("Bearer "):
            return SESSIONS.get(authorization[len("Bearer "):].strip())
        for part in self.headers.get("Cookie", "").split(";"):
            name, _, value = part.strip().partition("=")
            if name == "session":
                return SESSIONS.get(value)
        return None

    def do_POST(self):
        state = self.server.state
        url = urlparse(self.path)
        query = parse_qs(url.query)
        if url.path == "/admin/outage":
            with state.lock:
                state.outage = query.get("on", ["1"])[0] == "1"
                outage = state.outage
            self.send_json(200, {"outage": outage})
        elif url.path == "/admin/rotate":
            with state.lock:
                state.generation += 1
                generation = state.generation
            self.send_json(200, {"generation": generation})
        else:
            self.send_json(404, {"error": "not found"})

    def do_GET(self):
        state = self.server.state
        url = urlparse(self.path)
        query = parse_qs(url.query)
        if url.path == "/admin/generation":
            with state.lock:
                generation = state.generation
            self.send_json(200, {"generation": generation})
            return
        if url.path != "/identity":
            self.send_json(404, {"error": "not found"})
            return
        clock = self.headers.get("X-Demo-Clock")
        self.backend_now = int(clock) if clock is not None else time.time()
        mode = query.get("mode", [""])[0]
        if mode == "slow":
            time.sleep(float(query.get("delay", ["3"])[0]))
        with state.lock:
            outage = state.outage
        if outage:
            # A backend under maintenance tells its clients when to come back.
            self.send_json(503, {"error": "unavailable"}, extra_headers=[("Retry-After", "120")])
            return
        if mode == "status":
            extra = []
            if "retry" in query:
                extra.append(("Retry-After", query["retry"][0]))
            if "retry_date" in query:
                extra.append(("Retry-After", self.date_time_string(self.backend_now + int(query["retry_date"][0]))))
            error = query.get("error", ["requested status"])[0]
            self.send_json(int(query.get("code", ["500"])[0]), {"error": error}, extra_headers=extra)
            return
        if mode == "html":
            page = b"<html><body><h1>Forbidden</h1><p>Request blocked by the firewall.</p></body></html>"
            self.send_response(int(query.get("code", ["403"])[0]))
            self.send_header("Content-Type", "text/html")
            self.send_header("Content-Length", str(len(page)))
            self.end_headers()
            self.wfile.write(page)
            return
        if mode == "flaky":
            key = query.get("key", [""])[0]
            with state.lock:
                first = key not in state.flaky_seen
                state.flaky_seen.add(key)
            if first:
                self.send_json(500, {"error": "flaky"})
                return
        if mode == "redirect":
            self.send_json(302, {"error": "moved"}, extra_headers=[("Location", "/identity")])
            return
        if "application/json" not in self.headers.get("Accept", ""):
            self.send_json(406, {"error": "send Accept: application/json"})
            return
        session = self.session()
        if session is None:
            self.send_json(401, {"error": "unauthenticated"})
            return
        if mode == "malformed":
            self.send_json(200, b'{"email": "not-json-at-all", "expiresAt": ')
            return
        now = self.backend_now
        lifetime = int(query.get("lifetime", ["900"])[0])
        credential = issue(state, session[0], session[1], now, lifetime)
        cache_control = "private, max-age=60" if mode == "cacheable" else "no-store"
        self.send_json(200, credential, cache_control=cache_control)


def main():
    parser = argparse.ArgumentParser(description="Loopback verified-identity backend.")
    parser.add_argument("--port", type=int, default=0)
    loopback_server.add_arguments(parser)
    arguments = parser.parse_args()
    project_id = os.environ.get("APPNORTH_PROJECT_ID")
    secret = os.environ.get("APPNORTH_IDENTITY_SECRET")
    if not project_id or not secret:
        sys.stderr.write("Missing AppNorth identity configuration: set APPNORTH_PROJECT_ID and APPNORTH_IDENTITY_SECRET\n")
        return 2
    server = loopback_server.Server(("127.0.0.1", arguments.port), Handler)
    server.state = State(project_id, secret)
    return loopback_server.serve(server, arguments)


if __name__ == "__main__":
    sys.exit(main())
