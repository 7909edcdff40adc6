#!/usr/bin/env bash
# Real Squid on loopback, for test_squid: an upstream HTTP server and Squid
# with collector/decoders/squid.conf, each on a free port of 127.0.0.1,
# allowed and refused requests through it with curl, then Squid stopped so
# that its log is complete.
#   squid.sh DIR TOKEN     writes DIR/access.json
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
dir=$1
token=$2
read -r sport uport < <(python3 "$root/tests/integration/free_port.py" 2)
rm -rf "$dir"
mkdir -p "$dir/www"
echo "hello from loopback" >"$dir/www/index.html"
sed -e "s|@DIR@|$dir|g" -e "s|@PORT@|$sport|g" -e "s|@UPSTREAM_PORT@|$uport|g" \
    "$root/collector/decoders/squid.conf" >"$dir/squid.conf"
# Squid drops root for its own user, which must be able to write here
chown -R proxy "$dir" 2>/dev/null || true

python3 -m http.server "$uport" --bind 127.0.0.1 --directory "$dir/www" \
    >"$dir/upstream.log" 2>&1 &
upstream=$!
squid -N -f "$dir/squid.conf" >"$dir/squid.out" 2>&1 &
squidpid=$!
cleanup()
{
    kill "$upstream" 2>/dev/null || true
    kill "$squidpid" 2>/dev/null || true
}
trap cleanup EXIT
# the upstream first, directly (Squid logs nothing of it; -f: only its
# page ends the wait), then Squid: its first answer, whatever it is, ends
# that wait, and is the one line of the probe in its log (test_squid
# counts it: a probe retried after an answer would log two)
for _ in $(seq 1 50); do
    curl -sf -o /dev/null --max-time 1 --noproxy '*' http://127.0.0.1:$uport/ && break
    sleep 0.2
done
for _ in $(seq 1 50); do
    curl -s -o /dev/null --max-time 5 -x http://127.0.0.1:$sport -H "X-Task-Id: T-PROBE" \
        http://127.0.0.1:$uport/ && break
    sleep 0.2
done

proxy=(-s -o /dev/null --max-time 5 -x http://127.0.0.1:$sport)
hdr=(-H "X-Task-Id: T-SQ" -H "X-Run-Id: run-sq"
     -H "traceparent: 00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01")
curl "${proxy[@]}" "${hdr[@]}" http://127.0.0.1:$uport/index.html              # allowed
curl "${proxy[@]}" "${hdr[@]}" http://blocked.invalid/upload                    # not in allowlist
curl "${proxy[@]}" "${hdr[@]}" http://x.evil.example/                           # blocklist
# Squid strips query terms from the URL it logs; a token in a logged header
# is what reaches the collector
curl "${proxy[@]}" "${hdr[@]}" -A "agent/1.0 $token" http://127.0.0.1:$uport/    # allowed, leaks a token
curl "${proxy[@]}" "${hdr[@]}" -A $'agent\t1.0\x01' http://127.0.0.1:$uport/     # control bytes in a header
curl "${proxy[@]}" "${hdr[@]}" http://127.0.0.1:22/                             # port not allowed

kill "$squidpid"
wait "$squidpid" 2>/dev/null || true
test -s "$dir/access.json"
