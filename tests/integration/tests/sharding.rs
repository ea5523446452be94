//! Sharded limits under real concurrency: 16 connections hammer one global
//! limit split over N = 1, 2, 3, 8 and 16 shards, for both kinds, with and
//! without reservations, under READ COMMITTED and REPEATABLE READ. However
//! the shards are chosen and passed over, the tokens admitted never exceed
//! what the unsharded limit allows; no call fails with anything but a
//! serialization failure (so no deadlock is ever reported); and calls were
//! refused, so the limiter was saturated and the bound is not vacuous.

use postgres::IsolationLevel;
use rate_limiter_integration_tests::{
    connect, hammer, hammer_until, server_now, unique_name, url, Tally, REFUSALS_TO_STOP,
};
use std::time::Duration;

const CONNECTIONS: usize = 16;
const HAMMER_FOR: Duration = Duration::from_secs(2);
const SHARDS: [i32; 5] = [1, 2, 3, 8, 16];

/// Tokens per second and capacity of the hammered limit, and the debt
/// reservations may leave.
const RATE: f64 = 60.0;
const CAPACITY: f64 = 40.0;
const MAX_RESERVED: f64 = 16.0;

#[derive(Clone, Copy, Debug, PartialEq)]
enum Kind {
    TokenBucket,
    FixedWindow,
    SlidingWindow,
}

/// Hammers a new limit of `kind` with `shards` shards and checks the bound.
fn bound_holds(kind: Kind, shards: i32, reserve: bool, isolation: IsolationLevel) -> Tally {
    let mut client = connect();
    let name = unique_name("sharded");
    let config = match kind {
        Kind::TokenBucket => format!(
            "rate_limiter.token_bucket({RATE}, '1 second', capacity => {CAPACITY}, \
             max_reserved => {MAX_RESERVED}, shards => {shards})"
        ),
        // Windows start on whole seconds.
        Kind::FixedWindow => format!(
            "rate_limiter.fixed_window({RATE}, '1 second', capacity => {CAPACITY}, \
             max_reserved => {MAX_RESERVED}, shards => {shards}, start => '2000-01-01 00:00:00+00')"
        ),
        // Capacity is the rate; windows start on whole seconds.
        Kind::SlidingWindow => format!(
            "rate_limiter.sliding_window({RATE}, '1 second', max_reserved => {MAX_RESERVED}, shards => {shards}, \
             start => '2000-01-01 00:00:00+00')"
        ),
    };
    let sql = format!(
        "SELECT ok FROM rate_limiter.rate_limit($1, count => 1, reserve => {reserve}, config => {config})"
    );
    let start = server_now(&mut client);
    let tally = hammer(CONNECTIONS, HAMMER_FOR, &sql, &name, isolation);
    let end = server_now(&mut client);
    let debt = if reserve { MAX_RESERVED } else { 0.0 };
    let bound = match kind {
        Kind::TokenBucket => CAPACITY + debt + RATE * (end - start),
        Kind::FixedWindow => CAPACITY + debt + RATE * (end.floor() - start.floor()),
        // Every window it touched admitted at most the rate, plus the debt
        // its estimate may run past it (docs/shapes.md).
        Kind::SlidingWindow => (RATE + debt) * (end.floor() - start.floor() + 1.0),
    };
    println!(
        "{kind:?}, {shards} shards, reserve {reserve}, {isolation:?}: {tally:?}, bound {bound:.1} over {:.2} s",
        end - start
    );
    assert!(
        tally.admitted as f64 <= bound,
        "over-admission with {shards} shards: {tally:?} > {bound}"
    );
    assert!(tally.refused > 0, "never saturated: {tally:?}");
    // Sharding may refuse while other shards still hold tokens, but it
    // must keep admitting as tokens arrive.
    assert!(
        tally.admitted as f64 >= 0.3 * bound,
        "suspiciously few admitted with {shards} shards: {tally:?} of {bound}"
    );
    tally
}

