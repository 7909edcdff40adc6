#!/usr/bin/env bash
# One message failed for good, then Kafka back, for test_http_abuse: a Kafka
# broker of the test's own (on free ports, stopped and started by
# scripts/services, leaving the shared broker alone) and
# sandtrail-collector --listen without a spool, kafka.delivery.timeout.ms
# 3000. One request while Kafka is up, one while it is down (its messages
# fail for good), then requests until one is answered 200 once Kafka is
# back (at most 90 s).
#   http_recover.sh DIR COLLECTOR
# prints key=value lines: before, during, after (HTTP codes), tries,
# after_id (the event id of the request answered after) and in_topic (1
# when that event is in Kafka)
# Ports: ST_KAFKA_PORT, ST_KAFKA_CONTROLLER_PORT, ST_HTTP_PORT (the test
# gives them from world_free_ports), else free ones (free_port.py).
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
dir=$1
collector=$2
if [ -z "${ST_KAFKA_PORT:-}" ] || [ -z "${ST_KAFKA_CONTROLLER_PORT:-}" ] || [ -z "${ST_HTTP_PORT:-}" ]; then
    read -r ST_KAFKA_PORT ST_KAFKA_CONTROLLER_PORT ST_HTTP_PORT \
        < <(python3 "$root/tests/integration/free_port.py" 3)
fi
export SANDTRAIL_RUN=$dir/run SANDTRAIL_KAFKA_PORT=$ST_KAFKA_PORT
export SANDTRAIL_KAFKA_CONTROLLER_PORT=$ST_KAFKA_CONTROLLER_PORT
brokers=127.0.0.1:$ST_KAFKA_PORT
url=http://127.0.0.1:$ST_HTTP_PORT/v1/events
token=recover-token-0123456789
topic=recover.events

svc() { "$root/scripts/services" "$@" 2>>"$dir/services.log" >/dev/null; }
rm -rf "$dir"
mkdir -p "$dir"
collector_pid=
cleanup()
{
    [ -n "$collector_pid" ] && kill "$collector_pid" 2>/dev/null || true
    svc stop kafka || true
}
trap cleanup EXIT

svc start kafka
echo "$token sandbox sbx-recover" >"$dir/tokens"
"$collector" --listen "127.0.0.1:$ST_HTTP_PORT" -X http.tokens_file="$dir/tokens" \
    -X kafka.brokers="$brokers" -X kafka.topic.events=$topic -X kafka.topic.dlq=recover.dlq \
    -X kafka.delivery.timeout.ms=3000 2>"$dir/collector.log" &
collector_pid=$!
for _ in $(seq 1 100); do
    [ "$(curl -s -o /dev/null -w '%{http_code}' -X POST "$url")" = 401 ] && break
    sleep 0.1
done
kill -0 $collector_pid 2>/dev/null || { cat "$dir/collector.log" >&2; exit 1; }

post()
{
    printf '{"schema":"sandtrail.event.v1","event_id":"%s","ts":"2026-11-29T15:00:00Z","source":{"kind":"sandbox","name":"sbx-recover"},"task_id":"T-R","run_id":"run-r","type":"exec","attrs":{"command":"make test"}}\n' "$1" |
        curl -s -o "$dir/answer" -w '%{http_code}' --max-time 30 \
            -H "Authorization: Bearer $token" --data-binary @- "$url" || true
}
echo "before=$(post r-before)"
svc stop kafka
echo "during=$(post r-during)"
svc start kafka
code=
tries=0
for i in $(seq 1 45); do
    tries=$i
    code=$(post "r-after-$i")
    [ "$code" = 200 ] && break
    sleep 2
done
echo "after=$code"
echo "tries=$tries"
echo "after_id=r-after-$tries"
if kcat -C -b "$brokers" -t $topic -e -q -f '%s\n' 2>/dev/null | grep -q "\"r-after-$tries\""; then
    echo "in_topic=1"
else
    echo "in_topic=0"
fi
