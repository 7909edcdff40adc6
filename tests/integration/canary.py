#!/usr/bin/env python3
"""The canary test's driver (tests/integration/test_canary.c).

  canary.py run DIR COLLECTOR [-X name=value ...]
  canary.py check DIR

run: puts each secret of tests/data/canary/secrets.txt (every token shape,
and the canary of canaries.txt) into every string field, and as an object
key, of a real-shaped line of every format (native, squid, smokescreen, srt,
vault), and sends the lines through every input of the collector: --input
FILE, --follow FILE (appended while it runs) and --listen (POST
/v1/events, one token per source). The collector writes to the topics named
by SANDTRAIL_TOPIC_EVENTS / SANDTRAIL_TOPIC_DLQ. Its stderr, its metrics page
and the HTTP answers are kept in DIR/sinks/. A decoded format's events are
named "<format>-<input>" (input.source_name); native lines carry that name
themselves. DIR/forbidden.txt lists "rule<TAB>string" that must appear
nowhere: each raw value, and for srt the base64 form the format carries.
Extra -X settings go to every collector (the test breaks a rule this way).

check: reads DIR/events.txt (the events topic, one message a line) and
prints, for every format, input and rule, "missing FORMAT INPUT RULE" when
no event of that format and input carries the rule's marker, and for every
rule "fingerprints RULE N" with N the number of different fingerprints the
rule produced across all formats and inputs (1: the same secret, the same
fingerprint, whatever the source).
"""
import base64
import json
import os
import re
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.parse
import urllib.request

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
DATA = os.path.join(ROOT, "tests", "data", "canary")
FORMATS = ("native", "squid", "smokescreen", "srt", "vault")
INPUTS = ("file", "follow", "http")


def _free_ports(n):
    """n distinct free ports, the kernel's choice (as free_port.py and
    world.c do), so that no other test, here or in another checkout, posts
    to our collectors"""
    held = []
    for _ in range(n):
        s = socket.socket()
        s.bind(("127.0.0.1", 0))
        held.append(s)
    ports = [s.getsockname()[1] for s in held]
    for s in held:
        s.close()
    return ports


_PORT, _METRICS_PORT = _free_ports(2)
HTTP = "127.0.0.1:%d" % _PORT
METRICS = "127.0.0.1:%d" % _METRICS_PORT
# the source each format's events claim, for the HTTP tokens
KIND = {"squid": "proxy", "smokescreen": "proxy", "srt": "sandbox", "vault": "broker"}


# shapes this test adds to tests/data/canary/secrets.txt (which
# test_redaction's fixed events also cover)
EXTRA = [("aws_secret_key", "Zq8uV3mK/7tYp2Lx+R4wN9bC6dF1gH5jS0eA2oIu"),
         ("vault_token", "hvs.CAESIKx9Qm2Lp7Rt4Wv8Zc1Tn6Yb3Hd5Jf0Gk")]


def secrets():
    out = []
    with open(os.path.join(DATA, "secrets.txt")) as f:
        for line in f:
            rule, value = line.rstrip("\n").split("\t")
            out.append((rule, value))
    return out + EXTRA


def pct_all(s):
    """Every byte percent-encoded: no rule sees the plain value."""
    return "".join("%%%02X" % b for b in s.encode())


def json_u(s):
    """Every other char a JSON \\u escape, '/' as \\/ (raw JSON text)."""
    return "".join(("\\u%04x" % ord(c)) if i % 2 else c
                   for i, c in enumerate(s)).replace("/", "\\/")


