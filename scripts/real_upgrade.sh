#!/usr/bin/env bash
# A real upgrade, with the old binary: builds 0.1.0's
# library from its commit (48d680c) in a git worktree, lets it write state
# under real calls on PostgreSQL 15, swaps in the current library (a new
# file renamed over the old one, as a package upgrade does, so running
# backends keep the code they mapped), runs ALTER EXTENSION rate_limiter
# UPDATE, and checks that every limit answers exactly as before. A session
# that stayed connected across the swap (it still runs 0.1.0's code) is
# then asked for the same answers, and what it says is reported.
#
# Not part of scripts/test.sh (building 0.1.0 takes minutes): run it by
# hand; it prints a report (docs/real-upgrade-report.md is its last output).
# Leaves the current library installed.
set -euo pipefail
cd "$(dirname "$0")/.."
export RL_PG=15 RL_PORT=${RL_PORT:-24339}
source scripts/lib.sh
ensure_tools

old_commit=48d680c
work=$(mktemp -d /tmp/rate_limiter_real_upgrade.XXXXXX)
cluster=$work/cluster
libdir=$("$PG_CONFIG" --pkglibdir)
cleanup() {
    stop_cluster "$cluster"
    git worktree remove --force "$work/old" >/dev/null 2>&1 || true
    rm -rf "$work"
}
trap cleanup EXIT

log "building 0.1.0's library (commit $old_commit)"
git worktree add --detach "$work/old" "$old_commit" >/dev/null 2>&1
(cd "$work/old" && CARGO_TARGET_DIR=$work/old-target cargo pgrx package --pg-config "$PG_CONFIG" >"$work/old-build.log" 2>&1) ||
    { tail -n 30 "$work/old-build.log"; exit 1; }
old_so=$work/old-target/release/rate_limiter-pg15$libdir/rate_limiter.so
install_extension
new_so=$work/new.so
cp "$libdir/rate_limiter.so" "$new_so"

# Replaces the installed library by a new file (rename): backends that
# mapped the old one keep running its code.
swap_in() {
    install -m 755 "$1" "$libdir/rate_limiter.so.new"
    mv -f "$libdir/rate_limiter.so.new" "$libdir/rate_limiter.so"
}

swap_in "$old_so"
# No shared_preload_libraries: each backend loads the library it finds.
RL_PRELOAD=0 start_cluster "$cluster"
psql_at() { psql -X -q -At -v ON_ERROR_STOP=1 -h 127.0.0.1 -p "$RL_PORT" -U postgres -d upgrade "$@"; }
sudo -u postgres "$PG_BIN/createdb" -h "$cluster" -p "$RL_PORT" upgrade

log "0.1.0's library writes the state"
psql_at -c "CREATE EXTENSION rate_limiter VERSION '0.1.0'" -f scripts/upgrade_workload.sql >/dev/null
answers=$(grep -v '^--' scripts/upgrade_answers.sql)
psql_at -c "$answers" >"$work/before.txt"
rows=$(psql_at -c "SELECT count(*) FROM rate_limiter.rate_limits")

# A session that stays connected across the swap, with 0.1.0's code loaded.
mkfifo "$work/old-session.in"
psql -X -q -At -h 127.0.0.1 -p "$RL_PORT" -U postgres -d upgrade <"$work/old-session.in" >"$work/old-session.out" 2>&1 &
old_session=$!
exec 3>"$work/old-session.in"
echo "SELECT 'old session pid ' || pg_backend_pid();" >&3
echo "SELECT ok FROM rate_limiter.rate_check('chat', 'user1');" >&3

log "swapping in the current library and updating"
swap_in "$new_so"
psql_at -c "ALTER EXTENSION rate_limiter UPDATE" -c "SELECT extversion FROM pg_extension WHERE extname = 'rate_limiter'" >"$work/version.txt"
psql_at -c "$answers" >"$work/after.txt"

# The connected session, after the update, still running 0.1.0's code.
echo "$answers" >&3
echo "SELECT 'define: ' || coalesce(rate_limiter.define('late', rate_limiter.token_bucket(1, '1 minute'))::text, 'done');" >&3
exec 3>&-
wait "$old_session" || true

same=no
cmp -s "$work/before.txt" "$work/after.txt" && same=yes
old_same=no
grep -v '^old session pid\|^t$\|^f$' "$work/old-session.out" | grep '|' >"$work/old-answers.txt" || true
cmp -s "$work/before.txt" "$work/old-answers.txt" && old_same=yes

cat <<REPORT
# Real upgrade report (scripts/real_upgrade.sh)

- Machine: PostgreSQL $("$PG_BIN/postgres" --version | awk '{print $3}'), $(date -u +%Y-%m-%d).
- 0.1.0's library (commit $old_commit) wrote $rows state rows under real calls
  (keyed and global token buckets, a reservation in debt, fixed windows with and
  without an anchor, an inline config).
- The current library was renamed over it while the server ran, then
  \`ALTER EXTENSION rate_limiter UPDATE\`: $(tr '\n' ' ' <"$work/version.txt")
- Every limit's answer 7 seconds later (rate_check, $(wc -l <"$work/before.txt") limits),
  before and after: **$( [ $same = yes ] && echo "identical" || echo "DIFFERENT")**.
- A session connected before the swap (it keeps 0.1.0's code) gave the same
  answers after the update: **$old_same**. Its last statement, a \`define\` after
  the update (0.4.0's SQL, 0.1.0's code), answered:
\`\`\`
$(sed -n '/^signup|k3|/,$p' "$work/old-session.out" | grep -v '|' || true)
\`\`\`

Answers before the update (name|key|ok|retry_after|remaining):
\`\`\`
$(cat "$work/before.txt")
\`\`\`
REPORT
[ $same = yes ]
