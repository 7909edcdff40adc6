#!/usr/bin/env bash
# check_ports.sh DIR: fails when a test under DIR names a fixed TCP port on
# 127.0.0.1. The suite runs in parallel (ctest -j) and beside other
# checkouts: every port a test listens on comes from the kernel
# (world_free_port() in world.c, free_port.py in the shell drivers).
# Allowed: ports used only as "nothing listens here": those below 1000 (no
# test listens there: 0, 1, the discard port 9, ssh's 22) and 19099 (an
# unreachable Kafka, below the kernel's range for free ports).
set -euo pipefail
dir=${1:?usage: check_ports.sh DIR}
# A port made from the pid (20000 + pid % 20000) is fixed too: it may be
# one the kernel gave another process's connection (test_operators' metrics
# port once was, and its analyzer could not listen).
bad=$(grep -nE '127\.0\.0\.1:[0-9]+|--port [0-9]|[^_]port=[0-9]|-p [0-9]{3,5}\b|listen-port [0-9]|http\.server [0-9]|port = [0-9]+ *\+|getpid\(\) *%' \
    "$dir"/*.c "$dir"/*.sh "$dir"/*.py |
    grep -vE '127\.0\.0\.1:([0-9]{1,3}|19099)\b|port=[0-9]{1,3}\b' || true)
if [ -n "$bad" ]; then
    echo "check_ports.sh: fixed ports (use world_free_port() or free_port.py):" >&2
    echo "$bad" >&2
    exit 1
fi
echo "check_ports.sh: no fixed port"