def encoded():
    """Encoded forms of some secrets (issue 14 item 3), and markers sent by a
    source (item 4): (rule, value as put into a field, raw-line rewrite or
    None, strings that must appear nowhere). The decoded secret must get the
    same marker and fingerprint as the plain one."""
    sec = dict(secrets())
    gh, aws = sec["github_token"], sec["aws_secret_key"]
    canary = sec["canary"]
    zw = gh[:10] + "\u200b" + gh[10:20] + "\u00ad" + gh[20:]
    out = [
        # a percent-encoded AWS secret in a logged URL query (%2F, %2B)
        ("aws_secret_key", "GET /s3?aws_secret_access_key=%s&x=1"
         % urllib.parse.quote(aws, safe=""), None,
         [urllib.parse.quote(aws, safe="")]),
        # a URL-encoded bearer token
        ("bearer", "h=" + pct_all("Authorization: Bearer " + sec["bearer"]), None,
         [pct_all(sec["bearer"])]),
        # base64 of a GitHub token
        ("github_token", "echo %s | base64 -d" % base64.b64encode(gh.encode()).decode(),
         None, [base64.b64encode(gh.encode()).decode()]),
        # zero-width characters inside a token (JSON-escaped in the line)
        ("github_token", "x %s y" % zw, None, [gh[:10] + "\u200b" + gh[10:20]]),
        # a token split by \u escapes and \/ (raw JSON text: the text pass
        # over a rejected line must decode it)
        ("aws_secret_key", "aws_secret_access_key=@AWSU@", ("@AWSU@", json_u(aws)),
         [json_u(aws)]),
        ("github_token", "x @GHU@ y", ("@GHU@", json_u(gh)), [json_u(gh)]),
        # a source's own marker around the canary, and one whose rule holds
        # terminal escapes (an OSC 52 clipboard write): as a member name it
        # also reaches token_write's summaries
        ("canary", "[REDACTED:canary:%s]" % canary, None, []),
        ("canary", "[REDACTED:\x1b]52;c;ZXZpbA==\x07:0123456789abcdef]", None, []),
    ]
    return out


def in_context(rule, value):
    """The secret as a source would write it."""
    if rule == "private_key":
        return ("-----BEGIN RSA PRIVATE KEY-----\n%s\n-----END RSA PRIVATE KEY-----"
                % value)
    if rule == "bearer":
        return "Authorization: Bearer " + value
    if rule == "url_userinfo":
        return "https://deploy:%s@git.example.com/r.git" % value
    if rule == "aws_secret_key":
        return "aws_secret_access_key=" + value
    if rule == "vault_token":
        return "X-Vault-Token: " + value
    return "x " + value + " y"


def templates(fmt, inp):
    """Real-shaped lines of fmt; native ones named for the input."""
    if fmt == "native":
        base = {"schema": "sandtrail.event.v1", "ts": "2026-11-29T12:00:01.000Z",
                "task_id": "T-CAN", "run_id": "run-can"}
        sbx = {"kind": "sandbox", "name": "native-" + inp}
        brk = {"kind": "broker", "name": "native-" + inp + "-broker"}
        return [
            dict(base, event_id="n-exec", source=sbx, type="exec", trace_id="t-1",
                 attrs={"command": "make", "cwd": "/work", "argv": ["make", "-j2"]}),
            dict(base, event_id="n-write", source=sbx, type="file_write",
                 attrs={"path": "/work/.env", "bytes": 10}, content="KEY=value"),
            dict(base, event_id="n-req", source=sbx, type="request", decision="deny",
                 reason="not in allowlist",
                 attrs={"method": "POST", "host": "api.example.com", "port": 443,
                        "path": "/upload", "headers": {"User-Agent": "curl/8"}}),
            dict(base, event_id="n-issue", source=brk, type="token_issue",
                 identity={"subject": "agent", "credential_id": "acc-1",
                           "credential": "tok-value-1", "scopes": ["repo:read"],
                           "audience": "github.com"}),
        ]
    if fmt == "squid":
        with open(os.path.join(DATA, "..", "samples", "squid-access.sample.json")) as f:
            return [json.loads(f.readline())]
    if fmt == "smokescreen":
        with open(os.path.join(DATA, "..", "samples", "smokescreen.sample.log")) as f:
            lines = [json.loads(l) for l in f if l.startswith("{")]
        return [next(l for l in lines if l.get("msg") == "CANONICAL-PROXY-DECISION"),
                next(l for l in lines if l.get("msg") == "CANONICAL-PROXY-CN-CLOSE")]
    if fmt == "srt":
        with open(os.path.join(DATA, "..", "samples", "srt-violations.sample.jsonl")) as f:
            lines = [json.loads(l) for l in f if l.strip()]
        return [next(l for l in lines if l.get("hook") == "violation-store")]
    if fmt == "vault":
        with open(os.path.join(DATA, "..", "samples", "vault-audit.handwritten.jsonl")) as f:
            return [json.loads(f.readline()), json.loads(f.readline())]
    raise ValueError(fmt)


