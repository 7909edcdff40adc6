#!/usr/bin/env bash
# Real Smokescreen on loopback, for test_smokescreen: an upstream HTTP server
# and Smokescreen (built by scripts/peers/smokescreen) with the ACL
# collector/decoders/smokescreen.yaml as an HTTPS proxy, each on a free port
# of 127.0.0.1, whose clients' roles come from their certificates, allowed,
# refused and report-mode requests through it with curl, then Smokescreen
# stopped so that its log is complete.
#   smokescreen.sh DIR TOKEN     writes DIR/smokescreen.log
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
dir=$1
token=$2
smokescreen=$root/.local/bin/smokescreen
read -r port up < <(python3 "$root/tests/integration/free_port.py" 2)

if [ ! -x "$smokescreen" ]; then
    echo "smokescreen.sh: $smokescreen is missing: run scripts/setup" >&2
    exit 1
fi
if ! command -v openssl >/dev/null; then
    echo "smokescreen.sh: openssl is missing" >&2
    exit 1
fi

rm -rf "$dir"
mkdir -p "$dir/www" "$dir/pki"
echo "hello from loopback" >"$dir/www/index.html"
# a body larger than any header block, so that bytes_in shows it went through
head -c 5000 /dev/zero | tr '\0' 'x' >"$dir/www/big.txt"

# A CA, Smokescreen's server certificate, and one client certificate per
# role: the Common Name is the role, which the decoder reads as task/run.
pki=$dir/pki
key()
{
    openssl genpkey -algorithm EC -pkeyopt ec_paramgen_curve:P-256 -out "$1" 2>/dev/null
}
key "$pki/ca.key"
openssl req -x509 -new -key "$pki/ca.key" -out "$pki/ca.pem" -days 1 \
    -subj "/CN=sandtrail test agents CA" 2>/dev/null
cert() # name subject extension
{
    key "$pki/$1.key"
    openssl req -new -key "$pki/$1.key" -subj "$2" -out "$pki/$1.csr" 2>/dev/null
    printf '%s\n' "$3" >"$pki/$1.ext"
    openssl x509 -req -in "$pki/$1.csr" -CA "$pki/ca.pem" -CAkey "$pki/ca.key" \
        -CAcreateserial -days 1 -extfile "$pki/$1.ext" -out "$pki/$1.pem" 2>/dev/null
}
cert server "/CN=127.0.0.1" "subjectAltName=IP:127.0.0.1"
cat "$pki/server.pem" "$pki/server.key" >"$pki/server-bundle.pem"
cert enforce "/CN=T-SM\/run-sm" "extendedKeyUsage=clientAuth"
cert report "/CN=T-RP\/run-rp" "extendedKeyUsage=clientAuth"
cert unlisted "/CN=T-XX\/run-xx" "extendedKeyUsage=clientAuth"
# the enforce role's policy, the run named by the OU (one ACL for all runs)
cert shared "/OU=T-OU\/run-ou/CN=T-SM\/run-sm" "extendedKeyUsage=clientAuth"

sed -e "s|@ENFORCE_ROLE@|T-SM/run-sm|g" -e "s|@REPORT_ROLE@|T-RP/run-rp|g" \
    "$root/collector/decoders/smokescreen.yaml" >"$dir/acl.yaml"

python3 -m http.server "$up" --bind 127.0.0.1 --directory "$dir/www" \
    >"$dir/upstream.log" 2>&1 &
upstream=$!
"$smokescreen" --listen-ip 127.0.0.1 --listen-port "$port" \
    --egress-acl-file "$dir/acl.yaml" \
    --tls-server-bundle-file "$pki/server-bundle.pem" \
    --tls-client-ca-file "$pki/ca.pem" \
    --allow-address "127.0.0.1:$up" \
    >"$dir/smokescreen.log" 2>&1 &
smk=$!
cleanup()
{
    kill "$upstream" 2>/dev/null || true
    kill -KILL "$smk" 2>/dev/null || true
}
trap cleanup EXIT

# ready when both accept a connection (a bare TCP probe: Smokescreen logs
# the aborted TLS handshake as a plain message, which is not an event)
listening() { (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; }
for _ in $(seq 1 100); do
    listening "$port" && listening "$up" && break
    kill -0 "$smk" 2>/dev/null || { cat "$dir/smokescreen.log" >&2; exit 1; }
    sleep 0.1
done

trace=4bf92f3577b34da6a3ce929d0e0e4736
u=http://127.0.0.1:$up
# want CODES ROLE CURL-ARGS...: one request through Smokescreen as ROLE (the
# client certificate, "-" for none); CODES is what curl saw, the HTTP status
# and the answer to the CONNECT ("000" where there was none)
want()
{
    local codes=$1 role=$2 got
    shift 2
    local as=()
    [ "$role" = - ] || as=(--proxy-cert "$pki/$role.pem" --proxy-key "$pki/$role.key")
    got=$(curl -s -o /dev/null --max-time 5 -w '%{http_code}/%{http_connect}' \
        -x "https://127.0.0.1:$port" --proxy-cacert "$pki/ca.pem" \
        "${as[@]}" "$@" || true)
    if [ "$got" != "$codes" ]; then
        echo "smokescreen.sh: curl $* as $role: got $got, want $codes" >&2
        exit 1
    fi
}
# plain HTTP: the trace header rides on the request; CONNECT (-p tunnels
# plain HTTP, so the upstream needs no TLS): on the CONNECT itself
http=(-H "X-Smokescreen-Trace-ID: $trace")
tunnel=(-p --proxy-header "X-Smokescreen-Trace-ID: $trace")

# enforce role T-SM/run-sm
want 200/000 enforce "${http[@]}" "$u/index.html"           # allowed
want 407/000 enforce "${http[@]}" http://blocked.invalid/up  # not in allowlist
want 200/200 enforce "${tunnel[@]}" "$u/big.txt"             # allowed tunnel
want 000/407 enforce "${tunnel[@]}" https://blocked.invalid/ # refused CONNECT
want 407/000 enforce "${http[@]}" http://x.evil.example/     # global deny list
# the trace header is the one value set by the client that Smokescreen
# logs: a token put there reaches the log
want 200/000 enforce -H "X-Smokescreen-Trace-ID: $token" "$u/"
# the enforce role again, from a certificate whose OU is T-OU/run-ou
want 200/000 shared "${http[@]}" "$u/index.html"             # allowed
# report role T-RP/run-rp: 127.0.0.1 is outside its allowlist
want 200/000 report "${http[@]}" "$u/index.html"             # would deny, allowed
want 200/200 report "${tunnel[@]}" "$u/big.txt"              # would deny, tunnel
want 407/000 report "${http[@]}" http://x.evil.example/      # deny list still refuses
# a certificate whose role the ACL does not list, and no certificate
want 407/000 unlisted "${http[@]}" "$u/index.html"           # default rule
want 407/000 - "${http[@]}" "$u/index.html"                  # no role

# SIGTERM: Smokescreen waits for its connections to close, then exits
kill -TERM "$smk"
for _ in $(seq 1 100); do
    kill -0 "$smk" 2>/dev/null || break
    sleep 0.1
done
if kill -0 "$smk" 2>/dev/null; then
    echo "smokescreen.sh: smokescreen did not stop within 10 s" >&2
    exit 1
fi
wait "$smk" 2>/dev/null || true
grep -q CANONICAL-PROXY-DECISION "$dir/smokescreen.log"
