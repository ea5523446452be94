#!/usr/bin/env bash
# pg_tle (Trusted Language Extensions), for the tests of the portable
# edition's pg_tle install (docs/guarantees.md, "Portable edition"): what
# AWS RDS, Aurora and Supabase let a database owner use to install an
# extension written in SQL and PL/pgSQL.
#
#   bash scripts/pg_tle.sh build   # builds and installs pg_tle into PostgreSQL $RL_PG, unless it is there
#
# The sources are the releases in ../shared/pg_tle (RL_PG_TLE_SOURCES moves
# it), as its README says: 1.5.2 for PostgreSQL 15, the snapshot after it
# (2f4b7b3, whose README names 18) for 16-18. Building needs flex and bison
# (scripts/lib.sh installs them).
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/lib.sh

case "$RL_PG" in
15) PG_TLE_RELEASE=pg_tle-1.5.2 ;;
*) PG_TLE_RELEASE=pg_tle-2f4b7b3 ;;
esac

pg_tle_sources() {
    local candidate
    for candidate in "${RL_PG_TLE_SOURCES:-}" "$PWD/../shared/pg_tle" /work/shared/pg_tle; do
        if [ -n "$candidate" ] && [ -f "$candidate/$PG_TLE_RELEASE.tar.gz" ]; then
            echo "$candidate"
            return 0
        fi
    done
    echo "$PG_TLE_RELEASE.tar.gz not found (../shared/pg_tle; RL_PG_TLE_SOURCES=...)" >&2
    return 1
}

# Builds and installs pg_tle unless this release is installed already (a
# marker file beside its library names the release).
build() {
    ensure_tools
    local lib marker
    lib=$("$PG_CONFIG" --pkglibdir)
    marker="$lib/pg_tle.release"
    if [ -f "$lib/pg_tle.so" ] && [ "$(cat "$marker" 2>/dev/null)" = "$PG_TLE_RELEASE" ]; then
        return 0
    fi
    local sources work
    sources=$(pg_tle_sources)
    work=$(mktemp -d)
    log "building $PG_TLE_RELEASE for PostgreSQL $RL_PG"
    tar xzf "$sources/$PG_TLE_RELEASE.tar.gz" -C "$work"
    (
        cd "$work/$PG_TLE_RELEASE"
        make PG_CONFIG="$PG_CONFIG" >"$work/make.log" 2>&1 &&
            make PG_CONFIG="$PG_CONFIG" install >>"$work/make.log" 2>&1
    ) || {
        tail -n 25 "$work/make.log" 2>/dev/null
        rm -rf "$work"
        return 1
    }
    echo "$PG_TLE_RELEASE" >"$marker"
    rm -rf "$work"
}

case "${1:-}" in
build) build ;;
*)
    echo "usage: $0 build" >&2
    exit 2
    ;;
esac
