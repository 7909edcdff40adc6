#!/usr/bin/env python3
"""Posts N native events to the collector's POST /v1/events, BATCH a request,
at about RATE events/s, as a well-behaved source would: a 503 or a refused
connection is retried after Retry-After (or 1 s), the same batch again.

  post_events.py URL TOKEN N BATCH RATE PROGRESS_FILE

Event ids are "o-<i>", i in 0..N-1. PROGRESS_FILE holds the number of events
acknowledged so far. Prints one JSON object at the end: acknowledged events,
requests answered 200, 503 answers, connection errors, and the events
rejected by the collector (which must be none).
"""
import json
import sys
import time
import urllib.error
import urllib.request


def body(first, last):
    lines = []
    for i in range(first, last):
        lines.append(json.dumps({
            "schema": "sandtrail.event.v1", "event_id": "o-%d" % i,
            "ts": "2026-11-29T12:%02d:%02d.%06dZ" % (i // 60000 % 60, i // 1000 % 60, i % 1000),
            "source": {"kind": "sandbox", "name": "sbx-outage"},
            "task_id": "T-OUT%d" % (i % 50), "run_id": "run-out%d" % (i % 7),
            "type": "exec", "attrs": {"command": "make test -j2 # step %d" % i}},
            separators=(",", ":")))
    return ("\n".join(lines) + "\n").encode()


def main():
    url, token, n, batch, rate, progress = (sys.argv[1], sys.argv[2], int(sys.argv[3]),
                                            int(sys.argv[4]), float(sys.argv[5]), sys.argv[6])
    stats = {"acknowledged": 0, "ok": 0, "unavailable": 0, "conn_errors": 0, "rejected": 0}
    start = time.monotonic()
    for first in range(0, n, batch):
        last = min(n, first + batch)
        data = body(first, last)
        while True:
            req = urllib.request.Request(url, data=data, method="POST", headers={
                "Authorization": "Bearer " + token, "Content-Type": "application/x-ndjson"})
            try:
                with urllib.request.urlopen(req, timeout=120) as r:
                    answer = json.load(r)
                stats["ok"] += 1
                stats["rejected"] += answer.get("rejected", 0)
                break
            except urllib.error.HTTPError as e:
                if e.code != 503:
                    raise
                stats["unavailable"] += 1
                time.sleep(float(e.headers.get("Retry-After", "1")))
            except (urllib.error.URLError, ConnectionError):
                stats["conn_errors"] += 1
                time.sleep(1)
        stats["acknowledged"] = last
        with open(progress, "w") as f:
            f.write("%d\n" % last)
        ahead = last / rate - (time.monotonic() - start)
        if ahead > 0:
            time.sleep(ahead)
    print(json.dumps(stats))


if __name__ == "__main__":
    main()
