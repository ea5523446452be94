//! Scenario 2: throughput with pgbench: 2 clients, keys drawn from 100,000,
//! one call per transaction, prepared statements, with synchronous_commit
//! off and on. The scripts are in bench/pgbench/.

use crate::report::{rotate, Report};
use crate::{pgbench, Bench, Pgbench};

const SECONDS: usize = 10;
/// Runs per contender and setting (the VM's timing moves by ±20%).
const RUNS: usize = 5;
/// Keys are drawn from 1..=KEYS.
const KEYS: usize = 100_000;

/// Empties the contenders' tables and checkpoints, so that every run starts
/// from the same state.
fn fresh_tables(bench: &Bench) {
    let mut client = bench.connect();
    client
        .batch_execute(
            "TRUNCATE rate_limiter.rate_limits, baseline.plpgsql_limits, baseline.floor_limits",
        )
        .unwrap();
    client.batch_execute("CHECKPOINT").unwrap();
}

pub fn run(bench: &Bench, report: &mut Report) {
    let seconds = bench.scaled(SECONDS).max(2);
    let dir = concat!(env!("CARGO_MANIFEST_DIR"), "/pgbench");
    let mut rows = String::new();
    let scripts =
        ["extension.sql", "plpgsql.sql", "floor.sql"].map(|script| format!("{dir}/{script}"));
    for synchronous_commit in ["off", "on"] {
        // Median of RUNS runs each, the contenders taking turns.
        let tps = rotate(scripts.len(), RUNS, |i| {
            fresh_tables(bench);
            pgbench(
                bench,
                &Pgbench {
                    clients: 2,
                    script: &scripts[i],
                    synchronous_commit,
                    length: &["-T", &seconds.to_string()],
                    keys: KEYS,
                },
            )
        });
        let (ext, pl, floor) = (&tps[0], &tps[1], &tps[2]);
        rows.push_str(&format!(
            "| {synchronous_commit} | {} | {} | {} |\n",
            ext.show(0),
            pl.show(0),
            floor.show(0)
        ));
        report.ratio(
            &format!("S2 tps, sync commit {synchronous_commit}: extension / floor"),
            ext.ratio_to(floor),
            1.0,
            false,
        );
    }
    report.scenario(
        "Scenario 2: throughput (pgbench transactions per second)",
        format!(
            "`pgbench -c 2 -j 2 -M prepared -T {seconds}`, one call per transaction, keys random in 1..100,000.\n\n\
             Median of {RUNS} rounds (min–max), the contenders taking turns. With synchronous_commit on, every transaction waits for its WAL flush, which costs far more than the call, so that row measures the disk more than the limiter.\n\n\
             | synchronous_commit | extension | (a) PL/pgSQL | (b) floor (bare statement) |\n|---|---:|---:|---:|\n{rows}"
        ),
        "the throughput of an application that sends one call per transaction.",
        "the call's own cost (the round trip and the commit dominate; scenario 1), or many clients on few keys (scenario 5).",
    );
}
