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
source scripts/clean_system.sh
fail() {
    echo "package: 0 passed, 1 failed"
    exit 1
}

root=$(mktemp -d /tmp/rate_limiter_clean_system.XXXXXX)
chmod 755 "$root"   # its / must be readable by postgres
cleanup() {
    stop_clean_cluster "$root"
    umount "$root/proc" 2>/dev/null || true
    rm -rf "$root"
}
trap cleanup EXIT

make_clean_system "$root" || fail
log "installing postgresql-15, then the package"
retry chroot "$root" env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends postgresql-15 >/dev/null
cp "$deb" "$root/tmp/rate_limiter.deb"
chroot "$root" dpkg -i /tmp/rate_limiter.deb >/dev/null || fail
[ -f "$root/usr/share/postgresql/15/rate_limiter/postgres_exporter.yml" ] || {
    echo "the package has no postgres_exporter.yml"
    fail
}
start_clean_cluster "$root" packaged || fail
as_clean_postgres "$root" "/usr/lib/postgresql/15/bin/psql -X -q -d packaged -c 'CREATE EXTENSION rate_limiter'" || fail
check_clean_install "$root" packaged || fail
echo "package: 1 passed, 0 failed"
