//! Concurrency against a real server: many connections hammer one limit;
//! the number of admitted calls never exceeds the algorithm's bound.

use postgres::error::SqlState;
use postgres::IsolationLevel;
use rate_limiter_integration_tests::race::race_new_keys;
use rate_limiter_integration_tests::{connect, server_now, unique_name, url, Tally};
use std::sync::{Arc, Barrier};
use std::thread;
use std::time::Duration;

const CONNECTIONS: usize = 8;
/// A run of the limits without refill: their capacity goes in the first
/// tenth of a second; the rest of the run shows that nothing more is
/// admitted.
const HAMMER_FOR: Duration = Duration::from_secs(1);
/// A run of the fixed window of a second: several whole windows.
const WINDOWS_FOR: Duration = Duration::from_secs(3);

/// `CONNECTIONS` connections call `rate_limit(name, 'k', config => ...)`
/// as fast as they can for `HAMMER_FOR` (see `hammer`).
fn hammer(name: &str, config_sql: &str, isolation: IsolationLevel) -> Tally {
    hammer_for(name, config_sql, isolation, HAMMER_FOR)
}

/// [`hammer`] for `duration`.
fn hammer_for(
    name: &str,
    config_sql: &str,
    isolation: IsolationLevel,
    duration: Duration,
) -> Tally {
    let sql = format!("SELECT ok FROM rate_limiter.rate_limit($1, 'k', config => {config_sql})");
    rate_limiter_integration_tests::hammer(CONNECTIONS, duration, &sql, name, isolation)
}

/// A long period: over a run of a few seconds the limit refills by less
/// than a thousandth of a token, so exactly `CAPACITY` calls are admitted,
/// never more (over-admission) and never fewer (a refusal with tokens left).
const CAPACITY: u64 = 200;
const LONG_PERIOD: &str = "10 days";

/// Token bucket: `CAPACITY` tokens, refilling over `LONG_PERIOD`.
fn token_bucket_admits_exactly_capacity(isolation: IsolationLevel) -> Tally {
    let name = unique_name("hammer_bucket");
    let config = format!("rate_limiter.token_bucket({CAPACITY}, '{LONG_PERIOD}')");
    let tally = hammer(&name, &config, isolation);
    println!("{isolation:?}: {tally:?}");
    assert_eq!(
        tally.admitted, CAPACITY,
        "admitted must equal the capacity exactly: {tally:?}"
    );
    assert!(tally.refused + tally.conflicts > 0, "{tally:?}");
    tally
}

#[test]
fn read_committed_token_bucket_never_over_admits() {
    let tally = token_bucket_admits_exactly_capacity(IsolationLevel::ReadCommitted);
    assert_eq!(
        tally.conflicts, 0,
        "READ COMMITTED callers serialize on the row: no 40001"
    );
}

#[test]
fn repeatable_read_conflicts_are_40001_never_over_admission() {
    let tally = token_bucket_admits_exactly_capacity(IsolationLevel::RepeatableRead);
    assert!(
        tally.conflicts > 0,
        "8 connections on one row must conflict: {tally:?}"
    );
}

#[test]
fn serializable_conflicts_are_40001_never_over_admission() {
    let tally = token_bucket_admits_exactly_capacity(IsolationLevel::Serializable);
    assert!(
        tally.conflicts > 0,
        "8 connections on one row must conflict: {tally:?}"
    );
}

#[test]
fn read_committed_fixed_window_never_over_admits() {
    // 30 per second, windows on whole seconds: admitted <= 30 * (windows started + 1).
    let mut client = connect();
    let name = unique_name("hammer_window");
    let config = "rate_limiter.fixed_window(30, '1 second', start => '2000-01-01 00:00:00+00')";
    let start = server_now(&mut client);
    let tally = hammer_for(&name, config, IsolationLevel::ReadCommitted, WINDOWS_FOR);
    let end = server_now(&mut client);
    let windows = (end.floor() - start.floor()) + 1.0;
    let bound = 30.0 * windows;
    println!("fixed window: {tally:?}, bound {bound} over {windows} windows");
    assert!(
        tally.admitted as f64 <= bound,
        "over-admission: {tally:?} > {bound}"
    );
    assert!(tally.refused > 0);
    // The first and last windows the clock readings span may see no call
    // (connecting happens after the first reading); every other window is
    // wholly inside the hammering and hands out all its 30 tokens.
    assert!(tally.admitted as f64 >= 30.0 * (windows - 2.0), "{tally:?}");
}

