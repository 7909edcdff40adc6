# common.sh: what the analyzer benchmark scripts share (sourced, not run).
# Sets root, bin, work, tag, psql_; gives newdb, drain-safe cleanup, bounded
# commands, machine facts and the writer of a docs/benchmarks.md section.
#
# Everything a script makes is named after its tag (bench_NAME_EPOCH_PID):
# topics TAG.*, databases TAG_*, Redis keys TAG.*:..., consumer groups TAG.*;
# all of it is dropped at exit unless BENCH_KEEP=1. Nothing else is touched:
# the services are the running ones (scripts/services env), never started,
# stopped or flushed here.
#
# Env common to the scripts:
#   BENCH_BUILD      build folder (default build), brought up to date first
#   BENCH_TIMEOUT    seconds any single step may take (default 1800)
#   BENCH_KEEP=1     keep topics, databases, Redis keys and .local/bench-NAME
#   BENCH_NO_DOC=1   do not write docs/benchmarks.md (print the section only)
#   BENCH_LABEL=TEXT a line put in bold under each section's heading, e.g.
#                    "Before the redesign: main at 640710c"

bench_init() # NAME
{
    bench_name=$1
    root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
    cd "$root"
    eval "$(scripts/services env)"
    local st i
    for i in 1 2 3; do
        st=$(scripts/services status 2>&1 || true)
        [ "$(grep -cE '^(kafka|postgresql|redis) .*: up$' <<<"$st")" -eq 3 ] && break
        sleep 5
    done
    if [ "$(grep -cE '^(kafka|postgresql|redis) .*: up$' <<<"$st")" -ne 3 ]; then
        echo "$st" >&2
        echo "$bench_name: the services are not up (scripts/services status)" >&2
        exit 1
    fi
    case "$SANDTRAIL_KAFKA_BROKERS" in
    127.0.0.1:*) ;;
    *) echo "$bench_name: Kafka is not on 127.0.0.1" >&2; exit 1 ;;
    esac
    command -v sec >/dev/null && [ -x /usr/bin/time ] ||
        DEBIAN_FRONTEND=noninteractive apt-get install -y -qq sec time >/dev/null
    bdir=${BENCH_BUILD:-build}
    bin=$root/$bdir
    # always: a build left from another commit would be measured otherwise
    # (an up-to-date build costs a second)
    nice scripts/build "$bdir" >/dev/null
    step_timeout=${BENCH_TIMEOUT:-1800}
    work=$root/.local/bench-$bench_name
    rm -rf "$work"
    mkdir -p "$work"
    tag=bench_${bench_name}_$(date +%s)_$$
    pg_port=${SANDTRAIL_PG_PORT:-15433}
    redis_port=${SANDTRAIL_REDIS_PORT:-16380}
    psql_=(/usr/lib/postgresql/15/bin/psql -h 127.0.0.1 -p "$pg_port" -U sandtrail -qAt
        -v ON_ERROR_STOP=1)
    bench_dbs=() bench_topics=() bench_pids=()
    bench_started=$(date -u +%Y-%m-%dT%H:%M:%SZ)
    bench_load0=$(cut -d' ' -f1-3 /proc/loadavg)
    trap bench_cleanup EXIT
    trap 'exit 130' INT TERM
}

