#!/usr/bin/env python3
"""A slow-loris against 127.0.0.1 only, for test_http_abuse: N connections
from SRC (another loopback address, so that the per-address limit falls on
the attacker, not on the test's client) each sending one byte of a request's
headers per second for SECS seconds. Writes "ready" to READY once every
connection is attempted; at the end prints how many the server still keeps
open (it should have closed every one at its header deadline).
    slowloris.py PORT N SECS READY [SRC]"""
import socket
import sys
import time

port, n, secs, ready = int(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3]), sys.argv[4]
src = sys.argv[5] if len(sys.argv) > 5 else "127.0.0.2"
msg = b"POST /v1/events HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: 2\r\n\r\n{}"
socks, failed = [], 0
for _ in range(n):
    s = socket.socket()
    s.bind((src, 0))
    s.settimeout(2)
    try:
        s.connect(("127.0.0.1", port))
        s.setblocking(False)
        socks.append(s)
    except OSError:
        failed += 1
        s.close()
with open(ready, "w") as f:
    f.write("ready\n")
open_ = set(range(len(socks)))
for t in range(secs):
    for i in list(open_):
        s = socks[i]
        try:
            if s.recv(4096) == b"":
                open_.discard(i)
                continue
        except BlockingIOError:
            pass
        except OSError:
            open_.discard(i)
            continue
        try:
            s.send(msg[t % len(msg):t % len(msg) + 1])
        except OSError:
            open_.discard(i)
    time.sleep(1)
print("connected=%d failed=%d still_open=%d" % (len(socks), failed, len(open_)))
