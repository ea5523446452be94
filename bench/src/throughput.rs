//! Scenario 2: throughput with pgbench: 2 clients, keys drawn from 100,000,
//! one call per transaction, prepared statements, with synchronous_commit
//! off and on. The scripts are in bench/pgbench/.

use crate::report::{rotate, Report};
use crate::Bench;
use std::process::Command;

const SECONDS: usize = 10;

/// Runs one pgbench script and returns its tps.
fn pgbench(bench: &Bench, script: &str, synchronous_commit: &str, seconds: usize) -> f64 {
    let mut client = bench.connect();
    client
        .batch_execute(
            "TRUNCATE rate_limiter.rate_limits, baseline.plpgsql_limits, baseline.floor_limits",
        )
        .unwrap();
    client.batch_execute("CHECKPOINT").unwrap();
    let output = Command::new("pgbench")
        .args([
            "-n",
            "-c",
            "2",
            "-j",
            "2",
            "-M",
            "prepared",
            "-T",
            &seconds.to_string(),
            "-f",
            script,
        ])
        .args(&bench.pgbench_args)
        .env(
            "PGOPTIONS",
            format!("-c synchronous_commit={synchronous_commit}"),
        )
        .output()
        .expect("run pgbench");
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(
        output.status.success(),
        "pgbench failed: {stdout}\n{}",
        String::from_utf8_lossy(&output.stderr)
    );
    stdout
        .lines()
        .find(|line| line.starts_with("tps = "))
        .and_then(|line| line.split_whitespace().nth(2))
        .and_then(|tps| tps.parse().ok())
        .unwrap_or_else(|| panic!("no tps in pgbench output: {stdout}"))
}

pub fn run(bench: &Bench, report: &mut Report) {
    let seconds = bench.scaled(SECONDS).max(2);
    let dir = concat!(env!("CARGO_MANIFEST_DIR"), "/pgbench");
    let mut rows = String::new();
    let scripts =
        ["extension.sql", "plpgsql.sql", "floor.sql"].map(|script| format!("{dir}/{script}"));
    for synchronous_commit in ["off", "on"] {
        // Median of 3 runs each, the contenders taking turns.
        let tps = rotate(scripts.len(), 3, |i| {
            pgbench(bench, &scripts[i], synchronous_commit, seconds)
        });
        let (ext, pl, floor) = (tps[0], tps[1], tps[2]);
        rows.push_str(&format!(
            "| {synchronous_commit} | {ext:.0} | {pl:.0} | {floor:.0} |\n"
        ));
        report.ratio(
            &format!("S2 tps, sync commit {synchronous_commit}: extension / floor"),
            ext / floor,
            1.0,
            false,
        );
    }
    report.section(
        "Scenario 2: throughput (pgbench transactions per second)",
        format!(
            "`pgbench -c 2 -j 2 -M prepared -T {seconds}`, one call per transaction, keys random in 1..100,000.\n\n\
             Median of 3 runs each, the contenders taking turns.\n\n\
             | synchronous_commit | extension | (a) PL/pgSQL | (b) floor (bare statement) |\n|---|---:|---:|---:|\n{rows}"
        ),
    );
}
