#!/usr/bin/env bash
# check_names.sh DIR: fails when an integration test under DIR (its C
# files) gives the shared services a fixed name: a consumer group or Redis
# prefix passed to run() (world.h) as a string literal, or a literal value
# for kafka.group, redis.prefix, kafka.topic.*, SANDTRAIL_GROUP,
# SANDTRAIL_REDIS_PREFIX, SANDTRAIL_TOPIC_* or CREATE DATABASE. Two runs of
# the suite against the same services (two checkouts, or ctest -j) would
# share it: one consumer fences the other (the group's instance id is
# "<group>-1"), a replay finds detector state of another run under the
# prefix, and world_drop() never removes keys outside the world's name.
# Every name comes from the world's (world_init: pid, time, sequence), e.g.
# "%s_replay" of w.name.
# Allowed: kafka.group=sandtrail-analyzer (test_roles: the default group,
# refused before the analyzer connects); kafka.topic.partitions and
# SANDTRAIL_TOPIC_PARTITIONS (a count, not a name).
set -euo pipefail
dir=${1:?usage: check_names.sh DIR}
bad=$(grep -nE \
    '\brun\([^,()]+, *"|\brun\([^,()]+, *[^,()]+, *"|(kafka\.group|redis\.prefix|kafka\.topic\.[a-z]+)=['"'"'"]?[A-Za-z0-9_]|SANDTRAIL_(GROUP|REDIS_PREFIX|TOPIC_[A-Z]+)=['"'"'"]?[A-Za-z0-9_]|CREATE DATABASE [A-Za-z0-9_]' \
    "$dir"/*.c |
    grep -vE 'kafka\.group=sandtrail-analyzer\b|kafka\.topic\.partitions=|SANDTRAIL_TOPIC_PARTITIONS=' ||
    true)
if [ -n "$bad" ]; then
    echo "check_names.sh: fixed names on the shared services (build them from the" \
        "world's name, world.h):" >&2
    echo "$bad" >&2
    exit 1
fi
echo "check_names.sh: every group, prefix, topic and database is the world's"
