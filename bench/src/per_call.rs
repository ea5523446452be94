//! Scenario 1: per-call server cost. One statement calls a limiter once per
//! row of `generate_series`: 100,000 distinct keys (first calls: inserts),
//! then 1,000 keys called 100 times each (updates, one statement per
//! round); `rate_check` against a bare primary-key SELECT of the same row.
//! Each measurement is divided by the number of calls; every figure is the
//! median of 3 rounds, the contenders taking turns.
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

fn reset(client: &mut Client) {
    // No ANALYZE after the TRUNCATE: statistics of an empty table would make
    // the PL/pgSQL baseline's cached SELECT ... FOR UPDATE plan a sequential
    // scan for the whole run (the extension does not depend on them).
    client
        .batch_execute(
            "TRUNCATE rate_limiter.rate_limits, baseline.plpgsql_limits, baseline.floor_limits",
        )
        .unwrap();
}

fn seconds(client: &mut Client, sql: &str) -> f64 {
    let start = Instant::now();
    client.batch_execute(sql).unwrap();
    start.elapsed().as_secs_f64()
}

/// Microseconds per call for `keys` distinct new keys, for each call in
/// `calls`: RUNS rounds, the contenders taking turns in a
/// rotating order so that none always runs first after a TRUNCATE.
fn distinct_keys(client: &mut Client, calls: &[&str], keys: usize) -> Vec<Samples> {
    rotate(calls.len(), RUNS, |i| {
        reset(client);
        let sql = format!(
            "SELECT count(*) FROM generate_series(1, {keys}) AS g, LATERAL {} AS r",
            calls[i]
        );
        seconds(client, &sql) * 1e6 / keys as f64
    })
}

/// Microseconds per call for `keys` existing keys, `rounds` statements of
/// one call per key, for each call in `calls` (taking turns as above).
fn repeated_keys(client: &mut Client, calls: &[&str], keys: usize, rounds: usize) -> Vec<Samples> {
    rotate(calls.len(), RUNS, |i| {
        reset(client);
        let sql = format!(
            "SELECT count(*) FROM generate_series(1, {keys}) AS g, LATERAL {} AS r",
            calls[i]
        );
        client.batch_execute(&sql).unwrap(); // create the rows
        let total: f64 = (0..rounds).map(|_| seconds(client, &sql)).sum();
        total * 1e6 / (keys * rounds) as f64
    })
}

pub fn run(bench: &Bench, report: &mut Report) {
    let mut client = bench.connect();
    let distinct = bench.scaled(100_000);
    let (keys, rounds) = (1000, bench.scaled(100));

    let contenders = [EXTENSION, PLPGSQL, FLOOR];
    let new = distinct_keys(&mut client, &contenders, distinct);
    let (new_ext, new_pl, new_floor) = (&new[0], &new[1], &new[2]);
    let old = repeated_keys(&mut client, &contenders, keys, rounds);
    let (old_ext, old_pl, old_floor) = (&old[0], &old[1], &old[2]);

    // rate_check vs a bare primary-key SELECT of the same rows.
    reset(&mut client);
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
    let reads = [
        "rate_limiter.rate_check('bench', (g + 0 * round)::text)",
        "(SELECT value, ts FROM rate_limiter.rate_limits WHERE name = 'bench' AND key = (g + 0 * round)::text AND shard = 0)",
    ];
    let read = rotate(reads.len(), RUNS, |i| {
        // Hash and merge joins off for the primary-key SELECT only.
        let joins = if i == 1 { "off" } else { "on" };
        client
            .batch_execute(&format!(
                "SET enable_hashjoin = {joins}; SET enable_mergejoin = {joins}"
            ))
            .unwrap();
        let sql = format!("SELECT count(*) FROM generate_series(1, {rounds}) AS round, generate_series(1, {keys}) AS g, LATERAL {} AS r", reads[i]);
        seconds(&mut client, &sql) * 1e6 / (keys * rounds) as f64
    });
    client
        .batch_execute("RESET enable_hashjoin; RESET enable_mergejoin")
        .unwrap();
    let (rate_check, pk_select) = (&read[0], &read[1]);

    // The bare statements from one pgbench client: µs per transaction.
    let dir = concat!(env!("CARGO_MANIFEST_DIR"), "/pgbench");
    let scripts = ["extension.sql", "floor.sql"].map(|script| format!("{dir}/{script}"));
    let seconds = bench.scaled(BARE_SECONDS).max(2).to_string();
    let bare = rotate(scripts.len(), RUNS, |i| {
        reset(&mut client);
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
             | read-only | rate_check | bare primary-key SELECT (nested loop of index probes) |\n|---|---:|---:|\n\
             | {keys} keys × {rounds} rounds | {} | {} |\n\n\
             The same two calls as bare prepared statements from one client (`pgbench -c 1 -M prepared -T {seconds}`, \
             synchronous_commit off, keys random in 1..1,000, so nearly every call updates an existing row), in µs per transaction: \
             the round trip, parse-free execution and commit of one statement. Here the floor pays no function call.\n\n\
             | | extension | (b) floor (bare statement) |\n|---|---:|---:|\n\
             | µs per transaction | {} | {} |\n",
            new_ext.show(2), new_pl.show(2), new_floor.show(2),
            old_ext.show(2), old_pl.show(2), old_floor.show(2),
            rate_check.show(2), pk_select.show(2),
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
}
