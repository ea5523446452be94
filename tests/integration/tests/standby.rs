//! A real hot standby: a streaming replica that scripts/test.sh starts with
//! `pg_basebackup -R` (connection string in `RATE_LIMITER_TEST_STANDBY_URL`).
//! `rate_check`, `status` and `http_headers` answer there from the
//! replicated state; every consuming function fails with 25006
//! (read_only_sql_transaction); `postgrest_limit` only sets the headers.

use postgres::error::SqlState;
use postgres::{Client, NoTls};
use rate_limiter_integration_tests::{connect, unique_name, DATABASE};
use std::time::{Duration, Instant};

const NOW: &str = "SET rate_limiter.now_override = '2026-01-01 00:00:00+00'";

/// A connection to the test database on the standby (which exists there
/// once the standby has replayed its creation).
fn standby() -> Result<Client, postgres::Error> {
    let url = std::env::var("RATE_LIMITER_TEST_STANDBY_URL").unwrap_or_else(|_| {
        panic!("RATE_LIMITER_TEST_STANDBY_URL is not set: run the integration tests through scripts/test.sh")
    });
    Client::connect(&format!("{url} dbname={DATABASE}"), NoTls)
}

/// Waits until the standby has replayed everything the primary has written.
fn wait_for_replay(primary: &mut Client) -> Client {
    let lsn: String = primary
        .query_one("SELECT pg_current_wal_lsn()::text", &[])
        .unwrap()
        .get(0);
    let started = Instant::now();
    loop {
        if let Ok(mut client) = standby() {
            let replayed: bool = client
                .query_one(
                    "SELECT pg_last_wal_replay_lsn() >= $1::text::pg_lsn",
                    &[&lsn],
                )
                .unwrap()
                .get(0);
            if replayed {
                return client;
            }
        }
        assert!(
            started.elapsed() < Duration::from_secs(60),
            "the standby did not replay {lsn}"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

#[test]
fn reads_answer_and_consuming_functions_fail_with_25006() {
    let mut primary = connect();
    primary.batch_execute(NOW).unwrap();
    let name = unique_name("standby");
    primary
        .execute(
            "SELECT rate_limiter.define($1, rate_limiter.token_bucket(10, '1 minute'))",
            &[&name],
        )
        .unwrap();
    let remaining: f64 = primary
        .query_one(
            "SELECT remaining FROM rate_limiter.rate_limit($1, 'k', 3)",
            &[&name],
        )
        .unwrap()
        .get(0);
    assert_eq!(remaining, 7.0);

    let mut replica = wait_for_replay(&mut primary);
    let in_recovery: bool = replica
        .query_one("SELECT pg_is_in_recovery()", &[])
        .unwrap()
        .get(0);
    assert!(in_recovery, "not a standby");
    replica.batch_execute(NOW).unwrap();

    // The replicated state answers.
    let row = replica
        .query_one(
            "SELECT ok, remaining FROM rate_limiter.rate_check($1, 'k', 5)",
            &[&name],
        )
        .unwrap();
    assert!(row.get::<_, bool>(0));
    assert_eq!(row.get::<_, f64>(1), 2.0);
    let row = replica
        .query_one(
            "SELECT ok, retry_after IS NOT NULL FROM rate_limiter.rate_check($1, 'k', 8)",
            &[&name],
        )
        .unwrap();
    assert!(!row.get::<_, bool>(0));
    assert!(row.get::<_, bool>(1));
    let value: f64 = replica
        .query_one("SELECT value FROM rate_limiter.status($1, 'k')", &[&name])
        .unwrap()
        .get(0);
    assert_eq!(value, 7.0);
    let headers: String = replica
        .query_one("SELECT rate_limiter.http_headers($1, 'k')::text", &[&name])
        .unwrap()
        .get(0);
    assert!(headers.contains("r=7"), "{headers}");

    // Everything that writes fails with 25006 and changes nothing.
    let consuming = [
        "SELECT * FROM rate_limiter.rate_limit($1, 'k')",
        "SELECT * FROM rate_limiter.rate_limit_all(ARRAY[ROW($1, 'k', 1, NULL)]::rate_limiter.request[])",
        "SELECT rate_limiter.rate_credit($1, 'k', 1)",
        "SELECT * FROM rate_limiter.rate_wait($1, 'k', 1)",
        "SELECT rate_limiter.rate_reset($1, 'k')",
        "SELECT rate_limiter.define($1, rate_limiter.token_bucket(1, '1 second'))",
        "SELECT rate_limiter.undefine($1)",
    ];
    for sql in consuming {
        let error = replica.query(sql, &[&name]).unwrap_err();
        assert_eq!(
            error.code(),
            Some(&SqlState::READ_ONLY_SQL_TRANSACTION),
            "{sql}: {error}"
        );
    }
    let error = replica
        .query("SELECT rate_limiter.prune()", &[])
        .unwrap_err();
    assert_eq!(
        error.code(),
        Some(&SqlState::READ_ONLY_SQL_TRANSACTION),
        "{error}"
    );

    // postgrest_limit runs read-only there, as for a GET: headers only.
    let mut transaction = replica.transaction().unwrap();
    transaction
        .execute("SELECT rate_limiter.postgrest_limit($1, 'k')", &[&name])
        .unwrap();
    let headers: String = transaction
        .query_one("SELECT current_setting('response.headers')", &[])
        .unwrap()
        .get(0);
    assert!(headers.contains("r=7"), "{headers}");
    transaction.commit().unwrap();

    let value: f64 = replica
        .query_one("SELECT value FROM rate_limiter.status($1, 'k')", &[&name])
        .unwrap()
        .get(0);
    assert_eq!(value, 7.0);
}
