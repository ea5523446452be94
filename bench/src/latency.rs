//! Scenario 3: client-observed latency of one rate-limit call, one call at
//! a time from one client over loopback, against one EVALSHA round trip to
//! Redis running the Lua token bucket, at three durability levels:
//!
//! - a `rate_limit` call inside an already open transaction (the commit is
//!   the application's and not measured) against Redis without persistence;
//! - the call in its own transaction (autocommit) with synchronous_commit on,
//!   which waits for the WAL flush, against Redis with `appendfsync always`,
//!   which fsyncs its append-only file before answering;
//! - autocommit with synchronous_commit off (the WAL is flushed within
//!   about 3 × wal_writer_delay) against `appendfsync everysec`.
//!
//! A prepared `SELECT 1` from the same client gives the round trip's floor;
//! a prepared primary-key SELECT of the state row, the floor of any read of
//! it; `rate_check` is the limiter's read; and the floor's bare upsert
//! (`baselines/floor.sql`, the statement pgbench sends in scenario 1) inside
//! an open transaction, the least any statement writing a state row costs.
//! ROUNDS rounds, the ten contenders taking turns; each figure is the
//! median of the rounds' percentiles.

use crate::report::{percentile, rotate, Report, Samples};
use crate::Bench;
use postgres::{Client, Statement};
use std::time::Instant;

const CALLS: usize = 10_000;
const ROUNDS: usize = 3;