/// Fixed window: one window that spans the whole run (it opened an hour
/// before it): exactly `CAPACITY` admitted, at every isolation level.
#[test]
fn fixed_window_admits_exactly_its_window_at_every_isolation_level() {
    let mut client = connect();
    for isolation in [
        IsolationLevel::ReadCommitted,
        IsolationLevel::RepeatableRead,
        IsolationLevel::Serializable,
    ] {
        let name = unique_name("hammer_one_window");
        let opened = server_now(&mut client) - 3600.0;
        let config = format!(
            "rate_limiter.fixed_window({CAPACITY}, '{LONG_PERIOD}', start => to_timestamp({opened}))"
        );
        let tally = hammer(&name, &config, isolation);
        println!("fixed window, {isolation:?}: {tally:?}");
        assert_eq!(tally.admitted, CAPACITY, "{isolation:?}: {tally:?}");
    }
}

/// Hammers a limit of `CAPACITY` made by `config` (given the server's
/// clock, in seconds) at every isolation level: exactly `CAPACITY`
/// admitted, and its row then holds `stored`.
fn exact_at_every_level(label: &str, config: impl Fn(f64) -> String, stored: f64) {
    let mut client = connect();
    for isolation in [
        IsolationLevel::ReadCommitted,
        IsolationLevel::RepeatableRead,
        IsolationLevel::Serializable,
    ] {
        let name = unique_name(&format!("hammer_{label}"));
        let tally = hammer(&name, &config(server_now(&mut client)), isolation);
        println!("{label}, {isolation:?}: {tally:?}");
        assert_eq!(tally.admitted, CAPACITY, "{isolation:?}: {tally:?}");
        let value: f64 = client
            .query_one(
                "SELECT value FROM rate_limiter.rate_limits WHERE name = $1",
                &[&name],
            )
            .unwrap()
            .get(0);
        assert_eq!(value, stored, "{label}, {isolation:?}: the row");
    }
}

/// Sliding window: one window that spans the whole run (it opened an hour
/// before it), with no previous window: the estimate is this window's
/// count, so exactly `CAPACITY` admitted, at every isolation level; the
/// row counts what was admitted.
#[test]
fn sliding_window_admits_exactly_its_rate_at_every_isolation_level() {
    exact_at_every_level(
        "sliding",
        |now| {
            format!(
                "rate_limiter.sliding_window({CAPACITY}, '{LONG_PERIOD}', start => to_timestamp({}))",
                now - 3600.0
            )
        },
        CAPACITY as f64,
    );
}

/// A calendar window (docs/shapes.md) of `CAPACITY` per year in New York
/// time: exactly `CAPACITY` admitted, at every isolation level; the row
/// holds what is left. (A year: the test never runs across the end of a
/// window but on New Year's Eve.)
#[test]
fn calendar_window_admits_exactly_its_rate_at_every_isolation_level() {
    exact_at_every_level(
        "calendar",
        |_| format!("rate_limiter.calendar_window({CAPACITY}, 'year', 'America/New_York')"),
        0.0,
    );
}

/// A composite (docs/composites.md) of a limit of `CAPACITY` and one of
/// twice that, hammered by its name at every isolation level: exactly
/// `CAPACITY` admitted, all or nothing (the larger member's row holds
/// `CAPACITY`: nothing was taken from it by a refused call), and no
/// deadlock however the calls interleave (every call locks the members'
/// rows in one order). The smaller member is a token bucket, then a fixed
/// window of 8 shards (its shards' rows held and passed over as
/// `rate_limit_all` holds them: their values sum to zero).
#[test]
fn a_composite_admits_exactly_its_tightest_member_at_every_isolation_level() {
    let mut client = connect();
    let smaller = [
        format!("rate_limiter.token_bucket({CAPACITY}, '{LONG_PERIOD}')"),
        format!(
            "rate_limiter.fixed_window({CAPACITY}, '{LONG_PERIOD}', shards => 8, \
             start => now() - interval '1 hour')"
        ),
    ];
    for small_config in &smaller {
        for isolation in [
            IsolationLevel::ReadCommitted,
            IsolationLevel::RepeatableRead,
            IsolationLevel::Serializable,
        ] {
            let name = unique_name("hammer_composite");
            let (small, large) = (format!("{name}_small"), format!("{name}_large"));
            client
                .execute(
                    &format!(
                        "SELECT rate_limiter.define($1, {small_config}), \
                                rate_limiter.define($2, rate_limiter.token_bucket(2 * $3::float8, $4::text::interval)), \
                                rate_limiter.define_all($5, ARRAY[$2, $1])"
                    ),
                    &[&small, &large, &(CAPACITY as f64), &LONG_PERIOD, &name],
                )
                .expect("define the composite");
            let tally = rate_limiter_integration_tests::hammer(
                CONNECTIONS,
                HAMMER_FOR,
                "SELECT ok FROM rate_limiter.rate_limit($1, 'k')",
                &name,
                isolation,
            );
            println!("composite of {small_config}, {isolation:?}: {tally:?}");
            assert_eq!(tally.admitted, CAPACITY, "{isolation:?}: {tally:?}");
            for (member, left) in [(&small, 0.0), (&large, CAPACITY as f64)] {
                let value: f64 = client
                    .query_one(
                        "SELECT sum(value) FROM rate_limiter.rate_limits WHERE name = $1",
                        &[member],
                    )
                    .unwrap()
                    .get(0);
                assert!(
                    (value - left).abs() < 0.01,
                    "{isolation:?}: {member} holds {value}"
                );
            }
        }
    }
}

