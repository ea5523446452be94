#!/usr/bin/env bash
# Installs the Debian package for PostgreSQL 15 into a clean system and uses
# it: a minimal Debian 12 made with debootstrap in a temporary directory,
# Debian's postgresql-15 installed there with apt, then `dpkg -i` of the
# package, a cluster started as `postgres`, CREATE EXTENSION and a call.
# Prints "package: 1 passed, 0 failed" (or "0 passed, 1 failed").
#
#   bash scripts/package_test.sh [path/to/postgresql-15-rate-limiter_*.deb]
set -euo pipefail
cd "$(dirname "$0")/.."
export RL_PG=15
source scripts/lib.sh

if ! command -v debootstrap >/dev/null; then
    retry apt-get update -qq
    retry env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq debootstrap >/dev/null
fi
deb=${1:-}
if [ -z "$deb" ]; then
    built=$(mktemp)
    if ! bash scripts/package.sh >"$built" 2>&1; then
        tail -n 40 "$built"
        rm -f "$built"
        echo "package: 0 passed, 1 failed"
        exit 1
    fi
    deb=$(tail -n 1 "$built")
    rm -f "$built"
fi
mirror=${RL_DEBIAN_MIRROR:-http://deb.debian.org/debian}

root=$(mktemp -d /tmp/rate_limiter_clean_system.XXXXXX)
chmod 755 "$root"   # its / must be readable by postgres
cleanup() {
    umount "$root/proc" 2>/dev/null || true
    rm -rf "$root"
}
trap cleanup EXIT

log "making a clean Debian 12 in $root (debootstrap, minbase)"
debootstrap --variant=minbase bookworm "$root" "$mirror" >"$root.log" 2>&1 || {
    tail -n 20 "$root.log"
    rm -f "$root.log"
    echo "package: 0 passed, 1 failed"
    exit 1
}
rm -f "$root.log"
mount -t proc proc "$root/proc"
# No services start inside, and Debian's postgresql-common makes no cluster.
printf '#!/bin/sh\nexit 101\n' >"$root/usr/sbin/policy-rc.d"
chmod +x "$root/usr/sbin/policy-rc.d"
mkdir -p "$root/etc/postgresql-common/createcluster.d"
echo "create_main_cluster = false" >"$root/etc/postgresql-common/createcluster.d/no-main-cluster.conf"

log "installing postgresql-15, then the package"
retry chroot "$root" env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends postgresql-15 >/dev/null
cp "$deb" "$root/tmp/rate_limiter.deb"
cat >"$root/tmp/check.sql" <<'SQL'
CREATE EXTENSION rate_limiter;
SELECT extversion FROM pg_extension WHERE extname = 'rate_limiter';
SELECT ok FROM rate_limiter.rate_limit('packaged', config => rate_limiter.token_bucket(1, '1 minute'));
SELECT ok FROM rate_limiter.rate_limit('packaged', config => rate_limiter.token_bucket(1, '1 minute'));
DROP EXTENSION rate_limiter;
CREATE EXTENSION rate_limiter VERSION '0.1.0';
ALTER EXTENSION rate_limiter UPDATE;
SELECT extversion FROM pg_extension WHERE extname = 'rate_limiter';
SQL
version=$(sed -n 's/^version = "\(.*\)"$/\1/p' Cargo.toml | head -n 1)
ok=0
if chroot "$root" dpkg -i /tmp/rate_limiter.deb >/dev/null &&
    chroot "$root" su postgres -s /bin/sh -c '
        set -e
        bin=/usr/lib/postgresql/15/bin
        $bin/initdb -D /tmp/data -U postgres --auth=trust --encoding=UTF8 --locale=C >/dev/null
        $bin/pg_ctl -D /tmp/data -l /tmp/server.log -o "-k /tmp -c listen_addresses=" -w start >/dev/null
        $bin/psql -X -q -At -h /tmp -U postgres -d postgres -v ON_ERROR_STOP=1 -f /tmp/check.sql >/tmp/answers
        $bin/pg_ctl -D /tmp/data -m fast -w stop >/dev/null' &&
    [ "$(tr '\n' ' ' <"$root/tmp/answers")" = "$version t f $version " ] &&
    [ -f "$root/usr/share/postgresql/15/rate_limiter/postgres_exporter.yml" ]; then
    ok=1
fi
[ -f "$root/tmp/answers" ] && sed 's/^/  /' "$root/tmp/answers"
if [ $ok = 1 ]; then
    echo "package: 1 passed, 0 failed"
else
    echo "package: 0 passed, 1 failed"
    exit 1
fi