/// How a PostgreSQL contender sends its calls.
#[derive(Clone, Copy)]
enum Postgres {
    /// Inside an open transaction; commits every 1,000 calls, unmeasured.
    InTransaction,
    /// One transaction per call, with this synchronous_commit.
    Autocommit(&'static str),
}

/// Latencies (µs) of one `rate_limit` call per key.
fn postgres(bench: &Bench, mode: Postgres, keys: &[String]) -> Vec<f64> {
    let mut client = bench.connect();
    client
        .batch_execute("TRUNCATE rate_limiter.rate_limits; CHECKPOINT")
        .unwrap();
    let statement = client
        .prepare("SELECT ok, retry_after, remaining FROM rate_limiter.rate_limit('bench', $1)")
        .unwrap();
    match mode {
        Postgres::InTransaction => in_transaction(&mut client, &statement, keys),
        Postgres::Autocommit(synchronous_commit) => {
            client
                .batch_execute(&format!("SET synchronous_commit = {synchronous_commit}"))
                .unwrap();
            keys.iter()
                .map(|key| {
                    let start = Instant::now();
                    client.query_one(&statement, &[key]).unwrap();
                    start.elapsed().as_secs_f64() * 1e6
                })
                .collect()
        }
    }
}

/// Latencies (µs) of the prepared read `sql` (one parameter, the key) per
/// key, inside an open transaction as [`Postgres::InTransaction`], after
/// one call per key has written every row (unmeasured).
fn read(bench: &Bench, sql: &str, keys: &[String]) -> Vec<f64> {
    let mut client = bench.connect();
    client
        .batch_execute("TRUNCATE rate_limiter.rate_limits")
        .unwrap();
    client
        .execute(
            "SELECT count(*) FROM unnest($1::text[]) AS k, LATERAL rate_limiter.rate_limit('bench', k) AS r",
            &[&keys],
        )
        .unwrap();
    client
        .batch_execute("VACUUM ANALYZE rate_limiter.rate_limits")
        .unwrap();
    client.batch_execute("CHECKPOINT").unwrap();
    let statement = client.prepare(sql).unwrap();
    in_transaction(&mut client, &statement, keys)
}

/// The floor's bare upsert as pgbench sends it (`bench/pgbench/floor.sql`,
/// after its `\set` line), with the key as its one parameter: a new key's
/// row is an INSERT, as in [`postgres`].
fn floor_statement() -> String {
    let script = include_str!("../pgbench/floor.sql");
    let statement = script.split_once('\n').map_or(script, |(_, rest)| rest);
    statement
        .replace(":k::text", "$1")
        .trim_end()
        .trim_end_matches(';')
        .to_string()
}

/// Latencies (µs) of the floor's bare upsert per key, inside an open
/// transaction as [`Postgres::InTransaction`], from an empty table.
fn floor(bench: &Bench, keys: &[String]) -> Vec<f64> {
    let mut client = bench.connect();
    client
        .batch_execute("TRUNCATE baseline.floor_limits; CHECKPOINT")
        .unwrap();
    let statement = client.prepare(&floor_statement()).unwrap();
    in_transaction(&mut client, &statement, keys)
}

/// Latencies (µs) of `statement` (one parameter, the key) per key, inside
/// an open transaction that commits every 1,000 calls, unmeasured.
fn in_transaction(client: &mut Client, statement: &Statement, keys: &[String]) -> Vec<f64> {
    let mut latencies = Vec::with_capacity(keys.len());
    let mut transaction = client.transaction().unwrap();
    for (i, key) in keys.iter().enumerate() {
        if i > 0 && i % 1000 == 0 {
            transaction.commit().unwrap();
            transaction = client.transaction().unwrap();
        }
        let start = Instant::now();
        transaction.query_opt(statement, &[key]).unwrap();
        latencies.push(start.elapsed().as_secs_f64() * 1e6);
    }
    transaction.commit().unwrap();
    latencies
}

/// Latencies (µs) of `calls` prepared `SELECT 1`s, one at a time: what any
/// statement costs this client over loopback, the floor under every
/// PostgreSQL row above.
fn round_trip(bench: &Bench, calls: usize) -> Vec<f64> {
    let mut client = bench.connect();
    let statement = client.prepare("SELECT 1").unwrap();
    (0..calls)
        .map(|_| {
            let start = Instant::now();
            client.query_one(&statement, &[]).unwrap();
            start.elapsed().as_secs_f64() * 1e6
        })
        .collect()
}

/// Latencies (µs) of one EVALSHA of the Lua token bucket per key, on the
/// redis-server at `url`.
fn redis(url: &str, keys: &[String]) -> Vec<f64> {
    let redis = redis::Client::open(url).expect("redis url");
    let mut connection = redis.get_connection().expect("connect to redis");
    redis::cmd("FLUSHALL").query::<()>(&mut connection).unwrap();
    let script = redis::Script::new(include_str!("../baselines/token_bucket.lua"));
    keys.iter()
        .map(|key| {
            let start = Instant::now();
            let _: (i64, String) = script
                .key(key)
                .arg(100)
                .arg(60000)
                .arg(100)
                .arg(1)
                .invoke(&mut connection)
                .unwrap();
            start.elapsed().as_secs_f64() * 1e6
        })
        .collect()
}

/// One contender's run: its latencies in µs.
type Measure<'a> = Box<dyn Fn() -> Vec<f64> + 'a>;

pub fn run(bench: &Bench, report: &mut Report) {
    let calls = bench.scaled(CALLS);
    let keys: Vec<String> = (0..calls)
        .map(|i| format!("{}", (i * 7919) % 100_000))
        .collect();
    let contenders: [(&str, Measure<'_>); 10] = [
        (
            "extension, inside an open transaction",
            Box::new(|| postgres(bench, Postgres::InTransaction, &keys)),
        ),
        (
            "(c) Redis EVALSHA, no persistence",
            Box::new(|| redis(&bench.redis_url, &keys)),
        ),
        (
            "extension, own transaction, synchronous_commit on",
            Box::new(|| postgres(bench, Postgres::Autocommit("on"), &keys)),
        ),
        (
            "(c) Redis EVALSHA, appendfsync always",
            Box::new(|| redis(&bench.redis_always_url, &keys)),
        ),
        (
            "extension, own transaction, synchronous_commit off",
            Box::new(|| postgres(bench, Postgres::Autocommit("off"), &keys)),
        ),
        (
            "(c) Redis EVALSHA, appendfsync everysec",
            Box::new(|| redis(&bench.redis_everysec_url, &keys)),
        ),
        (
            "PostgreSQL round trip: prepared `SELECT 1` from the same client",
            Box::new(|| round_trip(bench, calls)),
        ),
        (
            "PostgreSQL: prepared primary-key SELECT of the state row, inside an open transaction",
            Box::new(|| {
                read(
                    bench,
                    "SELECT value, ts FROM rate_limiter.rate_limits WHERE name = 'bench' AND key = $1 AND shard = 0",
                    &keys,
                )
            }),
        ),
        (
            "extension, `rate_check` (reads, no lock), inside an open transaction",
            Box::new(|| {
                read(
                    bench,
                    "SELECT ok, retry_after, remaining FROM rate_limiter.rate_check('bench', $1)",
                    &keys,
                )
            }),
        ),
        (
            "(b) floor: the bare upsert statement, inside an open transaction",
            Box::new(|| floor(bench, &keys)),
        ),
    ];
    // Every round measures each contender once; rotate() asks for p50 and
    // then p99 of the same run, so keep the run's percentiles per round.
    let mut p99: Vec<Vec<f64>> = vec![Vec::new(); contenders.len()];
    let p50 = rotate(contenders.len(), ROUNDS, |i| {
        let mut latencies = (contenders[i].1)();
        p99[i].push(percentile(&mut latencies, 99.0));
        percentile(&mut latencies, 50.0)
    });
    let p99: Vec<Samples> = p99.into_iter().map(Samples::new).collect();

    let table: String = contenders
        .iter()
        .enumerate()
        .map(|(i, (label, _))| format!("| {label} | {} | {} |\n", p50[i].show(1), p99[i].show(1)))
        .collect();
    report.scenario(
        "Scenario 3: client-observed latency (µs, median of 3 rounds, min–max)",
        format!(
            "{calls} calls per contender and round, one at a time from one client over loopback, \
             on keys spread over 100,000. PostgreSQL: a prepared `rate_limit` call. Redis: `EVALSHA` \
             of the Lua token bucket (not transactional with anything). The rows come in pairs of \
             matched durability: a call inside an open transaction (its commit is the application's \
             and is not measured) against Redis without persistence; a call in its own transaction \
             that waits for its WAL flush against Redis fsyncing its append-only file before it \
             answers; and both with the flush left to a background writer (about 3 × \
             wal_writer_delay = 600 ms of writes at risk in PostgreSQL, about 1 s in Redis). \
             The `SELECT 1` row is the floor under every PostgreSQL row: a prepared `SELECT 1` from the same \
             client library (the `postgres` crate), which is what one round trip costs before any work. \
             The primary-key SELECT and `rate_check` rows read the rows that one call per key wrote first (unmeasured): the simplest \
             statement that reads a state row at all (superuser only; an application role may not read \
             the table), and `rate_check`, which reads it as the limiter. The last row is the floor's bare \
             upsert (`INSERT ... ON CONFLICT DO UPDATE ... RETURNING`, the token bucket's arithmetic in SQL, \
             no definitions, no retry_after) on the same new keys inside an open transaction: the least a \
             statement that writes a state row costs.\n\n\
             | | p50 | p99 |\n|---|---:|---:|\n{table}"
        ),
        "what one caller waits per call at each durability level.",
        "latency under concurrent load (scenario 5), or another client library (the `SELECT 1` row gives this one's share).",
    );
    report.ratio(
        "S3 p50, open transaction: extension / Redis without persistence",
        p50[0].ratio_to(&p50[1]),
        1.2,
        true,
    );
    report.ratio(
        "S3 p50, open transaction, stretch: extension / Redis without persistence",
        p50[0].ratio_to(&p50[1]),
        1.0,
        true,
    );
    // Ratios without a target: (label, contender, baseline).
    let others = [
        (
            "S3 p50, own transaction, synchronous_commit on / Redis appendfsync always",
            2,
            3,
        ),
        (
            "S3 p50, own transaction, synchronous_commit off / Redis appendfsync everysec",
            4,
            5,
        ),
        (
            "S3 p50, PostgreSQL round trip (SELECT 1) / Redis without persistence",
            6,
            1,
        ),
        (
            "S3 p50, primary-key SELECT of a state row / Redis without persistence",
            7,
            1,
        ),
        (
            "S3 p50, open transaction: extension rate_limit / primary-key SELECT",
            0,
            7,
        ),
        (
            "S3 p50, open transaction: extension rate_check / primary-key SELECT",
            8,
            7,
        ),
        (
            "S3 p50, open transaction: (b) floor's bare upsert / Redis without persistence",
            9,
            1,
        ),
        (
            "S3 p50, open transaction: extension rate_limit / (b) floor's bare upsert",
            0,
            9,
        ),
    ];
    for (label, contender, baseline) in others {
        report.ratio_without_target(label, p50[contender].ratio_to(&p50[baseline]));
    }
}
