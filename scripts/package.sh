#!/usr/bin/env bash
# Builds an installable Debian package of the extension for PostgreSQL
# $RL_PG (15 by default; 16, 17 and 18 too), named the way PostgreSQL's own
# extension packages are: target/packages/postgresql-<major>-rate-limiter_<version>-1_amd64.deb.
# It installs into Debian's (and apt.postgresql.org's) layout:
# /usr/lib/postgresql/<major>/lib and /usr/share/postgresql/<major>/extension,
# with the install scripts of the released versions (and the query file for
# postgres_exporter in /usr/share/postgresql/<major>/rate_limiter), and depends on
# postgresql-<major>.
#
#   bash scripts/package.sh            # PostgreSQL 15
#   RL_PG=17 bash scripts/package.sh   # PostgreSQL 17
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/lib.sh

ensure_tools
version=$(sed -n 's/^version = "\(.*\)"$/\1/p' Cargo.toml | head -n 1)
package=postgresql-$RL_PG-rate-limiter
log "packaging $package $version"

# cargo pgrx package builds (release) and lays the files out under
# target/release/rate_limiter-pg<major>/ at the paths pg_config names.
output=$(mktemp)
cargo pgrx package --pg-config "$PG_CONFIG" >"$output" 2>&1 || { cat "$output"; rm -f "$output"; exit 1; }
rm -f "$output"
built=target/release/rate_limiter-pg$RL_PG

staging=$(mktemp -d)
chmod 755 "$staging"
trap 'rm -rf "$staging"' EXIT
lib=$staging/usr/lib/postgresql/$RL_PG/lib
extension=$staging/usr/share/postgresql/$RL_PG/extension
monitoring=$staging/usr/share/postgresql/$RL_PG/rate_limiter
mkdir -p "$lib" "$extension" "$monitoring" "$staging/DEBIAN"
cp "$built$("$PG_CONFIG" --pkglibdir)/rate_limiter.so" "$lib/"
cp "$built$("$PG_CONFIG" --sharedir)"/extension/rate_limiter* "$extension/"
cp sql/released/rate_limiter--*.sql "$extension/"
cp monitoring/postgres_exporter.yml "$monitoring/"
chmod 644 "$extension"/* "$monitoring"/* "$lib"/rate_limiter.so
cat >"$staging/DEBIAN/control" <<CONTROL
Package: $package
Version: $version-1
Architecture: amd64
Section: database
Priority: optional
Depends: postgresql-$RL_PG, libc6 (>= 2.36), libgcc-s1
Maintainer: rate_limiter developers <rate-limiter@localhost>
Description: transactional rate limiting (token bucket, fixed window) for PostgreSQL $RL_PG
 The rate_limiter extension limits application calls inside the
 application's own transaction: a limit's row is locked, the token-bucket or
 fixed-window math runs, and a rollback undoes the consumption.
 CREATE EXTENSION rate_limiter; in the database that uses it.
CONTROL
mkdir -p target/packages
deb=target/packages/${package}_$version-1_amd64.deb
dpkg-deb --root-owner-group --build "$staging" "$deb" >/dev/null
echo "$deb"
