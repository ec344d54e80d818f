#!/usr/bin/env bash
# Runs the demo's scenario against the loopback backend behind nginx over TLS with a private authority, with nginx's
# own Date header: nginx writes its clock (real time) into every response while the backend signs on the demo's
# simulated clock, so the offset the Date header implies contradicts every credential. The engine must keep that
# offset out and pass the four Verify checks.
#
#   Scripts/check-demo-behind-nginx.sh [DEMO]    # DEMO: the demo binary (default: built with `swift build`)
#
# Needs nginx and openssl (Scripts/install-test-servers.sh installs them). Bounded: every wait has a limit, and the
# servers stop with this script.
set -euo pipefail
cd "$(dirname "$0")/.."

nginx=$(command -v nginx || echo /usr/sbin/nginx)
[ -x "$nginx" ] || { echo "nginx is not installed (Scripts/install-test-servers.sh installs it)" >&2; exit 1; }
demo=${1:-}
if [ -z "$demo" ]; then
    swift build --product SessionEngineDemo >/dev/null
    demo="$(swift build --show-bin-path)/SessionEngineDemo"
fi
work=$(mktemp -d)
cleanup() {
    [ -f "$work/nginx.pid" ] && kill "$(cat "$work/nginx.pid")" 2>/dev/null || true
    exec 3>&- 2>/dev/null || true
}
trap cleanup EXIT

export APPNORTH_PROJECT_ID=proj_demo
secret="demo-nginx-check-$(od -An -N8 -tx8 /dev/urandom | tr -d ' ')"

# A private authority and a certificate for 127.0.0.1 signed by it.
openssl req -x509 -newkey rsa:2048 -nodes -days 2 -subj "/CN=SessionEngine demo CA" \
    -keyout "$work/ca.key" -out "$work/ca.pem" 2>/dev/null
openssl req -newkey rsa:2048 -nodes -subj "/CN=127.0.0.1" -keyout "$work/server.key" -out "$work/server.csr" \
    2>/dev/null
printf 'subjectAltName=IP:127.0.0.1,DNS:localhost\n' >"$work/san.ext"
openssl x509 -req -in "$work/server.csr" -CA "$work/ca.pem" -CAkey "$work/ca.key" -CAcreateserial -days 2 \
    -extfile "$work/san.ext" -out "$work/server.pem" 2>/dev/null

# The backend stops when its standard input closes, that is when this script exits.
exec 3> >(APPNORTH_IDENTITY_SECRET=$secret exec python3 Tests/SessionEngineTests/Fixtures/backend/identity_backend.py \
    --exit-on-stdin-eof >"$work/port" 2>"$work/backend.log")
for _ in $(seq 1 100); do [ -s "$work/port" ] && break; sleep 0.1; done
backend=$(head -1 "$work/port")
[ -n "$backend" ] || { echo "the loopback backend did not start" >&2; exit 1; }

# nginx on a free port: try a few, as another process may take one between the choice and the bind.
mkdir -p "$work/logs"
for attempt in 1 2 3 4 5; do
    port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
    cat >"$work/nginx.conf" <<CONF
worker_processes 1;
pid $work/nginx.pid;
error_log $work/logs/error.log;
events {}
http {
    access_log $work/logs/access.log;
    client_body_temp_path $work/body; proxy_temp_path $work/proxy; fastcgi_temp_path $work/fastcgi;
    uwsgi_temp_path $work/uwsgi; scgi_temp_path $work/scgi;
    server {
        listen 127.0.0.1:$port ssl http2;
        ssl_certificate $work/server.pem;
        ssl_certificate_key $work/server.key;
        location / { proxy_pass http://127.0.0.1:$backend; }
    }
}
CONF
    "$nginx" -p "$work" -c "$work/nginx.conf" -g 'daemon on;' 2>>"$work/logs/start.log" && break
    [ "$attempt" -lt 5 ] || { echo "nginx did not start:" >&2; cat "$work/logs/start.log" >&2; exit 1; }
done
for _ in $(seq 1 50); do [ -s "$work/nginx.pid" ] && break; sleep 0.1; done

url="https://127.0.0.1:$port/identity"
if ! APPNORTH_IDENTITY_SECRET=$secret timeout 120 "$demo" --backend "$url" --ca-file "$work/ca.pem" \
    >"$work/demo.log" 2>&1; then
    echo "the demo behind nginx failed:" >&2
    tail -n 30 "$work/demo.log" >&2
    exit 1
fi
if grep -q "WARNING: ThreadSanitizer" "$work/demo.log"; then
    echo "the thread sanitizer reported a race in the demo" >&2
    exit 1
fi
if grep -q "$secret" "$work/demo.log"; then
    echo "a secret reached the demo's output" >&2
    exit 1
fi
grep -q "HTTP/2.0\" 200" "$work/logs/access.log" || { echo "nginx served no request over HTTP/2" >&2; exit 1; }
echo "demo behind nginx (TLS with a private authority, HTTP/2, nginx's own Date): $(grep -c '^VERIFY [0-9] PASS' \
    "$work/demo.log") of 4 Verify checks passed"