/// Two sessions create the state of the same new key at once, many times:
/// exactly one of each pair is admitted (capacity 3, 2 each), the other is
/// refused with the right remaining; no unique violation.
fn new_key_race(isolation: IsolationLevel) -> (u32, u32) {
    let name = unique_name("race");
    let rounds = 40;
    let barrier = Arc::new(Barrier::new(2));
    let workers: Vec<_> = (0..2)
        .map(|_| {
            let (name, barrier) = (name.clone(), barrier.clone());
            thread::spawn(move || {
                let mut client = connect();
                let sql = "SELECT ok, remaining FROM rate_limiter.rate_limit($1, $2, 2, \
                           config => rate_limiter.token_bucket(1, '1 hour', capacity => 3))";
                let mut outcomes = Vec::new();
                for round in 0..rounds {
                    let key = format!("key{round}");
                    let mut transaction = client
                        .build_transaction()
                        .isolation_level(isolation)
                        .start()
                        .unwrap();
                    transaction.query_one("SELECT 1", &[]).unwrap(); // take the snapshot
                    barrier.wait();
                    let outcome = match transaction.query_one(sql, &[&name, &key]) {
                        Ok(row) => {
                            let (ok, remaining): (bool, f64) = (row.get(0), row.get(1));
                            transaction.commit().unwrap();
                            Ok((ok, remaining))
                        }
                        Err(e) => Err(e.code().cloned()),
                    };
                    outcomes.push(outcome);
                    barrier.wait();
                }
                outcomes
            })
        })
        .collect();
    let results: Vec<_> = workers.into_iter().map(|w| w.join().unwrap()).collect();
    let (mut refused, mut conflicts) = (0, 0);
    for (round, (first, second)) in results[0].iter().zip(&results[1]).enumerate() {
        let pair = [first, second];
        let admitted = pair.iter().filter(|o| matches!(o, Ok((true, _)))).count();
        assert_eq!(admitted, 1, "round {round}: exactly one admitted: {pair:?}");
        for outcome in pair {
            match outcome {
                Ok((true, remaining)) => assert!((remaining - 1.0).abs() < 1e-6, "{pair:?}"),
                Ok((false, remaining)) => {
                    refused += 1;
                    assert!((remaining - 1.0).abs() < 1e-3, "{pair:?}");
                }
                Err(code) => {
                    assert_eq!(
                        code.as_ref(),
                        Some(&SqlState::T_R_SERIALIZATION_FAILURE),
                        "{pair:?}"
                    );
                    conflicts += 1;
                }
            }
        }
    }
    (refused, conflicts)
}

#[test]
fn two_sessions_creating_one_key_under_read_committed_both_answer_correctly() {
    let (refused, conflicts) = new_key_race(IsolationLevel::ReadCommitted);
    assert_eq!(conflicts, 0);
    assert_eq!(refused, 40);
}

/// A second unique (name, key, shard) index (a user's, or the copy
/// REINDEX CONCURRENTLY builds) arbitrates like the first: racing new keys
/// are still answered correctly, never with a unique violation.
#[test]
fn a_second_unique_index_arbitrates_racing_new_keys_too() {
    let mut admin = connect();
    admin
        .batch_execute(
            "CREATE UNIQUE INDEX rate_limits_second ON rate_limiter.rate_limits (name, key, shard) NULLS NOT DISTINCT",
        )
        .unwrap();
    let outcome = std::panic::catch_unwind(|| new_key_race(IsolationLevel::ReadCommitted));
    admin
        .batch_execute("DROP INDEX rate_limiter.rate_limits_second")
        .unwrap();
    let (refused, conflicts) = outcome.expect("the race with a second unique index");
    assert_eq!((refused, conflicts), (40, 0));
}

