#!/usr/bin/env bash
# A Citus cluster on this machine, for developing and testing the Citus
# support (docs/guarantees.md, "Citus"); scripts/test.sh runs tests/integration/tests/citus/
# against it on PostgreSQL 15 and 18.
#
#   bash scripts/citus.sh build        # build and install Citus into PostgreSQL $RL_PG
#   bash scripts/citus.sh start DIR    # a coordinator and two workers in DIR, rate_limiter created
#   bash scripts/citus.sh stop DIR
#   bash scripts/citus.sh regress OUT  # tests/pg_regress/citus_schedule against the coordinator and worker 1
#   bash scripts/citus.sh node DIR N [citus]  # one more node N (not in the cluster), citus created in it
#   bash scripts/citus.sh stop-node DIR N
#
# Citus comes from the source releases in ../shared/citus (RL_CITUS_SOURCES
# moves it): 13.2.2 for PostgreSQL 15, 14.0.1 for 16-18. 13.2.2 does not
# compile against Debian's 15.20 headers as it is (their dbcommands.h
# exports have_createdb_privilege(), which Citus also defines for < 16): the
# build renames Citus's copy, as ../shared/citus/README.md says. The nodes
# listen on 127.0.0.1, ports $RL_CITUS_PORT (coordinator; by default 25440
# on PostgreSQL 15, 25470 on 18, scripts/lib.sh) and the next two, with
# sockets in DIR; `start` prints their conninfos. When it cannot start them,
# it says why: a port in use and by what, or the last lines of each node's
# server log.
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/lib.sh

CITUS_PORT=$RL_CITUS_PORT
case "$RL_PG" in
15) CITUS_VERSION=13.2.2 ;;
*) CITUS_VERSION=14.0.1 ;;
esac
CITUS_PACKAGES=(liblz4-dev libzstd-dev libkrb5-dev make gcc)

citus_sources() {
    local candidate
    for candidate in "${RL_CITUS_SOURCES:-}" "$PWD/../shared/citus" /work/shared/citus; do
        if [ -n "$candidate" ] && [ -f "$candidate/citus-$CITUS_VERSION.tar.gz" ]; then
            echo "$candidate"
            return 0
        fi
    done
    echo "citus-$CITUS_VERSION.tar.gz not found (../shared/citus; RL_CITUS_SOURCES=...)" >&2
    return 1
}

