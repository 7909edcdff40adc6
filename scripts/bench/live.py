#!/usr/bin/env python3
"""Writes events at a fixed rate to stdout (for `sandtrail-collector
--input -`), event time = the wall-clock time of writing, for the live
benchmarks (latency, restart).

  live.py RATE SECONDS BURSTS RUNS SENT.txt STATS.txt [DENY_PERMILLE]

Allowed proxy requests go round robin over RUNS runs (T<r>/R<r>), so that
after RUNS events every run has been seen. BURSTS denial bursts (runs
LT<b>/LR<b>, 12 denials 0.2 s apart) start evenly over the SECONDS; their
denials take the place of allowed requests, so the rate stays RATE.
SENT.txt gets, per burst, "task/run <unix time>" of the moment its 10th
denial was flushed to stdout (the earliest moment a finding can exist).
DENY_PERMILLE (default 0) of the round-robin requests are denied instead
(refused when a run could then reach 10 denials in 60 s: 60 * RATE / RUNS
must stay under 10), so that the runs also hold denial state.
STATS.txt gets "events first_write last_write max_behind_s": what was
really written, and how far the writer fell behind its schedule at worst.
Writes a slice every 10 ms; the lines are formatted from templates, not
json.dumps, so that 30,000 events/s costs little CPU."""
import sys
import time

ALLOW = ('{"schema":"sandtrail.event.v1","event_id":"l%d","ts":"%s",'
         '"source":{"kind":"proxy","name":"squid"},"task_id":"T%d","run_id":"R%d",'
         '"type":"request","attrs":{"host":"h%d.example","status":200}}')
DENIED = ('{"schema":"sandtrail.event.v1","event_id":"l%d","ts":"%s",'
          '"source":{"kind":"proxy","name":"squid"},"task_id":"T%d","run_id":"R%d",'
          '"type":"request","decision":"deny","attrs":{"host":"h%d.example","status":403}}')
DENY = ('{"schema":"sandtrail.event.v1","event_id":"L%d-%d","ts":"%s",'
        '"source":{"kind":"proxy","name":"squid"},"task_id":"LT%d","run_id":"LR%d",'
        '"type":"request","decision":"deny","attrs":{"host":"x%d.example","status":403}}')


def fmt(ts):
    return time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(ts)) + ".%06dZ" % int(
        (ts % 1) * 1e6)


def main():
    rate, seconds, bursts, runs = (int(sys.argv[1]), float(sys.argv[2]), int(sys.argv[3]),
                                   int(sys.argv[4]))
    sent = open(sys.argv[5], "w")
    permille = int(sys.argv[7]) if len(sys.argv) > 7 else 0
    if permille and 60 * rate / runs >= 10:
        sys.exit("live.py: with denials, 60 * RATE / RUNS must stay under 10")
    total = int(rate * seconds)
    out = sys.stdout
    start = time.time()
    # burst b: denial k is due at start + at[b] + 0.2 k
    # (the last one complete 3 s before the end)
    at = [max(0.0, seconds - 3) * (b + 0.5) / max(1, bursts) for b in range(bursts)]
    nextb, active = 0, []  # active: [burst, next denial index]
    slice_n = max(1, rate // 100)
    i = rr = 0
    behind = 0.0
    first = None
    while i < total:
        due = start + i / rate
        now = time.time()
        if due > now:
            time.sleep(due - now)
            now = time.time()
        else:
            behind = max(behind, now - due)
        ts = fmt(now)
        rel = now - start
        while nextb < bursts and at[nextb] <= rel:
            active.append([nextb, 0])
            nextb += 1
        chunk, tenth = [], []
        n = min(slice_n, total - i)
        for b in active:
            if len(chunk) < n and rel >= at[b[0]] + 0.2 * b[1]:
                chunk.append(DENY % (b[0], b[1], ts, b[0], b[0], b[1] % 3))
                b[1] += 1
                if b[1] == 10:
                    tenth.append(b[0])
        active = [b for b in active if b[1] < 12]
        for k in range(i + len(chunk), i + n):
            r = rr % runs  # its own counter: a denial of a burst skips no run
            rr += 1
            if permille and (k * 7919) % 1000 < permille:
                chunk.append(DENIED % (k, ts, r, r, k % 100))
            else:
                chunk.append(ALLOW % (k, ts, r, r, k % 100))
        out.write("\n".join(chunk) + "\n")
        out.flush()
        t = time.time()
        if first is None:
            first = now
        for b in tenth:
            sent.write("LT%d/LR%d %.6f\n" % (b, b, t))
        i += n
    sent.close()
    with open(sys.argv[6], "w") as f:
        f.write("%d %.6f %.6f %.3f\n" % (i, first, time.time(), behind))


if __name__ == "__main__":
    main()
