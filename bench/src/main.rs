//! Benchmarks of the rate_limiter extension against the alternatives users
//! pick from, measured side by side in one run on one machine:
//! (a) hand-written PL/pgSQL (`baselines/plpgsql.sql`), (b) the single
//! upsert "floor" (`baselines/floor.sql`), (c) Redis with a Lua token
//! bucket (`baselines/token_bucket.lua`). Scenario 5 measures the
//! extension alone: one global limit under open-loop load (pgbench `-R`)
//! with 1, 8 and 16 shards; scenario 6 the cost of statistics (the library
//! preloaded or not); scenario 8 one limit under overload, with and
//! without lock-free refusals. Every figure is the median of at least 3 rounds in
//! which the contenders take turns; the report shows min and max too.
//!
//! Run through `bench/run.sh`, which starts a throwaway PostgreSQL cluster
//! and three redis-servers and passes their addresses in the environment:
//! `RATE_LIMITER_BENCH_URL` (libpq key=value string), `RATE_LIMITER_BENCH_PGBENCH`
//! (pgbench connection arguments), `RATE_LIMITER_BENCH_REDIS`,
//! `RATE_LIMITER_BENCH_REDIS_ALWAYS`, `RATE_LIMITER_BENCH_REDIS_EVERYSEC`
//! (redis URLs: no persistence, appendfsync always, appendfsync everysec),
//! `RATE_LIMITER_BENCH_OUT` (report directory). `RATE_LIMITER_BENCH_QUICK=1`
//! shrinks every scenario for a smoke run. Scenario 7 (Citus) runs only
//! through `bench/citus.sh`, against a Citus coordinator; the redis
//! addresses are then not needed.

mod citus;
mod hot_limit;
mod latency;
mod overload;
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
    /// redis-server without persistence.
    pub redis_url: String,
    /// redis-server with `appendonly yes`, `appendfsync always`.
    pub redis_always_url: String,
    /// redis-server with `appendonly yes`, `appendfsync everysec`.
    pub redis_everysec_url: String,
    /// Multiplier for sizes (1.0 normally, smaller for a smoke run).
    pub scale: f64,
    /// The database with the portable edition (docs/guarantees.md,
    /// "Portable edition"), for scenario 1's comparison of the editions
    /// (`RATE_LIMITER_BENCH_PORTABLE_URL`; none: left out).
    pub portable_url: Option<String>,
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

/// One pgbench run: `clients` clients (prepared statements) running
/// `script` with `synchronous_commit`, for `length` (`-T seconds` or `-t
/// transactions`), keys drawn from 1..=`keys` (the script's `:keys`).
pub struct Pgbench<'a> {
    pub clients: usize,
    pub script: &'a str,
    pub synchronous_commit: &'a str,
    pub length: &'a [&'a str],
    pub keys: usize,
}

/// Runs pgbench with `run` and `extra` arguments; returns its standard
/// output. Panics when pgbench fails.
pub fn pgbench_output(bench: &Bench, run: &Pgbench, extra: &[&str]) -> String {
    let clients = run.clients.to_string();
    let threads = run.clients.min(2).to_string();
    let output = std::process::Command::new("pgbench")
        .args(["-n", "-c", &clients, "-j", &threads, "-M", "prepared"])
        .args(["-f", run.script])
        .args(["-D", &format!("keys={}", run.keys)])
        .args(run.length)
        .args(extra)
        .args(&bench.pgbench_args)
        .env(
            "PGOPTIONS",
            format!("-c synchronous_commit={}", run.synchronous_commit),
        )
        .output()
        .expect("run pgbench");
    let stdout = String::from_utf8_lossy(&output.stdout).into_owned();
    assert!(
        output.status.success(),
        "pgbench failed: {stdout}\n{}",
        String::from_utf8_lossy(&output.stderr)
    );
    stdout
}

/// Runs pgbench (see [`Pgbench`]) and returns its transactions per second.
pub fn pgbench(bench: &Bench, run: &Pgbench) -> f64 {
    let stdout = pgbench_output(bench, run, &[]);
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

/// A redis address, empty when not set (scenario 7 needs none; the
/// scenarios that do fail to connect to an empty one).
fn env_or_empty(name: &str) -> String {
    std::env::var(name).unwrap_or_default()
}

/// A scenario: measures and adds its sections and targets to the report.
type Scenario = fn(&Bench, &mut Report);

fn main() {
    let bench = Bench {
        url: env("RATE_LIMITER_BENCH_URL"),
        pgbench_args: env("RATE_LIMITER_BENCH_PGBENCH")
            .split_whitespace()
            .map(str::to_string)
            .collect(),
        redis_url: env_or_empty("RATE_LIMITER_BENCH_REDIS"),
        redis_always_url: env_or_empty("RATE_LIMITER_BENCH_REDIS_ALWAYS"),
        redis_everysec_url: env_or_empty("RATE_LIMITER_BENCH_REDIS_EVERYSEC"),
        scale: if std::env::var("RATE_LIMITER_BENCH_QUICK").is_ok() {
            0.05
        } else {
            1.0
        },
        portable_url: std::env::var("RATE_LIMITER_BENCH_PORTABLE_URL").ok(),
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

    // RATE_LIMITER_BENCH_SCENARIOS=1,6 runs only those (default: all but
    // 7, which needs a Citus cluster: bench/citus.sh).
    let chosen = std::env::var("RATE_LIMITER_BENCH_SCENARIOS").ok();
    let wanted = |number: &str| {
        chosen.as_deref().map_or(number != "7", |list| {
            list.split(',').any(|n| n.trim() == number)
        })
    };
    let scenarios: [(&str, &str, Scenario); 8] = [
        ("1", "per-call server cost", per_call::run),
        ("2", "throughput with pgbench", throughput::run),
        ("3", "client-observed latency", latency::run),
        ("4", "storage", storage::run),
        ("5", "one hot limit", hot_limit::run),
        ("6", "the cost of statistics", stats_overhead::run),
        ("7", "Citus", citus::run),
        ("8", "overload, lock-free refusals", overload::run),
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
