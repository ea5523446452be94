//! rate_limiter.stats against real concurrent connections (the test server
//! preloads the library), where calls meet held rows: `contended` counts a
//! sharded call that met a shard another transaction held, passed over or
//! waited for (also in `rate_limit_all`); `rate_wait` counts once, also when
//! it sleeps and loses a race. (The counters after a mixed workload:
//! `stats.rs`.)

use postgres::Client;
use rate_limiter_integration_tests::stats::counted;
use rate_limiter_integration_tests::{connect, unique_name};
use std::thread;
use std::time::{Duration, Instant};

/// `contended` counts a sharded call that met a shard another transaction
/// held: with one of two shards locked by an open transaction, every call
/// of the limit passes over it.
#[test]
fn a_call_that_meets_a_held_shard_is_contended() {
    let name = unique_name("stats_contended");
    let mut holder = holding(&name, 1);
    let mut caller = connect();
    // Were both shards held, the calls would wait: fail rather than hang.
    caller
        .batch_execute("SET statement_timeout = '10s'")
        .expect("statement_timeout");
    for _ in 0..3 {
        let ok: bool = caller
            .query_one("SELECT ok FROM rate_limiter.rate_limit($1)", &[&name])
            .expect("a call beside the held shard")
            .get(0);
        assert!(ok);
    }
    holder.batch_execute("COMMIT").expect("commit");
    let (counts, contended) = counted(&mut caller, &name);
    assert_eq!(counts.calls, 4);
    assert_eq!(
        contended, 3,
        "each call beside the held shard passed over it"
    );
}

/// A connection with an open transaction that called the new 2-shard
/// limit `name` (capacity 100, 50 per shard) for `count` tokens, and so
/// holds the shards it consumed from: one for a count one shard can serve,
/// both for a count of more than 50 (only the two together can serve it).
fn holding(name: &str, count: i32) -> Client {
    let mut holder = connect();
    holder
        .execute(
            "SELECT rate_limiter.define($1, rate_limiter.token_bucket(100, '1 hour', shards => 2))",
            &[&name],
        )
        .expect("define");
    holder.batch_execute("BEGIN").expect("begin");
    let ok: bool = holder
        .query_one(
            "SELECT ok FROM rate_limiter.rate_limit($1, count => $2::int4)",
            &[&name, &count],
        )
        .expect("hold shards")
        .get(0);
    assert!(ok, "{count} of 100 tokens");
    holder
}

/// [`holding`] both shards.
fn hold_both_shards(name: &str) -> Client {
    let mut holder = holding(name, 60);
    let rows: i64 = holder
        .query_one(
            "SELECT count(*) FROM rate_limiter.rate_limits WHERE name = $1",
            &[&name],
        )
        .expect("count the rows")
        .get(0);
    assert_eq!(rows, 2, "the call wrote (and holds) both shards");
    holder
}

/// Runs `sql` (one row, `ok` first) with `name` on a new connection in a
/// thread; returns once that connection waits for a lock, with the thread
/// (which answers `ok`).
fn blocked_call(sql: &'static str, name: &str) -> thread::JoinHandle<bool> {
    let name = name.to_string();
    let mut caller = connect();
    let pid: i32 = caller
        .query_one("SELECT pg_backend_pid()", &[])
        .expect("pid")
        .get(0);
    caller
        .batch_execute("SET statement_timeout = '60s'")
        .expect("statement_timeout");
    let call = thread::spawn(move || {
        caller
            .query_one(sql, &[&name])
            .expect("the waiting call")
            .get(0)
    });
    let mut watcher = connect();
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let waiting: bool = watcher
            .query_one(
                "SELECT coalesce(wait_event_type = 'Lock', false) FROM pg_stat_activity WHERE pid = $1",
                &[&pid],
            )
            .expect("read pg_stat_activity")
            .get(0);
        if waiting {
            return call;
        }
        assert!(Instant::now() < deadline, "the call never waited");
        thread::sleep(Duration::from_millis(20));
    }
}

/// `rate_limit_all` for one token of the limit `$1`.
const ALL_ONE: &str = "SELECT bool_and(ok) FROM rate_limiter.rate_limit_all(\
                       ARRAY[ROW($1::text, NULL, 1, NULL)::rate_limiter.request])";

