//! docs/guarantees.md, "Portable edition" and "Concurrency and exactness",
//! on the portable edition: concurrency with real connections, as
//! `concurrency.rs` and `sharding.rs` test the native extension. 16
//! connections call one limit as fast as they can, each call in its own
//! transaction, on a fixed window with no refill during the run (one window
//! longer than the run): exactly the capacity is admitted and recorded (the
//! stored values sum to zero), under READ COMMITTED, REPEATABLE READ and
//! SERIALIZABLE (where conflicts are 40001, never an over-admission),
//! unsharded and with 8 shards (the power of two choices with `FOR UPDATE
//! SKIP LOCKED`); and `rate_limit_all` over two limits from 8 connections
//! naming them in opposite orders never deadlocks and admits exactly the
//! capacity.

use postgres::IsolationLevel;
use rate_limiter_integration_tests::race::race_new_keys;
use rate_limiter_integration_tests::{hammer_until, portable, unique_name, REFUSALS_TO_STOP};
use std::time::Duration;

const DATABASE: &str = "rate_limiter_portable_concurrency";
const CONNECTIONS: usize = 16;
const HAMMER_FOR: Duration = Duration::from_secs(1);

fn url() -> String {
    format!(
        "{} dbname={DATABASE}",
        rate_limiter_integration_tests::test_env("RATE_LIMITER_TEST_URL")
    )
}

