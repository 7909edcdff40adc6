#!/usr/bin/env bash
# Transport security against real servers configured for it, for
# test_transport: a throwaway CA (tls_ca.sh) and a server of the test's own on
# free ports (free_port.py), on 127.0.0.1 only. Every server this script starts is stopped
# on exit, whatever happened.
#   transport.sh kafka|pg|redis|https DIR BINDIR
# The world's settings come from the environment (SANDTRAIL_PG_DSN,
# SANDTRAIL_TOPIC_*, SANDTRAIL_GROUP, SANDTRAIL_REDIS_PREFIX, ...). Prints
# key=value lines: NAME_status (exit status of a run) and NAME_said=1 when its
# stderr holds the message expected of it (0 otherwise); counts where named.
set -uo pipefail
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
what=$1
dir=$2
bin=$3
collector=$bin/collector/sandtrail-collector
analyzer=$bin/analyzer/sandtrail-analyzer
events=$dir/events.ndjson

rm -rf "$dir"
mkdir -p "$dir"
"$here/tls_ca.sh" "$dir" || { echo "tls_ca.sh failed" >&2; exit 1; }
# fourteen valid events of the demo
head -n 14 "$root/tests/data/demo.ndjson" >"$events"

# run NAME EXPECTED-TEXT COMMAND...: NAME_status and NAME_said; stderr kept
# in DIR/NAME.log
run()
{
    local name=$1 expect=$2
    shift 2
    timeout 60 "$@" >"$dir/$name.out" 2>"$dir/$name.log" </dev/null
    echo "${name}_status=$?"
    if [ -n "$expect" ]; then
        grep -qF -- "$expect" "$dir/$name.log" && echo "${name}_said=1" || echo "${name}_said=0"
    fi
}

