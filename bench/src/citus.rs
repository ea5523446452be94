//! Scenario 7 (`bench/citus.sh`): a Citus cluster of this machine, a
//! coordinator and two workers (`scripts/citus.sh`), with
//! `rate_limiter.distribute(colocate_with => 'app.messages')`. Against the
//! plain-SQL upsert (the floor of `baselines/floor.sql`, written the way
//! Citus accepts it: the time comes from the `VALUES` row, since Citus
//! refuses a non-immutable function in `DO UPDATE`) on a table distributed
//! the same way and colocated with the same application table:
//! (a) 8 clients over 10,000 keys through the coordinator, one call per
//! transaction; (b) the tenant transaction (`BEGIN`, the limit, an insert
//! into `app.messages` for that tenant, `COMMIT`). (c) One global limit
//! with 16 shards, 4 clients on each worker: the share of admitted calls
//! its shards on the caller's own worker served, and the bound.

use crate::report::{rotate, Report, Samples};
use crate::{pgbench, Bench, Pgbench};
use postgres::{Client, NoTls};
use std::time::Instant;

const SECONDS: usize = 10;
/// Rounds per contender (the contenders take turns).
const RUNS: usize = 3;
const CLIENTS: usize = 8;
/// Keys (tenants) are drawn from 1..=KEYS.
const KEYS: usize = 10_000;

/// The application table, the baseline's table colocated with it, and the
/// limiter distributed beside them. Each `distribute()` in a transaction
/// of its own (it asks the workers over connections of their own).
fn set_up(bench: &Bench) {
    let mut client = bench.connect();
    client
        .batch_execute("SELECT rate_limiter.undistribute()")
        .expect("undistribute()");
    client
        .batch_execute(
            "DROP SCHEMA IF EXISTS app CASCADE; CREATE SCHEMA app; \
             CREATE TABLE app.messages (tenant_id text COLLATE \"C\" NOT NULL, body text); \
             SELECT create_distributed_table('app.messages', 'tenant_id'); \
             DROP TABLE IF EXISTS baseline.citus_limits; \
             CREATE TABLE baseline.citus_limits ( \
                 name text NOT NULL, key text COLLATE \"C\" NOT NULL, \
                 value float8 NOT NULL, ts timestamptz NOT NULL, \
                 PRIMARY KEY (key, name) WITH (fillfactor = 100)); \
             SELECT create_distributed_table('baseline.citus_limits', 'key', colocate_with => 'app.messages')",
        )
        .expect("the application's table and the baseline's");
    client
        .batch_execute("SELECT rate_limiter.distribute(colocate_with => 'app.messages')")
        .expect("distribute()");
}

/// Empties every table (on every node: Citus runs the TRUNCATE on each
/// shard), so that every run starts from the same state.
fn fresh_tables(bench: &Bench) {
    bench
        .connect()
        .batch_execute("TRUNCATE rate_limiter.rate_limits, baseline.citus_limits, app.messages")
        .expect("truncate");
}

/// The port in a connection string or pgbench arguments of the
/// coordinator (`port`), for worker `worker` (1 or 2: the next ports, as
/// `scripts/citus.sh` starts them).
fn on_worker(text: &str, port: u16, worker: u16) -> String {
    text.replace(&port.to_string(), &(port + worker).to_string())
}

/// The coordinator's port, from `bench.url`.
fn coordinator_port(bench: &Bench) -> u16 {
    bench
        .url
        .split_whitespace()
        .find_map(|part| part.strip_prefix("port="))
        .and_then(|port| port.parse().ok())
        .expect("a port in the benchmark's connection string")
}

/// `bench` with its connection string and pgbench arguments for worker
/// `worker`.
fn worker_bench(bench: &Bench, worker: u16) -> Bench {
    let port = coordinator_port(bench);
    Bench {
        url: on_worker(&bench.url, port, worker),
        pgbench_args: bench
            .pgbench_args
            .iter()
            .map(|arg| on_worker(arg, port, worker))
            .collect(),
        redis_url: String::new(),
        redis_always_url: String::new(),
        redis_everysec_url: String::new(),
        scale: bench.scale,
        portable_url: None,
    }
}

/// The global limit of (c).
const GLOBAL: &str = "citus_global16";
const CLIENTS_PER_WORKER: usize = 4;

