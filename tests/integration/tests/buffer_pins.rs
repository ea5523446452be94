//! A call that holds many rows holds none of their pages: the row lock is
//! a mark in the tuple, so `rate_limit_all` and `rate_credit` release each
//! buffer right after locking its row. Measured with `pg_buffercache`
//! while the call is blocked on its last row: the backend pins (almost) no
//! page of the state table. Before the fix it pinned every page holding
//! one of its rows, and with a small `shared_buffers` other backends hit
//! "no unpinned buffers available".

use rate_limiter_integration_tests::{connect, unique_name};
use std::thread;
use std::time::{Duration, Instant};

/// Keys of the rate_limit_all test: they fill about 100 pages.
const KEYS: i32 = 20_000;

/// Once backend `blocked` waits for a lock: how many pages of the state
/// table are pinned, per pg_buffercache.
fn pinned_pages(client: &mut postgres::Client, blocked: u32) -> i64 {
    // pinning_backends counts every backend; the blocked call is the only
    // one that could hold a pin on these pages for long, so wait for it to
    // block and then count the pages anyone pins.
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let waiting: bool = client
            .query_one(
                "SELECT coalesce(wait_event_type = 'Lock', false) FROM pg_stat_activity WHERE pid = $1",
                &[&(blocked as i32)],
            )
            .unwrap()
            .get(0);
        if waiting {
            break;
        }
        assert!(Instant::now() < deadline, "the call never blocked");
        thread::sleep(Duration::from_millis(20));
    }
    client
        .query_one(
            "SELECT count(*) FROM pg_buffercache
             WHERE relfilenode = pg_relation_filenode('rate_limiter.rate_limits')
               AND reldatabase = (SELECT oid FROM pg_database WHERE datname = current_database())
               AND pinning_backends > 0",
            &[],
        )
        .unwrap()
        .get(0)
}

/// Holds the row of (name, key) locked in an open transaction of a new
/// connection, returned with it.
fn hold_row(name: &str, key: &str) -> postgres::Client {
    let mut holder = connect();
    holder.batch_execute("BEGIN").unwrap();
    holder
        .execute(
            "SELECT ok FROM rate_limiter.rate_limit($1, $2, 0)",
            &[&name, &key],
        )
        .unwrap();
    holder
}

/// Creates pg_buffercache if it is missing. Both tests run at once, and
/// two concurrent `CREATE EXTENSION IF NOT EXISTS` can collide on the
/// catalog's unique index (23505): an advisory lock serializes them.
fn with_buffercache(client: &mut postgres::Client) {
    client
        .batch_execute(
            "BEGIN; SELECT pg_advisory_xact_lock(hashtext('pg_buffercache'));
             CREATE EXTENSION IF NOT EXISTS pg_buffercache; COMMIT",
        )
        .expect("create pg_buffercache");
}

fn pid(client: &mut postgres::Client) -> u32 {
    client
        .query_one("SELECT pg_backend_pid()", &[])
        .unwrap()
        .get::<_, i32>(0) as u32
}

#[test]
fn rate_limit_all_pins_no_page_while_it_waits() {
    let mut client = connect();
    with_buffercache(&mut client);
    let name = unique_name("pins_all");
    client
        .execute(
            "SELECT rate_limiter.define($1, rate_limiter.token_bucket(10, '1 hour'))",
            &[&name],
        )
        .unwrap();
    // Every key has a row; the last one is held by another transaction.
    client
        .execute(
            "INSERT INTO rate_limiter.rate_limits (name, key, shard, value, ts)
             SELECT $1, lpad(i::text, 6, '0'), 0, 10, now() FROM generate_series(1, $2) AS i",
            &[&name, &KEYS],
        )
        .unwrap();
    let last = format!("{KEYS:06}");
    let mut holder = hold_row(&name, &last);
    let caller_name = name.clone();
    let mut caller = connect();
    // More requests than the default rate_limiter.max_requests (1,000).
    caller
        .batch_execute("SET rate_limiter.max_requests = 100000")
        .unwrap();
    let caller_pid = pid(&mut caller);
    let call = thread::spawn(move || {
        caller
            .query(
                "SELECT ok FROM rate_limiter.rate_limit_all(ARRAY(
                    SELECT ROW($1, lpad(i::text, 6, '0'), 1, NULL)::rate_limiter.request
                    FROM generate_series(1, $2) AS i))",
                &[&caller_name, &KEYS],
            )
            .map(|rows| rows.iter().all(|row| row.get::<_, bool>(0)))
    });
    let pinned = pinned_pages(&mut client, caller_pid);
    holder.batch_execute("COMMIT").unwrap();
    let admitted = call.join().unwrap().expect("rate_limit_all");
    assert!(admitted, "every request had tokens");
    // The rows fill about 100 pages; the waiting call may pin the page of
    // the row it waits for, nothing more.
    assert!(
        pinned <= 2,
        "{pinned} pages of the state table pinned while rate_limit_all waited"
    );
}

#[test]
fn rate_credit_pins_no_page_while_it_waits() {
    let mut client = connect();
    with_buffercache(&mut client);
    let name = unique_name("pins_credit");
    // 64 shards with a row each, every one on its own page (fillfactor
    // does not apply to direct writes, so pad the pages with other rows).
    client
        .execute(
            "SELECT rate_limiter.define($1, rate_limiter.token_bucket(6400, '1 hour', shards => 64))",
            &[&name],
        )
        .unwrap();
    client
        .execute(
            "INSERT INTO rate_limiter.rate_limits (name, key, shard, value, ts)
             SELECT CASE WHEN i % 200 = 0 THEN $1 ELSE $1 || '_padding' END,
                    CASE WHEN i % 200 = 0 THEN 'k' ELSE i::text END,
                    CASE WHEN i % 200 = 0 THEN (i / 200 - 1)::int2 ELSE 0 END,
                    50, '2026-01-01 00:00:00+00'
             FROM generate_series(1, 200 * 64) AS i",
            &[&name],
        )
        .unwrap();
    let pages: i64 = client
        .query_one(
            "SELECT count(DISTINCT (ctid::text::point)[0]) FROM rate_limiter.rate_limits WHERE name = $1",
            &[&name],
        )
        .unwrap()
        .get(0);
    assert!(pages >= 32, "the shards' rows span {pages} pages");
    // Shard 63, the last one credit locks, is held elsewhere: lock it with
    // a credit of 0 in an open transaction.
    let mut holder = connect();
    holder.batch_execute("BEGIN").unwrap();
    holder
        .execute(
            "SELECT 1 FROM rate_limiter.rate_limits WHERE name = $1 AND key = 'k' AND shard = 63 FOR UPDATE",
            &[&name],
        )
        .unwrap();
    let mut caller = connect();
    caller
        .batch_execute("SET rate_limiter.now_override = '2026-01-01 00:00:00+00'")
        .unwrap();
    let caller_pid = pid(&mut caller);
    let caller_name = name.clone();
    let call = thread::spawn(move || {
        caller
            .query_one(
                "SELECT rate_limiter.rate_credit($1, 'k', 1)",
                &[&caller_name],
            )
            .map(|row| row.get::<_, f64>(0))
    });
    let pinned = pinned_pages(&mut client, caller_pid);
    holder.batch_execute("COMMIT").unwrap();
    let value = call.join().unwrap().expect("rate_credit");
    assert_eq!(value, 64.0 * 50.0 + 1.0);
    assert!(
        pinned <= 2,
        "{pinned} pages of the state table pinned while rate_credit waited"
    );
}
