#!/usr/bin/env python3
"""Generates the denial stream of the SEC comparison: NDJSON, schema
sandtrail.event.v1, every event a denied proxy request.

  gen_denials.py EVENTS BURSTS OUT.ndjson TRUTH.txt

EVENTS denials in event-time order over one hour. BURSTS runs get a burst:
12 denials 2.5 s apart (within 30 s). Every other denial goes to a run of
its own round robin, so that no such run gets more than 4 denials in all,
a quarter of an hour apart. A 10-in-60 s rule -- sandtrail's denial_burst on
event time, or SEC's SingleWithThreshold on wall-clock time (the whole file
passes in well under the hour, so its window holds every denial of a run) --
must flag exactly the BURSTS runs; TRUTH.txt lists them, "task/run" a line.
The keys are written in the order SEC's pattern expects (task_id, run_id,
..., decision)."""
import datetime
import sys


def fmt(ts):
    d = datetime.datetime.fromtimestamp(ts, datetime.timezone.utc)
    return d.strftime("%Y-%m-%dT%H:%M:%S.") + "%06dZ" % d.microsecond


def main():
    n, bursts, out_path, truth_path = (int(sys.argv[1]), int(sys.argv[2]), sys.argv[3],
                                       sys.argv[4])
    per_burst = 12
    normal = n - bursts * per_burst
    if normal < 0:
        sys.exit("gen_denials: fewer events than bursts need")
    quiet_runs = max(1, -(-normal // 4))  # at most 4 denials a run
    t0 = 1795946400  # 2026-11-29T10:00:00Z
    span = 3600.0
    # the bursts start evenly over the hour (minus a minute), one run each
    starts = [t0 + (span - 60) * (b + 0.5) / max(1, bursts) for b in range(bursts)]
    line = ('{"schema":"sandtrail.event.v1","event_id":"%s","ts":"%s",'
            '"source":{"kind":"proxy","name":"squid","platform":"squid"},'
            '"task_id":"%s","run_id":"%s","type":"request","decision":"deny",'
            '"reason":"not_in_allowlist","attrs":{"method":"%s","host":"%s",'
            '"port":443,"path":"/","status":403}}\n')
    with open(out_path, "w") as f:
        b, k = 0, 0  # next burst event: burst b, denial k
        for i in range(normal):
            ts = t0 + span * i / normal
            while b < bursts and starts[b] + k * 2.5 <= ts:
                f.write(line % ("x%d-%d" % (b, k), fmt(starts[b] + k * 2.5), "B%06d" % b,
                                "rb%06d" % b, "CONNECT", "x%d.example" % (k % 3)))
                k += 1
                if k == per_burst:
                    b, k = b + 1, 0
            r = i % quiet_runs
            f.write(line % ("d%d" % i, fmt(ts), "T%07d" % r, "r%07d" % r, "GET",
                            "h%d.example" % (i % 200)))
        while b < bursts:
            f.write(line % ("x%d-%d" % (b, k), fmt(starts[b] + k * 2.5), "B%06d" % b,
                            "rb%06d" % b, "CONNECT", "x%d.example" % (k % 3)))
            k += 1
            if k == per_burst:
                b, k = b + 1, 0
    with open(truth_path, "w") as f:
        for b in range(bursts):
            f.write("B%06d/rb%06d\n" % (b, b))


if __name__ == "__main__":
    main()