/// What one run of (c) measured: calls per second offered, admitted,
/// refused, calls that went to the other worker, and the bound.
struct Spread {
    tps: f64,
    admitted: i64,
    refused: i64,
    delegated: i64,
    bound: f64,
}

/// (c): `GLOBAL` defined with `rate` per second (capacity the same), 16
/// shards; 4 pgbench clients on each worker for `seconds`.
fn spread_run(bench: &Bench, workers: &[Bench; 2], rate: f64, seconds: usize) -> Spread {
    let mut coordinator = bench.connect();
    coordinator
        .execute(
            "DELETE FROM rate_limiter.rate_limits WHERE name = $1",
            &[&GLOBAL],
        )
        .expect("forget the state");
    let mut clients: Vec<Client> = workers
        .iter()
        .map(|worker| Client::connect(&worker.url, NoTls).expect("connect to a worker"))
        .collect();
    for client in &mut clients {
        client
            .batch_execute("SELECT pg_stat_reset(); SELECT rate_limiter.stats_reset()")
            .expect("reset the statistics");
    }
    coordinator
        .execute(
            "SELECT rate_limiter.define($1, rate_limiter.token_bucket($2, '1 second', shards => 16))",
            &[&GLOBAL, &rate],
        )
        .expect("define");
    let started = Instant::now();
    let script = concat!(env!("CARGO_MANIFEST_DIR"), "/pgbench/citus_global.sql");
    let length = seconds.to_string();
    let tps: f64 = std::thread::scope(|scope| {
        let runs: Vec<_> = workers
            .iter()
            .map(|worker| {
                let length = &length;
                scope.spawn(move || {
                    pgbench(
                        worker,
                        &Pgbench {
                            clients: CLIENTS_PER_WORKER,
                            script,
                            synchronous_commit: "on",
                            length: &["-T", length],
                            keys: 1,
                        },
                    )
                })
            })
            .collect();
        runs.into_iter()
            .map(|run| run.join().expect("pgbench"))
            .sum()
    });
    // Tokens start full: at most the capacity plus what refilled since
    // the definition.
    let bound = rate + rate * started.elapsed().as_secs_f64();
    let mut spread = Spread {
        tps,
        admitted: 0,
        refused: 0,
        delegated: 0,
        bound,
    };
    for client in &mut clients {
        let row = client
            .query_one(
                "SELECT coalesce((SELECT admitted FROM rate_limiter.stats WHERE name = $1), 0),                         coalesce((SELECT refused FROM rate_limiter.stats WHERE name = $1), 0),                         coalesce((SELECT sum(calls) FROM pg_stat_user_functions                                   WHERE schemaname = 'rate_limiter' AND funcname = '_rate_limit_at'), 0)::int8",
                &[&GLOBAL],
            )
            .expect("read the statistics");
        spread.admitted += row.get::<_, i64>(0);
        spread.refused += row.get::<_, i64>(1);
        spread.delegated += row.get::<_, i64>(2);
    }
    spread
}

/// (c) at the offered load, then with the limit at half of it.
fn spread_case(bench: &Bench, report: &mut Report, seconds: usize) -> String {
    let workers = [worker_bench(bench, 1), worker_bench(bench, 2)];
    for worker in &workers {
        // Counts the calls other nodes delegate to this one.
        let mut client = Client::connect(&worker.url, NoTls).expect("connect to a worker");
        client
            .batch_execute("ALTER SYSTEM SET track_functions = 'all'")
            .expect("track_functions");
        client
            .batch_execute("SELECT pg_reload_conf()")
            .expect("reload");
    }
    // The load the clients offer when the limit never stands in the way.
    let offered = spread_run(bench, &workers, 1_000_000.0, seconds).tps;
    let mut rows = String::new();
    let mut shares = Vec::new();
    for (case, rate) in [
        ("the rate the clients offer", offered.round()),
        ("half of it", (offered / 2.0).round()),
    ] {
        let run = spread_run(bench, &workers, rate, seconds);
        // Each delegated call is one that its own worker's shards could
        // not serve: at most that many admissions were served elsewhere.
        let local = 1.0 - run.delegated as f64 / (run.admitted.max(1) as f64);
        shares.push(local);
        rows.push_str(&format!(
            "| {case}: {rate:.0}/s | {:.0} | {} | {} | {} | {:.1}% | {:.0} | {} |\n",
            run.tps,
            run.admitted,
            run.refused,
            run.delegated,
            100.0 * local,
            run.bound,
            if (run.admitted as f64) <= run.bound {
                "yes"
            } else {
                "**no**"
            },
        ));
    }
    report.target(
        "S7c Citus, a global limit with 16 shards at the offered rate: share of admissions served by the caller's worker",
        Samples::new(vec![100.0 * shares[0]]),
        80.0,
        false,
        "%",
    );
    report.target(
        "S7c Citus, the same limit at half the offered rate: share served by the caller's worker",
        Samples::new(vec![100.0 * shares[1]]),
        80.0,
        false,
        "%",
    );
    format!(
        "(c) One global limit with 16 shards (`token_bucket(rate, '1 second', shards => 16)`, capacity = rate), {CLIENTS_PER_WORKER} pgbench clients on each worker calling `rate_limit('{GLOBAL}')` for {seconds} s, synchronous_commit on. \
          The offered rate is what the clients made with a limit that never refuses ({offered:.0} calls/s). \
          A call that its own worker's shards cannot serve goes to the other worker (`_rate_limit_at`, counted there in `pg_stat_user_functions`): \
          the share served locally is at least 1 − delegated / admitted. The bound is the capacity plus the rate times the time since `define`.\n\n\
         | limit | calls/s | admitted | refused | delegated | served locally (at least) | bound | within |\n|---|---:|---:|---:|---:|---:|---:|:---:|\n{rows}"
    )
}