#[test]
fn sixteen_connections_admit_exactly_the_capacity_at_every_isolation_level() {
    let mut owner = portable::fresh_database(DATABASE, "postgres");
    for (kind, shards) in [
        ("fixed", 1),
        ("fixed", 8),
        ("sliding", 1),
        ("sliding", 8),
        ("calendar", 1),
    ] {
        for isolation in [
            IsolationLevel::ReadCommitted,
            IsolationLevel::RepeatableRead,
            IsolationLevel::Serializable,
        ] {
            let name = unique_name("portable_exact");
            let capacity = 240;
            // A calendar window of a year (docs/shapes.md): the test never
            // runs across the end of a window.
            let config = if kind == "calendar" {
                format!("rate_limiter.calendar_window({capacity}, 'year', 'America/New_York')")
            } else {
                format!(
                    "rate_limiter.{kind}_window({capacity}, '1 day', shards => {shards}, \
                     start => now() - interval '1 hour')"
                )
            };
            owner
                .execute(
                    &format!("SELECT rate_limiter.define($1, {config})"),
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
            eprintln!("{kind} window, {shards} shards, {isolation:?}: {tally:?}");
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
            // A fixed window stores what is left, a sliding window what it
            // admitted (docs/shapes.md).
            let recorded = if kind == "sliding" {
                capacity as f64
            } else {
                0.0
            };
            assert_eq!(
                total, recorded,
                "{kind} window, {shards} shards, {isolation:?}: recorded as admitted"
            );
        }
    }
}

/// A composite (docs/composites.md) of a fixed window of 240 and one of
/// 480: 16 connections calling its name admit exactly 240 at every
/// isolation level, and the larger member is charged only for those; on
/// the global key (the general path, 55_all.sql) and on a key (under READ
/// COMMITTED the composite's fast path, 56_composite.sql).
#[test]
fn a_composite_admits_exactly_its_tightest_member_at_every_isolation_level() {
    let mut owner = portable::fresh_database(&format!("{DATABASE}_composite"), "postgres");
    for isolation in [
        IsolationLevel::ReadCommitted,
        IsolationLevel::RepeatableRead,
        IsolationLevel::Serializable,
    ] {
        for key in [None, Some("k")] {
            let name = unique_name("portable_composite");
            let (small, large) = (format!("{name}_small"), format!("{name}_large"));
            owner
                .batch_execute(&format!(
                    "SELECT rate_limiter.define('{small}', rate_limiter.fixed_window(240, '1 day', start => now() - interval '1 hour'));
                     SELECT rate_limiter.define('{large}', rate_limiter.fixed_window(480, '1 day', start => now() - interval '1 hour'));
                     SELECT rate_limiter.define_all('{name}', ARRAY['{large}', '{small}']);"
                ))
                .expect("define the composite");
            let call = match key {
                None => "SELECT ok FROM rate_limiter.rate_limit($1)".to_string(),
                Some(key) => format!("SELECT ok FROM rate_limiter.rate_limit($1, '{key}')"),
            };
            let tally = hammer_until(
                &format!(
                    "{} dbname={DATABASE}_composite",
                    rate_limiter_integration_tests::test_env("RATE_LIMITER_TEST_URL")
                ),
                CONNECTIONS,
                HAMMER_FOR,
                &call,
                &name,
                isolation,
                REFUSALS_TO_STOP,
            );
            eprintln!("composite, {isolation:?}, key {key:?}: {tally:?}");
            assert_eq!(
                tally.admitted, 240,
                "{isolation:?}, key {key:?}: exactly the tightest member's"
            );
            for (member, left) in [(&small, 0.0), (&large, 240.0)] {
                let value: f64 = owner
                    .query_one(
                        "SELECT value FROM rate_limiter.rate_limits \
                         WHERE name = $1 AND key IS NOT DISTINCT FROM $2",
                        &[member, &key],
                    )
                    .expect("the stored state")
                    .get(0);
                assert_eq!(value, left, "{isolation:?}, key {key:?}: {member}");
            }
        }
    }
}

/// A composite's fast path (56_composite.sql) on new keys, raced from 4
/// sessions: one that finds a member's new row inserted first by another
/// takes the general path; every member ends with one row per key, its
/// consumption exactly the calls admitted.
#[test]
fn racing_composite_inserts_lose_nothing_and_duplicate_nothing() {
    let database = format!("{DATABASE}_race");
    let mut owner = portable::fresh_database(&database, "postgres");
    let name = unique_name("portable_race");
    let members = [format!("{name}_a"), format!("{name}_b")];
    for member in &members {
        owner
            .execute(
                "SELECT rate_limiter.define($1, \
                 rate_limiter.fixed_window(1000000, '1 day', start => '2000-01-01'))",
                &[member],
            )
            .expect("define a member");
    }
    owner
        .execute(
            "SELECT rate_limiter.define_all($1, ARRAY[$2, $3])",
            &[&name, &members[0], &members[1]],
        )
        .expect("define the composite");
    race_new_keys(
        &format!(
            "{} dbname={database}",
            rate_limiter_integration_tests::test_env("RATE_LIMITER_TEST_URL")
        ),
        &name,
        "rate_limiter.rate_limit($1, k.key)",
        &members,
    );
}

/// A composite of a and b (a token bucket of 100 each) in a database of
/// its own, called on key while another transaction holds b's row (a call
/// of b alone, after `setup`): the composite's call waits for it, the
/// holder commits, and the call, admitted, left the DEBUG notice `notice`,
/// a's state `a_left` and b's `b_left`, one row each.
fn call_while_b_is_held(
    database: &str,
    setup: &str,
    key: &str,
    notice: &str,
    a_left: f64,
    b_left: f64,
) {
    let mut owner = portable::fresh_database(database, "postgres");
    let name = unique_name(database);
    let (a, b) = (format!("{name}_a"), format!("{name}_b"));
    owner
        .batch_execute(&format!(
            "SELECT rate_limiter.define('{a}', rate_limiter.token_bucket(100, '1 day'));
             SELECT rate_limiter.define('{b}', rate_limiter.token_bucket(100, '1 day'));
             SELECT rate_limiter.define_all('{name}', ARRAY['{b}', '{a}']);
             {}",
            setup.replace("$name", &name)
        ))
        .expect("define the composite");
    let url = format!(
        "{} dbname={database}",
        rate_limiter_integration_tests::test_env("RATE_LIMITER_TEST_URL")
    );
    let mut holder = postgres::Client::connect(&url, postgres::NoTls).expect("connect");
    let mut holding = holder.transaction().expect("begin");
    holding
        .execute("SELECT rate_limiter.rate_limit($1, $2)", &[&b, &key])
        .expect("b's row, not yet committed");
    let notices = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
    let mut config: postgres::Config = url.parse().expect("the URL");
    let seen = notices.clone();
    config.notice_callback(move |notice| seen.lock().unwrap().push(notice.message().to_string()));
    let mut caller = config.connect(postgres::NoTls).expect("connect");
    caller
        .batch_execute("SET client_min_messages = debug1")
        .expect("debug notices");
    let caller_key = key.to_string();
    let waiting = std::thread::spawn(move || -> bool {
        caller
            .query_one(
                "SELECT ok FROM rate_limiter.rate_limit($1, $2)",
                &[&name, &caller_key],
            )
            .expect("the composite's call")
            .get(0)
    });
    // The composite's call writes a's row, then waits on b's.
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    loop {
        let waits: i64 = owner
            .query_one(
                "SELECT count(*) FROM pg_stat_activity \
                 WHERE datname = $1 AND wait_event_type = 'Lock'",
                &[&database],
            )
            .expect("pg_stat_activity")
            .get(0);
        if waits > 0 {
            break;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "the call never waited"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    holding.commit().expect("commit b's row");
    assert!(waiting.join().expect("the caller"), "admitted");
    assert!(
        notices
            .lock()
            .unwrap()
            .iter()
            .any(|seen| seen.contains(notice)),
        "no notice {notice:?}: {:?}",
        notices.lock().unwrap()
    );
    for (member, left) in [(&a, a_left), (&b, b_left)] {
        let rows = owner
            .query(
                "SELECT value FROM rate_limiter.rate_limits WHERE name = $1 AND key = $2",
                &[member, &key],
            )
            .expect("the stored state");
        assert_eq!(rows.len(), 1, "{member}: one row");
        let value: f64 = rows[0].get(0);
        assert!(
            (value - left).abs() < 0.01,
            "{member}: {value}, not {left} (a refill of at most a few tokens a second aside)"
        );
    }
}

/// The fast path inserts a composite's new rows one by one, in the lock
/// order; when another transaction inserted a later one first, the rows
/// it inserted are withdrawn (deleted) before the general path decides
/// again, so nothing is consumed twice: a composite of a and b called on a
/// new key while another transaction holds b's new row (inserted by a
/// call of b alone) waits for it, then leaves a charged once and b twice.
#[test]
fn a_composite_withdraws_its_new_rows_when_another_inserted_one_first() {
    call_while_b_is_held(
        &format!("{DATABASE}_withdraw"),
        "",
        "new",
        "inserted the same state row",
        99.0,
        98.0,
    );
}

/// When every member has a row, the fast path updates each only if it is
/// still the version read; a row changed meanwhile gives the rows updated
/// before it their states back before the general path decides again, so
/// nothing is consumed twice: a composite of a and b called on an existing
/// key while another transaction holds b's row (a call of b alone) updates
/// a, waits for b, then leaves a charged once and b twice.
#[test]
fn a_composite_gives_back_what_it_updated_when_a_row_changed_meanwhile() {
    call_while_b_is_held(
        &format!("{DATABASE}_give_back"),
        "SELECT rate_limiter.rate_limit('$name', 'old');",
        "old",
        "changed since the call read it",
        98.0,
        97.0,
    );
}

/// A composite's fast path (56_composite.sql) locks its members' rows in
/// the order rate_limit_all's general path does (55_all.sql), whatever the
/// order the members or the requests are named in: 4 connections calling
/// the composite of (b, a) and 4 calling rate_limit_all of (b, a) on the
/// same key never deadlock, and admit exactly the capacity.
#[test]
fn a_composite_and_rate_limit_all_never_deadlock() {
    let database = format!("{DATABASE}_order");
    let mut owner = portable::fresh_database(&database, "postgres");
    let name = unique_name("portable_order");
    let (a, b) = (format!("{name}_a"), format!("{name}_b"));
    owner
        .batch_execute(&format!(
            "SELECT rate_limiter.define('{a}', rate_limiter.fixed_window(120, '1 day', start => now() - interval '1 hour'));
             SELECT rate_limiter.define('{b}', rate_limiter.fixed_window(120, '1 day', start => now() - interval '1 hour'));
             SELECT rate_limiter.define_all('{name}', ARRAY['{b}', '{a}']);
             SELECT rate_limiter.rate_limit('{name}', 'k', count => 0);"
        ))
        .expect("define the composite and create its rows");
    let url = format!(
        "{} dbname={database}",
        rate_limiter_integration_tests::test_env("RATE_LIMITER_TEST_URL")
    );
    let composite = "SELECT ok FROM rate_limiter.rate_limit($1, 'k')".to_string();
    let all = format!(
        "SELECT bool_and(ok) FROM rate_limiter.rate_limit_all(\
         ARRAY[('{b}', 'k', 1, NULL), ('{a}', 'k', 1, NULL)]::rate_limiter.request[]) WHERE $1::text IS NOT NULL"
    );
    let (one, two) = std::thread::scope(|scope| {
        let one = scope.spawn(|| {
            hammer_until(
                &url,
                4,
                HAMMER_FOR,
                &composite,
                &name,
                IsolationLevel::ReadCommitted,
                1,
            )
        });
        let two = scope.spawn(|| {
            hammer_until(
                &url,
                4,
                HAMMER_FOR,
                &all,
                &name,
                IsolationLevel::ReadCommitted,
                1,
            )
        });
        (
            one.join().expect("composite"),
            two.join().expect("rate_limit_all"),
        )
    });
    eprintln!("composite {one:?}, rate_limit_all {two:?}");
    assert_eq!(one.admitted + two.admitted, 120, "exactly the capacity");
    for member in [&a, &b] {
        let value: f64 = owner
            .query_one(
                "SELECT value FROM rate_limiter.rate_limits WHERE name = $1 AND key = 'k'",
                &[member],
            )
            .expect("stored")
            .get(0);
        assert_eq!(value, 0.0, "{member}");
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

/// A shard row that another open transaction has inserted is invisible to
/// SQL, so it looks free; inserting it would wait for that transaction,
/// and two calls inserting in opposite orders would deadlock. The
/// portable edition marks a new shard row with an advisory lock while its
/// transaction is open and passes over a shard so marked, as the native
/// extension passes over it (docs/guarantees.md, sharded limits: a busy
/// shard is passed over, and two calls never deadlock).
#[test]
fn a_shard_row_being_inserted_is_passed_over_and_calls_never_deadlock() {
    let mut owner = portable::fresh_database(DATABASE, "postgres");
    let name = unique_name("portable_new_rows");
    owner
        .execute(
            "SELECT rate_limiter.define($1, rate_limiter.token_bucket(80, '1 hour', shards => 8))",
            &[&name],
        )
        .expect("define the limit");
    // A inserts shard rows of key k and stays open; B (another draw of
    // shards) must not wait for it.
    let mut a = postgres::Client::connect(&url(), postgres::NoTls).expect("connect");
    let mut b = postgres::Client::connect(&url(), postgres::NoTls).expect("connect");
    let mut open = a.transaction().expect("begin");
    open.batch_execute("SET rate_limiter.random_seed = 29")
        .unwrap();
    let ok: bool = open
        .query_one(
            "SELECT ok FROM rate_limiter.rate_limit($1, 'k', 5)",
            &[&name],
        )
        .expect("A consumes")
        .get(0);
    assert!(ok);
    b.batch_execute("SET lock_timeout = '2s'; SET rate_limiter.random_seed = 40")
        .unwrap();
    let started = std::time::Instant::now();
    let ok: bool = b
        .query_one(
            "SELECT ok FROM rate_limiter.rate_limit($1, 'k', 5)",
            &[&name],
        )
        .unwrap_or_else(|e| panic!("B waited for A's new rows: {e}"))
        .get(0);
    assert!(ok, "B is admitted from the shards A does not hold");
    assert!(
        started.elapsed() < Duration::from_secs(1),
        "B answered without waiting for A: {:?}",
        started.elapsed()
    );
    open.rollback().unwrap();
    // Twelve connections, one call per transaction, on keys whose shard
    // rows are new: never a deadlock or a lock timeout (hammer_until fails
    // on any error but 40001).
    let name = unique_name("portable_new_rows_many");
    owner
        .execute(
            "SELECT rate_limiter.define($1, rate_limiter.token_bucket(16, '1 hour', shards => 8))",
            &[&name],
        )
        .expect("define the limit");
    let tally = hammer_until(
        &url(),
        12,
        Duration::from_secs(4),
        "SELECT ok FROM rate_limiter.rate_limit($1, (pg_catalog.random() * 30)::int::text)",
        &name,
        IsolationLevel::ReadCommitted,
        1,
    );
    eprintln!("12 connections on new shard rows: {tally:?}");
    assert!(tally.admitted > 0 && tally.refused > 0, "{tally:?}");
}
