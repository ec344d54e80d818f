#!/usr/bin/env bash
# Installs the real servers the network tests run the fetcher against (Tests/SessionEngineTests/Network/): nginx, a
# TLS and HTTP/2 front, and tinyproxy, a forward proxy that tunnels with CONNECT; openssl, which makes the tests'
# private certificate authority, too; objdump (binutils), which CI's scan of the release binaries reads
# (Scripts/check-thread-ids.py); and redis-server with hiredis 0.14 (libhiredis0.14), the server and the client
# library the fleet's coordinator on Redis is tested with (Tests/SessionEngineTests/Redis/). Each comes from the distribution's packages (Debian's apt-get) and only when its
# command is missing, so a second run does nothing and exits 0. Needs root for apt-get; where apt-get is not there it
# says what is missing and exits 0: the tests then skip with a printed reason instead of failing.
#
#   Scripts/install-test-servers.sh
set -euo pipefail

declare -A packages=([nginx]=nginx [tinyproxy]=tinyproxy [openssl]=openssl [objdump]=binutils
    [redis-server]=redis-server)
missing=()
for command in nginx tinyproxy openssl objdump redis-server; do
    # nginx and tinyproxy live in /usr/sbin, which is not on every PATH.
    if ! command -v "$command" >/dev/null && [ ! -x "/usr/sbin/$command" ]; then
        missing+=("${packages[$command]}")
    fi
done
# hiredis is a library, loaded at run time by name: look for that name.
if ! /sbin/ldconfig -p 2>/dev/null | grep "libhiredis.so.0.14 " >/dev/null; then
    missing+=(libhiredis0.14)
fi
if [ ${#missing[@]} -eq 0 ]; then
    echo "test servers: nginx, tinyproxy, openssl, objdump, redis-server and hiredis 0.14 are installed"
    exit 0
fi
if ! command -v apt-get >/dev/null; then
    echo "test servers: ${missing[*]} missing and apt-get is not there; the network tests will skip" >&2
    exit 0
fi
echo "test servers: installing ${missing[*]}"
export DEBIAN_FRONTEND=noninteractive
apt-get update -qq
# RUNLEVEL=1 keeps the packages' scripts from starting the system-wide services: the tests start their own servers,
# on ports of their own, and stop them.
RUNLEVEL=1 apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
for command in nginx tinyproxy redis-server; do
    [ -x "/usr/sbin/$command" ] || command -v "$command" >/dev/null || { echo "test servers: $command did not install" >&2; exit 1; }
done
echo "test servers: installed ${missing[*]}"
