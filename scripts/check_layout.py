#!/usr/bin/env python3
"""The layout rules of the code (issue 34), checked on every run of the
suite (scripts/test.sh, step 1), one TAP line each ("ok N - rule" or
"not ok N - rule", then why):

1. no source file is over 600 lines: every Rust file (the extension, the
   algorithm's crate and its tests, the integration tests, the benchmark
   and the demo) and every SQL file the extension's scripts are made from
   (sql/*.sql and portable/sql/*.sql; not the upgrade scripts
   sql/rate_limiter--A--B.sql, whose name and one-file form PostgreSQL
   fixes, nor the released install scripts in sql/released/, which never
   change);
2. the single-server code names no Citus: outside src/citus/ only lib.rs
   (which registers it at load) and the seam, placement.rs, says `crate::citus` or `citus::`;
3. src/citus/ calls down only: it never uses the SQL functions' modules
   (limit, credit, status, prune, all_or_nothing, wait, http, define) nor the seam's
   callers, only the seam (`placement`), the single-server path (`local`)
   and what lies below them;
4. no module cycle: in each crate, no two files use each other, directly
   or through others (a module's use of its own submodules, declaring or
   re-exporting them, is not a dependency);
5. no glob re-export (`pub use x::*`) hides where a name lives;
6. the single-server path knows no routing: outside src/citus/, the seam
   (placement.rs), lib.rs and catalog.rs (which reads from Citus's
   catalog whether the state table's rows are stored elsewhere), no code
   (comments and string literals aside) says `route`, `Routed`, `dkey` or
   `distributed`: storage is given its target explicitly.

Run from anywhere: python3 scripts/check_layout.py
"""

import os
import re
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
CRATES = {"src": "src", "algorithm": "algorithm/src"}
MAX_LINES = 600
# Where rule 1 looks: every Rust file of the repository.
LINE_LIMITED = ("src", "algorithm", "tests/integration", "bench/src", "demo/src")
SQL_FUNCTION_MODULES = {"api"}


def sql_sources():
    """The SQL files the extension's scripts are made from (rule 1)."""
    for directory in ("sql", "portable/sql"):
        for name in sorted(os.listdir(os.path.join(ROOT, directory))):
            if name.endswith(".sql") and not name.startswith("rate_limiter--"):
                yield os.path.join(ROOT, directory, name)


def rust_files(directory):
    for base, _, names in os.walk(os.path.join(ROOT, directory)):
        for name in sorted(names):
            if name.endswith(".rs"):
                yield os.path.join(base, name)


def module_of(path, source_root):
    """The module path of a file: src/lib.rs is (), src/a/mod.rs and
    src/a.rs are ("a",), src/a/b.rs is ("a", "b")."""
    relative = os.path.relpath(path, os.path.join(ROOT, source_root))
    parts = relative[:-3].split(os.sep)
    if parts[-1] in ("lib", "mod"):
        parts = parts[:-1]
    return tuple(parts)


ROUTING_WORDS = re.compile(r"(?i)\b(?:routed?|dkey)\b|distributed")
ROUTING_ALLOWED = ("src/citus/", "src/placement.rs", "src/lib.rs", "src/catalog.rs")


def strip_strings(code):
    """Code without its string literals (plain, byte and C strings, and raw
    ones), for rule 6."""
    code = re.sub(r'\b[bc]?r(#*)".*?"\1', '""', code, flags=re.S)
    return re.sub(r'[bc]?"(?:\\.|[^"\\])*"', '""', code, flags=re.S)


def strip_comments(text):
    text = re.sub(r"/\*.*?\*/", "", text, flags=re.S)
    return re.sub(r"//[^\n]*", "", text)


def expand(tree):
    """The paths of a `use` tree: a::{b, c::{d, e}} -> a::b, a::c::d, a::c::e."""
    tree = re.sub(r"\s+", "", tree)
    depth, start = 0, None
    for index, char in enumerate(tree):
        if char == "{":
            if depth == 0:
                start = index
            depth += 1
        elif char == "}":
            depth -= 1
            if depth == 0:
                prefix, inner, rest = tree[:start], tree[start + 1 : index], tree[index + 1 :]
                items, level, current = [], 0, ""
                for c in inner:
                    if c == "," and level == 0:
                        items.append(current)
                        current = ""
                        continue
                    level += c == "{"
                    level -= c == "}"
                    current += c
                items.append(current)
                paths = []
                for item in items:
                    if item:
                        paths.extend(expand(prefix + item + rest))
                return paths
    return [re.sub(r"as[A-Za-z_0-9]+$", "", tree.split(" as ")[0])] if tree else []


