//! `rate_limiter.rate_wait()` on the real clock, with a fast limit (10
//! tokens per second, capacity 1). It never returns early (lower bounds on
//! elapsed time) and does not oversleep: upper bounds are generous (a
//! second or more beyond the wait), so a slow machine cannot fail them but
//! a call that sleeps its whole timeout, or far past retry_after, does.

use postgres::error::SqlState;
use rate_limiter_integration_tests::{connect, unique_name};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread;
use std::time::{Duration, Instant};

/// A new limit with `config` (SQL), its key `'k'` used up: one token
/// taken, which is all it holds.
fn used_up(client: &mut postgres::Client, prefix: &str, config: &str) -> String {
    let name = unique_name(prefix);
    client
        .execute(
            &format!("SELECT rate_limiter.define($1, {config})"),
            &[&name],
        )
        .unwrap();
    let ok: bool = client
        .query_one(
            "SELECT ok FROM rate_limiter.rate_limit($1, 'k', 1)",
            &[&name],
        )
        .unwrap()
        .get(0);
    assert!(ok);
    name
}

#[test]
fn returns_ok_once_tokens_arrive() {
    let mut client = connect();
    // 10 tokens per second, holding at most 1.
    let name = used_up(
        &mut client,
        "wait",
        "rate_limiter.token_bucket(10, '1 second', capacity => 1)",
    );
    let started = Instant::now();
    let row = client
        .query_one(
            "SELECT ok, remaining FROM rate_limiter.rate_wait($1, 'k', 1, timeout => '10 seconds')",
            &[&name],
        )
        .unwrap();
    let (ok, remaining): (bool, f64) = (row.get(0), row.get(1));
    assert!(ok);
    assert!(remaining < 1.0);
    // One token takes 100 ms to arrive; rate_wait may not return earlier,
    // and must not sleep on towards its 10-second timeout.
    assert!(
        started.elapsed() >= Duration::from_millis(90),
        "{:?}",
        started.elapsed()
    );
    assert!(
        started.elapsed() < Duration::from_secs(3),
        "overslept: {:?}",
        started.elapsed()
    );
}

#[test]
fn gives_up_with_ok_false_when_the_timeout_comes_first() {
    let mut client = connect();
    let name = used_up(
        &mut client,
        "wait_slow",
        "rate_limiter.token_bucket(1, '1 hour')",
    );
    let started = Instant::now();
    let row = client
        .query_one(
            "SELECT ok, extract(epoch FROM retry_after)::float8 FROM rate_limiter.rate_wait($1, 'k', 1, timeout => '200 milliseconds')",
            &[&name],
        )
        .unwrap();
    let (ok, retry_after): (bool, f64) = (row.get(0), row.get(1));
    assert!(!ok);
    // The token is an hour away: it gives up at once, without sleeping.
    assert!(
        started.elapsed() < Duration::from_secs(2),
        "slept although the timeout could not be met: {:?}",
        started.elapsed()
    );
    assert!(retry_after > 3500.0, "{retry_after}");
    // Nothing consumed.
    let value: f64 = client
        .query_one(
            "SELECT value FROM rate_limiter.rate_limits WHERE name = $1",
            &[&name],
        )
        .unwrap()
        .get(0);
    assert!(value.abs() < 0.01, "{value}");
}

#[test]
fn can_be_cancelled_and_obeys_statement_timeout() {
    let mut client = connect();
    let name = used_up(
        &mut client,
        "wait_cancel",
        "rate_limiter.token_bucket(1, '10 seconds')",
    );
    // A cancel from another connection ends the sleep with 57014.
    let cancel = client.cancel_token();
    let canceller = thread::spawn(move || {
        thread::sleep(Duration::from_millis(300));
        cancel.cancel_query(postgres::NoTls).unwrap();
    });
    let started = Instant::now();
    let error = client
        .query_one(
            "SELECT ok FROM rate_limiter.rate_wait($1, 'k', 1, timeout => '30 seconds')",
            &[&name],
        )
        .unwrap_err();
    canceller.join().unwrap();
    assert_eq!(error.code(), Some(&SqlState::QUERY_CANCELED), "{error}");
    assert!(started.elapsed() >= Duration::from_millis(300));
    // statement_timeout applies to the sleep too.
    client
        .batch_execute("SET statement_timeout = '300ms'")
        .unwrap();
    let error = client
        .query_one(
            "SELECT ok FROM rate_limiter.rate_wait($1, 'k', 1, timeout => '30 seconds')",
            &[&name],
        )
        .unwrap_err();
    assert_eq!(error.code(), Some(&SqlState::QUERY_CANCELED), "{error}");
    client.batch_execute("RESET statement_timeout").unwrap();
    // Nothing was consumed by either.
    let value: f64 = client
        .query_one(
            "SELECT value FROM rate_limiter.rate_limits WHERE name = $1",
            &[&name],
        )
        .unwrap()
        .get(0);
    assert!(value < 1.0, "{value}");
}

