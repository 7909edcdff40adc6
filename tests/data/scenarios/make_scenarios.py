#!/usr/bin/env python3
"""Writes the detector scenarios (NAME.ndjson) of tests/integration/test_detectors.c.

Each scenario has runs that must fire and benign runs that come close: under
the threshold, or the same pattern spread out in time. The expected findings
(NAME.expected) are written by hand from the detector's documented rules, not
generated, so that a change of behaviour shows up as a test failure.
"""
import json
import os

HERE = os.path.dirname(os.path.abspath(__file__))


def ev(eid, ts, kind, name, task, run, typ, **kw):
    e = {"schema": "sandtrail.event.v1", "event_id": eid, "ts": ts,
         "source": {"kind": kind, "name": name}, "task_id": task, "run_id": run,
         "type": typ}
    platform = kw.pop("platform", None)
    if platform:
        e["source"]["platform"] = platform
    e.update(kw)
    return e


def t(hour, s):
    m, sec = divmod(s, 60)
    h, m = divmod(m, 60)
    return "2026-11-29T%02d:%02d:%02d.000Z" % (hour + h, m, sec)


def req(eid, ts, task, run, host, path="/", status=200, decision=None, **attrs):
    a = {"method": "GET", "host": host, "port": 443, "path": path, "status": status}
    a.update(attrs)
    kw = {"attrs": a}
    if decision:
        kw["decision"] = decision
    return ev(eid, ts, "proxy", "squid", task, run, "request", **kw)


def write(name, events):
    events.sort(key=lambda e: (e["ts"], e["event_id"]))
    with open(os.path.join(HERE, name + ".ndjson"), "w") as f:
        for e in events:
            f.write(json.dumps(e, separators=(",", ":")) + "\n")


def denial_burst():
    out = []
    # fires, medium: 10 denials in 45 s to 2 targets
    for i in range(10):
        out.append(req("db-a-%d" % i, t(9, i * 5), "T-DB", "run-db-medium",
                       ["a.example", "b.example"][i % 2], status=403, decision="deny"))
    # fires, high: 9 proxy denials to 5 hosts and 2 broker denials, 6 targets
    for i in range(9):
        out.append(req("db-b-%d" % i, t(9, 100 + i * 5), "T-DB", "run-db-high",
                       "h%d.example" % (i % 5), status=403, decision="deny"))
    for i in range(2):
        out.append(ev("db-b-v%d" % i, t(9, 147 + i), "broker", "vault", "T-DB",
                      "run-db-high", "token_deny", decision="deny",
                      attrs={"requested_scope": "admin:org"}))
    # two bursts five minutes apart: two findings
    for i in range(10):
        out.append(req("db-c-%d" % i, t(9, 200 + i * 3), "T-DB2", "run-db-twice",
                       "x.example", status=403, decision="deny"))
        out.append(req("db-c2-%d" % i, t(9, 600 + i * 3), "T-DB2", "run-db-twice",
                       "x.example", status=403, decision="deny"))
    # benign: 9 denials in 40 s; 10 denials over 10 minutes; 30 allowed
    for i in range(9):
        out.append(req("db-d-%d" % i, t(9, 50 + i * 5), "T-DB3", "run-db-nine",
                       "c.example", status=403, decision="deny"))
    for i in range(10):
        out.append(req("db-e-%d" % i, t(9, i * 61), "T-DB3", "run-db-spread",
                       "d.example", status=403, decision="deny"))
    for i in range(30):
        out.append(req("db-f-%d" % i, t(9, i * 2), "T-DB3", "run-db-allowed", "pypi.org"))
    write("denial_burst", out)


def retry_across_paths():
    out = []
    # fires, high: refused at /upload, then three other paths and hosts, one
    # goes through
    out.append(req("rp-a-0", t(10, 0), "T-RP", "run-rp-probe", "paste.example",
                   "/upload", status=403, decision="deny"))
    out.append(req("rp-a-1", t(10, 10), "T-RP", "run-rp-probe", "paste.example",
                   "/api/v2/upload", status=403, decision="deny"))
    out.append(req("rp-a-2", t(10, 20), "T-RP", "run-rp-probe", "gist.example",
                   "/create", status=404))
    out.append(req("rp-a-3", t(10, 30), "T-RP", "run-rp-probe", "files.example",
                   "/put", status=200))
    # fires, medium: broker refuses a scope, the run asks for three others
    for i, scope in enumerate(["admin:org", "repo:admin", "org:write", "packages:write"]):
        out.append(ev("rp-b-%d" % i, t(10, 100 + i * 20), "broker", "vault", "T-RP",
                      "run-rp-scopes", "token_deny", decision="deny",
                      attrs={"requested_scope": scope}))
    # benign: refused, then retries of the same target only
    for i in range(5):
        out.append(req("rp-c-%d" % i, t(10, i * 10), "T-RP2", "run-rp-retry",
                       "paste.example", "/upload", status=403, decision="deny"))
    # benign: refused, then three other targets spread over more than 120 s
    out.append(req("rp-d-0", t(10, 0), "T-RP2", "run-rp-slow", "paste.example",
                   "/upload", status=403, decision="deny"))
    for i in range(3):
        out.append(req("rp-d-%d" % (i + 1), t(10, 100 + i * 100), "T-RP2", "run-rp-slow",
                       "site%d.example" % i, "/x"))
    # benign: many different targets, nothing refused
    for i in range(8):
        out.append(req("rp-e-%d" % i, t(10, i * 5), "T-RP2", "run-rp-clean",
                       "h%d.example" % i, "/p%d" % i))
    write("retry_across_paths", out)


