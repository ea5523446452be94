//! Refusals never wait (docs/guarantees.md, "Concurrency and exactness"),
//! with real connections. One transaction holds a limit's row with an
//! uncommitted credit; eight other connections call a limit that the
//! committed state has used up. Each has `lock_timeout = 200ms`, which a
//! call waiting for the row would hit (`55P03`): with lock-free refusals
//! (the default) every call is answered with a refusal and nothing is
//! written; with `rate_limiter.lock_free_refusals = off` every call times
//! out on the lock. Then the holder commits, and the credit admits exactly
//! one call. For a keyed limit, a global limit of 4 shards and
//! `rate_limit_all`.

use postgres::error::SqlState;
use postgres::Client;
use rate_limiter_integration_tests::{connect, unique_name};
use std::thread;

const CALLERS: usize = 8;
const CALLS_EACH: usize = 20;

/// What `CALLERS` connections got from `CALLS_EACH` calls of `sql` each:
/// (refused, timed out on the lock).
fn flood(sql: &str, lock_free: bool) -> (usize, usize) {
    let threads: Vec<_> = (0..CALLERS)
        .map(|_| {
            let sql = sql.to_string();
            thread::spawn(move || {
                let mut client = connect();
                client
                    .batch_execute(&format!(
                        "SET rate_limiter.now_override = '2026-01-01 00:00:00+00';
                         SET lock_timeout = '200ms';
                         SET rate_limiter.lock_free_refusals = {}",
                        if lock_free { "on" } else { "off" }
                    ))
                    .unwrap();
                let (mut refused, mut timed_out) = (0, 0);
                for _ in 0..CALLS_EACH {
                    match client.query_one(sql.as_str(), &[]) {
                        Ok(row) => {
                            assert!(
                                !row.get::<_, bool>(0),
                                "a call was admitted from an empty limit"
                            );
                            refused += 1;
                        }
                        Err(error) if error.code() == Some(&SqlState::LOCK_NOT_AVAILABLE) => {
                            timed_out += 1
                        }
                        Err(error) => panic!("unexpected error: {error}"),
                    }
                }
                (refused, timed_out)
            })
        })
        .collect();
    threads
        .into_iter()
        .map(|thread| thread.join().unwrap())
        .fold((0, 0), |(a, b), (c, d)| (a + c, b + d))
}

/// The committed state of `name`'s rows, for comparing before and after.
fn rows(client: &mut Client, name: &str) -> Vec<(Option<String>, i16, f64)> {
    client
        .query(
            "SELECT key, shard, value FROM rate_limiter.rate_limits WHERE name = $1 ORDER BY key, shard",
            &[&name],
        )
        .unwrap()
        .iter()
        .map(|row| (row.get(0), row.get(1), row.get(2)))
        .collect()
}

/// Defines `name` with `config`, uses it up with `drain`, holds its rows in
/// a transaction with `hold` (which gives back `credited` tokens), floods
/// it with `call` both ways, then commits the holder and checks that the
/// tokens given back admit at least one call and at most `credited`.
fn refusals_do_not_wait(
    config: &str,
    key: Option<&str>,
    drain: &str,
    hold: &str,
    credited: usize,
    call: &str,
) {
    let name = unique_name("lock_free");
    let mut admin = connect();
    admin
        .batch_execute(&format!(
            "SET rate_limiter.now_override = '2026-01-01 00:00:00+00';
             SELECT rate_limiter.define('{name}', {config})"
        ))
        .unwrap();
    let key = key.map_or("NULL".to_string(), |key| format!("'{key}'"));
    let fill = |sql: &str| sql.replace("{name}", &name).replace("{key}", &key);
    assert!(admin
        .query_one(&fill(drain), &[])
        .unwrap()
        .get::<_, bool>(0));
    let before = rows(&mut admin, &name);

    let mut holder = connect();
    holder
        .batch_execute(&format!(
            "SET rate_limiter.now_override = '2026-01-01 00:00:00+00'; BEGIN; {}",
            fill(hold)
        ))
        .unwrap();

    let (refused, timed_out) = flood(&fill(call), true);
    assert_eq!(
        (refused, timed_out),
        (CALLERS * CALLS_EACH, 0),
        "every call is refused at once while the row is held"
    );
    assert_eq!(rows(&mut admin, &name), before, "a refusal writes nothing");
    let (refused, timed_out) = flood(&fill(call), false);
    assert_eq!(
        (refused, timed_out),
        (0, CALLERS * CALLS_EACH),
        "with lock_free_refusals off, every call waits for the holder"
    );

    holder.batch_execute("COMMIT").unwrap();
    let admitted = (0..credited + 8)
        .filter(|_| admin.query_one(&fill(call), &[]).unwrap().get::<_, bool>(0))
        .count();
    assert!(
        (1..=credited).contains(&admitted),
        "the committed credit of {credited} admitted {admitted} calls"
    );
}

#[test]
fn keyed_refusals_do_not_wait_for_the_holder() {
    refusals_do_not_wait(
        "rate_limiter.token_bucket(5, '1 hour')",
        Some("alice"),
        "SELECT ok FROM rate_limiter.rate_limit('{name}', {key}, 5)",
        "SELECT rate_limiter.rate_credit('{name}', {key}, 1)",
        1,
        "SELECT ok FROM rate_limiter.rate_limit('{name}', {key})",
    );
}

#[test]
fn sharded_refusals_do_not_wait_for_the_holders() {
    // 4 shards of 5, each empty (written as the table's owner); the holder
    // writes every shard, giving each a token back.
    refusals_do_not_wait(
        "rate_limiter.token_bucket(20, '1 hour', shards => 4)",
        None,
        "WITH emptied AS (
             INSERT INTO rate_limiter.rate_limits (name, key, shard, value, ts)
             SELECT '{name}', NULL, s, 0, '2026-01-01 00:00:00+00' FROM generate_series(0, 3) AS s
             RETURNING 1)
         SELECT count(*) = 4 FROM emptied",
        "UPDATE rate_limiter.rate_limits SET value = value + 1 WHERE name = '{name}'",
        4,
        "SELECT ok FROM rate_limiter.rate_limit('{name}')",
    );
}

#[test]
fn rate_limit_all_refuses_before_holding_anything() {
    refusals_do_not_wait(
        "rate_limiter.token_bucket(5, '1 hour')",
        Some("bob"),
        "SELECT ok FROM rate_limiter.rate_limit('{name}', {key}, 5)",
        "SELECT rate_limiter.rate_credit('{name}', {key}, 1)",
        1,
        "SELECT bool_and(ok) FROM rate_limiter.rate_limit_all(ARRAY[
             ROW('{name}', {key}, 1, NULL)]::rate_limiter.request[])",
    );
}
