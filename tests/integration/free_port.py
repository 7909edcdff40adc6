#!/usr/bin/env python3
"""free_port.py [N]: N (default 1) distinct free TCP ports on 127.0.0.1, on
one line, chosen by the kernel (like world_free_ports in world.c), for the
shell drivers of the integration tests: a fixed port would make a test
unsafe to run beside the others (ctest -j) or beside another checkout."""
import socket
import sys

n = int(sys.argv[1]) if len(sys.argv) > 1 else 1
held = []
for _ in range(n):
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    held.append(s)  # bound until all n are known: they are distinct
print(" ".join(str(s.getsockname()[1]) for s in held))
