//! docs/concurrency.md, "Guarantees": never more than `max` operations in
//! flight per (name, key), counting transaction and timed leases, at READ
//! COMMITTED, REPEATABLE READ and SERIALIZABLE, with random rollbacks and
//! holders killed by `pg_terminate_backend`; in both editions (the native
//! extension, and the portable edition installed in a database of the same
//! server).
//!
//! The run itself, and how the count of holders is taken, is
//! `rate_limiter_integration_tests::in_flight`.
//!
//! And `wait => ...`: a waiting call is admitted once a holder's
//! transaction ends, and `statement_timeout` cancels a wait.

use postgres::error::SqlState;
use postgres::{Client, NoTls};
use rate_limiter_integration_tests::{in_flight, portable, unique_name};
use std::time::{Duration, Instant};

fn server_url() -> String {
    rate_limiter_integration_tests::test_env("RATE_LIMITER_TEST_URL")
}

fn connect(database: &str) -> Client {
    Client::connect(&format!("{} dbname={database}", server_url()), NoTls)
        .expect("connect to the test database")
}

fn never_more_than_max(database: &str, owner: &mut Client) {
    let url = format!("{} dbname={database}", server_url());
    in_flight::never_more_than_max(&[url], owner, Some("k"));
}

#[test]
fn native_never_more_than_max_in_flight() {
    let database = "rate_limiter_concurrency_limits";
    let mut owner = rate_limiter_integration_tests::fresh_database(database);
    never_more_than_max(database, &mut owner);
}

#[test]
fn portable_never_more_than_max_in_flight() {
    let database = "rate_limiter_portable_concurrency_limits";
    let mut owner = portable::fresh_database(database, "postgres");
    never_more_than_max(database, &mut owner);
}

/// docs/concurrency.md: `wait => ...` waits for a slot of a full limit,
/// holding nothing, and is admitted once a holder's transaction ends
/// (before its wait is up); `statement_timeout` cancels a wait (57014).
fn waits(database: &str, owner: &mut Client) {
    let name = unique_name("waiting");
    owner
        .execute(
            "SELECT rate_limiter.define($1, rate_limiter.concurrency(1))",
            &[&name],
        )
        .expect("define the limit");
    let take = "SELECT ok FROM rate_limiter.acquire($1, 'k')";
    let wait = "SELECT ok FROM rate_limiter.acquire($1, 'k', wait => '20 seconds')";
    let mut holder = connect(database);
    let mut holding = holder.transaction().expect("begin");
    let ok: bool = holding.query_one(take, &[&name]).expect("acquire").get(0);
    assert!(ok, "the first call takes the one slot");
    let waiter = {
        let (database, name) = (database.to_string(), name.clone());
        std::thread::spawn(move || {
            let ok: bool = connect(&database)
                .query_one(wait, &[&name])
                .expect("a waiting acquire")
                .get(0);
            ok
        })
    };
    // The waiter is running its call (found by its text), and still waits
    // a while later: the slot is held.
    let started = Instant::now();
    loop {
        let running: i64 = owner
            .query_one(
                "SELECT count(*) FROM pg_stat_activity WHERE state = 'active' AND query LIKE '%wait => ''20 seconds''%' AND pid <> pg_backend_pid()",
                &[],
            )
            .expect("look for the waiter")
            .get(0);
        if running > 0 {
            break;
        }
        assert!(
            started.elapsed() < Duration::from_secs(10),
            "the waiter started"
        );
        std::thread::sleep(Duration::from_millis(10));
    }
    std::thread::sleep(Duration::from_millis(200));
    assert!(
        !waiter.is_finished(),
        "the waiter waits while the slot is held"
    );
    let freed = Instant::now();
    holding.commit().expect("end the holder's transaction");
    assert!(
        waiter.join().expect("the waiter"),
        "admitted once the slot freed"
    );
    assert!(
        freed.elapsed() < Duration::from_secs(10),
        "admitted before its wait was up ({:?})",
        freed.elapsed()
    );
    // statement_timeout cancels a wait.
    let mut holding = holder.transaction().expect("begin");
    let ok: bool = holding.query_one(take, &[&name]).expect("acquire").get(0);
    assert!(ok, "the slot is free again");
    let mut other = connect(database);
    other
        .batch_execute("SET statement_timeout = '200ms'")
        .expect("set statement_timeout");
    let started = Instant::now();
    let error = other
        .query_one(wait, &[&name])
        .expect_err("statement_timeout cancels the wait");
    assert_eq!(error.code(), Some(&SqlState::QUERY_CANCELED), "{error}");
    assert!(
        started.elapsed() < Duration::from_secs(10),
        "cancelled in time"
    );
    holding.rollback().expect("rollback");
}

#[test]
fn native_wait_is_admitted_when_a_slot_frees_and_cancellable() {
    let database = "rate_limiter_concurrency_waits";
    let mut owner = rate_limiter_integration_tests::fresh_database(database);
    waits(database, &mut owner);
}

#[test]
fn portable_wait_is_admitted_when_a_slot_frees_and_cancellable() {
    let database = "rate_limiter_portable_concurrency_waits";
    let mut owner = portable::fresh_database(database, "postgres");
    waits(database, &mut owner);
}