bench_cleanup()
{
    local st=$? p
    for p in "${bench_pids[@]}"; do
        kill -KILL "$p" 2>/dev/null || true
    done
    if [ "${BENCH_KEEP:-0}" != 1 ]; then
        for p in "${bench_dbs[@]}"; do
            "${psql_[@]}" -d postgres -c "DROP DATABASE IF EXISTS $p WITH (FORCE)" \
                >/dev/null 2>&1 || echo "$bench_name: could not drop database $p" >&2
        done
        [ ${#bench_topics[@]} -eq 0 ] ||
            python3 scripts/bench/kafka_admin.py delete "$SANDTRAIL_KAFKA_BROKERS" \
                "${bench_topics[@]}" 2>/dev/null ||
            echo "$bench_name: could not delete topics ${bench_topics[*]}" >&2
        redis-cli -h 127.0.0.1 -p "$redis_port" --scan --pattern "$tag.*" 2>/dev/null |
            xargs -r -n 500 redis-cli -h 127.0.0.1 -p "$redis_port" UNLINK >/dev/null 2>&1 ||
            true
        rm -rf "$work"
    else
        echo "$bench_name: kept databases ${bench_dbs[*]}, topics ${bench_topics[*]}," \
            "Redis keys $tag.*, $work" >&2
    fi
    exit "$st"
}

# newdb SUFFIX: creates database TAG_SUFFIX and sets dsn to its DSN
# (call it in the main shell, not in $(...): the database is recorded)
newdb()
{
    "${psql_[@]}" -d postgres -c "CREATE DATABASE ${tag}_$1" >/dev/null
    bench_dbs+=("${tag}_$1")
    dsn="host=127.0.0.1 port=$pg_port user=sandtrail dbname=${tag}_$1"
}

# migrate: the schema made in the database of the last newdb by
# `sandtrail migrate`, untimed, as a deployment makes it once before its
# analyzers start (an analyzer then finds it current and applies nothing:
# its timed seconds are the stream's, not a first install's 12 migrations,
# about 0.1 s). Call it in the main shell, after newdb.
migrate()
{
    SANDTRAIL_PG_DSN=$dsn bounded "$bin/cli/sandtrail" migrate >"$work/migrate.log" 2>&1 ||
        { cat "$work/migrate.log" >&2; return 1; }
}

# topic SUFFIX: the name of topic TAG.SUFFIX, recorded for deletion
# (call it in the main shell, not in $(...))
topic()
{
    bench_topics+=("$tag.$1")
}

bounded() { timeout -k 10 "$step_timeout" "$@"; }
now() { date +%s.%N; }
secs() { python3 -c "import sys; print('%.2f' % (float(sys.argv[2]) - float(sys.argv[1])))" "$@"; }
rate() { python3 -c "import sys; print('%d' % (float(sys.argv[1]) / float(sys.argv[2])))" "$@"; }
ratio() { python3 -c "import sys; print('%.2f' % (float(sys.argv[1]) / float(sys.argv[2])))" "$@"; }

# quiesce: before a timed run, the background work the runs before it
# left the services -- a PostgreSQL checkpoint of their rows (run here,
# untimed), autovacuum of their tables, a Redis AOF rewrite or RDB save --
# is done first (waited for, at most BENCH_QUIESCE_S seconds, 120 by
# default), so that a run does not pay for the one before it. What a run
# causes itself (its own rows' autovacuum, an AOF rewrite its own writes
# trigger) stays in its time. Prints what it waited for, in seconds.
quiesce()
{
    local t0 av=0 rw=0 i max=${BENCH_QUIESCE_S:-120}
    t0=$(now)
    "${psql_[@]}" -d postgres -c CHECKPOINT >/dev/null 2>&1 || true
    for ((i = 0; i < max; i++)); do
        av=$("${psql_[@]}" -d postgres -c "SELECT count(*) FROM pg_stat_activity
            WHERE backend_type = 'autovacuum worker'" 2>/dev/null || echo 0)
        rw=$(redis-cli -h 127.0.0.1 -p "$redis_port" info persistence 2>/dev/null |
            grep -cE '^(aof_rewrite_in_progress|aof_rewrite_scheduled|rdb_bgsave_in_progress):1' ||
            true)
        [ "$av" = 0 ] && [ "$rw" = 0 ] && break
        sleep 1
    done
    [ "$i" -lt "$max" ] ||
        echo "$bench_name: services still busy after ${max} s (autovacuum $av, Redis $rw); timing anyway" >&2
    echo "$bench_name: quiet after $(secs "$t0" "$(now)") s" >&2
}

# load FILE TOPIC_SUFFIX: the collector writes FILE into topic TAG.SUFFIX
load()
{
    topic "$2"
    topic "$2.dlq"
    SANDTRAIL_TOPIC_EVENTS=$tag.$2 SANDTRAIL_TOPIC_DLQ=$tag.$2.dlq \
        bounded "$bin/collector/sandtrail-collector" --input "$1" 2>"$work/collector.$2.log"
}

# analyzer_env NAME: the environment of an analyzer of this run named NAME
# (its own group and Redis prefix); the caller adds the topic and DSN
analyzer_env()
{
    echo "SANDTRAIL_GROUP=$tag.$1 SANDTRAIL_REDIS_PREFIX=$tag.$1:"
}

# has_config NAME: whether this analyzer knows the setting NAME
has_config()
{
    "$bin/analyzer/sandtrail-analyzer" --config-doc 2>/dev/null | grep -q "\`$1\`"
}

# machine facts, one paragraph of markdown
machine()
{
    local cpu kafka pgv redisv secv commit dirty
    cpu=$(lscpu | sed -n 's/^Model name: *//p' | head -1)
    kafka=$(ls "$root/.local/kafka-libs" 2>/dev/null | sed -n 's/^kafka-clients-\([0-9.]*\)\.jar$/\1/p' | head -1)
    pgv=$(/usr/lib/postgresql/15/bin/postgres --version | awk '{print $3}')
    redisv=$(redis-server --version 2>/dev/null | sed -n 's/.*v=\([^ ]*\).*/\1/p')
    secv=$(dpkg-query -W -f '${Version}' sec 2>/dev/null || echo '?')
    commit=$(git rev-parse --short HEAD)
    dirty=$(git diff --quiet HEAD -- analyzer collector common sql 2>/dev/null || echo " (with uncommitted changes to the daemons)")
    cat <<MD
Machine: $(nproc) cores ($cpu), $(free -g | awk '/Mem:/ {print $2}') GiB, $(uname -r);
load average $bench_load0 at the start and $(cut -d' ' -f1-3 /proc/loadavg) at the
end (the machine may be shared: figures are noisy). Kafka ${kafka:-?} (one
KRaft node), PostgreSQL $pgv, Redis ${redisv:-?}, SEC $secv, all on
127.0.0.1. sandtrail commit $commit$dirty, build folder \`$bdir\`
($(sed -n 's/^CMAKE_BUILD_TYPE:STRING=\(..*\)/\1/p' "$bin/CMakeCache.txt" 2>/dev/null | grep . || echo 'RelWithDebInfo, the default')).
Run from $bench_started to $(date -u +%Y-%m-%dT%H:%M:%SZ).
MD
}

# write_section FILE: puts FILE between this script's markers in
# docs/benchmarks.md (the rest of the file is kept) and prints it
write_section()
{
    cat "$1"
    [ "${BENCH_NO_DOC:-0}" = 1 ] && return 0
    python3 - docs/benchmarks.md "bench-$bench_name" "$1" "${BENCH_LABEL:-}" <<'PY'
import os
import sys

path, name, section, label = sys.argv[1:5]
begin, end = "<!-- %s:begin -->" % name, "<!-- %s:end -->" % name
text = open(path).read() if os.path.exists(path) else "# Benchmarks\n"
body = open(section).read().rstrip("\n")
if label:
    head, _, rest = body.partition("\n")
    body = head + "\n\n**" + label + "**\n" + rest
block = begin + "\n" + body + "\n" + end
if begin in text and end in text:
    a, b = text.index(begin), text.index(end) + len(end)
    text = text[:a] + block + text[b:]
else:
    text = text.rstrip("\n") + "\n\n" + block + "\n"
open(path, "w").write(text)
PY
    echo "== wrote docs/benchmarks.md (bench-$bench_name)"
}

# summary LINE: one line for scripts/bench-analyzer's table of targets
summary()
{
    [ -n "${BENCH_SUMMARY:-}" ] && echo "$1" >>"$BENCH_SUMMARY"
    return 0
}

# start_analyzer NAME TOPIC_SUFFIX LOG [ARGS...]: starts an analyzer of this
# run in the background on topic TAG.TOPIC_SUFFIX, database $dsn, group and
# Redis prefix TAG.NAME, with the extra environment in the array start_env;
# sets apid and waits (60 s at most) until it has its partitions.
start_analyzer()
{
    local name=$1 t=$2 log=$3 i
    shift 3
    : >"$log"
    # env execs the analyzer: $! is its pid, so that a SIGKILL hits it (not
    # a wrapper); bench_cleanup kills it whatever happens
    env SANDTRAIL_PG_DSN="$dsn" \
        SANDTRAIL_TOPIC_EVENTS="$tag.$t" SANDTRAIL_TOPIC_DLQ="$tag.$t.dlq" \
        SANDTRAIL_GROUP="$tag.$name" SANDTRAIL_REDIS_PREFIX="$tag.$name:" \
        ${start_env[@]+"${start_env[@]}"} \
        "$bin/analyzer/sandtrail-analyzer" "$@" 2>>"$log" &
    apid=$!
    bench_pids+=("$apid")
    for i in $(seq 600); do
        grep -q "assigned" "$log" && return 0
        kill -0 "$apid" 2>/dev/null || { echo "$bench_name: the analyzer stopped:" >&2;
            tail -5 "$log" >&2; return 1; }
        sleep 0.1
    done
    echo "$bench_name: the analyzer has no partition after 60 s" >&2
    return 1
}

# stop_analyzer PID: SIGTERM, 60 s to stop, then SIGKILL
stop_analyzer()
{
    local i
    kill -TERM "$1" 2>/dev/null || return 0
    for i in $(seq 600); do
        kill -0 "$1" 2>/dev/null || { wait "$1" 2>/dev/null || true; return 0; }
        sleep 0.1
    done
    kill -KILL "$1" 2>/dev/null || true
    wait "$1" 2>/dev/null || true
}

# make_topic SUFFIX: creates topic TAG.SUFFIX (and its dead-letter topic)
# the way the collector does, by running it on no input
make_topic()
{
    : >"$work/empty"
    load "$work/empty" "$1"
}

# latency SENT FOUND WAIT: "p50 p99 max found sent" from the write times of
# SENT and the finding times of FOUND ("task/run epoch" lines); a burst with
# no finding counts as later than WAIT, shown as ">WAIT"
latency()
{
    python3 - "$@" <<'PY'
import sys
sent = dict(l.split() for l in open(sys.argv[1]) if l.strip())
found = dict(l.split() for l in open(sys.argv[2]) if l.strip())
wait = float(sys.argv[3])
lat = sorted(float(found[k]) - float(v) if k in found else float("inf")
             for k, v in sent.items())
if not lat:
    print("n/a n/a n/a 0 0"); sys.exit()
def p(q):
    x = lat[min(len(lat) - 1, int(q * len(lat)))]
    return ">%.0f" % wait if x == float("inf") else "%.3f" % x
print(p(0.5), p(0.99), p(1.0), sum(1 for k in sent if k in found), len(sent))
PY
}

# assigned_after T0 LOG: seconds from epoch second T0 to the first
# "assigned N partition(s)" line of the analyzer log LOG (by the log's own
# millisecond timestamps, plain or JSON), "?" when it has none
assigned_after()
{
    python3 - "$@" <<'PY'
import datetime
import re
import sys
t0 = float(sys.argv[1])
for line in open(sys.argv[2], errors="replace"):
    if re.search(r"\bassigned [0-9]+ partition", line):
        m = re.search(r"(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3})Z", line)
        if m:
            t = datetime.datetime.strptime(m.group(1), "%Y-%m-%dT%H:%M:%S.%f")
            t = t.replace(tzinfo=datetime.timezone.utc).timestamp()
            print("%.2f" % (t - t0))
            sys.exit()
print("?")
PY
}

# drain_pair TOPIC_SUFFIX NAME [ARGS...]: a store and a detect analyzer
# (analyzer.role), each in a group of its own (TAG.NAME.store,
# TAG.NAME.detect), drain topic TAG.TOPIC_SUFFIX into $dsn side by side,
# with ARGS; sets pair_t0 (the epoch second both were started at), pair_s
# (from both starts until both have exited), store_s
# and detect_s (each process's own), pair_cpu (user + system seconds of
# both). Returns 1, with their logs' tails, when either fails.
drain_pair()
{
    local t=$1 name=$2 t0 t1 role rc=0 kb u sys
    local -A pid
    shift 2
    t0=$(now)
    pair_t0=$t0
    for role in store detect; do
        bounded env SANDTRAIL_PG_DSN="$dsn" SANDTRAIL_TOPIC_EVENTS="$tag.$t" \
            SANDTRAIL_TOPIC_DLQ="$tag.$t.dlq" SANDTRAIL_REDIS_PREFIX="$tag.$name:" \
            SANDTRAIL_GROUP="$tag.$name.$role" SANDTRAIL_ANALYZER_ROLE=$role \
            /usr/bin/time -f "%e %M %U %S" -o "$work/time.$name.$role" \
            "$bin/analyzer/sandtrail-analyzer" --drain "$@" \
            2>"$work/analyzer.$name.$role.log" &
        pid[$role]=$!
        bench_pids+=("${pid[$role]}")
    done
    for role in store detect; do
        wait "${pid[$role]}" || { rc=1; echo "$bench_name: the $role analyzer failed:" >&2;
            tail -5 "$work/analyzer.$name.$role.log" >&2; }
    done
    t1=$(now)
    pair_s=$(secs "$t0" "$t1")
    read -r store_s kb u sys <"$work/time.$name.store"
    pair_cpu=$(python3 -c "print('%.1f' % ($u + $sys))")
    read -r detect_s kb u sys <"$work/time.$name.detect"
    pair_cpu=$(python3 -c "print('%.1f' % ($pair_cpu + $u + $sys))")
    return $rc
}
