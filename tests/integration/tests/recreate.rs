//! The state table and its unique index are found through OIDs cached per
//! backend. While other sessions keep calling, `REINDEX INDEX CONCURRENTLY`
//! replaces the index (a new OID under the old name) and `DROP EXTENSION` +
//! `CREATE EXTENSION` replace everything. The calls look the objects up,
//! lock them and check again (PostgreSQL's look-up, lock, re-check
//! pattern): during a REINDEX nothing fails at all; across the re-creation
//! a call may find the extension missing (a clear error of the missing
//! object, or PostgreSQL's own "cache lookup failed for function" when the
//! function was dropped while the call was being planned), but never an
//! internal error of the extension, and the limits work afterwards.

use postgres::error::SqlState;
use postgres::{Client, NoTls};
use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread;
use std::time::{Duration, Instant};

const DATABASE: &str = "rate_limiter_recreate";
const CALLERS: usize = 4;

fn base_url() -> String {
    std::env::var("RATE_LIMITER_TEST_URL")
        .expect("RATE_LIMITER_TEST_URL is not set: run the tests through scripts/test.sh")
}

fn connect() -> Client {
    Client::connect(&format!("{} dbname={DATABASE}", base_url()), NoTls).expect("connect")
}

/// Callers hammer limits until `stop`; returns the errors seen, by SQLSTATE.
fn callers(stop: Arc<AtomicBool>) -> Vec<thread::JoinHandle<(u64, HashMap<String, u64>)>> {
    (0..CALLERS)
        .map(|caller| {
            let stop = stop.clone();
            thread::spawn(move || {
                let mut client = connect();
                let (mut calls, mut errors) = (0u64, HashMap::new());
                while !stop.load(Ordering::SeqCst) {
                    // By name: an inline config would be a value of the
                    // composite type the re-creation drops, which PostgreSQL
                    // itself cannot look up once it is gone.
                    let sql = format!(
                        "SELECT ok FROM rate_limiter.rate_limit('recreate', '{caller}-{}')",
                        calls % 50
                    );
                    match client.simple_query(&sql) {
                        Ok(_) => calls += 1,
                        Err(error) => {
                            // The SQLSTATE, and the message of its first occurrence.
                            let code = match error.as_db_error() {
                                Some(db) => format!("{} {}", db.code().code(), db.message()),
                                None => format!("no SQLSTATE: {error}"),
                            };
                            *errors.entry(code).or_insert(0) += 1;
                        }
                    }
                }
                (calls, errors)
            })
        })
        .collect()
}

fn join(
    workers: Vec<thread::JoinHandle<(u64, HashMap<String, u64>)>>,
) -> (u64, HashMap<String, u64>) {
    let mut total = (0, HashMap::new());
    for worker in workers {
        let (calls, errors) = worker.join().expect("a caller panicked");
        total.0 += calls;
        for (code, n) in errors {
            *total.1.entry(code).or_insert(0) += n;
        }
    }
    total
}

#[test]
fn calls_survive_reindex_concurrently_and_recreating_the_extension() {
    let mut admin = Client::connect(&base_url(), NoTls).expect("connect");
    for sql in [
        format!("DROP DATABASE IF EXISTS {DATABASE}"),
        format!("CREATE DATABASE {DATABASE}"),
    ] {
        admin.batch_execute(&sql).unwrap();
    }
    let mut ddl = connect();
    const CREATE: &str = "CREATE EXTENSION rate_limiter; \
        SELECT rate_limiter.define('recreate', rate_limiter.token_bucket(1000, '1 second'))";
    ddl.batch_execute(CREATE).unwrap();

    // REINDEX CONCURRENTLY under load: no call fails.
    let stop = Arc::new(AtomicBool::new(false));
    let workers = callers(stop.clone());
    let deadline = Instant::now() + Duration::from_secs(3);
    let mut reindexes = 0;
    while Instant::now() < deadline {
        ddl.batch_execute("REINDEX INDEX CONCURRENTLY rate_limiter.rate_limits_name_key_shard_key")
            .unwrap();
        reindexes += 1;
    }
    stop.store(true, Ordering::SeqCst);
    let (calls, errors) = join(workers);
    println!("{reindexes} reindexes, {calls} calls, errors {errors:?}");
    assert!(reindexes > 1 && calls > 0);
    assert!(
        errors.is_empty(),
        "calls failed during REINDEX CONCURRENTLY: {errors:?}"
    );

    // DROP and CREATE EXTENSION under load: only missing-object errors.
    let stop = Arc::new(AtomicBool::new(false));
    let workers = callers(stop.clone());
    let deadline = Instant::now() + Duration::from_secs(3);
    let mut recreations = 0;
    while Instant::now() < deadline {
        // One transaction: the extension is gone for the others until it
        // commits, and then it is back, defined, with new OIDs. The DROP
        // can lose a deadlock against a call (which, holding the state
        // table, reads the definitions again after the invalidation): as
        // any DDL under load, it is then tried again.
        match ddl.batch_execute(&format!("DROP EXTENSION rate_limiter; {CREATE}")) {
            Ok(()) => recreations += 1,
            Err(error) if error.code() == Some(&SqlState::T_R_DEADLOCK_DETECTED) => {}
            Err(error) => panic!("DROP and CREATE EXTENSION failed: {error}"),
        }
    }
    stop.store(true, Ordering::SeqCst);
    let (calls, errors) = join(workers);
    println!("{recreations} re-creations, {calls} calls, errors {errors:?}");
    assert!(recreations > 1 && calls > 0);
    let missing = [
        SqlState::INVALID_SCHEMA_NAME, // 3F000: schema rate_limiter does not exist
        SqlState::UNDEFINED_FUNCTION,  // 42883
        SqlState::UNDEFINED_OBJECT,    // 42704
        SqlState::UNDEFINED_TABLE,     // 42P01
        SqlState::T_R_DEADLOCK_DETECTED, // 40P01: a call's lock against DROP's
    ]
    .map(|code| code.code().to_string());
    for code in errors.keys() {
        // PostgreSQL itself does not lock a function while a query that
        // calls it is planned: one dropped in between fails in the
        // executor, before any of the extension's code runs.
        let executor_race = code.starts_with("XX000 cache lookup failed for function");
        assert!(
            executor_race
                || missing
                    .iter()
                    .any(|missing| code.starts_with(missing.as_str())),
            "a call failed with {code} across the re-creation: {errors:?}"
        );
    }

    // Afterwards the new objects work.
    let ok: bool = ddl
        .query_one(
            "SELECT ok FROM rate_limiter.rate_limit('recreate', 'after')",
            &[],
        )
        .unwrap()
        .get(0);
    assert!(ok);
    drop(ddl);
    admin
        .batch_execute(&format!("DROP DATABASE {DATABASE}"))
        .unwrap();
}