cleanups=()
cleanup()
{
    local i
    for ((i = ${#cleanups[@]} - 1; i >= 0; i--)); do eval "${cleanups[i]}" || true; done
}
trap cleanup EXIT

case $what in
kafka)
    cleanups+=("'$here/kafka_sasl.sh' '$dir' stop")
    "$here/kafka_sasl.sh" "$dir" start >&2 || exit 1
    sec=(-X kafka.brokers="127.0.0.1:$(cat "$dir/kafka/port")" -X kafka.rdkafka.security.protocol=SASL_SSL
        -X kafka.rdkafka.sasl.mechanisms=SCRAM-SHA-512 -X kafka.rdkafka.sasl.username=sandtrail
        -X kafka.sasl.password_file="$dir/kafka.password"
        -X kafka.rdkafka.ssl.ca.location="$dir/ca.crt")
    echo "not-the-password" >"$dir/wrong.password"
    run produce "" "$collector" "${sec[@]}" --input "$events"
    run consume "" "$analyzer" "${sec[@]}" --drain -X drain.assign_timeout_ms=20000
    # refused, each with librdkafka's or the broker's own words, never retried
    # without TLS or SASL
    run unknown 'No such configuration property: "sasl.pasword"' \
        "$collector" "${sec[@]}" -X kafka.rdkafka.sasl.pasword=x --input "$events"
    run wrong_password "SASL authentication error" \
        "$collector" "${sec[@]}" -X kafka.sasl.password_file="$dir/wrong.password" --input "$events"
    run wrong_ca "certificate verify failed" \
        "$collector" "${sec[@]}" -X kafka.rdkafka.ssl.ca.location="$dir/other-ca.crt" --input "$events"
    run missing_ca "ssl.ca.location failed" \
        "$collector" "${sec[@]}" -X kafka.rdkafka.ssl.ca.location="$dir/absent.crt" --input "$events"
    run analyzer_wrong_password "SASL authentication error" \
        "$analyzer" "${sec[@]}" -X kafka.sasl.password_file="$dir/wrong.password" --drain
    run analyzer_wrong_ca "certificate verify failed" \
        "$analyzer" "${sec[@]}" -X kafka.rdkafka.ssl.ca.location="$dir/other-ca.crt" --drain
    # the password is in no message
    echo "password_logged=$(cat "$dir"/*.log | grep -cF -- "$(cat "$dir/kafka.password")")"
    ;;
pg)
    # a PostgreSQL of the test's own: TLS only (hostssl), scram-sha-256, a
    # role with a password owning its database
    pgbin=/usr/lib/postgresql/15/bin
    port=$(python3 "$here/free_port.py")
    pd=$dir/pg
    mkdir -p "$pd"
    if [ "$(id -u)" -eq 0 ]; then
        pguser=sandtrail
        id "$pguser" >/dev/null 2>&1 ||
            useradd --system --no-create-home --shell /usr/sbin/nologin "$pguser"
        as_pg() { runuser -u "$pguser" -- "$@"; }
    else
        pguser=$(id -un)
        as_pg() { "$@"; }
    fi
    head -c 18 /dev/urandom | base64 | tr -d '/+=' >"$pd/su.pw"
    cp "$dir/server.crt" "$dir/server.key" "$pd/"
    chmod 600 "$pd/server.key" "$pd/su.pw"
    chown -R "$pguser" "$pd"
    as_pg "$pgbin/initdb" -D "$pd/data" -U "$pguser" --auth=scram-sha-256 \
        --pwfile="$pd/su.pw" -E UTF8 --locale=C.UTF-8 >"$pd/initdb.log" 2>&1 ||
        { cat "$pd/initdb.log" >&2; exit 1; }
    # TLS or nothing: no "host" line, so a plaintext connection has no entry
    echo "hostssl all all 127.0.0.1/32 scram-sha-256" >"$pd/data/pg_hba.conf"
    cleanups+=("as_pg '$pgbin/pg_ctl' -D '$pd/data' -m immediate -w stop >/dev/null 2>&1")
    as_pg "$pgbin/pg_ctl" -D "$pd/data" -l "$pd/server.log" -w -t 60 -o \
        "-c listen_addresses=127.0.0.1 -c port=$port -c unix_socket_directories='' -c ssl=on -c ssl_cert_file=$pd/server.crt -c ssl_key_file=$pd/server.key -c fsync=off -c max_connections=20" \
        start >/dev/null || { tail -n 20 "$pd/server.log" >&2; exit 1; }
    tls="host=127.0.0.1 port=$port sslmode=verify-full sslrootcert=$dir/ca.crt"
    app_pw=app-$(head -c 12 /dev/urandom | base64 | tr -d '/+=')
    PGPASSWORD=$(cat "$pd/su.pw") "$pgbin/psql" "$tls user=$pguser dbname=postgres" -qAt \
        -c "CREATE ROLE st_app LOGIN PASSWORD '$app_pw'" -c "CREATE DATABASE st OWNER st_app" ||
        exit 1
    (umask 077 && echo "127.0.0.1:$port:st:st_app:$app_pw" >"$dir/pgpass" &&
        echo "127.0.0.1:$port:st:st_app:not-$app_pw" >"$dir/wrong.pgpass")
    dsn="$tls dbname=st user=st_app passfile=$dir/pgpass"
    # events through the shared Kafka (the world's topic) into this server
    run produce "" "$collector" --input "$events"
    run consume "" "$analyzer" --drain -X pg.dsn="$dsn"
    echo "events=$("$pgbin/psql" "$dsn" -qAtc 'SELECT count(*) FROM events')"
    echo "ssl=$("$pgbin/psql" "$dsn" -qAtc 'SELECT ssl FROM pg_stat_ssl WHERE pid = pg_backend_pid()')"
    run wrong_ca "certificate verify failed" \
        "$analyzer" --drain -X pg.dsn="$dsn sslrootcert=$dir/other-ca.crt"
    run missing_ca "root certificate file" \
        "$analyzer" --drain -X pg.dsn="$dsn sslrootcert=$dir/absent.crt"
    run wrong_password "password authentication failed" \
        "$analyzer" --drain -X pg.dsn="$dsn passfile=$dir/wrong.pgpass"
    run plaintext "no encryption" "$analyzer" --drain -X pg.dsn="$dsn sslmode=disable"
    # a password in the DSN is in no message, even when libpq quotes the
    # part of a URI it cannot read
    secret=Secret-$RANDOM$RANDOM
    run inline_password "password authentication failed" \
        "$analyzer" --drain -X pg.dsn="$tls dbname=st user=st_app password=$secret"
    run bad_uri "invalid connection string" "$analyzer" --drain \
        -X pg.dsn="postgresql://st_app:$secret%zz@127.0.0.1:$port/st?sslmode=verify-full"
    echo "password_logged=$(cat "$dir"/*.log | grep -cF -e "$secret" -e "$app_pw")"
    ;;
redis)
    # a Redis of the test's own with an ACL user (the default user off),
    # reached through a TLS tunnel: stunnel in front of it (server) and one
    # on the analyzer's side (client), both on loopback; hiredis 0.14 has
    # no TLS of its own
    read -r rport sport cport badport < <(python3 "$here/free_port.py" 4)
    stunnel=$(command -v stunnel4 || command -v stunnel) || { echo "stunnel4 not installed: scripts/setup" >&2; exit 1; }
    rpw=redis-$(head -c 12 /dev/urandom | base64 | tr -d '/+=')
    (umask 077 && echo "$rpw" >"$dir/redis.password")
    redis-server --bind 127.0.0.1 --port $rport --save "" --appendonly no --dir "$dir" \
        --user default off --user sandtrail on ">$rpw" "~*" "&*" "+@all" \
        >"$dir/redis-server.log" 2>&1 </dev/null &
    cleanups+=("kill $!")
    tunnel() # NAME ACCEPT CONNECT [client options...]
    {
        local name=$1 accept=$2 connect=$3
        shift 3
        {
            printf '%s\n' "foreground = yes" "pid =" "[redis]" "accept = 127.0.0.1:$accept" \
                "connect = 127.0.0.1:$connect" "$@"
        } >"$dir/$name.conf"
        "$stunnel" "$dir/$name.conf" >"$dir/$name.log" 2>&1 </dev/null &
        cleanups+=("kill $!")
    }
    tunnel stunnel-server $sport $rport "cert = $dir/server.crt" "key = $dir/server.key"
    tunnel stunnel-client $cport $sport "client = yes" "CAfile = $dir/ca.crt" \
        "verifyChain = yes" "checkIP = 127.0.0.1"
    tunnel stunnel-wrong-ca $badport $sport "client = yes" "CAfile = $dir/other-ca.crt" \
        "verifyChain = yes" "checkIP = 127.0.0.1"
    for _ in $(seq 1 50); do
        redis-cli -p $cport --user sandtrail --pass "$rpw" --no-auth-warning ping 2>/dev/null |
            grep -q PONG && break
        sleep 0.1
    done
    run produce "" "$collector" --input "$events"
    run consume "" "$analyzer" --drain -X redis.url=redis://sandtrail@127.0.0.1:$cport/0 \
        -X redis.password_file="$dir/redis.password"
    echo "keys=$(redis-cli -p $rport --user sandtrail --pass "$rpw" --no-auth-warning \
        --scan --pattern "${SANDTRAIL_REDIS_PREFIX}*" | wc -l)"
    run url_password "" "$analyzer" --drain \
        -X redis.url="redis://sandtrail:$rpw@127.0.0.1:$cport/0"
    run wrong_password "WRONGPASS" "$analyzer" --drain \
        -X redis.url="redis://sandtrail:not-$rpw@127.0.0.1:$cport/0"
    run no_login "NOAUTH" "$analyzer" --drain -X redis.url=redis://127.0.0.1:$cport/0
    run wrong_ca "could not log in to Redis" "$analyzer" --drain \
        -X redis.url=redis://sandtrail@127.0.0.1:$badport/0 \
        -X redis.password_file="$dir/redis.password"
    grep -q "certificate verify failed" "$dir/stunnel-wrong-ca.log" &&
        echo "tunnel_refused_ca=1" || echo "tunnel_refused_ca=0"
    run bad_url "bad port" "$analyzer" --drain -X redis.url="redis://sandtrail:$rpw@127.0.0.1:0/0"
    # the alerter's throttle logs in the same way (redis.password_file or
    # the URL's user:password), and a refused login stops it at start
    alerter=$bin/alerter/sandtrail-alerter
    hook=(-X alert.webhook.url=http://127.0.0.1:9/hook -X alert.retry.max_attempts=1)
    run alerter_login "" "$alerter" --drain "${hook[@]}" \
        -X redis.url=redis://sandtrail@127.0.0.1:$cport/0 \
        -X redis.password_file="$dir/redis.password"
    echo "alerter_unthrottled=$(grep -c "not throttling" "$dir/alerter_login.log")"
    run alerter_url_password "" "$alerter" --drain "${hook[@]}" \
        -X redis.url="redis://sandtrail:$rpw@127.0.0.1:$cport/0"
    echo "alerter_url_unthrottled=$(grep -c "not throttling" "$dir/alerter_url_password.log")"
    run alerter_wrong_password "WRONGPASS" "$alerter" --drain "${hook[@]}" \
        -X redis.url="redis://sandtrail:not-$rpw@127.0.0.1:$cport/0"
    echo "password_logged=$(cat "$dir"/*.log | grep -cF -e "$rpw")"
    ;;
https)
    # the collector's listener with a certificate of the throwaway CA
    port=$(python3 "$here/free_port.py")
    url=https://127.0.0.1:$port/v1/events
    # the sandbox's token, and tokens of the same source bound to a pattern
    # of task ids (the batch's events are of task T-H)
    tokens=$dir/tokens
    { cat "$root/tests/data/http/tokens.txt"
      echo "task-h-token-0123456789 sandbox sbx-a T-H*"
      echo "task-x-token-0123456789 sandbox sbx-a T-X* # another task"
    } >"$tokens"
    body=$root/tests/data/http/batch.ndjson
    "$collector" --listen 127.0.0.1:$port -X http.tokens_file="$tokens" \
        -X http.tls_cert_file="$dir/server.crt" -X http.tls_key_file="$dir/server.key" \
        2>"$dir/listener.log" </dev/null &
    pid=$!
    cleanups+=("kill $pid 2>/dev/null")
    for _ in $(seq 1 100); do
        [ "$(curl -s -o /dev/null -w '%{http_code}' --cacert "$dir/ca.crt" -X POST "$url")" = 401 ] &&
            break
        sleep 0.1
    done
    echo "post=$(curl -s -w ' %{http_code}' --cacert "$dir/ca.crt" \
        -H 'Authorization: Bearer sbx-a-token-0123456789' --data-binary @"$body" "$url")"
    for t in h x; do
        echo "task_$t=$(curl -s --cacert "$dir/ca.crt" -H "Authorization: Bearer task-$t-token-0123456789" \
            --data-binary @"$body" "$url")"
    done
    # plain HTTP to the same port: no answer, never served
    curl -s -o /dev/null -m 5 -H 'Authorization: Bearer sbx-a-token-0123456789' \
        --data-binary @"$body" "http://127.0.0.1:$port/v1/events"
    echo "plain_curl=$?"
    # a client that trusts another CA refuses the server (curl: 60)
    curl -s -o /dev/null -m 5 --cacert "$dir/other-ca.crt" -X POST "$url"
    echo "wrong_ca_curl=$?"
    kill -TERM $pid
    wait $pid
    echo "listener_status=$?"
    # a half configuration is refused at start
    run half "http.tls_cert_file and http.tls_key_file go together" \
        "$collector" --listen 127.0.0.1:$port -X http.tokens_file="$tokens" \
        -X http.tls_cert_file="$dir/server.crt"
    run missing_key "could not open http.tls_key_file" \
        "$collector" --listen 127.0.0.1:$port -X http.tokens_file="$tokens" \
        -X http.tls_cert_file="$dir/server.crt" -X http.tls_key_file="$dir/absent.key"
    ;;
*)
    echo "usage: transport.sh kafka|pg|redis|https DIR BINDIR" >&2
    exit 64
    ;;
esac
