//! SPEC §12 and §5 on the portable edition: concurrency with real
//! connections, as `concurrency.rs` and `sharding.rs` test the native
//! extension. 16 connections call one limit as fast as they can, each call
//! in its own transaction, on a fixed window with no refill during the run
//! (one window longer than the run): exactly the capacity is admitted and
//! recorded (the stored values sum to zero), under READ COMMITTED,
//! REPEATABLE READ and SERIALIZABLE (where conflicts are 40001, never an
//! over-admission), unsharded and with 8 shards (the power of two choices
//! with `FOR UPDATE SKIP LOCKED`); and `rate_limit_all` over two limits
//! from 8 connections naming them in opposite orders never deadlocks and
//! admits exactly the capacity.

use postgres::IsolationLevel;
use rate_limiter_integration_tests::{hammer_until, portable, unique_name, REFUSALS_TO_STOP};
use std::time::Duration;

const DATABASE: &str = "rate_limiter_portable_concurrency";
const CONNECTIONS: usize = 16;
const HAMMER_FOR: Duration = Duration::from_secs(3);

fn url() -> String {
    format!(
        "{} dbname={DATABASE}",
        rate_limiter_integration_tests::test_env("RATE_LIMITER_TEST_URL")
    )
}

#[test]
fn sixteen_connections_admit_exactly_the_capacity_at_every_isolation_level() {
    let mut owner = portable::fresh_database(DATABASE, "postgres");
    for shards in [1, 8] {
        for isolation in [
            IsolationLevel::ReadCommitted,
            IsolationLevel::RepeatableRead,
            IsolationLevel::Serializable,
        ] {
            let name = unique_name("portable_exact");
            let capacity = 240;
            owner
                .execute(
                    &format!(
                        "SELECT rate_limiter.define($1, rate_limiter.fixed_window({capacity}, '1 day', \
                         shards => {shards}, start => now() - interval '1 hour'))"
                    ),
                    &[&name],
                )
                .expect("define the limit");
            let tally = hammer_until(
                &url(),
                CONNECTIONS,
                HAMMER_FOR,
                "SELECT ok FROM rate_limiter.rate_limit($1)",
                &name,
                isolation,
                REFUSALS_TO_STOP,
            );
            eprintln!("{shards} shards, {isolation:?}: {tally:?}");
            assert_eq!(
                tally.admitted, capacity,
                "{shards} shards, {isolation:?}: exactly the capacity"
            );
            assert!(tally.refused > 0);
            let (rows, total): (i64, f64) = {
                let row = owner
                    .query_one(
                        "SELECT count(*), coalesce(sum(value), 0) FROM rate_limiter.rate_limits WHERE name = $1",
                        &[&name],
                    )
                    .expect("the stored state");
                (row.get(0), row.get(1))
            };
            assert_eq!(
                rows, shards,
                "{shards} shards, {isolation:?}: every shard recorded"
            );
            assert_eq!(
                total, 0.0,
                "{shards} shards, {isolation:?}: recorded as admitted"
            );
        }
    }
}

#[test]
fn rate_limit_all_in_opposite_orders_never_deadlocks() {
    let mut owner = portable::fresh_database(&format!("{DATABASE}_all"), "postgres");
    let (a, b) = (unique_name("portable_all_a"), unique_name("portable_all_b"));
    for (name, shards) in [(&a, 1), (&b, 4)] {
        owner
            .execute(
                &format!(
                    "SELECT rate_limiter.define($1, rate_limiter.fixed_window(120, '1 day', \
                     shards => {shards}, start => now() - interval '1 hour'))"
                ),
                &[name],
            )
            .expect("define");
    }
    let url = format!(
        "{} dbname={DATABASE}_all",
        rate_limiter_integration_tests::test_env("RATE_LIMITER_TEST_URL")
    );
    // Half the connections name (a, b), half (b, a); hammer_until binds $1.
    let forwards = format!(
        "SELECT bool_and(ok) FROM rate_limiter.rate_limit_all(ARRAY[($1, NULL, 1, NULL), ('{b}', NULL, 1, NULL)]::rate_limiter.request[])"
    );
    let backwards = format!(
        "SELECT bool_and(ok) FROM rate_limiter.rate_limit_all(ARRAY[('{b}', NULL, 1, NULL), ($1, NULL, 1, NULL)]::rate_limiter.request[])"
    );
    let (one, two) = std::thread::scope(|scope| {
        let one = scope.spawn(|| {
            hammer_until(
                &url,
                4,
                HAMMER_FOR,
                &forwards,
                &a,
                IsolationLevel::ReadCommitted,
                1,
            )
        });
        let two = scope.spawn(|| {
            hammer_until(
                &url,
                4,
                HAMMER_FOR,
                &backwards,
                &a,
                IsolationLevel::ReadCommitted,
                1,
            )
        });
        (
            one.join().expect("forwards"),
            two.join().expect("backwards"),
        )
    });
    eprintln!("forwards {one:?}, backwards {two:?}");
    assert_eq!(
        one.admitted + two.admitted,
        120,
        "exactly the capacity of both"
    );
    let totals: Vec<f64> = [&a, &b]
        .iter()
        .map(|name| {
            owner
                .query_one(
                    "SELECT coalesce(sum(value), 0) FROM rate_limiter.rate_limits WHERE name = $1",
                    &[name],
                )
                .expect("stored")
                .get(0)
        })
        .collect();
    assert_eq!(totals, vec![0.0, 0.0]);
}