pub fn run(bench: &Bench, report: &mut Report) {
    set_up(bench);
    let seconds = bench.scaled(SECONDS).max(2);
    let dir = concat!(env!("CARGO_MANIFEST_DIR"), "/pgbench");
    let mut rows = String::new();
    let cases = [
        (
            "(a) one call per transaction",
            ["extension.sql", "citus_upsert.sql"],
            "S7a Citus, 8 clients over 10,000 keys: extension / upsert",
        ),
        (
            "(b) the tenant transaction",
            ["citus_tenant_extension.sql", "citus_tenant_upsert.sql"],
            "S7b Citus, the tenant transaction: extension / upsert",
        ),
    ];
    for (case, scripts, label) in cases {
        let scripts = scripts.map(|script| format!("{dir}/{script}"));
        let tps = rotate(scripts.len(), RUNS, |i| {
            fresh_tables(bench);
            pgbench(
                bench,
                &Pgbench {
                    clients: CLIENTS,
                    script: &scripts[i],
                    synchronous_commit: "on",
                    length: &["-T", &seconds.to_string()],
                    keys: KEYS,
                },
            )
        });
        rows.push_str(&format!(
            "| {case} | {} | {} |\n",
            tps[0].show(0),
            tps[1].show(0)
        ));
        report.ratio(label, tps[0].ratio_to(&tps[1]), 1.0, false);
    }
    let spread = spread_case(bench, report, seconds);
    report.scenario(
        "Scenario 7: Citus (pgbench transactions per second through the coordinator)",
        format!(
            "A coordinator and two workers on this machine (`scripts/citus.sh`), `rate_limiter.distribute(colocate_with => 'app.messages')`; \
             `pgbench -c {CLIENTS} -j 2 -M prepared -T {seconds}` against the coordinator, keys (tenants) random in 1..{KEYS}, synchronous_commit on. \
             The upsert is the floor's statement on `baseline.citus_limits`, distributed by its key and colocated with `app.messages`; \
             its time comes from the `VALUES` row (`EXCLUDED.ts`), because Citus refuses a non-immutable function in `DO UPDATE`.\n\n\
             Median of {RUNS} rounds (min–max), the contenders taking turns.\n\n\
             | case | extension | upsert |\n|---|---:|---:|\n{rows}\n\
             Round trips to the worker (seen with `citus.log_remote_commands`): in (a) one for each contender, as a statement of its own there (the limiter's call is its transaction's only work, so it goes without a transaction block: README, Citus); in (b) the tenant's transaction opens a block on the worker for both (`BEGIN` with `assign_distributed_transaction_id`, the limit, the insert, `COMMIT`).\n\n\
             {spread}"
        ),
        "what a call costs through the coordinator against the statement an application would write, alone and inside the tenant's own transaction; and how much of a sharded global limit's work stays on the caller's worker, and that it keeps its bound, when the limit is and is not the bottleneck.",
        "calls sent to the workers directly, a cluster of separate machines (here every node shares 2 cores, so the coordinator's and the workers' work compete), or many clients on few keys.",
    );
}
