#!/usr/bin/env bash
# pg_regress --launcher for the portable edition's run of the pg_regress
# schedule (tests/portable/regress.sh): runs psql ("$@"), so that a test
# written for the native extension runs unchanged on the portable edition:
#
# 1. In the test's input, and in the files it includes (\i tests/...,
#    copied for the run), "CREATE EXTENSION rate_limiter;" becomes an \i
#    of $RATE_LIMITER_INSTALL (a script that installs the portable edition:
#    dist/rate_limiter-portable.sql, or the pg_tle registration and CREATE
#    EXTENSION), and in the output the lines that echo it read as the
#    statement again, and the copies' paths as the originals'.
# 2. From each CONTEXT block of the output it removes the entries that
#    belong to the portable edition's own functions, which are C functions
#    in the native extension and add no context there: a line naming one
#    of its PL/pgSQL or SQL functions, and the statement line just before
#    it (the statement that function ran). Entries naming
#    rate_limiter.guard(), rate_limiter.postgrest_limit() and
#    rate_limiter.define_all() (PL/pgSQL in
#    both editions) and everything about the caller's own functions stay,
#    so an error reads as the native one, line for line.
set -o pipefail
: "${RATE_LIMITER_INSTALL:?the install script}"
# The files a test includes (\i tests/pg_regress/sql/include/...), with
# the same substitution,
# in a directory of their own; the output names them as before.
includes=$(mktemp -d /tmp/rate_limiter_portable_includes.XXXXXX)
trap 'rm -rf "$includes"' EXIT
for file in tests/pg_regress/sql/include/*.sql; do
    mkdir -p "$includes/$(dirname "$file")"
    sed "s|^CREATE EXTENSION rate_limiter;\$|\\\\i ${RATE_LIMITER_INSTALL}|" "$file" >"$includes/$file"
done
export RATE_LIMITER_INCLUDES=$includes
sed -e "s|^CREATE EXTENSION rate_limiter;\$|\\\\i ${RATE_LIMITER_INSTALL}|" \
    -e "s|^\\\\i tests/pg_regress/sql/include/|\\\\i ${includes}/tests/pg_regress/sql/include/|" | "$@" 2>&1 | python3 -c '
import re, sys

ENTRY = re.compile(r"^(PL/pgSQL function |SQL function |SQL statement |PL/pgSQL assignment |SQL expression |JSON data, )")
PORTABLE = re.compile(r"^(PL/pgSQL function rate_limiter\.(?!guard\(|postgrest_limit\(|define_all\()|SQL function \"_)")
STATEMENT = re.compile(r"^(SQL statement |PL/pgSQL assignment |SQL expression )")

def entries(first, lines):
    """The block starting with first: its entries (each a list of lines),
    and the lines after it."""
    found, current, i = [], [first], 0
    def closed(entry):
        text = "\n".join(entry)
        return not STATEMENT.match(entry[0]) or text.count("\"") % 2 == 0
    while True:
        if closed(current):
            found.append(current)
            if i < len(lines) and ENTRY.match(lines[i]):
                current = [lines[i]]
                i += 1
                continue
            return found, i
        if i >= len(lines):
            found.append(current)
            return found, i
        current.append(lines[i])
        i += 1

import os
install = "\\i " + os.environ["RATE_LIMITER_INSTALL"]
lines = sys.stdin.read().replace(os.environ["RATE_LIMITER_INCLUDES"] + "/", "").split("\n")
out, i = [], 0
while i < len(lines):
    line = lines[i]
    if line == install:
        # The install script starts with "\set ECHO none", echoed.
        out.append("CREATE EXTENSION rate_limiter;")
        i += 2 if i + 1 < len(lines) and lines[i + 1] == "\\set ECHO none" else 1
        continue
    if not line.startswith("CONTEXT:  "):
        out.append(line)
        i += 1
        continue
    block, used = entries(line[len("CONTEXT:  "):], lines[i + 1:])
    i += 1 + used
    kept = []
    for n, entry in enumerate(block):
        if PORTABLE.match(entry[0]):
            continue
        if STATEMENT.match(entry[0]) and n + 1 < len(block) and PORTABLE.match(block[n + 1][0]):
            continue
        kept.append(entry)
    if kept:
        kept[0] = ["CONTEXT:  " + kept[0][0]] + kept[0][1:]
        for entry in kept:
            out.extend(entry)
sys.stdout.write("\n".join(out))
'
