#!/usr/bin/env python3
"""Generates the benchmark's event stream: NDJSON, schema sandtrail.event.v1.

  gen_events.py EVENTS RUNS BURSTS OUT.ndjson TRUTH.txt [roundrobin]

EVENTS mixed events (proxy requests, sandbox exec and file writes, broker
token use) over RUNS concurrent runs, in event-time order over one hour. Into
BURSTS of the runs a denial burst is injected: 12 denied requests within
30 s. Every other run is denied at most 5 times in all, so that a detector
with a 10-in-60 s rule -- sandtrail's denial_burst, or SEC's SingleWithThreshold
whose window runs on wall-clock time -- must flag exactly the injected runs.
TRUTH.txt lists them, one "task/run" a line. With "roundrobin", event i
goes to run i % RUNS instead of a random run, so that every run is seen once
EVENTS >= RUNS (the run is still drawn, to keep the rest of the stream).
"""
import json
import random
import sys


def main():
    n, runs, bursts, out_path, truth_path = (int(sys.argv[1]), int(sys.argv[2]),
                                             int(sys.argv[3]), sys.argv[4], sys.argv[5])
    roundrobin = len(sys.argv) > 6 and sys.argv[6] == "roundrobin"
    rnd = random.Random(7)
    t0 = 1795946400  # 2026-11-29T10:00:00Z
    span = 3600.0
    burst_runs = set(rnd.sample(range(runs), bursts))
    denials = [0] * runs
    lines = []
    injected = 0
    burst_at = {r: rnd.uniform(0, span - 60) for r in burst_runs}
    per_burst = 12
    normal = n - bursts * per_burst
    for i in range(normal):
        r = rnd.randrange(runs)
        if roundrobin:
            r = i % runs
        ts = t0 + span * i / normal
        kind = rnd.random()
        task, run = "T%06d" % r, "r%06d" % r
        base = {"schema": "sandtrail.event.v1", "event_id": "b%d" % i,
                "ts": "%sZ" % fmt(ts), "task_id": task, "run_id": run}
        if kind < 0.70:
            deny = rnd.random() < 0.05 and denials[r] < 5 and r not in burst_runs
            denials[r] += deny
            ev = dict(base, source={"kind": "proxy", "name": "squid", "platform": "squid"},
                      type="request",
                      attrs={"method": "GET", "host": "h%d.example" % rnd.randrange(200),
                             "port": 443, "path": "/p%d" % rnd.randrange(50),
                             "status": 403 if deny else 200, "bytes_out": rnd.randrange(2000),
                             "bytes_in": rnd.randrange(50000)})
            if deny:
                ev["decision"] = "deny"
                ev["reason"] = "not_in_allowlist"
        elif kind < 0.85:
            ev = dict(base, source={"kind": "sandbox", "name": "sbx"}, type="exec",
                      attrs={"command": "pytest -q tests/test_%d.py" % rnd.randrange(100),
                             "exit_code": 0, "cwd": "/work", "duration_ms": rnd.randrange(900)})
        elif kind < 0.95:
            ev = dict(base, source={"kind": "sandbox", "name": "sbx"}, type="file_write",
                      attrs={"path": "/work/src/m%d.py" % rnd.randrange(300),
                             "bytes": rnd.randrange(9000)},
                      content="def f(x):\n    return x + %d\n" % rnd.randrange(1000))
        else:
            ev = dict(base, source={"kind": "broker", "name": "vault"}, type="token_use",
                      identity={"credential_id": "acc-%d" % r},
                      attrs={"operation": "repo:read", "audience": "github.com"})
        lines.append((ts, json.dumps(ev, separators=(",", ":"))))
    for r in burst_runs:
        for k in range(per_burst):
            ts = burst_at[r] + t0 + k * 2.5
            ev = {"schema": "sandtrail.event.v1", "event_id": "x%d-%d" % (r, k),
                  "ts": "%sZ" % fmt(ts), "source": {"kind": "proxy", "name": "squid",
                                                   "platform": "squid"},
                  "task_id": "T%06d" % r, "run_id": "r%06d" % r, "type": "request",
                  "decision": "deny", "reason": "not_in_allowlist",
                  "attrs": {"method": "CONNECT", "host": "x%d.example" % (k % 3), "port": 443,
                            "status": 403}}
            lines.append((ts, json.dumps(ev, separators=(",", ":"))))
            injected += 1
    lines.sort(key=lambda x: x[0])
    with open(out_path, "w") as f:
        for _, l in lines:
            f.write(l + "\n")
    with open(truth_path, "w") as f:
        for r in sorted(burst_runs):
            f.write("T%06d/r%06d\n" % (r, r))


def fmt(ts):
    import datetime
    d = datetime.datetime.fromtimestamp(ts, datetime.timezone.utc)
    return d.strftime("%Y-%m-%dT%H:%M:%S.") + "%06d" % d.microsecond


if __name__ == "__main__":
    main()
