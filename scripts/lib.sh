# Shared shell functions of the rate_limiter scripts (sourced, not run).
#
#   ensure_tools        install what is missing (apt packages, cargo-pgrx 0.18.1,
#                       pgrx's pg15 registration); idempotent
#   install_extension   build (release) and install the extension into the
#                       system PostgreSQL 15
#   start_cluster DIR   initdb + start a throwaway cluster as `postgres` in DIR,
#                       listening on 127.0.0.1:$RL_PORT and a socket in DIR
#   stop_cluster DIR    stop it and delete DIR
#   start_pgbouncer DIR run pgbouncer (transaction pooling) in DIR on
#                       127.0.0.1:$RL_POOLER_PORT in front of that cluster
#   stop_pgbouncer DIR

PG_BIN=/usr/lib/postgresql/15/bin
PG_CONFIG=/usr/bin/pg_config
PGXS_DIR=/usr/lib/postgresql/15/lib/pgxs
RL_PORT=${RL_PORT:-54329}
RL_POOLER_PORT=${RL_POOLER_PORT:-64329}
APT_PACKAGES=(postgresql-15 postgresql-server-dev-15 libclang-dev clang sudo pgbouncer redis-server gnuplot-nox)

log() { printf '\n== %s\n' "$*" >&2; }

ensure_tools() {
    local missing=()
    for package in "${APT_PACKAGES[@]}"; do
        dpkg-query -W -f='${Status}' "$package" 2>/dev/null | grep -q "install ok installed" || missing+=("$package")
    done
    if [ ${#missing[@]} -gt 0 ]; then
        log "installing ${missing[*]}"
        apt-get update -qq
        DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${missing[@]}" >/dev/null
    fi
    # Debian starts a cluster on port 5432 when postgresql is installed; we
    # never use it, but leave it alone.
    if ! cargo pgrx --version 2>/dev/null | grep -q "0.18.1"; then
        log "installing cargo-pgrx 0.18.1 (takes about 5 minutes)"
        cargo install cargo-pgrx --version 0.18.1 --locked
    fi
    if ! grep -qs '^pg15' "$HOME/.pgrx/config.toml"; then
        log "registering PostgreSQL 15 with pgrx"
        cargo pgrx init --pg15 "$PG_CONFIG" >/dev/null
    fi
}

install_extension() {
    log "building and installing the extension (release)"
    local output
    output=$(mktemp)
    cargo pgrx install --release --pg-config "$PG_CONFIG" >"$output" 2>&1 || { cat "$output"; rm -f "$output"; return 1; }
    rm -f "$output"
}

start_cluster() {
    local dir=$1
    mkdir -p "$dir"
    chown postgres:postgres "$dir"
    chmod a+x "$(dirname "$dir")"   # postgres must be able to reach it
    # Encoding and locale are pinned: a machine without a UTF-8 locale would
    # otherwise give an SQL_ASCII cluster (the tests make LATIN1 and
    # SQL_ASCII databases themselves, on purpose).
    sudo -u postgres env -u RUST_BACKTRACE LC_ALL=C "$PG_BIN/initdb" -D "$dir/data" -U postgres \
        --auth=trust --no-sync --encoding=UTF8 --locale=C >/dev/null
    local options="-p $RL_PORT -k $dir -c listen_addresses=127.0.0.1 -c max_connections=200"
    sudo -u postgres env -u RUST_BACKTRACE "$PG_BIN/pg_ctl" -D "$dir/data" -l "$dir/server.log" -w \
        -o "$options" start >/dev/null
    export PGHOST=$dir PGPORT=$RL_PORT PGUSER=postgres
    export RATE_LIMITER_TEST_URL="host=127.0.0.1 port=$RL_PORT user=postgres dbname=postgres"
    # What the crash test needs to restart the server after killing it.
    export RATE_LIMITER_TEST_PGDATA=$dir/data RATE_LIMITER_TEST_PG_OPTIONS=$options
    export RATE_LIMITER_TEST_PG_BIN=$PG_BIN
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
