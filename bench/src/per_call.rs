//! Scenario 1: per-call server cost. One statement calls a limiter once per
//! row of `generate_series`: 100,000 distinct keys (first calls: inserts),
//! then 1,000 keys called 100 times each (updates, one statement per
//! round); `rate_check` against a bare primary-key SELECT of the same row.
//! Each measurement is the median of 3 runs, divided by the number of calls.

use crate::report::{median, rotate, Report};
use crate::Bench;
use postgres::Client;
use std::time::Instant;

const RUNS: usize = 3;

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
/// `calls`: the median of RUNS runs, the contenders taking turns in a
/// rotating order so that none always runs first after a TRUNCATE.
fn distinct_keys(client: &mut Client, calls: &[&str], keys: usize) -> Vec<f64> {
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
fn repeated_keys(client: &mut Client, calls: &[&str], keys: usize, rounds: usize) -> Vec<f64> {
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
    let (new_ext, new_pl, new_floor) = (new[0], new[1], new[2]);
    let old = repeated_keys(&mut client, &contenders, keys, rounds);
    let (old_ext, old_pl, old_floor) = (old[0], old[1], old[2]);

    // rate_check vs a bare primary-key SELECT of the same rows.
    reset(&mut client);
    let create =
        format!("SELECT count(*) FROM generate_series(1, {keys}) AS g, LATERAL {EXTENSION} AS r");
    client.batch_execute(&create).unwrap();
    client
        .batch_execute("ANALYZE rate_limiter.rate_limits")
        .unwrap();
    let check = |client: &mut Client, call: &str| {
        let sql = format!("SELECT count(*) FROM generate_series(1, {rounds}) AS round, generate_series(1, {keys}) AS g, LATERAL {call} AS r");
        let mut runs: Vec<f64> = (0..RUNS)
            .map(|_| seconds(client, &sql) * 1e6 / (keys * rounds) as f64)
            .collect();
        median(&mut runs)
    };
    // `g + 0 * round` makes every call depend on the round, so the planner
    // cannot compute the 1,000 results once and replay them.
    let rate_check = check(
        &mut client,
        "rate_limiter.rate_check('bench', (g + 0 * round)::text)",
    );
    // A bare primary-key SELECT per call: a nested loop of index probes.
    // (Left alone, the planner turns the 100,000 lookups into one hash join
    // over a sequential scan, which is not the cost of a lookup.)
    client.batch_execute("SET enable_hashjoin = off").unwrap();
    client.batch_execute("SET enable_mergejoin = off").unwrap();
    let pk_select = check(
        &mut client,
        "(SELECT value, ts FROM rate_limiter.rate_limits WHERE name = 'bench' AND key = (g + 0 * round)::text AND shard = 0)",
    );
    client.batch_execute("RESET enable_hashjoin").unwrap();
    client.batch_execute("RESET enable_mergejoin").unwrap();

    report.section(
        "Scenario 1: per-call server cost (µs per call, median of 3)",
        format!(
            "One statement calls the limiter once per row: `SELECT count(*) FROM generate_series(1, N) g, LATERAL <call>`.\n\
             The floor is the single upsert wrapped in a SQL function so it can be called per row.\n\n\
             | workload | extension | (a) PL/pgSQL | (b) floor |\n|---|---:|---:|---:|\n\
             | {distinct} distinct new keys | {new_ext:.2} | {new_pl:.2} | {new_floor:.2} |\n\
             | {keys} keys × {rounds} rounds (updates) | {old_ext:.2} | {old_pl:.2} | {old_floor:.2} |\n\n\
             | read-only | rate_check | bare primary-key SELECT (nested loop of index probes) |\n|---|---:|---:|\n\
             | {keys} keys × {rounds} rounds | {rate_check:.2} | {pk_select:.2} |\n"
        ),
    );
    report.ratio(
        "S1 new keys: extension / floor",
        new_ext / new_floor,
        1.0,
        true,
    );
    report.ratio(
        "S1 updates: extension / floor",
        old_ext / old_floor,
        1.0,
        true,
    );
    report.ratio(
        "S1 new keys: extension / PL/pgSQL",
        new_ext / new_pl,
        0.6,
        true,
    );
    report.ratio(
        "S1 updates: extension / PL/pgSQL",
        old_ext / old_pl,
        0.6,
        true,
    );
    report.ratio(
        "S1 rate_check / PK SELECT",
        rate_check / pk_select,
        2.0,
        true,
    );
}
