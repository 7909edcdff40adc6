#!/usr/bin/env bash
# packaging.sh: builds the Debian packages (scripts/package) and checks
# what an operator installs: the binaries, units, configuration (as
# conffiles), migrations and dashboards are there; dependencies come from
# the libraries linked; the maintainer script only makes the system user;
# every unit's systemd-analyze security exposure is 4.0 or lower.
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fail() { echo "packaging.sh: $*" >&2; exit 1; }

"$root/scripts/package" >/dev/null
col=$(ls "$root"/build-package/sandtrail-collector_*_amd64.deb)
srv=$(ls "$root"/build-package/sandtrail-server_*_amd64.deb)

has() # deb path
{
    dpkg-deb -c "$1" | awk '{print $6}' | grep -qx "./$2" || fail "$(basename "$1") lacks /$2"
}
has "$col" usr/bin/sandtrail-collector
has "$col" lib/systemd/system/sandtrail-collector@.service
has "$col" etc/sandtrail/collector-squid.conf
has "$col" usr/share/sandtrail/schemas/event.v1.schema.json
has "$srv" usr/bin/sandtrail-analyzer
has "$srv" usr/bin/sandtrail
has "$srv" lib/systemd/system/sandtrail-analyzer.service
has "$srv" etc/sandtrail/analyzer.conf
for f in "$root"/sql/*.sql; do has "$srv" "usr/share/sandtrail/sql/$(basename "$f")"; done
if [ -d "$root/alerter" ]; then
    has "$srv" usr/bin/sandtrail-alerter
    has "$srv" lib/systemd/system/sandtrail-alerter.service
fi
if [ -d "$root/dashboards/grafana" ]; then
    for f in "$root"/dashboards/grafana/*.json; do
        has "$srv" "usr/share/sandtrail/dashboards/grafana/$(basename "$f")"
    done
fi
# the two packages install side by side: no file in both
dpkg-deb -c "$col" | awk '{print $6}' | grep -v '/$' | sort >"$tmp/c"
dpkg-deb -c "$srv" | awk '{print $6}' | grep -v '/$' | sort >"$tmp/s"
[ -z "$(comm -12 "$tmp/c" "$tmp/s")" ] || fail "files in both packages: $(comm -12 "$tmp/c" "$tmp/s")"

for deb in "$col" "$srv"; do
    dpkg-deb -f "$deb" Depends | grep -q librdkafka1 || fail "$(basename "$deb"): Depends lacks librdkafka1"
    dpkg-deb -e "$deb" "$tmp/ctl"
    grep -q "^/etc/sandtrail/" "$tmp/ctl/conffiles" || fail "$(basename "$deb"): no conffiles"
    # the maintainer script makes the user and nothing else: no enabling,
    # no starting, no other file
    grep -q "adduser --system" "$tmp/ctl/postinst" || fail "postinst makes no system user"
    ! grep -Eq "systemctl|deb-systemd|invoke-rc|mkdir|chown|rm " "$tmp/ctl/postinst" ||
        fail "postinst does more than make the user"
    rm -rf "$tmp/ctl"
    dpkg-deb -x "$deb" "$tmp/root"
done
dpkg-deb -f "$srv" Depends | grep -q libpq5 || fail "server Depends lacks libpq5"

for unit in "$tmp"/root/lib/systemd/system/*.service; do
    name=$(basename "$unit")
    # a template is analyzed as one instance of it
    [[ $name == *@.service ]] && { cp "$unit" "$tmp/${name/@/@squid}"; unit=$tmp/${name/@/@squid}; }
    line=$(systemd-analyze security --offline=yes "$unit" 2>&1 | tail -1)
    score=$(echo "$line" | grep -Eo '[0-9]+\.[0-9]+' | tail -1)
    [ -n "$score" ] || fail "no exposure for $name: $line"
    awk -v s="$score" 'BEGIN { exit !(s <= 4.0) }' || fail "$name exposure $score > 4.0"
    echo "packaging.sh: $name exposure $score"
done
echo "packaging.sh: packages and units checked"
