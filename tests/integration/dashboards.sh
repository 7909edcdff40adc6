#!/usr/bin/env bash
# dashboards.sh BUILD_DIR: the PromQL side of the dashboards test
# (test_dashboards.c runs it with a world's settings in the environment).
#   1. every PromQL expression of dashboards/grafana/*.json and of the alert
#      rules parses (promtool check rules over a file of recording rules);
#   2. every metric they name is one the programs export: read from the live
#      /metrics of a collector (--follow) and an analyzer fed real events;
#   3. the alert rules pass `promtool check rules` and their unit tests, and
#      a rule broken on purpose fails them.
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
bin=$1
dash=$root/dashboards
tmp=$(mktemp -d)
pids=()
cleanup() { for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done; rm -rf "$tmp"; }
trap cleanup EXIT
fail() { echo "dashboards.sh: $*" >&2; exit 1; }

# --- 1. every expression parses
python3 - "$dash" "$tmp/exprs.txt" "$tmp/check.yml" <<'PY'
import json, glob, sys, yaml
dash, out, rules = sys.argv[1:4]
exprs = []
for f in sorted(glob.glob(dash + "/grafana/*.json")):
    def walk(panels):
        for p in panels or []:
            for t in p.get("targets", []):
                if "expr" in t:
                    exprs.append(t["expr"])
            walk(p.get("panels"))
    walk(json.load(open(f)).get("panels"))
for g in yaml.safe_load(open(dash + "/prometheus/sandtrail-rules.yml"))["groups"]:
    for r in g["rules"]:
        exprs.append(r["expr"])
open(out, "w").write("\n".join(e.replace("\n", " ") for e in exprs) + "\n")
yaml.safe_dump({"groups": [{"name": "dashboard-expressions", "rules": [
    {"record": "sandtrail_dashboard_check_%d" % i, "expr": e}
    for i, e in enumerate(exprs)]}]}, open(rules, "w"))
PY
[ "$(wc -l <"$tmp/exprs.txt")" -ge 10 ] || fail "too few PromQL expressions found"
promtool check rules "$tmp/check.yml" >/dev/null || fail "a dashboard expression does not parse"

# --- 2. every metric named is exported by a live program
read -r cport aport lport < <(python3 "$root/tests/integration/free_port.py" 3)
log=$tmp/source.log
{
    for i in $(seq 1 20); do
        printf '{"schema":"sandtrail.event.v1","event_id":"m-%d","ts":"2026-11-29T10:00:%02dZ","source":{"kind":"proxy","name":"squid"},"task_id":"T-M","run_id":"run-m","type":"request","decision":"deny","attrs":{"host":"h%d.example","path":"/?k=AKIAIOSFODNN7EXAMPLE"}}\n' "$i" "$i" "$i"
    done
    echo '{"not an event"'
} >"$log"
"$bin/collector/sandtrail-collector" --follow "$log" -X "metrics.listen=127.0.0.1:$cport" \
    -X "spool.dir=$tmp/spool" 2>"$tmp/collector.err" &
pids+=($!)
"$bin/analyzer/sandtrail-analyzer" -X "metrics.listen=127.0.0.1:$aport" \
    -X detect.lateness_s=0 2>"$tmp/analyzer.err" &
pids+=($!)
# the twenty denials make a denial_burst finding, which the alerter sends to
# the Alertmanager of scripts/services
"$bin/alerter/sandtrail-alerter" -X "metrics.listen=127.0.0.1:$lport" 2>"$tmp/alerter.err" &
pids+=($!)
for i in $(seq 1 120); do
    curl -sf "http://127.0.0.1:$cport/metrics" >"$tmp/collector.prom" 2>/dev/null || true
    curl -sf "http://127.0.0.1:$aport/metrics" >"$tmp/analyzer.prom" 2>/dev/null || true
    curl -sf "http://127.0.0.1:$lport/metrics" >"$tmp/alerter.prom" 2>/dev/null || true
    grep -q '^sandtrail_collector_redactions_total{' "$tmp/collector.prom" 2>/dev/null &&
        grep -q '^sandtrail_analyzer_consumer_lag{' "$tmp/analyzer.prom" 2>/dev/null &&
        grep -q '^sandtrail_analyzer_source_events_total{' "$tmp/analyzer.prom" 2>/dev/null &&
        grep -q '^sandtrail_alerter_deliveries_total{' "$tmp/alerter.prom" 2>/dev/null &&
        break
    sleep 0.5
done
cat "$tmp"/*.prom >"$tmp/all.prom"
missing=0
for m in $(grep -o 'sandtrail_[a-z0-9_]*' "$tmp/exprs.txt" | sort -u); do
    grep -q "^$m[{ ]" "$tmp/all.prom" && continue
    echo "dashboards.sh: metric $m is not exported by any program" >&2
    missing=1
done
[ $missing -eq 0 ] || { cat "$tmp/all.prom" >&2; fail "unknown metrics"; }

# --- 3. the alert rules and their unit tests; a broken rule fails them
(cd "$dash/prometheus" && promtool check rules sandtrail-rules.yml >/dev/null &&
    promtool test rules sandtrail-rules.test.yml >/dev/null) ||
    fail "the alert rules or their unit tests fail"
cp "$dash/prometheus/sandtrail-rules.yml" "$dash/prometheus/sandtrail-rules.test.yml" "$tmp/"
sed -i 's/ > 0.05$/ > 0.5/' "$tmp/sandtrail-rules.yml"
if (cd "$tmp" && promtool test rules sandtrail-rules.test.yml >/dev/null 2>&1); then
    fail "a rule broken on purpose still passes its unit tests"
fi
echo "dashboards.sh: $(wc -l <"$tmp/exprs.txt") expressions parse, their metrics are exported, rules pass"
