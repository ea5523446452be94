//! Benchmarks of the rate_limiter extension against the alternatives users
//! pick from, measured side by side in one run on one machine:
//! (a) hand-written PL/pgSQL (`baselines/plpgsql.sql`), (b) the single
//! upsert "floor" (`baselines/floor.sql`), (c) Redis with a Lua token
//! bucket (`baselines/token_bucket.lua`). Scenario 5 measures the
//! extension alone: one global limit under 16 clients, with and without
//! shards; scenario 6 the cost of statistics (the library preloaded or not).
//!
//! Run through `bench/run.sh`, which starts a throwaway PostgreSQL cluster
//! and redis-server and passes their addresses in the environment:
//! `RATE_LIMITER_BENCH_URL` (libpq key=value string), `RATE_LIMITER_BENCH_PGBENCH`
//! (pgbench connection arguments), `RATE_LIMITER_BENCH_REDIS` (redis URL),
//! `RATE_LIMITER_BENCH_OUT` (report directory). `RATE_LIMITER_BENCH_QUICK=1`
//! shrinks every scenario for a smoke run.

mod hot_limit;
mod latency;
mod per_call;
mod report;
mod stats_overhead;
mod storage;
mod throughput;

use postgres::{Client, NoTls};
use report::Report;

/// Connection settings and sizes shared by the scenarios.
pub struct Bench {
    pub url: String,
    pub pgbench_args: Vec<String>,
    pub redis_url: String,
    /// Multiplier for sizes (1.0 normally, smaller for a smoke run).
    pub scale: f64,
}

impl Bench {
    pub fn connect(&self) -> Client {
        Client::connect(&self.url, NoTls).expect("connect to the benchmark server")
    }

    /// `n` scaled, at least 1.
    pub fn scaled(&self, n: usize) -> usize {
        ((n as f64 * self.scale) as usize).max(1)
    }
}

/// Runs the pgbench `script` (2 clients, prepared statements) with
/// `synchronous_commit`, for `length` (`-T seconds` or `-t transactions`),
/// keys drawn from 1..=`keys` (the script's `:keys`). Returns the tps.
pub fn pgbench(
    bench: &Bench,
    script: &str,
    synchronous_commit: &str,
    length: &[&str],
    keys: usize,
) -> f64 {
    let output = std::process::Command::new("pgbench")
        .args(["-n", "-c", "2", "-j", "2", "-M", "prepared", "-f", script])
        .args(["-D", &format!("keys={keys}")])
        .args(length)
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

fn env(name: &str) -> String {
    std::env::var(name).unwrap_or_else(|_| panic!("{name} is not set: run bench/run.sh"))
}

fn main() {
    let bench = Bench {
        url: env("RATE_LIMITER_BENCH_URL"),
        pgbench_args: env("RATE_LIMITER_BENCH_PGBENCH")
            .split_whitespace()
            .map(str::to_string)
            .collect(),
        redis_url: env("RATE_LIMITER_BENCH_REDIS"),
        scale: if std::env::var("RATE_LIMITER_BENCH_QUICK").is_ok() {
            0.05
        } else {
            1.0
        },
    };
    let out = env("RATE_LIMITER_BENCH_OUT");
    let mut client = bench.connect();
    client
        .batch_execute(concat!(
            "CREATE EXTENSION IF NOT EXISTS rate_limiter;\n",
            include_str!("../baselines/plpgsql.sql"),
            include_str!("../baselines/floor.sql"),
            "SELECT rate_limiter.define('bench', rate_limiter.token_bucket(100, '1 minute', capacity => 100));
             SELECT rate_limiter.define('pgbench', rate_limiter.token_bucket(100, '1 minute', capacity => 100));"
        ))
        .expect("install the extension and the baselines");
    let mut report = Report::new(&mut client);

    // RATE_LIMITER_BENCH_SCENARIOS=1,6 runs only those (default: all).
    let chosen = std::env::var("RATE_LIMITER_BENCH_SCENARIOS").ok();
    let wanted = |number: &str| {
        chosen
            .as_deref()
            .is_none_or(|list| list.split(',').any(|n| n.trim() == number))
    };
    let scenarios: [(&str, &str, fn(&Bench, &mut Report)); 6] = [
        ("1", "per-call server cost", per_call::run),
        ("2", "throughput with pgbench", throughput::run),
        ("3", "client-observed latency", latency::run),
        ("4", "storage", storage::run),
        ("5", "one hot limit", hot_limit::run),
        ("6", "the cost of statistics", stats_overhead::run),
    ];
    for (number, title, run) in scenarios {
        if wanted(number) {
            eprintln!("scenario {number}: {title}");
            run(&bench, &mut report);
        }
    }

    report.write(&out);
    eprintln!("report written to {out}/report.md");
}