/// Runs `sql` (see [`blocked_call`]) on a new limit named from `prefix`
/// while another transaction holds both its shards, then commits that
/// transaction: the call is served, and counted as contended. Returns the
/// limit's name and the holder's connection.
fn call_after_waiting(sql: &'static str, prefix: &str) -> (String, Client) {
    let name = unique_name(prefix);
    let mut holder = hold_both_shards(&name);
    let call = blocked_call(sql, &name);
    holder.batch_execute("COMMIT").expect("commit");
    assert!(
        call.join().expect("the call's thread"),
        "served after the wait"
    );
    let (counts, contended) = counted(&mut holder, &name);
    assert_eq!(counts.calls, 2);
    assert_eq!(contended, 1, "the holder met no one; the waiting call did");
    (name, holder)
}

/// `contended` also counts a sharded call that found every shard held and
/// waited: it waits for one, and once the holder commits it is served.
#[test]
fn a_call_that_waits_for_a_held_shard_is_contended() {
    call_after_waiting("SELECT ok FROM rate_limiter.rate_limit($1)", "stats_waited");
}

/// `rate_limit_all` holds every shard it may use, waiting for busy ones
/// instead of passing over them: a request whose shards it waited for is
/// contended, one that waited for nothing is not.
#[test]
fn rate_limit_all_counts_a_request_that_waited_for_its_shards() {
    let (name, _) = call_after_waiting(ALL_ONE, "stats_all_waited");

    // Nothing held: the same call waits for nothing and is not contended.
    let mut caller = connect();
    let ok: bool = caller
        .query_one(ALL_ONE, &[&name])
        .expect("a call with nothing held")
        .get(0);
    assert!(ok);
    let (counts, contended) = counted(&mut caller, &name);
    assert_eq!(counts.calls, 3);
    assert_eq!(contended, 1, "the free call was not contended");
}

/// `rate_wait` counts one decision per call (its final answer), also when
/// it really sleeps and retries after losing a race: its look sees a free
/// token (another transaction's consumption is not committed yet), its try
/// waits for that transaction's row lock and, once it commits, finds the
/// token gone: that try is refused and rolled back, the call sleeps
/// until the token comes back (on the real clock) and is admitted. Two
/// tries, one count.
#[test]
fn rate_wait_that_sleeps_and_loses_a_race_counts_once() {
    let name = unique_name("stats_wait_race");
    let mut holder = connect();
    // One token, back 2 s after it is taken.
    holder
        .execute(
            "SELECT rate_limiter.define($1, rate_limiter.token_bucket(1, '2 seconds'))",
            &[&name],
        )
        .expect("define");
    holder.batch_execute("BEGIN").expect("begin");
    let ok: bool = holder
        .query_one("SELECT ok FROM rate_limiter.rate_limit($1)", &[&name])
        .expect("take the token")
        .get(0);
    assert!(ok);
    // rate_wait's look saw the token (not taken in what committed), so it
    // tried, and the try waits for the holder's row lock.
    let waiting = blocked_call(
        "SELECT ok FROM rate_limiter.rate_wait($1, timeout => '10 seconds')",
        &name,
    );
    // The try then finds the token gone (the holder committed well before
    // it comes back): it loses the race.
    let before_refill: bool = holder
        .query_one(
            "SELECT clock_timestamp() < ts + interval '1.5 seconds' FROM rate_limiter.rate_limits WHERE name = $1",
            &[&name],
        )
        .expect("the holder's row")
        .get(0);
    assert!(
        before_refill,
        "the holder commits before the token comes back"
    );
    holder.batch_execute("COMMIT").expect("commit");
    let started = Instant::now();
    assert!(
        waiting.join().expect("the waiting call"),
        "admitted in the end"
    );
    // It slept until the token came back.
    assert!(
        started.elapsed() >= Duration::from_millis(400),
        "rate_wait slept after losing ({:?})",
        started.elapsed()
    );
    let (counts, _) = counted(&mut holder, &name);
    // The holder's call and rate_wait's final answer: a count for the
    // refused try would make 3 calls, with a refusal.
    assert_eq!(
        (counts.calls, counts.admitted, counts.refused),
        (2, 2, 0),
        "{counts:?}"
    );
}
