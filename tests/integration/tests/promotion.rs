//! Promoting the hot standby: consume on the primary, promote its
//! streaming standby (`pg_promote()`), and keep consuming there: the state
//! carries on from the replicated rows, nothing refills or drains, and
//! definitions are there too.
//!
//! Ignored in a plain `cargo test`: promotion ends the standby's life as a
//! standby, so scripts/test.sh runs it last (`--ignored`).

use postgres::{Client, NoTls};
use rate_limiter_integration_tests::{connect, test_env, unique_name, DATABASE};
use std::thread;
use std::time::{Duration, Instant};

const STOPPED: &str = "SET rate_limiter.now_override = '2026-01-01 00:00:00+00'";

#[test]
#[ignore = "run by scripts/test.sh after every other test"]
fn a_promoted_standby_carries_on_the_state() {
    let mut primary = connect();
    primary.batch_execute(STOPPED).expect("stop the clock");
    let name = unique_name("promotion");
    primary
        .execute(
            "SELECT rate_limiter.define($1, rate_limiter.token_bucket(5, '1 hour', shards => 2))",
            &[&name],
        )
        .expect("define");
    let inline = unique_name("promotion_inline");
    for (limit, key, count) in [(&name, "k", 3.0), (&inline, "k", 2.0)] {
        let ok: bool = primary
            .query_one(
                "SELECT ok FROM rate_limiter.rate_limit($1, $2, $3,
                     config => CASE WHEN $1 LIKE 'promotion_inline%' THEN rate_limiter.token_bucket(3, '1 hour') END)",
                &[limit, &key, &count],
            )
            .expect("consume on the primary")
            .get(0);
        assert!(ok);
    }
    // The global sharded limit: 4 of 5 tokens over its 2 shards.
    for _ in 0..4 {
        primary
            .query_one("SELECT ok FROM rate_limiter.rate_limit($1)", &[&name])
            .expect("consume the global limit");
    }
    // What the calls committed is flushed (synchronous_commit), and the
    // primary sends only flushed WAL: wait for the flush position (the
    // write position may run ahead of it, on WAL nobody flushes yet).
    let lsn: String = primary
        .query_one("SELECT pg_current_wal_flush_lsn()::text", &[])
        .expect("lsn")
        .get(0);

    let standby_url = format!(
        "{} dbname={DATABASE}",
        test_env("RATE_LIMITER_TEST_STANDBY_URL")
    );
    let mut standby = Client::connect(&standby_url, NoTls).expect("connect to the standby");
    let deadline = Instant::now() + Duration::from_secs(120);
    loop {
        let row = standby
            .query_one(
                "SELECT pg_last_wal_replay_lsn() >= $1::text::pg_lsn,
                        format('received %s, replayed %s, receiver %s', pg_last_wal_receive_lsn(),
                               pg_last_wal_replay_lsn(),
                               (SELECT status FROM pg_stat_wal_receiver))",
                &[&lsn],
            )
            .expect("replay lsn");
        if row.get::<_, bool>(0) {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "the standby did not catch up to {lsn}: {}",
            row.get::<_, String>(1)
        );
        thread::sleep(Duration::from_millis(20));
    }
    let promoted: bool = standby
        .query_one("SELECT pg_promote(wait => true)", &[])
        .expect("pg_promote")
        .get(0);
    assert!(promoted);
    let in_recovery: bool = standby
        .query_one("SELECT pg_is_in_recovery()", &[])
        .expect("recovery state")
        .get(0);
    assert!(!in_recovery);

    // The same answers as the primary would give: 2 and 1 left, 1 left of
    // the global limit; no refill (the clock is stopped), no drain.
    standby.batch_execute(STOPPED).expect("stop the clock");
    let remaining = |client: &mut Client,
                     limit: &str,
                     key: Option<&str>,
                     count: f64|
     -> (bool, f64) {
        let row = client
            .query_one(
                "SELECT ok, remaining FROM rate_limiter.rate_limit($1, $2, $3,
                     config => CASE WHEN $1 LIKE 'promotion_inline%' THEN rate_limiter.token_bucket(3, '1 hour') END)",
                &[&limit, &key, &count],
            )
            .expect("consume on the promoted server");
        (row.get(0), row.get(1))
    };
    assert_eq!(remaining(&mut standby, &name, Some("k"), 2.0), (true, 0.0));
    assert_eq!(remaining(&mut standby, &name, Some("k"), 1.0), (false, 0.0));
    assert_eq!(
        remaining(&mut standby, &inline, Some("k"), 1.0),
        (true, 0.0)
    );
    let (ok, _) = remaining(&mut standby, &name, None, 1.0);
    assert!(ok, "the global limit had 1 token left");
    let left: f64 = standby
        .query_one(
            "SELECT sum(value) FROM rate_limiter.rate_limits WHERE name = $1 AND key IS NULL",
            &[&name],
        )
        .expect("global state")
        .get(0);
    assert_eq!(left, 0.0, "5 tokens, 5 consumed over both servers");
}
