#!/usr/bin/env bash
# Transport security against real servers configured for it, for
# test_transport: a throwaway CA (tls_ca.sh) and a server of the test's own on
# other ports, on 127.0.0.1 only. Every server this script starts is stopped
# on exit, whatever happened.
#   transport.sh kafka|pg|redis DIR BINDIR
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
    "$here/kafka_sasl.sh" "$dir" start >&2 || exit 1
    cleanups+=("'$here/kafka_sasl.sh' '$dir' stop")
    sec=(-X kafka.brokers=127.0.0.1:19292 -X kafka.rdkafka.security.protocol=SASL_SSL
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
*)
    echo "usage: transport.sh kafka|pg|redis DIR BINDIR" >&2
    exit 64
    ;;
esac
