# A clean Debian 12 to install into, for scripts/package_test.sh and
# scripts/source_install_test.sh (sourced after scripts/lib.sh): made with
# debootstrap (minbase) in a directory, no service starting inside and no
# cluster made by Debian's postgresql-common; a cluster of its own started
# there as postgres, on the clean system's own socket
# (/var/run/postgresql, port 5432, no TCP); and the check both scripts run
# once the extension is created in a database.

# Makes a clean Debian 12 in the (empty) directory $1, its /proc mounted
# (the caller unmounts it). Prints the tail of debootstrap's log and fails
# when debootstrap does.
make_clean_system() {
    local root=$1 mirror=${RL_DEBIAN_MIRROR:-http://deb.debian.org/debian}
    log "making a clean Debian 12 in $root (debootstrap, minbase)"
    if ! debootstrap --variant=minbase bookworm "$root" "$mirror" >"$root.log" 2>&1; then
        tail -n 20 "$root.log"
        rm -f "$root.log"
        return 1
    fi
    rm -f "$root.log"
    mount -t proc proc "$root/proc"
    printf '#!/bin/sh\nexit 101\n' >"$root/usr/sbin/policy-rc.d"
    chmod +x "$root/usr/sbin/policy-rc.d"
    mkdir -p "$root/etc/postgresql-common/createcluster.d"
    echo "create_main_cluster = false" >"$root/etc/postgresql-common/createcluster.d/no-main-cluster.conf"
}

# Runs the script $2 with sh as postgres in the clean system $1. Nothing of
# this machine's environment (the suite's PGHOST and PGPORT, say) goes in.
as_clean_postgres() {
    chroot "$1" env -i PATH=/usr/bin:/bin su postgres -s /bin/sh -c "$2"
}

# Starts a cluster of Debian's PostgreSQL 15 in the clean system $1 (data
# in /tmp/data) and creates the database $2.
start_clean_cluster() {
    as_clean_postgres "$1" "
        set -e
        bin=/usr/lib/postgresql/15/bin
        \$bin/initdb -D /tmp/data -U postgres --auth=trust --encoding=UTF8 --locale=C >/dev/null
        \$bin/pg_ctl -D /tmp/data -l /tmp/server.log -o '-k /var/run/postgresql -c listen_addresses=' -w start >/dev/null
        \$bin/createdb $2"
}

# Stops it (quietly, if it runs).
stop_clean_cluster() {
    as_clean_postgres "$1" '/usr/lib/postgresql/15/bin/pg_ctl -D /tmp/data -m fast -w stop' >/dev/null 2>&1 || true
}

# In database $2 of the clean system $1, where the extension was just
# created: its version, a call admitted then one refused, and an install
# of 0.1.0 updated to the current version (which needs the released
# scripts). Prints the answers; fails unless they are "version t f
# version" with the version of Cargo.toml.
check_clean_install() {
    local root=$1 database=$2 version answers
    cat >"$root/tmp/check.sql" <<'SQL'
SELECT extversion FROM pg_extension WHERE extname = 'rate_limiter';
SELECT ok FROM rate_limiter.rate_limit('installed', config => rate_limiter.token_bucket(1, '1 minute'));
SELECT ok FROM rate_limiter.rate_limit('installed', config => rate_limiter.token_bucket(1, '1 minute'));
DROP EXTENSION rate_limiter;
CREATE EXTENSION rate_limiter VERSION '0.1.0';
ALTER EXTENSION rate_limiter UPDATE;
SELECT extversion FROM pg_extension WHERE extname = 'rate_limiter';
SQL
    version=$(sed -n 's/^version = "\(.*\)"$/\1/p' Cargo.toml | head -n 1)
    answers=$(as_clean_postgres "$root" \
        "/usr/lib/postgresql/15/bin/psql -X -q -At -d $database -v ON_ERROR_STOP=1 -f /tmp/check.sql" 2>&1) || {
        echo "$answers"
        return 1
    }
    sed 's/^/  /' <<<"$answers"
    [ "$(tr '\n' ' ' <<<"$answers")" = "$version t f $version " ]
}
