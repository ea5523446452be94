#!/usr/bin/env bash
# The demo: installs what is missing, builds and installs the extension,
# starts a throwaway PostgreSQL cluster (as `postgres`, in a temporary
# directory, on port $RL_PORT), runs a realistic scenario through a real
# client (demo/src/main.rs) and prints a short report. Removes the cluster.
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/lib.sh

ensure_tools
install_extension
log "building the demo client"
cargo build -q --release -p rate_limiter_demo

cluster=$(mktemp -d /tmp/rate_limiter_demo.XXXXXX)
trap 'stop_cluster "$cluster"' EXIT
start_cluster "$cluster"
sudo -u postgres "$PG_BIN/createdb" -h "$cluster" -p "$RL_PORT" demo

echo
RATE_LIMITER_DEMO_URL="host=127.0.0.1 port=$RL_PORT user=postgres dbname=demo" ./target/release/rate_limiter_demo
