#!/usr/bin/env python3
"""Posts one event a request to the collector's POST /v1/events, N rounds,
each round with three tokens, each on its own keep-alive connection: KEEP
(in the tokens file before and after the reload), GONE (removed by it) and
NEW (added by it), while the test reloads the collector (SIGHUP).

  reload_client.py HOST PORT N DIR CANARY

DIR/progress holds the rounds done; the test creates DIR/hup-sent just
before it sends SIGHUP and DIR/reloaded once the collector logged the
reload. A request started before hup-sent must be answered as the old
tokens say, one started after reloaded as the new ones say; in between
either. Requests started after reloaded carry CANARY (added to the
canaries file by the reload). Event ids accepted are written to
DIR/accepted, one a line. Prints a JSON object: "violations" (each a
request answered against the rules; must be none), "conn_errors" on the
KEEP connection (must be 0), counts per token and phase.
"""
import http.client
import json
import os
import sys


def event(eid, name, canary):
    attrs = {"command": "make test # %s" % eid}
    if canary:
        attrs["note"] = "x " + canary + " y"
    return (json.dumps({
        "schema": "sandtrail.event.v1", "event_id": eid,
        "ts": "2026-11-29T12:00:00Z", "source": {"kind": "sandbox", "name": name},
        "task_id": "T-RELOAD", "run_id": "run-reload", "type": "exec", "attrs": attrs},
        separators=(",", ":")) + "\n").encode()


def main():
    host, port, n, d, canary = (sys.argv[1], int(sys.argv[2]), int(sys.argv[3]),
                                sys.argv[4], sys.argv[5])
    tokens = {"keep": ("keep-token-0123456789", "sbx-keep"),
              "gone": ("gone-token-0123456789", "sbx-gone"),
              "new": ("new-token-0123456789ab", "sbx-new")}
    conns = {k: http.client.HTTPConnection(host, port, timeout=60) for k in tokens}
    stats = {"violations": [], "conn_errors": 0, "reconnects": 0}
    accepted = open(os.path.join(d, "accepted"), "w")
    for i in range(n):
        for k, (tok, name) in tokens.items():
            phase = ("after" if os.path.exists(os.path.join(d, "reloaded")) else
                     "during" if os.path.exists(os.path.join(d, "hup-sent")) else "before")
            eid = "rl-%s-%d" % (k, i)
            body = event(eid, name, canary if phase == "after" else None)
            status = None
            for attempt in range(2):
                try:
                    conns[k].request("POST", "/v1/events", body=body, headers={
                        "Authorization": "Bearer " + tok,
                        "Content-Type": "application/x-ndjson"})
                    r = conns[k].getresponse()
                    answer = r.read()
                    status = r.status
                    break
                except (OSError, http.client.HTTPException):
                    # a 401 may close the connection (its body was not read)
                    if k == "keep":
                        stats["conn_errors"] += 1
                    conns[k].close()
                    conns[k] = http.client.HTTPConnection(host, port, timeout=60)
                    stats["reconnects"] += 1
            key = "%s_%s_%s" % (k, phase, status)
            stats[key] = stats.get(key, 0) + 1
            if status == 200:
                a = json.loads(answer)
                if a.get("accepted") != 1:
                    stats["violations"].append("%s: %s" % (eid, answer.decode()[:200]))
                else:
                    accepted.write(eid + "\n")
            if status == 401 and conns[k].sock is not None:
                conns[k].close()  # the next request opens a new one
            allowed = {"keep": {"before": [200], "during": [200], "after": [200]},
                       "gone": {"before": [200], "during": [200, 401], "after": [401]},
                       "new": {"before": [401], "during": [200, 401], "after": [200]}}
            if status not in allowed[k][phase]:
                stats["violations"].append("%s (%s): %s" % (eid, phase, status))
        accepted.flush()
        with open(os.path.join(d, "progress.tmp"), "w") as f:
            f.write("%d\n" % (i + 1))
        os.rename(os.path.join(d, "progress.tmp"), os.path.join(d, "progress"))
    accepted.close()
    print(json.dumps(stats))


if __name__ == "__main__":
    main()
