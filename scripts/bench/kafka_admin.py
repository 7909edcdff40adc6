#!/usr/bin/env python3
"""Small Kafka admin calls over the wire protocol, for the benchmark scripts
(no client library is installed; one broker leads every partition here).

  kafka_admin.py end HOST:PORT TOPIC              sum of the end offsets
  kafka_admin.py lag HOST:PORT TOPIC GROUP        end offsets - GROUP's committed
  kafka_admin.py watch-lag HOST:PORT TOPIC GROUP SINCE MAX OUT
        polls every 100 ms from now; writes to OUT "T LAG" the first time the
        lag is <= MAX after epoch second SINCE (or nothing when killed first)
  kafka_admin.py lag-series HOST:PORT TOPIC GROUP OUT
        appends "T LAG" to OUT every second from now until killed
  kafka_admin.py partitions HOST:PORT TOPIC       the topic's partition count
  kafka_admin.py delete HOST:PORT TOPIC...        DeleteTopics

Idempotent producers write no control records, so in a fresh topic the sum
of the end offsets is the number of messages in it."""
import socket
import struct
import sys
import time


class Conn:
    def __init__(self, addr):
        host, port = addr.rsplit(":", 1)
        self.s = socket.create_connection((host, int(port)), timeout=30)
        self.s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.corr = 0

    def call(self, api, ver, body):
        self.corr += 1
        cid = b"sandtrail-bench"
        req = struct.pack(">hhih", api, ver, self.corr, len(cid)) + cid + body
        self.s.sendall(struct.pack(">i", len(req)) + req)
        resp = self.recv(struct.unpack(">i", self.recv(4))[0])
        if struct.unpack(">i", resp[:4])[0] != self.corr:
            sys.exit("kafka_admin: answer out of order")
        return resp[4:]

    def recv(self, n):
        b = b""
        while len(b) < n:
            chunk = self.s.recv(n - len(b))
            if not chunk:
                sys.exit("kafka_admin: the broker closed the connection")
            b += chunk
        return b


def string(s):
    b = s.encode()
    return struct.pack(">h", len(b)) + b


class Reader:
    def __init__(self, b):
        self.b, self.pos = b, 0

    def int16(self):
        v = struct.unpack_from(">h", self.b, self.pos)[0]
        self.pos += 2
        return v

    def int32(self):
        v = struct.unpack_from(">i", self.b, self.pos)[0]
        self.pos += 4
        return v

    def int64(self):
        v = struct.unpack_from(">q", self.b, self.pos)[0]
        self.pos += 8
        return v

    def str(self):
        n = self.int16()
        if n < 0:
            return None
        v = self.b[self.pos:self.pos + n].decode()
        self.pos += n
        return v


def partitions(c, topic):
    """Metadata v0: the topic's partition ids."""
    r = Reader(c.call(3, 0, struct.pack(">i", 1) + string(topic)))
    for _ in range(r.int32()):  # brokers
        r.int32(); r.str(); r.int32()
    parts = []
    for _ in range(r.int32()):
        err, name = r.int16(), r.str()
        for _ in range(r.int32()):
            _perr, pid, _leader = r.int16(), r.int32(), r.int32()
            for _ in range(r.int32()):
                r.int32()
            for _ in range(r.int32()):
                r.int32()
            if name == topic:
                parts.append(pid)
        if name == topic and err:
            sys.exit("kafka_admin: topic %s: error %d" % (topic, err))
    return sorted(parts)


def end_offsets(c, topic, parts):
    """ListOffsets v1: partition -> end offset."""
    body = struct.pack(">ii", -1, 1) + string(topic) + struct.pack(">i", len(parts))
    for p in parts:
        body += struct.pack(">iq", p, -1)
    r = Reader(c.call(2, 1, body))
    out = {}
    for _ in range(r.int32()):
        r.str()
        for _ in range(r.int32()):
            p, err, _ts, off = r.int32(), r.int16(), r.int64(), r.int64()
            if err:
                sys.exit("kafka_admin: %s/%d: error %d" % (topic, p, err))
            out[p] = off
    return out


def coordinator(addr, group):
    """FindCoordinator v0; one broker here, but ask anyway."""
    c = Conn(addr)
    r = Reader(c.call(10, 0, string(group)))
    err, _node, host, port = r.int16(), r.int32(), r.str(), r.int32()
    if err:
        return c  # no coordinator yet: ask the bootstrap broker
    return Conn("%s:%d" % (host, port))


def committed(c, group, topic, parts):
    """OffsetFetch v1: partition -> committed offset (-1: none)."""
    body = string(group) + struct.pack(">i", 1) + string(topic) + struct.pack(">i", len(parts))
    for p in parts:
        body += struct.pack(">i", p)
    r = Reader(c.call(9, 1, body))
    out = {}
    for _ in range(r.int32()):
        r.str()
        for _ in range(r.int32()):
            p, off = r.int32(), r.int64()
            r.str()
            r.int16()
            out[p] = off
    return out


def lag(c, gc, topic, group, parts):
    ends = end_offsets(c, topic, parts)
    com = committed(gc, group, topic, parts)
    return sum(ends[p] - max(0, com.get(p, -1)) for p in parts)


def main():
    cmd, addr = sys.argv[1], sys.argv[2]
    if cmd == "partitions":
        c = Conn(addr)
        print(len(partitions(c, sys.argv[3])))
    elif cmd == "end":
        c = Conn(addr)
        print(sum(end_offsets(c, sys.argv[3], partitions(c, sys.argv[3])).values()))
    elif cmd == "lag":
        c = Conn(addr)
        topic, group = sys.argv[3], sys.argv[4]
        print(lag(c, coordinator(addr, group), topic, group, partitions(c, topic)))
    elif cmd == "watch-lag":
        topic, group, since, most, out = (sys.argv[3], sys.argv[4], float(sys.argv[5]),
                                          int(sys.argv[6]), sys.argv[7])
        c = Conn(addr)
        parts = partitions(c, topic)
        gc = coordinator(addr, group)
        while True:
            n = lag(c, gc, topic, group, parts)
            t = time.time()
            if t >= since and n <= most:
                with open(out, "w") as f:
                    f.write("%.6f %d\n" % (t, n))
                return
            time.sleep(0.1)
    elif cmd == "lag-series":
        topic, group, out = sys.argv[3], sys.argv[4], sys.argv[5]
        c = Conn(addr)
        parts = partitions(c, topic)
        gc = coordinator(addr, group)
        with open(out, "a") as f:
            while True:
                t = time.time()
                f.write("%.6f %d\n" % (t, lag(c, gc, topic, group, parts)))
                f.flush()
                time.sleep(max(0.0, 1.0 - (time.time() - t)))
    elif cmd == "delete":
        topics = sys.argv[3:]
        body = struct.pack(">i", len(topics)) + b"".join(string(t) for t in topics)
        Conn(addr).call(20, 1, body + struct.pack(">i", 30000))
    else:
        sys.exit(__doc__)


if __name__ == "__main__":
    main()