#[test]
fn two_sessions_creating_one_key_under_repeatable_read_get_40001_not_23505() {
    let (refused, conflicts) = new_key_race(IsolationLevel::RepeatableRead);
    assert_eq!(refused + conflicts, 40);
}

/// Sessions creating the same new keys at the same instant: each call picks
/// the key from the server's clock (a new key every 0.5 ms), so the
/// sessions keep racing to insert the same row. A session that loses after
/// its own speculative insert withdraws it and updates the winner's row
/// (the server says so at DEBUG1, which the test counts). Every call is
/// admitted, no unique violation, one row per key, and each row's stored
/// consumption equals the calls admitted on it.
#[test]
fn racing_speculative_inserts_lose_nothing_and_duplicate_nothing() {
    let name = unique_name("speculative");
    let call = "rate_limiter.rate_limit($1, k.key, config => \
                rate_limiter.fixed_window(1000000, '1 day', start => '2000-01-01'))";
    race_new_keys(&url(), &name, call, std::slice::from_ref(&name));
}

/// The same race through a composite of two fixed windows (one
/// `rate_limit_all` of both): such a call inserts its new rows only once
/// decided (storage/all_or_nothing.rs, step 4), and one that loses the race
/// withdraws what it inserted, holds the rows (waiting for the winner) and
/// decides again. Each member's rows end exactly as with single calls.
#[test]
fn racing_all_or_nothing_inserts_lose_nothing_and_duplicate_nothing() {
    let name = unique_name("speculative_all");
    let members = [format!("{name}_a"), format!("{name}_b")];
    let mut admin = connect();
    for member in &members {
        admin
            .execute(
                "SELECT rate_limiter.define($1, \
                 rate_limiter.fixed_window(1000000, '1 day', start => '2000-01-01'))",
                &[member],
            )
            .unwrap();
    }
    admin
        .execute(
            "SELECT rate_limiter.define_all($1, ARRAY[$2, $3])",
            &[&name, &members[0], &members[1]],
        )
        .unwrap();
    race_new_keys(
        &url(),
        &name,
        "rate_limiter.rate_limit($1, k.key)",
        &members,
    );
}

/// A key with an override (docs/overrides.md): its own limit is exact too,
/// at every isolation level, on the plan's row (a plan of another kind
/// than the definition: its rows carry a regime) and on a sharded config
/// of its own; the definition's keys are untouched.
#[test]
fn an_overridden_key_admits_exactly_its_own_capacity_at_every_isolation_level() {
    let mut client = connect();
    for isolation in [
        IsolationLevel::ReadCommitted,
        IsolationLevel::RepeatableRead,
        IsolationLevel::Serializable,
    ] {
        let name = unique_name("hammer_override");
        let plan = format!("{name}_plan");
        client
            .batch_execute(&format!(
                "SELECT rate_limiter.define('{name}', rate_limiter.token_bucket(5, '{LONG_PERIOD}'));
                 SELECT rate_limiter.define('{plan}', rate_limiter.fixed_window({CAPACITY}, '{LONG_PERIOD}',
                     start => clock_timestamp() - interval '1 hour'));
                 SELECT rate_limiter.override('{name}', 'k', plan => '{plan}');
                 SELECT rate_limiter.override('{name}', 'sharded',
                     config => rate_limiter.token_bucket({CAPACITY}, '{LONG_PERIOD}', shards => 4));"
            ))
            .expect("define the limit, its plan and the overrides");
        for key in ["k", "sharded"] {
            let sql = format!("SELECT ok FROM rate_limiter.rate_limit($1, '{key}')");
            let tally = rate_limiter_integration_tests::hammer_until(
                &rate_limiter_integration_tests::url(),
                CONNECTIONS,
                HAMMER_FOR,
                &sql,
                &name,
                isolation,
                rate_limiter_integration_tests::REFUSALS_TO_STOP,
            );
            println!("override {key}, {isolation:?}: {tally:?}");
            assert_eq!(tally.admitted, CAPACITY, "{key}, {isolation:?}: {tally:?}");
        }
        let remaining: f64 = client
            .query_one(
                "SELECT remaining FROM rate_limiter.rate_check($1, 'plain')",
                &[&name],
            )
            .expect("rate_check of a key without an override")
            .get(0);
        assert_eq!(remaining, 4.0, "the definition's keys are untouched");
        client
            .batch_execute(&format!(
                "SELECT rate_limiter.undefine('{name}'); SELECT rate_limiter.undefine('{plan}');"
            ))
            .expect("undefine");
    }
}
