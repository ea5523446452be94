//! Scenario 6: what statistics cost per call. Scenario 1's workloads
//! (`rate_limit` on 1,000 existing keys, 100 rounds; 100,000 new keys)
//! on the same server started with the library in
//! `shared_preload_libraries` (statistics on: every call finds its name's
//! entry in shared memory and adds to it) and without (statistics off).
//! The server is restarted between runs, which alternate off, on, off,
//! on, ...; each figure is the median of RUNS runs.

use crate::report::{Report, Samples};
use crate::Bench;
use postgres::{Client, NoTls};
use std::process::Command;
use std::time::{Duration, Instant};

const RUNS: usize = 7;

/// Restarts the benchmark server with or without the library preloaded.
fn restart(preload: bool) {
    let env = |name: &str| {
        std::env::var(name).unwrap_or_else(|_| panic!("{name} is not set: run bench/run.sh"))
    };
    let (bin, data) = (
        env("RATE_LIMITER_BENCH_PG_BIN"),
        env("RATE_LIMITER_BENCH_PGDATA"),
    );
    let options = if preload {
        env("RATE_LIMITER_BENCH_PG_OPTIONS")
    } else {
        env("RATE_LIMITER_BENCH_PG_OPTIONS_WITHOUT_PRELOAD")
    };
    let pg_ctl = format!("{bin}/pg_ctl");
    for arguments in [
        vec!["-D", &data, "-m", "fast", "-w", "stop"],
        vec![
            "-D",
            &data,
            "-l",
            &format!("{data}/../server.log"),
            "-w",
            "-o",
            &options,
            "start",
        ],
    ] {
        let status = Command::new("sudo")
            .args(["-u", "postgres", "env", "-u", "RUST_BACKTRACE", &pg_ctl])
            .args(&arguments)
            .status()
            .expect("pg_ctl");
        assert!(status.success(), "pg_ctl {arguments:?}");
    }
}

fn connect(bench: &Bench) -> Client {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        match Client::connect(&bench.url, NoTls) {
            Ok(client) => return client,
            Err(error) => {
                assert!(
                    Instant::now() < deadline,
                    "connect after a restart: {error}"
                );
                std::thread::sleep(Duration::from_millis(100));
            }
        }
    }
}

/// µs per call: (existing keys, new keys) in one run.
fn one_run(bench: &Bench, preload: bool) -> (f64, f64) {
    restart(preload);
    let mut client = connect(bench);
    let enabled = client
        .batch_execute("SELECT count(*) FROM rate_limiter.stats")
        .is_ok();
    assert_eq!(enabled, preload, "statistics on exactly when preloaded");
    let (keys, rounds) = (1000, bench.scaled(100));
    let distinct = bench.scaled(100_000);
    client
        .batch_execute("TRUNCATE rate_limiter.rate_limits")
        .unwrap();
    let calls = format!(
        "SELECT count(*) FROM generate_series(1, {keys}) AS g, LATERAL rate_limiter.rate_limit('bench', g::text) AS r"
    );
    client.batch_execute(&calls).unwrap(); // create the rows, warm the backend
    let start = Instant::now();
    for _ in 0..rounds {
        client.batch_execute(&calls).unwrap();
    }
    let existing = start.elapsed().as_secs_f64() * 1e6 / (keys * rounds) as f64;
    client
        .batch_execute("TRUNCATE rate_limiter.rate_limits")
        .unwrap();
    let start = Instant::now();
    client
        .batch_execute(&format!(
            "SELECT count(*) FROM generate_series(1, {distinct}) AS g, LATERAL rate_limiter.rate_limit('bench', g::text) AS r"
        ))
        .unwrap();
    let new = start.elapsed().as_secs_f64() * 1e6 / distinct as f64;
    (existing, new)
}

pub fn run(bench: &Bench, report: &mut Report) {
    let mut off = (Vec::new(), Vec::new());
    let mut on = (Vec::new(), Vec::new());
    for _ in 0..RUNS {
        for preload in [false, true] {
            let (existing, new) = one_run(bench, preload);
            let runs = if preload { &mut on } else { &mut off };
            runs.0.push(existing);
            runs.1.push(new);
        }
    }
    // Leave the server as the other scenarios found it.
    restart(true);
    let [off_existing, off_new, on_existing, on_new] = [off.0, off.1, on.0, on.1].map(Samples::new);
    let (ratio_existing, ratio_new) = (
        on_existing.ratio_to(&off_existing),
        on_new.ratio_to(&off_new),
    );
    report.scenario(
        "Scenario 6: the cost of statistics (µs per rate_limit call, median of 7 rounds, min–max)",
        format!(
            "Scenario 1's workloads on one server, restarted between runs (alternating) with the library in \
             `shared_preload_libraries` (statistics on) and without (off). The on / off column is the median \
             of the per-round ratios.\n\n\
             | workload | statistics off | statistics on | on / off |\n|---|---:|---:|---:|\n\
             | 1000 keys × {rounds} rounds (updates) | {} | {} | {} |\n\
             | {distinct} new keys | {} | {} | {} |\n",
            off_existing.show(2),
            on_existing.show(2),
            ratio_existing.show(3),
            off_new.show(2),
            on_new.show(2),
            ratio_new.show(3),
            rounds = bench.scaled(100),
            distinct = bench.scaled(100_000),
        ),
        "what keeping statistics costs per call.",
        "the cost of reading the view.",
    );
    report.ratio(
        "S6 statistics on / off (updates)",
        ratio_existing,
        1.03,
        true,
    );
    report.ratio("S6 statistics on / off (new keys)", ratio_new, 1.03, true);
}
