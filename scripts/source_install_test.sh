#!/usr/bin/env bash
# The README's "On your own server" blocks (between <!-- own-server:begin -->
# and <!-- own-server:end -->), run as written, as root, in a clean Debian 12
# made with debootstrap, from this clone: Debian's packages installed by the
# README's apt-get lines, cargo-pgrx initialised for Debian's PostgreSQL 15,
# the extension built and installed, the released scripts copied, then
# CREATE EXTENSION in a database `yourdb` of a cluster started there, a call,
# and an update from 0.1.0 (which needs the copied scripts).
#
# One line is not run: the rustup installer's (`curl ... sh.rustup.rs | sh`),
# which downloads Rust. In its place this machine's Rust (~/.rustup) and
# cargo home (~/.cargo: cargo-pgrx and the crates already downloaded) are
# mounted into the clean system, with CARGO_NET_OFFLINE=true: every other
# line runs as written (`cargo install cargo-pgrx` then finds it installed).
# The clone is mounted at its own path, so the build reuses what this
# machine's earlier builds left in target/.
# Prints "source install: 1 passed, 0 failed" (or "0 passed, 1 failed").
#
#   bash scripts/source_install_test.sh
set -euo pipefail
cd "$(dirname "$0")/.."
export RL_PG=15
source scripts/lib.sh
source scripts/clean_system.sh

fail() {
    echo "$1"
    echo "source install: 0 passed, 1 failed"
    exit 1
}
if ! command -v debootstrap >/dev/null; then
    retry apt-get update -qq
    retry env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq debootstrap >/dev/null
fi
[ -d "$HOME/.rustup" ] && [ -x "$HOME/.cargo/bin/cargo-pgrx" ] ||
    fail "this machine has no ~/.rustup or no cargo-pgrx in ~/.cargo/bin to lend"
repo=$PWD

# The README's lines, in order; before and after the line that needs a
# running server.
readme_lines=$(awk '/<!-- own-server:begin -->/ { on = 1 } /<!-- own-server:end -->/ { on = 0 } on' README.md |
    awk '/^```sh$/ { inside = 1; next } /^```$/ { inside = 0; next } inside')
[ -n "$readme_lines" ] || fail "README.md has no own-server block"
grep -q 'sh.rustup.rs' <<<"$readme_lines" || fail "the README's blocks no longer install rustup as this script expects"
build=$(sed -n '/sudo -u postgres psql/q; p' <<<"$readme_lines" | grep -v 'sh.rustup.rs')
create=$(sed -n '/sudo -u postgres psql/,$p' <<<"$readme_lines")

root=$(mktemp -d /tmp/rate_limiter_source_install.XXXXXX)
chmod 755 "$root"   # its / must be readable by postgres
mounts=()
cleanup() {
    local i
    stop_clean_cluster "$root"
    for ((i = ${#mounts[@]} - 1; i >= 0; i--)); do
        umount "${mounts[$i]}" 2>/dev/null || umount -l "${mounts[$i]}" 2>/dev/null || true
    done
    # Never delete through a mount that is still there (this machine's
    # Rust, cargo home or clone).
    if [ -z "$(findmnt -rn -o TARGET | grep -F "$root" || true)" ]; then
        rm -rf "$root"
    else
        echo "left $root: something is still mounted in it"
    fi
}
trap cleanup EXIT
bind() { # source, target inside the clean system
    mkdir -p "$root$2"
    mount --bind "$1" "$root$2"
    mounts+=("$root$2")
}

make_clean_system "$root" || fail "debootstrap failed"
mounts+=("$root/proc")
cp /etc/resolv.conf "$root/etc/resolv.conf"
cp /etc/hosts "$root/etc/hosts"
bind "$HOME/.rustup" /root/.rustup
bind "$HOME/.cargo" /root/.cargo
bind "$repo" "$repo"

log "the README's lines, in the clean system"
in_system() { # a script, run by bash as root in the clone
    chroot "$root" env -i HOME=/root PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin \
        DEBIAN_FRONTEND=noninteractive CARGO_NET_OFFLINE=true TERM=dumb \
        bash -euo pipefail -c "cd '$repo'; $1"
}
out=$root.out
if ! in_system "set -x; $build" >"$out" 2>&1; then
    tail -n 40 "$out"
    rm -f "$out"
    fail "the README's build lines failed"
fi
rm -f "$out"
start_clean_cluster "$root" yourdb || fail "could not start a cluster in the clean system"
in_system "$create" || fail "the README's CREATE EXTENSION line failed"
check_clean_install "$root" yourdb || fail "unexpected answers"
echo "source install: 1 passed, 0 failed"
