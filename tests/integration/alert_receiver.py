#!/usr/bin/env python3
"""A webhook receiver for the alert tests, on 127.0.0.1.

  alert_receiver.py DIR [--secret-file F] [--fail-first N] [--fail-status S]
                        [--retry-after SECONDS] [--status S]
                        [--delay-first SECONDS] [--schema FILE]

Writes its port to DIR/port once listening, and one JSON line per request to
DIR/requests.ndjson (path, delivery id, signature check, body), flushed
before answering. Each delivery id's first N requests get --fail-status
(503) with Retry-After (0); the others get --status (200). --delay-first holds the first request of each delivery
id that long before answering (a slow receiver, to kill a sender
mid-delivery). With a secret, each signature is checked as the README
documents: hex HMAC-SHA256(secret, "<timestamp>.<body>"); with a schema,
each body is validated against it (schema_errors).
"""
import hashlib
import hmac
import http.server
import json
import sys
import threading
import time

args = sys.argv[1:]
out_dir = args.pop(0)
opts = {"--secret-file": None, "--fail-first": "0", "--status": "200", "--delay-first": "0",
        "--schema": None, "--retry-after": "0", "--fail-status": "503"}
while args:
    name, value = args[0], args[1]
    del args[:2]
    opts[name] = value
secret = None
if opts["--secret-file"]:
    with open(opts["--secret-file"], "rb") as f:
        secret = f.read().rstrip(b"\r\n")
validator = None
if opts["--schema"]:
    import jsonschema
    with open(opts["--schema"]) as f:
        validator = jsonschema.Draft202012Validator(json.load(f))
seen = {}
lock = threading.Lock()
log = open(out_dir + "/requests.ndjson", "a")


def verify(headers, body):
    if secret is None:
        return None
    ts = headers.get("X-Sandtrail-Timestamp", "")
    sig = headers.get("X-Sandtrail-Signature", "")
    want = "sha256=" + hmac.new(secret, ts.encode() + b"." + body, hashlib.sha256).hexdigest()
    fresh = ts.isdigit() and abs(time.time() - int(ts)) < 300
    return fresh and hmac.compare_digest(sig, want)


class Handler(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def do_POST(self):
        body = self.rfile.read(int(self.headers.get("Content-Length", "0")))
        delivery = self.headers.get("X-Sandtrail-Delivery", "")
        with lock:
            n = seen[delivery] = seen.get(delivery, 0) + 1
            rec = {"path": self.path, "delivery": delivery, "n": n,
                   "verified": verify(self.headers, body), "body": body.decode(),
                   "received": time.time()}
            if validator:
                errors = [e.message for e in validator.iter_errors(json.loads(body))]
                rec["schema_errors"] = errors
            log.write(json.dumps(rec) + "\n")
            log.flush()
        if n == 1 and float(opts["--delay-first"]) > 0:
            time.sleep(float(opts["--delay-first"]))
        failing = n <= int(opts["--fail-first"])
        status = int(opts["--fail-status"]) if failing else int(opts["--status"])
        self.send_response(status)
        if failing:
            self.send_header("Retry-After", opts["--retry-after"])
        self.send_header("Content-Length", "0")
        self.end_headers()

    def log_message(self, *a):
        pass


srv = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
with open(out_dir + "/port.tmp", "w") as f:
    f.write(str(srv.server_address[1]))
import os
os.rename(out_dir + "/port.tmp", out_dir + "/port")
srv.serve_forever()