/// While one session's rate_wait sleeps (inside an open transaction),
/// another session consumes from the same key and commits. Had the
/// sleeper kept the row lock, the other session could not finish before
/// the sleeper's transaction ended.
#[test]
fn another_session_consumes_the_same_key_while_it_sleeps() {
    let mut setup = connect();
    let name = used_up(
        &mut setup,
        "wait_shared",
        "rate_limiter.token_bucket(1, '2 seconds')",
    );
    let sleeper_returned = Arc::new(AtomicBool::new(false));
    let sleeper = {
        let (name, returned) = (name.clone(), sleeper_returned.clone());
        thread::spawn(move || {
            let mut client = connect();
            let mut transaction = client.transaction().unwrap();
            let ok: bool = transaction
                .query_one(
                    "SELECT ok FROM rate_limiter.rate_wait($1, 'k', 1, timeout => '20 seconds')",
                    &[&name],
                )
                .unwrap()
                .get(0);
            returned.store(true, Ordering::SeqCst);
            transaction.commit().unwrap();
            ok
        })
    };
    // Let the sleeper make its first (refused) try and go to sleep.
    thread::sleep(Duration::from_millis(500));
    let mut other = connect();
    let mut transaction = other.transaction().unwrap();
    let ok: bool = transaction
        .query_one(
            "SELECT ok FROM rate_limiter.rate_limit($1, 'k', 0.1)",
            &[&name],
        )
        .unwrap()
        .get(0);
    transaction.commit().unwrap();
    assert!(
        !sleeper_returned.load(Ordering::SeqCst),
        "the other session only got through after rate_wait returned"
    );
    // At least 500 ms have passed: 0.25 tokens had arrived for it.
    assert!(ok);
    assert!(sleeper.join().unwrap());
}

/// A sharded limit whose only shard with tokens is held by an open
/// transaction: rate_wait waits on that shard's row lock, as it does on an
/// unsharded row, and is admitted as soon as the holder commits. It does
/// not poll: a refusal with a retry_after of a microsecond would make it
/// try again about once a millisecond, each try a subtransaction with its
/// own transaction id. Counted with the server's transaction ids.
#[test]
fn waits_on_a_busy_shard_instead_of_polling() {
    let mut client = connect();
    let name = unique_name("wait_sharded");
    client
        .execute(
            "SELECT rate_limiter.define($1, rate_limiter.token_bucket(20, '1 hour', shards => 2))",
            &[&name],
        )
        .unwrap();
    client
        .execute(
            "INSERT INTO rate_limiter.rate_limits (name, key, shard, value, ts)
             VALUES ($1, NULL, 0, 0, now()), ($1, NULL, 1, 5, now())",
            &[&name],
        )
        .unwrap();
    // The holder takes a token from shard 1, the only one with tokens.
    let mut holder = connect();
    holder.batch_execute("BEGIN").unwrap();
    let ok: bool = holder
        .query_one("SELECT ok FROM rate_limiter.rate_limit($1)", &[&name])
        .unwrap()
        .get(0);
    assert!(ok);
    let xid_before: i64 = client
        .query_one("SELECT txid_current()", &[])
        .unwrap()
        .get(0);
    let waiter = {
        let name = name.clone();
        thread::spawn(move || {
            let mut client = connect();
            let started = Instant::now();
            let row = client
                .query_one(
                    "SELECT ok, remaining FROM rate_limiter.rate_wait($1, timeout => '20 seconds')",
                    &[&name],
                )
                .unwrap();
            (row.get::<_, bool>(0), started.elapsed())
        })
    };
    thread::sleep(Duration::from_millis(1000));
    holder.batch_execute("COMMIT").unwrap();
    let (ok, elapsed) = waiter.join().unwrap();
    let xid_after: i64 = client
        .query_one("SELECT txid_current()", &[])
        .unwrap()
        .get(0);
    assert!(ok, "admitted from the shard the holder left");
    assert!(elapsed >= Duration::from_millis(900), "{elapsed:?}");
    assert!(elapsed < Duration::from_secs(5), "overslept: {elapsed:?}");
    // The holder's commit, the two txid_current() calls and a few tries:
    // a poll once a millisecond for a second would be about a thousand.
    assert!(
        xid_after - xid_before < 20,
        "{} transaction ids used while waiting: rate_wait polled",
        xid_after - xid_before
    );
}