fn every_shard_count(kind: Kind, isolation: IsolationLevel) {
    let shard_counts: &[i32] = match kind {
        Kind::SlidingWindow => &[1, 8],
        Kind::TokenBucket | Kind::FixedWindow => &SHARDS,
    };
    for &shards in shard_counts {
        for reserve in [false, true] {
            let tally = bound_holds(kind, shards, reserve, isolation);
            if matches!(isolation, IsolationLevel::ReadCommitted) {
                assert_eq!(
                    tally.conflicts, 0,
                    "READ COMMITTED never gives 40001: {tally:?}"
                );
            }
        }
    }
}

#[test]
fn token_bucket_shards_never_over_admit_under_read_committed() {
    every_shard_count(Kind::TokenBucket, IsolationLevel::ReadCommitted);
}

#[test]
fn token_bucket_shards_never_over_admit_under_repeatable_read() {
    every_shard_count(Kind::TokenBucket, IsolationLevel::RepeatableRead);
}

#[test]
fn fixed_window_shards_never_over_admit_under_read_committed() {
    every_shard_count(Kind::FixedWindow, IsolationLevel::ReadCommitted);
}

#[test]
fn fixed_window_shards_never_over_admit_under_repeatable_read() {
    every_shard_count(Kind::FixedWindow, IsolationLevel::RepeatableRead);
}

#[test]
fn sliding_window_shards_never_over_admit_under_read_committed() {
    every_shard_count(Kind::SlidingWindow, IsolationLevel::ReadCommitted);
}

#[test]
fn sliding_window_shards_never_over_admit_under_repeatable_read() {
    every_shard_count(Kind::SlidingWindow, IsolationLevel::RepeatableRead);
}

/// Exactness: 16 connections on a limit of 200 tokens split over 8 shards
/// (25 each), with no refill during the run (a period of 10 days; the fixed
/// window opened an hour before the run): admitted equals the capacity
/// exactly, never more and never fewer, for both kinds and at every
/// isolation level, and every shard is left empty in the stored state.
#[test]
fn sharded_limits_admit_exactly_their_capacity() {
    const EXACT_CAPACITY: u64 = 200;
    let mut client = connect();
    for kind in [Kind::TokenBucket, Kind::FixedWindow, Kind::SlidingWindow] {
        for isolation in [
            IsolationLevel::ReadCommitted,
            IsolationLevel::RepeatableRead,
            IsolationLevel::Serializable,
        ] {
            let name = unique_name("sharded_exact");
            let opened = server_now(&mut client) - 3600.0;
            let config = match kind {
                Kind::TokenBucket => {
                    format!("rate_limiter.token_bucket({EXACT_CAPACITY}, '10 days', shards => 8)")
                }
                Kind::FixedWindow => format!(
                    "rate_limiter.fixed_window({EXACT_CAPACITY}, '10 days', shards => 8, start => to_timestamp({opened}))"
                ),
                Kind::SlidingWindow => format!(
                    "rate_limiter.sliding_window({EXACT_CAPACITY}, '10 days', shards => 8, start => to_timestamp({opened}))"
                ),
            };
            let sql = format!("SELECT ok FROM rate_limiter.rate_limit($1, config => {config})");
            let tally = hammer_until(
                &url(),
                CONNECTIONS,
                Duration::from_secs(3),
                &sql,
                &name,
                isolation,
                REFUSALS_TO_STOP,
            );
            let (rows, stored): (i64, f64) = {
                let row = client
                    .query_one(
                        "SELECT count(*), coalesce(sum(CASE WHEN $2 THEN 25 - value ELSE value END), 0)
                         FROM rate_limiter.rate_limits WHERE name = $1",
                        &[&name, &(kind == Kind::SlidingWindow)],
                    )
                    .unwrap();
                (row.get(0), row.get(1))
            };
            println!("{kind:?}, {isolation:?}: {tally:?}, {rows} rows holding {stored}");
            assert_eq!(
                tally.admitted, EXACT_CAPACITY,
                "{kind:?}, {isolation:?}: {tally:?}"
            );
            assert_eq!(rows, 8, "every shard was used");
            assert!(
                stored.abs() < 0.01,
                "tokens left in the stored state: {stored}"
            );
        }
    }
}
