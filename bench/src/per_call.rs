//! Scenario 1: per-call server cost. One statement calls a limiter once per
//! row of `generate_series`: 100,000 distinct keys (first calls: inserts),
//! then 1,000 keys called 100 times each (updates, one statement per
//! round); `rate_check` against a bare primary-key SELECT of the same row.
//! Each measurement is divided by the number of calls; every figure is the
//! median of 3 rounds, the contenders taking turns.
//!
//! The portable edition (the same limiter in SQL and PL/pgSQL:
//! docs/guarantees.md, "Portable edition") takes its turn beside them, in a
//! database of its own on the same server
//! (`RATE_LIMITER_BENCH_PORTABLE_URL`; without it, it is left out), with
//! the same call.
//!
//! The floor in those statements is the upsert wrapped in a SQL function
//! (so that it can be called once per row), which pays the executor's
//! start-up per call. So the scenario also runs the floor as a bare
//! prepared statement from one pgbench client, against the extension's call
//! sent the same way: that comparison includes the round trip and the
//! commit (synchronous_commit off), which both sides pay alike.

use crate::report::{rotate, Report, Samples};
use crate::{pgbench, Bench, Pgbench};
use postgres::Client;
use std::time::Instant;

const RUNS: usize = 3;
/// Seconds per pgbench run of the bare-statement comparison.
const BARE_SECONDS: usize = 5;

/// The SQL of one call per key `g` for each contender (text, so the
/// statement is planned like an application's would be).
const EXTENSION: &str = "rate_limiter.rate_limit('bench', g::text)";
const PLPGSQL: &str = "baseline.plpgsql_token_bucket('bench', g::text, 1, 100, 60000, 100)";
const FLOOR: &str = "baseline.floor_token_bucket('bench', g::text, 1, 100, 60000, 100)";

/// The connections: the benchmark database (the extension and the
/// baselines), and the portable edition's, if there is one.
struct Databases {
    native: Client,
    portable: Option<Client>,
}

impl Databases {
    /// The connection for contender `i` of `calls` (the portable edition
    /// is the one after the three of [`contenders`]).
    fn client(&mut self, i: usize) -> &mut Client {
        match (i, self.portable.as_mut()) {
            (3, Some(portable)) => portable,
            _ => &mut self.native,
        }
    }
}

/// The calls that take turns: the extension, PL/pgSQL, the floor, and the
/// portable edition when it is there.
fn contenders(databases: &Databases) -> Vec<&'static str> {
    let mut calls = vec![EXTENSION, PLPGSQL, FLOOR];
    if databases.portable.is_some() {
        calls.push(EXTENSION);
    }
    calls
}

fn reset(databases: &mut Databases) {
    // No ANALYZE after the TRUNCATE: statistics of an empty table would make
    // the PL/pgSQL baseline's cached SELECT ... FOR UPDATE plan a sequential
    // scan for the whole run (the extension does not depend on them).
    databases
        .native
        .batch_execute(
            "TRUNCATE rate_limiter.rate_limits, baseline.plpgsql_limits, baseline.floor_limits",
        )
        .unwrap();
    if let Some(portable) = databases.portable.as_mut() {
        portable
            .batch_execute("TRUNCATE rate_limiter.rate_limits")
            .unwrap();
    }
}

fn seconds(client: &mut Client, sql: &str) -> f64 {
    let start = Instant::now();
    client.batch_execute(sql).unwrap();
    start.elapsed().as_secs_f64()
}

/// Microseconds per call for `keys` distinct new keys, for each call in
/// `calls`: RUNS rounds, the contenders taking turns in a
/// rotating order so that none always runs first after a TRUNCATE.
fn distinct_keys(databases: &mut Databases, calls: &[&str], keys: usize) -> Vec<Samples> {
    rotate(calls.len(), RUNS, |i| {
        reset(databases);
        let sql = format!(
            "SELECT count(*) FROM generate_series(1, {keys}) AS g, LATERAL {} AS r",
            calls[i]
        );
        seconds(databases.client(i), &sql) * 1e6 / keys as f64
    })
}

