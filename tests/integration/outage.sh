#!/usr/bin/env bash
# A Kafka outage under load, for test_outage: a Kafka broker of the test's
# own (on free ports, stopped and started by scripts/services, leaving the
# shared broker alone), sandtrail-collector --listen with a spool in front of
# it, and N events posted over HTTP by tests/integration/post_events.py at a
# steady rate. Once a fifth of them is acknowledged the broker is stopped
# for OUTAGE_S seconds, then started again; posting goes on throughout.
# At the end every message of the topic is read back and counted by
# event_id.
#   outage.sh DIR COLLECTOR [N] [OUTAGE_S]
# prints key=value lines: posted, ok, unavailable, conn_errors, rejected,
# acked_during_outage, spool_bytes_during_outage, messages, distinct,
# missing, collector_status
# Ports: ST_KAFKA_PORT, ST_KAFKA_CONTROLLER_PORT, ST_HTTP_PORT,
# ST_METRICS_PORT (the test gives them from world_free_ports), else free
# ones (free_port.py).
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
dir=$1
collector=$2
n=${3:-100000}
outage_s=${4:-30}
if [ -z "${ST_KAFKA_PORT:-}" ] || [ -z "${ST_KAFKA_CONTROLLER_PORT:-}" ] ||
    [ -z "${ST_HTTP_PORT:-}" ] || [ -z "${ST_METRICS_PORT:-}" ]; then
    read -r ST_KAFKA_PORT ST_KAFKA_CONTROLLER_PORT ST_HTTP_PORT ST_METRICS_PORT \
        < <(python3 "$root/tests/integration/free_port.py" 4)
fi
export SANDTRAIL_RUN=$dir/run SANDTRAIL_KAFKA_PORT=$ST_KAFKA_PORT
export SANDTRAIL_KAFKA_CONTROLLER_PORT=$ST_KAFKA_CONTROLLER_PORT
brokers=127.0.0.1:$ST_KAFKA_PORT
http=127.0.0.1:$ST_HTTP_PORT
metrics=127.0.0.1:$ST_METRICS_PORT
topic=outage.events
token=outage-token-0123456789

svc() { "$root/scripts/services" "$@" 2>>"$dir/services.log"; }
metric() { curl -s "http://$metrics/metrics" | awk -v m="$1" '$1 == m {print $2}'; }
progress() { cat "$dir/progress" 2>/dev/null || echo 0; }

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
echo "$token sandbox sbx-outage" >"$dir/tokens"
"$collector" --listen "$http" -X http.tokens_file="$dir/tokens" -X spool.dir="$dir/spool" \
    -X kafka.brokers="$brokers" -X kafka.topic.events=$topic -X kafka.topic.dlq=outage.dlq \
    -X metrics.listen="$metrics" 2>"$dir/collector.log" &
collector_pid=$!
for _ in $(seq 1 100); do
    [ "$(curl -s -o /dev/null -w '%{http_code}' -X POST "http://$http/v1/events")" = 401 ] && break
    sleep 0.1
done
kill -0 $collector_pid 2>/dev/null || { cat "$dir/collector.log" >&2; exit 1; }

# about 55 s of posting: the outage falls in the middle
python3 "$root/tests/integration/post_events.py" "http://$http/v1/events" "$token" "$n" 1000 \
    $((n / 55)) "$dir/progress" >"$dir/post.json" &
poster=$!
while [ "$(progress)" -lt $((n / 5)) ]; do
    kill -0 $poster 2>/dev/null || { echo "the poster stopped" >&2; exit 1; }
    kill -0 $collector_pid 2>/dev/null || { cat "$dir/collector.log" >&2; exit 1; }
    sleep 0.2
done

svc stop kafka
echo "$(date +%T) kafka stopped at $(progress) events" >>"$dir/timeline"
before=$(progress)
spool_max=0
for _ in $(seq 1 "$outage_s"); do
    sleep 1
    b=$(metric sandtrail_collector_spool_bytes)
    [ "${b%.*}" -gt "$spool_max" ] && spool_max=${b%.*}
done
during=$(( $(progress) - before ))
svc start kafka
echo "$(date +%T) kafka started at $(progress) events" >>"$dir/timeline"
wait $poster

count()
{
    kcat -C -b "$brokers" -t $topic -e -q -f '%s\n' 2>/dev/null |
        python3 -c '
import json, sys
ids = [json.loads(l)["event_id"] for l in sys.stdin if l.strip()]
print(len(ids), len(set(ids)))'
}
messages=0
distinct=0
for _ in $(seq 1 90); do
    read -r messages distinct < <(count)
    [ "$messages" -ge "$n" ] && break
    sleep 2
done
# anything still to come would be a duplicate: give it a moment, count again
sleep 3
read -r messages distinct < <(count)

kill "$collector_pid"
status=0
wait "$collector_pid" || status=$?
collector_pid=

python3 - "$dir/post.json" <<PY
import json, sys
p = json.load(open(sys.argv[1]))
for k in ("ok", "unavailable", "conn_errors", "rejected"):
    print("%s=%d" % (k, p[k]))
print("posted=%d" % p["acknowledged"])
PY
echo "acked_during_outage=$during"
echo "spool_bytes_during_outage=$spool_max"
echo "messages=$messages"
echo "distinct=$distinct"
echo "missing=$((n - distinct))"
echo "collector_status=$status"