def referenced_paths(text):
    code = strip_comments(text)
    paths = []
    for tree in re.findall(r"\buse\s+([^;]+);", code):
        paths.extend(expand(tree))
    paths.extend(re.findall(r"(?<![A-Za-z0-9_$])(?:crate|super)(?:::[A-Za-z_][A-Za-z0-9_]*)+", code))
    return paths


def resolve(path, current, modules):
    """The module a path names (the longest known prefix), or None for an
    outside crate."""
    segments = [s for s in path.split("::") if s]
    if not segments:
        return None
    if segments[0] == "crate":
        base, segments = (), segments[1:]
    elif segments[0] == "super":
        base = current
        while segments and segments[0] == "super":
            base, segments = base[:-1], segments[1:]
    elif segments[0] == "self":
        base, segments = current, segments[1:]
    elif current + (segments[0],) in modules:
        base = current
    else:
        return None
    target = base
    for segment in segments:
        if target + (segment,) in modules:
            target = target + (segment,)
        else:
            break
    return target


def cycles(graph):
    index, low, stack, on_stack, found, counter = {}, {}, [], set(), [], [0]

    def visit(node):
        index[node] = low[node] = counter[0]
        counter[0] += 1
        stack.append(node)
        on_stack.add(node)
        for target in graph.get(node, ()):
            if target not in index:
                visit(target)
                low[node] = min(low[node], low[target])
            elif target in on_stack:
                low[node] = min(low[node], index[target])
        if low[node] == index[node]:
            component = []
            while True:
                top = stack.pop()
                on_stack.discard(top)
                component.append(top)
                if top == node:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    sys.setrecursionlimit(10000)
    for node in sorted(graph):
        if node not in index:
            visit(node)
    return found


def main():
    results = []

    too_long = []
    sources = [path for directory in LINE_LIMITED for path in rust_files(directory)]
    for path in sources + list(sql_sources()):
        with open(path, encoding="utf-8") as file:
            lines = file.read().count("\n")
        if lines > MAX_LINES:
            too_long.append(f"{os.path.relpath(path, ROOT)}: {lines} lines")
    results.append((f"no Rust or SQL source file over {MAX_LINES} lines", too_long))

    naming = []
    for path in rust_files("src"):
        relative = os.path.relpath(path, ROOT)
        if relative.startswith("src/citus/") or relative in ("src/lib.rs", "src/placement.rs"):
            continue
        with open(path, encoding="utf-8") as file:
            for number, line in enumerate(file, 1):
                if re.search(r"crate::citus|citus::", line):
                    naming.append(f"{relative}:{number}: {line.strip()}")
    results.append(("outside src/citus/ only the seam and lib.rs name crate::citus", naming))

    graphs, upward, globs = {}, [], []
    for crate, source_root in CRATES.items():
        files = {module_of(path, source_root): path for path in rust_files(source_root)}
        modules = set(files)
        graph = {}
        for module, path in files.items():
            with open(path, encoding="utf-8") as file:
                text = file.read()
            for number, line in enumerate(strip_comments(text).splitlines(), 1):
                if re.match(r"\s*pub(\([^)]*\))?\s+use\s+[^;]*\*\s*;", line):
                    globs.append(f"{os.path.relpath(path, ROOT)}:{number}: {line.strip()}")
            for reference in referenced_paths(text):
                target = resolve(reference, module, modules)
                if target is None or target == module:
                    continue
                if target[: len(module)] == module:
                    continue  # its own submodule
                graph.setdefault(module, set()).add(target)
                if (
                    crate == "src"
                    and module[:1] == ("citus",)
                    and target
                    and target[0] in SQL_FUNCTION_MODULES
                ):
                    upward.append(f"{os.path.relpath(path, ROOT)} uses {'::'.join(target)}")
        graphs[crate] = graph
    results.append(("src/citus/ calls down only (no SQL function module)", sorted(set(upward))))
    found = []
    for crate, graph in graphs.items():
        for component in cycles(graph):
            found.append(f"{crate}: " + " <-> ".join("::".join(m) or "lib" for m in component))
    results.append(("no module cycle", found))
    results.append(("no glob re-export", globs))

    routing = []
    for path in rust_files("src"):
        relative = os.path.relpath(path, ROOT)
        if relative.startswith(ROUTING_ALLOWED):
            continue
        with open(path, encoding="utf-8") as file:
            code = strip_strings(strip_comments(file.read()))
        for number, line in enumerate(code.splitlines(), 1):
            if ROUTING_WORDS.search(line):
                routing.append(f"{relative}: {line.strip()}")
    results.append(("outside src/citus/ and the seam no code names routing", routing))

    failed = 0
    for number, (rule, problems) in enumerate(results, 1):
        if problems:
            failed += 1
            print(f"not ok {number} - {rule}")
            for problem in problems:
                print(f"#   {problem}")
        else:
            print(f"ok {number} - {rule}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
