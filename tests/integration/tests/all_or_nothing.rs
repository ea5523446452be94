//! rate_limit_all under real concurrency: 8 connections charge the same
//! three limits (one of them sharded, all of them new at the start), each
//! call giving the requests in a random order, with the clock stopped
//! (`rate_limiter.now_override`) so nothing refills. No call fails (a
//! deadlock, 40P01, would), exactly as many calls are admitted as the
//! tightest limit holds, and every limit lost exactly that many tokens:
//! each admitted call consumed from all three, each refused one from none.

use rand::seq::SliceRandom;
use rate_limiter_integration_tests::{connect, unique_name};
use std::sync::{Arc, Barrier};
use std::thread;
use std::time::{Duration, Instant};

#[test]
fn random_orders_never_deadlock_or_over_admit() {
    let mut client = connect();
    let names: Vec<String> = (0..3).map(|i| unique_name(&format!("all{i}"))).collect();
    let configs = [
        "rate_limiter.token_bucket(50, '1 second', capacity => 10)",
        "rate_limiter.token_bucket(100, '1 second', capacity => 20)",
        "rate_limiter.token_bucket(200, '1 second', capacity => 40, shards => 4)",
    ];
    for (name, config) in names.iter().zip(configs) {
        client
            .execute(
                &format!("SELECT rate_limiter.define($1, {config})"),
                &[name],
            )
            .unwrap();
    }
    let connections = 8;
    let barrier = Arc::new(Barrier::new(connections + 1));
    let workers: Vec<_> = (0..connections)
        .map(|_| {
            let (names, barrier) = (names.clone(), barrier.clone());
            thread::spawn(move || {
                let mut client = connect();
                client
                    .batch_execute("SET rate_limiter.now_override = '2026-01-01 00:00:00+00'")
                    .unwrap();
                let statement = client
                    .prepare(
                        "SELECT bool_and(ok) FROM rate_limiter.rate_limit_all(\
                         ARRAY(SELECT ROW(n, 'k', 1, NULL)::rate_limiter.request FROM unnest($1::text[]) AS n))",
                    )
                    .unwrap();
                let mut order = names.clone();
                let (mut admitted, mut refused) = (0u64, 0u64);
                barrier.wait();
                let start = Instant::now();
                while start.elapsed() < Duration::from_secs(2) {
                    order.shuffle(&mut rand::rng());
                    let mut transaction = client.transaction().unwrap();
                    let ok: bool = transaction
                        .query_one(&statement, &[&order])
                        .unwrap_or_else(|e| panic!("rate_limit_all failed: {e:?}"))
                        .get(0);
                    transaction.commit().unwrap();
                    if ok {
                        admitted += 1
                    } else {
                        refused += 1
                    }
                }
                (admitted, refused)
            })
        })
        .collect();
    barrier.wait();
    let (admitted, refused) = workers
        .into_iter()
        .map(|w| w.join().expect("a connection failed"))
        .fold((0, 0), |a, b| (a.0 + b.0, a.1 + b.1));
    println!("rate_limit_all: {admitted} admitted, {refused} refused");
    // The tightest limit holds 10 tokens, and nothing refills.
    assert_eq!(admitted, 10);
    assert!(refused > 0);
    // Each limit lost exactly 10 tokens (summed over the sharded one's rows).
    for (name, capacity) in names.iter().zip([10.0, 20.0, 40.0]) {
        let value: f64 = client
            .query_one(
                "SELECT sum(value) FROM rate_limiter.rate_limits WHERE name = $1 AND key = 'k'",
                &[name],
            )
            .unwrap()
            .get(0);
        let missing_shards: i64 = client
            .query_one(
                "SELECT 4 - count(*) FROM rate_limiter.rate_limits WHERE name = $1 AND key = 'k'",
                &[name],
            )
            .unwrap()
            .get(0);
        // Shards without a row are full (10 tokens each, for the sharded limit).
        let total = if capacity == 40.0 {
            value + 10.0 * missing_shards as f64
        } else {
            value
        };
        assert!(
            (total - (capacity - 10.0)).abs() < 1e-9,
            "{name}: {total} left of {capacity}"
        );
    }
    for name in &names {
        client
            .execute("SELECT rate_limiter.undefine($1)", &[name])
            .unwrap();
    }
}