def leaves(node, path=()):
    """Paths of every string leaf."""
    if isinstance(node, dict):
        for k, v in node.items():
            yield from leaves(v, path + (k,))
    elif isinstance(node, list):
        for i, v in enumerate(node):
            yield from leaves(v, path + (i,))
    elif isinstance(node, str):
        yield path


def objects(node, path=()):
    if isinstance(node, dict):
        yield path
        for k, v in node.items():
            yield from objects(v, path + (k,))
    elif isinstance(node, list):
        for i, v in enumerate(node):
            yield from objects(v, path + (i,))


def put(doc, path, value):
    doc = json.loads(json.dumps(doc))
    node = doc
    for p in path[:-1]:
        node = node[p]
    node[path[-1]] = value
    return doc


def get(doc, path):
    for p in path:
        doc = doc[p]
    return doc


def lines_for(fmt, inp, forbidden):
    out = []
    cases = [(rule, in_context(rule, value), None) for rule, value in secrets()]
    for rule, v, rewrite, bad in encoded():
        cases.append((rule, v, rewrite))
        # as sent, and as a dead-letter record quotes it (JSON-escaped)
        forbidden.update((rule + "-encoded", b) for b in bad)
        forbidden.update((rule + "-encoded", json.dumps(b)[1:-1]) for b in bad)
    for rule, v, rewrite in cases:
        for t in templates(fmt, inp):
            for path in leaves(t):
                if fmt == "srt" and path == ("encodedCommand",):
                    # the command id, which names task and run, as srt
                    # carries it: base64
                    enc = base64.b64encode(("T-CAN/" + v).encode()).decode()
                    forbidden.add((rule, enc))
                    doc = put(t, path, enc)
                else:
                    doc = put(t, path, v)
                out.append(dump(doc, rewrite))
            for path in objects(t):
                doc = json.loads(json.dumps(t))
                obj = get(doc, path)
                obj[v] = "k"
                out.append(dump(doc, rewrite))
    return out


def dump(doc, rewrite):
    line = json.dumps(doc, separators=(",", ":"))
    return line.replace(*rewrite) if rewrite else line


def collector(coll, mode, arg, fmt, inp, extra, sinks):
    args = [coll, mode, arg, "-X", "input.format=" + fmt,
            "-X", "metrics.listen=" + METRICS,
            "-X", "redact.canaries_file=" + os.path.join(DATA, "canaries.txt")] + extra
    if fmt != "native":
        args += ["-X", "input.source_name=%s-%s" % (fmt, inp)]
    err = open(os.path.join(sinks, "%s.%s.log" % (fmt, inp)), "w")
    return subprocess.Popen(args, stderr=err, stdout=err)


def metric(name):
    try:
        with urllib.request.urlopen("http://%s/metrics" % METRICS, timeout=5) as r:
            text = r.read().decode()
    except (urllib.error.URLError, ConnectionError):
        return None, ""
    m = re.search(r"^%s (\d+)" % re.escape(name), text, re.M)
    return (int(m.group(1)) if m else 0), text


def stop(p, what):
    p.terminate()
    rc = p.wait(timeout=60)
    if rc not in (0, 1):
        sys.exit("the collector (%s) exited %d" % (what, rc))


