#!/usr/bin/env python3
"""Watches a gauge of a daemon's Prometheus endpoint, for the benchmarks.

  watch_metric.py URL NAME SINCE MAX OUT [SAMPLES]

Polls URL (http://127.0.0.1:PORT/metrics) every 100 ms from now; writes to
OUT "T VALUE" the first time, at or after epoch second SINCE, that NAME
has at least SAMPLES label sets (default 1) and their values sum to at
most MAX (nothing when killed first). A gauge per partition appears with
the partition's first batch: SAMPLES the topic's partitions, so that a sum
over the first partitions seen is not taken for the whole. bench-restart watches the restarted
analyzer's sandtrail_analyzer_consumer_lag this way: the messages behind
the batch it last handed to its store (processed), where the group's
committed offsets trail by state.checkpoint_ms more."""
import sys
import time
import urllib.request


def total(url, name, samples):
    """The sum of NAME's samples, or None while there are fewer than
    samples (or no answer: the daemon starting)."""
    try:
        with urllib.request.urlopen(url, timeout=2) as r:
            text = r.read().decode()
    except OSError:
        return None
    n, found = 0.0, 0
    for line in text.splitlines():
        if line.startswith(name) and line[len(name):len(name) + 1] in ("{", " "):
            n += float(line.rsplit(" ", 1)[1])
            found += 1
    return n if found >= samples else None


def main():
    url, name, since, most, out = (sys.argv[1], sys.argv[2], float(sys.argv[3]),
                                   float(sys.argv[4]), sys.argv[5])
    samples = int(sys.argv[6]) if len(sys.argv) > 6 else 1
    while True:
        v = total(url, name, samples)
        t = time.time()
        if t >= since and v is not None and v <= most:
            with open(out, "w") as f:
                f.write("%.6f %d\n" % (t, v))
            return
        time.sleep(0.1)


if __name__ == "__main__":
    main()