/// Microseconds per call for `keys` existing keys, `rounds` statements of
/// one call per key, for each call in `calls` (taking turns as above).
fn repeated_keys(
    databases: &mut Databases,
    calls: &[&str],
    keys: usize,
    rounds: usize,
) -> Vec<Samples> {
    rotate(calls.len(), RUNS, |i| {
        reset(databases);
        let sql = format!(
            "SELECT count(*) FROM generate_series(1, {keys}) AS g, LATERAL {} AS r",
            calls[i]
        );
        let client = databases.client(i);
        client.batch_execute(&sql).unwrap(); // create the rows
        let total: f64 = (0..rounds).map(|_| seconds(client, &sql)).sum();
        total * 1e6 / (keys * rounds) as f64
    })
}

pub fn run(bench: &Bench, report: &mut Report) {
    let mut databases = Databases {
        native: bench.connect(),
        portable: bench.portable_url.as_ref().map(|url| {
            let mut client = Client::connect(url, postgres::NoTls)
                .expect("connect to the portable edition's database");
            client
                .batch_execute(
                    "SELECT rate_limiter.define('bench', rate_limiter.token_bucket(100, '1 minute', capacity => 100))",
                )
                .expect("define the limit in the portable edition");
            client
        }),
    };
    let distinct = bench.scaled(100_000);
    let (keys, rounds) = (1000, bench.scaled(100));

    let contenders = contenders(&databases);
    let new = distinct_keys(&mut databases, &contenders, distinct);
    let (new_ext, new_pl, new_floor) = (&new[0], &new[1], &new[2]);
    let old = repeated_keys(&mut databases, &contenders, keys, rounds);
    let (old_ext, old_pl, old_floor) = (&old[0], &old[1], &old[2]);
    if let (Some(new_portable), Some(old_portable)) = (new.get(3), old.get(3)) {
        editions(
            report,
            [new_ext, new_portable, new_pl, new_floor],
            [old_ext, old_portable, old_pl, old_floor],
            distinct,
            keys,
            rounds,
        );
    }

    // rate_check vs a bare primary-key SELECT of the same rows.
    reset(&mut databases);
    let client = &mut databases.native;
    let create =
        format!("SELECT count(*) FROM generate_series(1, {keys}) AS g, LATERAL {EXTENSION} AS r");
    client.batch_execute(&create).unwrap();
    client
        .batch_execute("ANALYZE rate_limiter.rate_limits")
        .unwrap();
    // `g + 0 * round` makes every call depend on the round, so the planner
    // cannot compute the 1,000 results once and replay them. The bare
    // primary-key SELECT runs as a nested loop of index probes: left alone,
    // the planner turns the 100,000 lookups into one hash join over a
    // sequential scan, which is not the cost of a lookup.
    // Each statement counts a column of its rows, so that each reads what
    // it is compared for: rate_check its answer, the primary-key SELECT
    // the row's value and ts. (With count(*) the planner drops the
    // SELECT's columns and makes it an index-only scan, which reads no
    // column, and reads no table page at all once VACUUM has marked the
    // pages all-visible: the fourth statement, shown for reference.)
    // The third is what PostgreSQL charges any set-returning function
    // called per row, before the function does anything: a built-in one
    // that returns one row (the executor collects every function's rows in
    // a tuplestore, and starts it again for each outer row).
    let pk_row = "(SELECT value, ts FROM rate_limiter.rate_limits WHERE name = 'bench' AND key = (g + 0 * round)::text AND shard = 0)";
    let reads = [
        (
            "r.ok",
            "rate_limiter.rate_check('bench', (g + 0 * round)::text)",
        ),
        ("r.ts", pk_row),
        ("r", "generate_series(g + 0 * round, g + 0 * round)"),
        ("*", pk_row),
    ];
    let read = rotate(reads.len(), RUNS, |i| {
        // Hash and merge joins off for the primary-key SELECT only.
        let joins = if matches!(i, 1 | 3) { "off" } else { "on" };
        client
            .batch_execute(&format!(
                "SET enable_hashjoin = {joins}; SET enable_mergejoin = {joins}"
            ))
            .unwrap();
        let (counted, from) = reads[i];
        let sql = format!("SELECT count({counted}) FROM generate_series(1, {rounds}) AS round, generate_series(1, {keys}) AS g, LATERAL {from} AS r");
        seconds(client, &sql) * 1e6 / (keys * rounds) as f64
    });
    client
        .batch_execute("RESET enable_hashjoin; RESET enable_mergejoin")
        .unwrap();
    let (rate_check, pk_select, srf_floor, pk_probe) = (&read[0], &read[1], &read[2], &read[3]);

    // The bare statements from one pgbench client: µs per transaction.
    let dir = concat!(env!("CARGO_MANIFEST_DIR"), "/pgbench");
    let scripts = ["extension.sql", "floor.sql"].map(|script| format!("{dir}/{script}"));
    let seconds = bench.scaled(BARE_SECONDS).max(2).to_string();
    let bare = rotate(scripts.len(), RUNS, |i| {
        reset(&mut databases);
        let tps = pgbench(
            bench,
            &Pgbench {
                clients: 1,
                script: &scripts[i],
                synchronous_commit: "off",
                length: &["-T", &seconds],
                keys: 1000,
            },
        );
        1e6 / tps
    });
    let (bare_ext, bare_floor) = (&bare[0], &bare[1]);

    report.scenario(
        "Scenario 1: per-call server cost (µs per call, median of 3 rounds, min–max)",
        format!(
            "One statement calls the limiter once per row: `SELECT count(*) FROM generate_series(1, N) g, LATERAL <call>`.\n\
             The floor is the single upsert wrapped in a SQL function so it can be called per row; \
             that costs it an executor start-up per call, which the extension's C-level call does not pay. \
             So this table shows the cost of a call made from SQL (a trigger, a query calling the limiter per row), \
             not the cost of a statement sent by an application.\n\n\
             | workload | extension | (a) PL/pgSQL | (b) floor (SQL function) |\n|---|---:|---:|---:|\n\
             | {distinct} distinct new keys | {} | {} | {} |\n\
             | {keys} keys × {rounds} rounds (updates) | {} | {} | {} |\n\n\
             | read-only | rate_check | bare primary-key SELECT of value and ts (nested loop of index probes) | a set-returning function alone (`generate_series(g, g)`) | the primary-key SELECT under `count(*)` (an index-only probe) |\n|---|---:|---:|---:|---:|\n\
             | {keys} keys × {rounds} rounds | {} | {} | {} | {} |\n\n\
             Each read statement counts a column of its rows (`count(r.ok)`, `count(r.ts)`), so each reads what it is compared for. \
             Under `count(*)` (the last column, for reference) the planner drops the SELECT's columns and makes it an index-only scan: \
             it reads no column, and no table page at all once VACUUM (or autovacuum) has marked the pages all-visible.\n\n\
             The last column is what PostgreSQL spends on any set-returning function called once per row \
             (the function scan started again, the arguments, the call, the tuplestore of its one row), \
             which `rate_check` pays and the primary-key SELECT does not: \
             `rate_check` / (primary-key SELECT + that) is in the targets table.\n\n\
             The same two calls as bare prepared statements from one client (`pgbench -c 1 -M prepared -T {seconds}`, \
             synchronous_commit off, keys random in 1..1,000, so nearly every call updates an existing row), in µs per transaction: \
             the round trip, parse-free execution and commit of one statement. Here the floor pays no function call.\n\n\
             | | extension | (b) floor (bare statement) |\n|---|---:|---:|\n\
             | µs per transaction | {} | {} |\n",
            new_ext.show(2), new_pl.show(2), new_floor.show(2),
            old_ext.show(2), old_pl.show(2), old_floor.show(2),
            rate_check.show(2), pk_select.show(2), srf_floor.show(2), pk_probe.show(2),
            bare_ext.show(1), bare_floor.show(1),
        ),
        "what a call costs inside a statement (a trigger, a query calling the limiter per row), and that an application's statement costs the same as the floor's bare upsert.",
        "a call under contention (scenario 5), or the cost on another machine.",
    );
    report.ratio(
        "S1 new keys: extension / floor (SQL function)",
        new_ext.ratio_to(new_floor),
        1.0,
        true,
    );
    report.ratio(
        "S1 updates: extension / floor (SQL function)",
        old_ext.ratio_to(old_floor),
        1.0,
        true,
    );
    report.ratio(
        "S1 updates, stretch: extension / floor (SQL function)",
        old_ext.ratio_to(old_floor),
        0.35,
        true,
    );
    report.ratio(
        "S1 new keys: extension / PL/pgSQL",
        new_ext.ratio_to(new_pl),
        0.6,
        true,
    );
    report.ratio(
        "S1 updates: extension / PL/pgSQL",
        old_ext.ratio_to(old_pl),
        0.6,
        true,
    );
    report.ratio_without_target(
        "S1 bare statement, 1 client: extension / floor (µs per transaction)",
        bare_ext.ratio_to(bare_floor),
    );
    report.ratio(
        "S1 rate_check / PK SELECT",
        rate_check.ratio_to(pk_select),
        2.0,
        true,
    );
    report.ratio(
        "S1 rate_check / PK SELECT, stretch",
        rate_check.ratio_to(pk_select),
        1.5,
        true,
    );
    report.ratio_without_target(
        "S1 rate_check / the PK SELECT under count(*) (an index-only probe that reads no column)",
        rate_check.ratio_to(pk_probe),
    );
    report.ratio_without_target(
        "S1 a set-returning function alone (generate_series per row) / PK SELECT",
        srf_floor.ratio_to(pk_select),
    );
    report.ratio_without_target(
        "S1 rate_check / (PK SELECT + a set-returning function alone)",
        rate_check.ratio_to_sum(pk_select, srf_floor),
    );
}

