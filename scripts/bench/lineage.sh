#!/usr/bin/env bash
# The cost of issued-credential lineage on the collector: the same input,
# scripts/bench/gen_mixed.py N (about 420-byte native events, 5% with a
# token shape), through sandtrail-collector --input with
#   off      kafka.topic.credentials empty: no search, no topic
#   empty    lineage on, the credentials topic empty: the set is empty, so
#            no string is searched
#   10k/1    FPS fingerprints of credentials of one length (40 bytes, a
#            typical generated token): one candidate length
#   10k/5    FPS fingerprints over 5 lengths (40, 56, 72, 95, 100: a few
#            kinds of token)
#   10k/100  FPS fingerprints over 100 lengths (16..115): the worst a
#            broker issuing every size of credential gives
# ROUNDS rounds, interleaved; medians printed as a Markdown table. Not a test:
# nothing passes or fails on a number. The services must be up (the local
# broker); the topics (prefix stbench-lineage-<pid>) are kept.
#
#   scripts/bench/lineage.sh [BUILD]      N=200000 ROUNDS=3 FPS=10000 WORKERS=0
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
cd "$root"
N=${N:-200000}
ROUNDS=${ROUNDS:-3}
FPS=${FPS:-10000}
WORKERS=${WORKERS:-0}
build=${1:-build}
coll=$root/$build/collector/sandtrail-collector
[ -x "$coll" ] || { echo "lineage.sh: no collector at $coll (scripts/build $build)" >&2; exit 1; }
eval "$(scripts/services env)"
brokers=$SANDTRAIL_KAFKA_BROKERS
work=$(mktemp -d /tmp/st-bench-lineage.XXXXXX)
trap 'rm -rf "$work"' EXIT
tag=stbench-lineage-$$

python3 scripts/bench/gen_mixed.py "$N" "$work/in.ndjson" 1 2>/dev/null

# records as the collectors write them: key \t {"fp","len",...}
records() { # $1 = the lengths, comma-separated
    python3 - "$FPS" "$1" <<'PY'
import json, random, sys
n, lens = int(sys.argv[1]), [int(x) for x in sys.argv[2].split(",")]
rnd = random.Random(7)
for i in range(n):
    fp = "%016x" % rnd.getrandbits(64)
    ln = lens[i % len(lens)]
    print(fp + "\t" + json.dumps({"fp": fp, "len": ln, "credential_id": "acc-%d" % i,
                                  "source": "bench"}, separators=(",", ":")))
PY
}
for c in empty one five spread; do
    # the collector creates the topic (compacted) as it would in production
    SANDTRAIL_TOPIC_EVENTS=$tag.setup SANDTRAIL_TOPIC_DLQ=$tag.dlq \
        "$coll" --input /dev/null -X kafka.topic.credentials=$tag.cred.$c 2>/dev/null
done
records 40 | kcat -b "$brokers" -P -t "$tag.cred.one" -K $'\t' -l /dev/stdin
records 40,56,72,95,100 | kcat -b "$brokers" -P -t "$tag.cred.five" -K $'\t' -l /dev/stdin
records "$(seq -s, 16 115)" | kcat -b "$brokers" -P -t "$tag.cred.spread" -K $'\t' -l /dev/stdin

declare -A topic=([off]="" [empty]=$tag.cred.empty ["10k/1"]=$tag.cred.one
                  ["10k/5"]=$tag.cred.five ["10k/100"]=$tag.cred.spread)
configs=(off empty 10k/1 10k/5 10k/100)
for r in $(seq 1 "$ROUNDS"); do
    for c in "${configs[@]}"; do
        SANDTRAIL_TOPIC_EVENTS=$tag.events SANDTRAIL_TOPIC_DLQ=$tag.dlq \
            /usr/bin/time -f "%e %U %S" -o "$work/time" \
            "$coll" --input "$work/in.ndjson" -X input.workers=$WORKERS \
            -X kafka.topic.credentials="${topic[$c]}" 2>"$work/log"
        known=$(sed -n 's/.*lineage: \([0-9]*\) issued.*/\1/p' "$work/log")
        read -r wall user sys <"$work/time"
        echo "$c $wall $(echo "$user + $sys" | bc) ${known:-0}" >>"$work/runs"
    done
done

median() { sort -n | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}'; }
echo "| lineage | credentials known | seconds | events/s | CPU s | CPU µs/event |"
echo "|---|---|---|---|---|---|"
for c in "${configs[@]}"; do
    wall=$(awk -v c="$c" '$1==c {print $2}' "$work/runs" | median)
    cpu=$(awk -v c="$c" '$1==c {print $3}' "$work/runs" | median)
    known=$(awk -v c="$c" '$1==c {print $4}' "$work/runs" | median)
    awk -v c="$c" -v w="$wall" -v u="$cpu" -v k="$known" -v n="$N" \
        'BEGIN {printf "| %s | %d | %.2f | %.0f | %.2f | %.2f |\n", c, k, w, n / w, u, u * 1e6 / n}'
done
echo
echo "every run (config seconds cpu known):"
cat "$work/runs"