def run(d, coll, extra):
    sinks = os.path.join(d, "sinks")
    os.makedirs(sinks, exist_ok=True)
    forbidden = set((rule, value) for rule, value in secrets())
    for fmt in FORMATS:
        for inp in INPUTS:
            lines = lines_for(fmt, inp, forbidden)
            path = os.path.join(d, "%s.%s.in" % (fmt, inp))
            what = "%s %s" % (fmt, inp)
            if inp == "file":
                with open(path, "w") as f:
                    f.write("\n".join(lines) + "\n")
                p = collector(coll, "--input", path, fmt, inp, extra, sinks)
                rc = p.wait(timeout=120)
                if rc not in (0, 1):
                    sys.exit("the collector (%s) exited %d" % (what, rc))
            elif inp == "follow":
                open(path, "w").close()
                p = collector(coll, "--follow", path, fmt, inp, extra, sinks)
                time.sleep(0.5)
                with open(path, "a") as f:
                    for i, l in enumerate(lines):
                        f.write(l + "\n")
                        if i % 200 == 0:
                            f.flush()
                n = None
                for _ in range(600):
                    n, text = metric("sandtrail_collector_lines_total")
                    if n == len(lines):
                        break
                    time.sleep(0.1)
                if n != len(lines):
                    sys.exit("%s: the collector read %s of %d lines" % (what, n, len(lines)))
                with open(os.path.join(sinks, "%s.%s.metrics" % (fmt, inp)), "w") as f:
                    f.write(text)
                stop(p, what)
            else:
                tokens = os.path.join(d, "tokens.%s" % fmt)
                with open(tokens, "w") as f:
                    if fmt == "native":
                        f.write("canary-sbx-0123456789 sandbox native-http\n")
                        f.write("canary-brk-0123456789 broker native-http-broker\n")
                    else:
                        f.write("canary-tok-0123456789 %s %s-http\n" % (KIND[fmt], fmt))
                p = collector(coll, "--listen", HTTP, fmt, inp,
                              extra + ["-X", "http.tokens_file=" + tokens], sinks)
                for _ in range(100):
                    try:
                        urllib.request.urlopen("http://%s/v1/events" % HTTP, data=b"",
                                               timeout=2)
                    except urllib.error.HTTPError:
                        break
                    except (urllib.error.URLError, ConnectionError):
                        time.sleep(0.1)
                groups = {}
                for l in lines:
                    tok = "canary-tok-0123456789"
                    if fmt == "native":
                        tok = ("canary-brk-0123456789" if '"kind":"broker"' in l
                               else "canary-sbx-0123456789")
                    groups.setdefault(tok, []).append(l)
                with open(os.path.join(sinks, "%s.http.answers" % fmt), "w") as out:
                    for tok, ls in groups.items():
                        req = urllib.request.Request(
                            "http://%s/v1/events" % HTTP, method="POST",
                            data=("\n".join(ls) + "\n").encode(),
                            headers={"Authorization": "Bearer " + tok})
                        with urllib.request.urlopen(req, timeout=120) as r:
                            answer = r.read().decode()
                        out.write(answer + "\n")
                        a = json.loads(answer)
                        if a["accepted"] + a["rejected"] > len(ls):
                            sys.exit("%s: more answers than lines" % what)
                _, text = metric("sandtrail_collector_lines_total")
                with open(os.path.join(sinks, "%s.%s.metrics" % (fmt, inp)), "w") as f:
                    f.write(text)
                stop(p, what)
            print("%s %s %d" % (fmt, inp, len(lines)))
    with open(os.path.join(d, "forbidden.txt"), "w") as f:
        for rule, value in sorted(forbidden):
            f.write("%s\t%s\n" % (rule, value))


MARKER = re.compile(r"\[REDACTED:([a-z_]+):([0-9a-f]+)\]")


def check(d):
    rules = sorted(set(rule for rule, _ in secrets()))
    seen = set()
    fps = {}
    with open(os.path.join(d, "events.txt")) as f:
        for line in f:
            if not line.strip():
                continue
            ev = json.loads(line)
            # a secret put in the source name itself leaves it unknown
            m = re.fullmatch(r"(native|[a-z]+)-(file|follow|http)(-broker)?",
                             ev["source"]["name"])
            for rule, fp in MARKER.findall(line):
                if m:
                    seen.add((m.group(1), m.group(2), rule))
                fps.setdefault(rule, set()).add(fp)
    for fmt in FORMATS:
        for inp in INPUTS:
            for rule in rules:
                if (fmt, inp, rule) not in seen:
                    print("missing %s %s %s" % (fmt, inp, rule))
    for rule in rules:
        print("fingerprints %s %d" % (rule, len(fps.get(rule, ()))))


def main():
    if len(sys.argv) >= 4 and sys.argv[1] == "run":
        extra = sys.argv[4:]
        run(sys.argv[2], sys.argv[3], extra)
    elif len(sys.argv) == 3 and sys.argv[1] == "check":
        check(sys.argv[2])
    else:
        sys.exit(__doc__)


if __name__ == "__main__":
    main()
