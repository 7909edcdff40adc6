#!/usr/bin/env python3
"""Writes events at a fixed rate to stdout (for the collector's stdin), with
event time = wall-clock time of sending, for the live latency benchmark.

  pace.py RATE SECONDS BURSTS SENT.txt

Into BURSTS runs spread over the stream a denial burst is injected (12
denials, 0.2 s apart); SENT.txt gets, per burst, "task/run <unix time>" of
the moment its 10th denial was written: the earliest moment a finding can
exist. Everything else is allowed traffic of 10,000 other runs.
"""
import json
import random
import sys
import time


def fmt(ts):
    return time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(ts)) + ".%06dZ" % int(
        (ts % 1) * 1e6)


def main():
    rate, seconds, bursts, sent_path = (int(sys.argv[1]), int(sys.argv[2]),
                                        int(sys.argv[3]), sys.argv[4])
    rnd = random.Random(11)
    total = rate * seconds
    burst_start = {int(total * (b + 0.5) / bursts): b for b in range(bursts)}
    active = []  # [burst id, next denial index]
    sent = open(sent_path, "w")
    out = sys.stdout
    start = time.time()
    batch = max(1, rate // 100)
    i = 0
    while i < total:
        # keep to the schedule: write a slice every 10 ms
        due = start + i / rate
        now = time.time()
        if due > now:
            time.sleep(due - now)
        chunk = []
        for _ in range(batch):
            if i in burst_start:
                active.append([burst_start[i], 0])
            ts = time.time()
            ev = None
            if active and i % (rate // 5 // max(1, len(active)) or 1) == 0:
                b = active[0]
                ev = {"schema": "sandtrail.event.v1", "event_id": "L%d-%d" % (b[0], b[1]),
                      "ts": fmt(ts), "source": {"kind": "proxy", "name": "squid"},
                      "task_id": "LT%d" % b[0], "run_id": "LR%d" % b[0], "type": "request",
                      "decision": "deny", "attrs": {"host": "x%d.example" % (b[1] % 3),
                                                    "status": 403}}
                b[1] += 1
                if b[1] == 10:
                    sent.write("LT%d/LR%d %.6f\n" % (b[0], b[0], ts))
                if b[1] == 12:
                    active.pop(0)
            else:
                r = rnd.randrange(10000)
                ev = {"schema": "sandtrail.event.v1", "event_id": "l%d" % i, "ts": fmt(ts),
                      "source": {"kind": "proxy", "name": "squid"}, "task_id": "T%d" % r,
                      "run_id": "R%d" % r, "type": "request",
                      "attrs": {"host": "h%d.example" % rnd.randrange(100), "status": 200}}
            chunk.append(json.dumps(ev, separators=(",", ":")))
            i += 1
        out.write("\n".join(chunk) + "\n")
        out.flush()
    sent.close()


if __name__ == "__main__":
    main()