# Builds and installs Citus unless this version is installed already.
# RL_TOOLS_READY=1: the server is there and the packages installed
# (scripts/test.sh's background build), so ensure_tools, which would also
# register the version with pgrx, is not run.
build() {
    [ "${RL_TOOLS_READY:-0}" = 1 ] || ensure_tools
    local installed
    installed=$(sed -n "s/^default_version = '\(.*\)'/\1/p" "$("$PG_CONFIG" --sharedir)/extension/citus.control" 2>/dev/null || true)
    if [ -f "$("$PG_CONFIG" --pkglibdir)/citus.so" ] && [ "${installed%%-*}" = "${CITUS_VERSION%.*}" ]; then
        return 0
    fi
    local missing=() package
    for package in "${CITUS_PACKAGES[@]}"; do
        dpkg-query -W -f='${Status}' "$package" 2>/dev/null | grep -q "install ok installed" || missing+=("$package")
    done
    if [ ${#missing[@]} -gt 0 ]; then
        retry apt-get update -qq
        retry env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${missing[@]}" >/dev/null
    fi
    local sources work
    sources=$(citus_sources)
    work=$(mktemp -d)
    log "building Citus $CITUS_VERSION for PostgreSQL $RL_PG"
    tar xzf "$sources/citus-$CITUS_VERSION.tar.gz" -C "$work"
    (
        cd "$work"/citus-*
        if [ "$CITUS_VERSION" = 13.2.2 ]; then
            perl -0pi -e 's/static inline bool\nhave_createdb_privilege\(void\)/#define have_createdb_privilege citus_have_createdb_privilege\n$&/' \
                src/include/pg_version_compat.h
        fi
        ./configure PG_CONFIG="$PG_CONFIG" --without-libcurl >"$work/configure.log" 2>&1 &&
            make -j"$(nproc)" with_llvm=no >"$work/make.log" 2>&1 &&
            make with_llvm=no install >>"$work/make.log" 2>&1
    ) || {
        tail -n 25 "$work/configure.log" "$work/make.log" 2>/dev/null
        rm -rf "$work"
        return 1
    }
    rm -rf "$work"
}

node_port() { echo $((CITUS_PORT + $1)); }

start() {
    local dir=$1 node port
    for node in 0 1 2; do
        port=$(node_port "$node")
        # Something listening there would answer in place of the node.
        if (exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null; then
            echo "port $port (node $node) is in use already:" >&2
            ss -ltnp "sport = :$port" >&2 || true
            return 1
        fi
    done
    # Whatever fails from here on (set -e ends the script), the nodes' logs say why.
    trap 'explain_start "$?" "'"$dir"'"' EXIT
    mkdir -p "$dir"
    chown postgres:postgres "$dir"
    let_postgres_reach "$dir"
    let_postgres_reach "$PG_BIN"
    for node in 0 1 2; do
        sudo -u postgres env LC_ALL=C "$PG_BIN/initdb" -D "$dir/node$node" -U postgres --auth=trust --no-sync \
            --encoding=UTF8 --locale=C >/dev/null
        # citus first: it refuses to load after another library.
        sudo -u postgres env -u RUST_BACKTRACE "LD_LIBRARY_PATH=$PG_LIBRARY_PATH" "$PG_BIN/pg_ctl" -D "$dir/node$node" \
            -l "$dir/node$node.log" -w -o "-p $(node_port $node) -k $dir -c listen_addresses=127.0.0.1 \
            -c shared_preload_libraries=citus,rate_limiter -c max_prepared_transactions=100 \
            -c max_connections=200 -c wal_level=logical -c citus.node_conninfo=sslmode=disable" start >/dev/null
        psql_node "$node" -c "CREATE EXTENSION citus" >/dev/null
    done
    psql_node 0 -c "SELECT citus_set_coordinator_host('127.0.0.1', $(node_port 0))" \
        -c "SELECT citus_add_node('127.0.0.1', $(node_port 1))" \
        -c "SELECT citus_add_node('127.0.0.1', $(node_port 2))" >/dev/null
    # Created on the coordinator, Citus creates it on the workers too.
    psql_node 0 -c "CREATE EXTENSION rate_limiter" >/dev/null
    local workers
    workers=$(psql_node 0 -c "SELECT count(*) FROM citus_get_active_worker_nodes()")
    [ "$workers" = 2 ] || { echo "the coordinator sees $workers active workers, not 2" >&2; return 1; }
    trap - EXIT
    for node in 0 1 2; do
        echo "host=127.0.0.1 port=$(node_port $node) user=postgres dbname=postgres"
    done
}

# The EXIT trap of a start that failed (status $1): the last lines of each
# node's server log in DIR ($2), on standard error.
explain_start() {
    local status=$1 dir=$2 node
    [ "$status" = 0 ] && return 0
    echo "the Citus cluster in $dir did not start (exit status $status)" >&2
    for node in 0 1 2; do
        for file in "$dir/node$node.log" "$dir/node$node/log/"*; do
            [ -f "$file" ] || continue
            echo "--- node $node (port $(node_port "$node")), the end of $file:" >&2
            tail -n 15 "$file" >&2
        done
    done
}

# Starts one more node, number N (port $RL_CITUS_PORT + N), in DIR beside
# the cluster's, not yet in the cluster (for the tests of adding a node):
# Citus created in it, rate_limiter preloaded unless PRELOAD is "citus"
# (then only citus is). Prints its conninfo.
start_node() {
    local dir=$1 node=$2 preload=${3:-citus,rate_limiter}
    let_postgres_reach "$dir"
    let_postgres_reach "$PG_BIN"
    [ -d "$dir/node$node" ] || sudo -u postgres env LC_ALL=C "$PG_BIN/initdb" -D "$dir/node$node" -U postgres \
        --auth=trust --no-sync --encoding=UTF8 --locale=C >/dev/null
    sudo -u postgres env -u RUST_BACKTRACE "LD_LIBRARY_PATH=$PG_LIBRARY_PATH" "$PG_BIN/pg_ctl" -D "$dir/node$node" \
        -l "$dir/node$node.log" -w -o "-p $(node_port "$node") -k $dir -c listen_addresses=127.0.0.1 \
        -c shared_preload_libraries=$preload -c max_prepared_transactions=100 \
        -c max_connections=200 -c wal_level=logical -c citus.node_conninfo=sslmode=disable" start >/dev/null
    psql_node "$node" -c "CREATE EXTENSION IF NOT EXISTS citus" >/dev/null
    echo "host=127.0.0.1 port=$(node_port "$node") user=postgres dbname=postgres"
}

# Stops node N of DIR and deletes its data directory.
stop_node() {
    local dir=$1 node=$2
    [ -f "$dir/node$node/postmaster.pid" ] && sudo -u postgres "$PG_BIN/pg_ctl" -D "$dir/node$node" -m fast -w -t 60 stop >/dev/null 2>&1
    rm -rf "${dir:?}/node$node"
}

psql_node() {
    local node=$1
    shift
    env "LD_LIBRARY_PATH=$PG_LIBRARY_PATH" "$PG_BIN/psql" -X -q -At -v ON_ERROR_STOP=1 -h 127.0.0.1 -p "$(node_port "$node")" -U postgres -d postgres "$@"
}

# Stops each node (fast; immediate if that has not ended it within 60 s;
# SIGKILL as the last resort), so that none is left holding its port, then
# deletes DIR.
stop() {
    local dir=$1 node data pid
    for node in 0 1 2 3; do
        data=$dir/node$node
        [ -f "$data/postmaster.pid" ] || continue
        pid=$(head -n 1 "$data/postmaster.pid")
        sudo -u postgres "$PG_BIN/pg_ctl" -D "$data" -m fast -w -t 60 stop >/dev/null 2>&1 && continue
        echo "node $node did not stop within 60 s (fast shutdown): stopping it with an immediate shutdown" >&2
        sudo -u postgres "$PG_BIN/pg_ctl" -D "$data" -m immediate -w -t 30 stop >/dev/null 2>&1 && continue
        echo "node $node did not stop (immediate shutdown): SIGKILL to its postmaster $pid and its processes" >&2
        pkill -KILL -P "$pid" 2>/dev/null || true
        kill -KILL "$pid" 2>/dev/null || true
    done
    rm -rf "$dir"
}

# The pg_regress schedule tests/pg_regress/citus_schedule, unchanged, against
# the coordinator and then worker 1 of a distributed install (results in
# OUT/coordinator and OUT/worker): each run starts from empty tables, freshly
# distributed. The tests' sessions run with citus.enable_ddl_propagation =
# off, so their helper objects (temporary functions, tables) stay on the
# node they are made on, as on one server; rate_limiter.max_requests is
# raised on every node, as all_or_nothing raises it in its session (a
# rate_limit_all is bounded on each node it reaches).
regress() {
    local out=$1 node name status=0
    mkdir -p "$out"
    chmod -R a+rwX "$out"
    for node in 0 1 2; do
        psql_node "$node" -c "ALTER SYSTEM SET rate_limiter.max_requests = 10000" -c "SELECT pg_reload_conf()" >/dev/null
    done
    for node in 0 1; do
        name=$([ "$node" = 0 ] && echo coordinator || echo worker)
        psql_node 0 -c "SET client_min_messages = warning" -c "SELECT rate_limiter.undistribute()" \
            -c "DELETE FROM rate_limiter.rate_limits" -c "DELETE FROM rate_limiter.definitions" \
            -c "SELECT rate_limiter.distribute()" >/dev/null
        # The run counts only if the state table is distributed as distribute() does it.
        if [ "$(psql_node 0 -c "SELECT partmethod FROM pg_dist_partition WHERE logicalrelid = 'rate_limiter.rate_limits'::regclass")" != h ]; then
            echo "rate_limiter.rate_limits is not distributed: the $name run would test nothing" >&2
            status=1
            continue
        fi
        echo "pg_regress against the $name (port $(node_port "$node"))"
        env "LD_LIBRARY_PATH=$PG_LIBRARY_PATH" PGOPTIONS="-c citus.enable_ddl_propagation=off" \
            "$PGXS_DIR/src/test/regress/pg_regress" --bindir="$PG_BIN" \
            --inputdir=tests/pg_regress --outputdir="$out/$name" \
            --host=127.0.0.1 --port="$(node_port "$node")" --user=postgres --dbname=postgres --use-existing \
            --schedule=tests/pg_regress/citus_schedule || status=1
        [ -f "$out/$name/regression.diffs" ] && cat "$out/$name/regression.diffs"
    done
    for node in 0 1 2; do
        psql_node "$node" -c "ALTER SYSTEM RESET rate_limiter.max_requests" -c "SELECT pg_reload_conf()" >/dev/null
    done
    amcheck_shards || status=1
    return $status
}

# amcheck of every shard relation of the state table on each worker (the
# relations the direct writes wrote): verify_heapam finds nothing and
# bt_index_check (heapallindexed) passes on each of their indexes. Prints
# one line per worker in pg_regress's format ("... ok" / "... FAILED").
amcheck_shards() {
    local node result relations corrupt checked indexes status=0
    # Shards are hidden from catalog queries unless visibility is overridden.
    local shards="SELECT c.oid FROM pg_class AS c WHERE c.relnamespace = 'rate_limiter'::regnamespace
                  AND c.relkind = 'r' AND c.relname ~ '^rate_limits_[0-9]+$'"
    for node in 1 2; do
        result=$(psql_node "$node" -c "SET citus.enable_ddl_propagation = off" -c "SET citus.override_table_visibility = off" \
            -c "CREATE EXTENSION IF NOT EXISTS amcheck" \
            -c "SELECT (SELECT count(*) FROM ($shards) AS s) || ' ' ||
                       (SELECT count(*) FROM ($shards) AS s, LATERAL verify_heapam(s.oid, check_toast => true)) || ' ' ||
                       (SELECT count(bt_index_check(i.indexrelid, true)) FROM pg_index AS i WHERE i.indrelid IN ($shards)) || ' ' ||
                       (SELECT count(*) FROM pg_index AS i WHERE i.indrelid IN ($shards))" 2>&1 | tail -1) || result="error"
        # relations, corrupt tuples, indexes checked, indexes
        read -r relations corrupt checked indexes <<<"$result"
        if [ "${relations:-0}" -ge 1 ] 2>/dev/null && [ "$corrupt" = 0 ] && [ "$checked" = "$indexes" ] && [ "${indexes:-0}" -ge 1 ]; then
            echo "test amcheck of the shards on worker $node ($relations relations, $indexes indexes) ... ok"
        else
            echo "test amcheck of the shards on worker $node ($result) ... FAILED"
            status=1
        fi
    done
    return $status
}

case "${1:-}" in
build) build ;;
regress) regress "${2:?OUT}" ;;
# RL_CITUS_INSTALLED=1: the extension is installed already (scripts/test.sh).
start) build && { [ "${RL_CITUS_INSTALLED:-}" = 1 ] || install_extension; } && start "${2:?DIR}" ;;
stop) stop "${2:?DIR}" ;;
node) start_node "${2:?DIR}" "${3:?N}" "${4:-}" ;;
stop-node) stop_node "${2:?DIR}" "${3:?N}" ;;
*)
    echo "usage: $0 build | start DIR | stop DIR | regress OUT | node DIR N [PRELOAD] | stop-node DIR N" >&2
    exit 2
    ;;
esac
