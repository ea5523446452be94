//! Scenario 3: client-observed latency of one extra rate-limit call inside
//! an already open transaction, against one EVALSHA round trip to Redis
//! running the Lua token bucket. Both over loopback from this process.

use crate::report::{percentile, Report};
use crate::Bench;
use std::time::Instant;

const CALLS: usize = 20_000;

pub fn run(bench: &Bench, report: &mut Report) {
    let calls = bench.scaled(CALLS);
    let mut client = bench.connect();
    client
        .batch_execute("TRUNCATE rate_limiter.rate_limits")
        .unwrap();
    let statement = client
        .prepare("SELECT ok, retry_after, remaining FROM rate_limiter.rate_limit('bench', $1)")
        .unwrap();
    let keys: Vec<String> = (0..calls)
        .map(|i| format!("{}", (i * 7919) % 100_000))
        .collect();
    let mut postgres_us = Vec::with_capacity(calls);
    let mut transaction = client.transaction().unwrap();
    for (i, key) in keys.iter().enumerate() {
        if i > 0 && i % 1000 == 0 {
            // Keep transactions bounded; commits are not measured.
            transaction.commit().unwrap();
            transaction = client.transaction().unwrap();
        }
        let start = Instant::now();
        transaction.query_one(&statement, &[key]).unwrap();
        postgres_us.push(start.elapsed().as_secs_f64() * 1e6);
    }
    transaction.commit().unwrap();

    let redis = redis::Client::open(bench.redis_url.as_str()).expect("redis url");
    let mut connection = redis.get_connection().expect("connect to redis");
    redis::cmd("FLUSHALL").query::<()>(&mut connection).unwrap();
    let script = redis::Script::new(include_str!("../baselines/token_bucket.lua"));
    let mut redis_us = Vec::with_capacity(calls);
    for key in &keys {
        let start = Instant::now();
        let _: (i64, String) = script
            .key(key)
            .arg(100)
            .arg(60000)
            .arg(100)
            .arg(1)
            .invoke(&mut connection)
            .unwrap();
        redis_us.push(start.elapsed().as_secs_f64() * 1e6);
    }

    let (pg50, pg99) = (
        percentile(&mut postgres_us, 50.0),
        percentile(&mut postgres_us, 99.0),
    );
    let (r50, r99) = (
        percentile(&mut redis_us, 50.0),
        percentile(&mut redis_us, 99.0),
    );
    report.section(
        "Scenario 3: client-observed latency (µs)",
        format!(
            "{calls} calls each, one at a time from one client over loopback. PostgreSQL: a prepared \
             `rate_limit` call inside an open transaction (transactional with the app's writes). \
             Redis: `EVALSHA` of the Lua token bucket (not transactional with anything).\n\n\
             | | p50 | p99 |\n|---|---:|---:|\n\
             | extension, in a transaction | {pg50:.1} | {pg99:.1} |\n\
             | (c) Redis EVALSHA | {r50:.1} | {r99:.1} |\n"
        ),
    );
    report.ratio("S3 p50 latency: extension / Redis", pg50 / r50, 1.3, true);
}