/// The editions side by side (docs/guarantees.md, "Portable edition"): the
/// S1 workloads for the native extension, the portable edition, PL/pgSQL
/// and the floor, from the same rounds (`new` and `old`: new keys, updates,
/// in that order).
fn editions(
    report: &mut Report,
    new: [&Samples; 4],
    old: [&Samples; 4],
    distinct: usize,
    keys: usize,
    rounds: usize,
) {
    let [new_ext, new_portable, new_pl, new_floor] = new;
    let [old_ext, old_portable, old_pl, old_floor] = old;
    report.scenario(
        "Scenario 1, the editions: per-call server cost (µs per call, median of 3 rounds, min–max)",
        format!(
            "The same statements as above, with the portable edition (SQL and PL/pgSQL, `dist/rate_limiter-portable.sql`) \
             in a database of its own on the same server, taking its turn in the same rounds.\n\n\
             | workload | native extension | portable edition | (a) PL/pgSQL | (b) floor (SQL function) |\n|---|---:|---:|---:|---:|\n\
             | {distinct} distinct new keys | {} | {} | {} | {} |\n\
             | {keys} keys × {rounds} rounds (updates) | {} | {} | {} | {} |\n",
            new_ext.show(2), new_portable.show(2), new_pl.show(2), new_floor.show(2),
            old_ext.show(2), old_portable.show(2), old_pl.show(2), old_floor.show(2),
        ),
        "what a call of each edition costs inside a statement, against the hand-written PL/pgSQL it replaces.",
        "the cost of a statement sent by an application (the round trip and the commit dominate both editions: scenarios 2 and 3).",
    );
    report.ratio(
        "S1 new keys: portable edition / PL/pgSQL",
        new_portable.ratio_to(new_pl),
        1.0,
        true,
    );
    report.ratio(
        "S1 updates: portable edition / PL/pgSQL",
        old_portable.ratio_to(old_pl),
        1.0,
        true,
    );
    report.ratio_without_target(
        "S1 new keys: native extension / portable edition",
        new_ext.ratio_to(new_portable),
    );
    report.ratio_without_target(
        "S1 updates: native extension / portable edition",
        old_ext.ratio_to(old_portable),
    );
    let _ = (new_floor, old_floor);
}