def volume_anomaly():
    out = []
    # fires on requests: 1,005 requests within 10 minutes (budget 1,000)
    for i in range(1005):
        out.append(req("va-a-%d" % i, t(11, i // 2), "T-VA", "run-va-chatty", "pypi.org",
                       bytes_out=100))
    # fires on bytes, high: 3 uploads of 40 MB within 2 minutes (budget 50 MB)
    for i in range(3):
        out.append(req("va-b-%d" % i, t(11, 60 + i * 40), "T-VA", "run-va-exfil",
                       "files.example", "/put", bytes_out=40 * 1024 * 1024))
    # benign: 1,000 requests, exactly the budget
    for i in range(1000):
        out.append(req("va-c-%d" % i, t(11, i // 2), "T-VA2", "run-va-budget", "pypi.org",
                       bytes_out=100))
    # benign: 60 MB, but 30 MB each 11 minutes apart
    for i in range(2):
        out.append(req("va-d-%d" % i, t(11, i * 660), "T-VA2", "run-va-spread",
                       "files.example", "/put", bytes_out=30 * 1024 * 1024))
    write("volume_anomaly", out)


def scope_drift():
    out = []

    def broker(eid, s, run, typ, task="T-SD", **kw):
        return ev(eid, t(12, s), "broker", "vault", task, run, typ, **kw)

    issue = {"subject": "agent", "scopes": ["repo:read", "packages:*"],
             "audience": "github.com"}
    # one credential per misuse, each issued to its run
    for cred, run in [("acc-scope", "run-sd-scope"), ("acc-aud", "run-sd-aud"),
                      ("acc-exp", "run-sd-exp"), ("acc-rev", "run-sd-rev"),
                      ("acc-ok", "run-sd-ok"), ("acc-replay", "run-sd-owner")]:
        out.append(broker("sd-i-" + cred, 0, run, "token_issue",
                          identity=dict(issue, credential_id=cred),
                          attrs={"expires_at": t(12, 600)}))
    out.append(broker("sd-u-scope", 10, "run-sd-scope", "token_use",
                      identity={"credential_id": "acc-scope"},
                      attrs={"operation": "repo:write", "audience": "github.com"}))
    out.append(broker("sd-u-aud", 10, "run-sd-aud", "token_use",
                      identity={"credential_id": "acc-aud"},
                      attrs={"operation": "repo:read", "audience": "npmjs.com"}))
    out.append(broker("sd-u-exp", 700, "run-sd-exp", "token_use",
                      identity={"credential_id": "acc-exp"},
                      attrs={"operation": "repo:read", "audience": "github.com"}))
    out.append(broker("sd-r-rev", 20, "run-sd-rev", "token_revoke",
                      identity={"credential_id": "acc-rev"}))
    out.append(broker("sd-u-rev", 30, "run-sd-rev", "token_use",
                      identity={"credential_id": "acc-rev"},
                      attrs={"operation": "repo:read", "audience": "github.com"}))
    out.append(broker("sd-u-replay", 40, "run-sd-thief", "token_use",
                      identity={"credential_id": "acc-replay"},
                      attrs={"operation": "repo:read", "audience": "github.com"}))
    # benign: uses within scope (a wildcard scope included), before expiry
    for i, op in enumerate(["repo:read", "packages:write", "packages:read"]):
        out.append(broker("sd-u-ok-%d" % i, 50 + i, "run-sd-ok", "token_use",
                          identity={"credential_id": "acc-ok"},
                          attrs={"operation": op, "audience": "github.com"}))
    # a scope requested in a loop: 3 denials in 4 minutes
    for i in range(3):
        out.append(broker("sd-d-%d" % i, 100 + i * 120, "run-sd-loop", "token_deny",
                          decision="deny", attrs={"requested_scope": "admin:org"}))
    # benign: 3 denials over 25 minutes
    for i in range(3):
        out.append(broker("sd-d2-%d" % i, 100 + i * 700, "run-sd-patient", "token_deny",
                          decision="deny", attrs={"requested_scope": "admin:org"}))
    write("scope_drift", out)


def agg_allowlist_drift():
    out = []
    # one destination allowed by three platforms and denied by a fourth
    for i, platform in enumerate(["squid", "smokescreen", "envoy"]):
        out.append(req("al-a-%d" % i, t(13, i * 10), "T-AL%d" % i, "run-al", "drift.example",
                       platform=platform) | {"source": {"kind": "proxy", "name": platform,
                                                        "platform": platform}})
    out.append(dict(req("al-d-0", t(13, 40), "T-AL9", "run-al", "drift.example",
                        status=403, decision="deny"),
                    source={"kind": "proxy", "name": "strict", "platform": "strict"}))
    # benign: allowed by two platforms, denied by a third
    for i, platform in enumerate(["squid", "smokescreen"]):
        out.append(dict(req("al-b-%d" % i, t(13, i * 10), "T-AL%d" % i, "run-al",
                            "two.example"),
                        source={"kind": "proxy", "name": platform, "platform": platform}))
    out.append(dict(req("al-b-9", t(13, 40), "T-AL9", "run-al", "two.example",
                        status=403, decision="deny"),
                    source={"kind": "proxy", "name": "strict", "platform": "strict"}))
    write("agg_allowlist_drift", out)


if __name__ == "__main__":
    denial_burst()
    retry_across_paths()
    volume_anomaly()
    scope_drift()
    agg_allowlist_drift()
