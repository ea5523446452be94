//! amcheck after the rest of the suite: the extension writes heap and index
//! pages itself, so after the crash test, the concurrency and shard tests,
//! the re-creations and the statistics restarts, PostgreSQL's own checker
//! must find nothing wrong in any database that holds the state table:
//! `verify_heapam` reports no corruption, and `bt_index_check` with
//! `heapallindexed` finds every heap tuple in the unique index.
//!
//! Ignored in a plain `cargo test`: scripts/test.sh runs it after every
//! other test (`--ignored`), on the server they used.

use postgres::{Client, NoTls};
use rate_limiter_integration_tests::test_env;

#[test]
#[ignore = "run by scripts/test.sh after the other tests"]
fn the_state_tables_pass_amcheck() {
    let base = test_env("RATE_LIMITER_TEST_URL");
    let mut server = Client::connect(&base, NoTls).expect("connect");
    let databases: Vec<String> = server
        .query(
            "SELECT datname FROM pg_database WHERE datallowconn ORDER BY datname",
            &[],
        )
        .expect("databases")
        .iter()
        .map(|row| row.get(0))
        .collect();
    let mut checked = Vec::new();
    for database in databases {
        let mut client = Client::connect(&format!("{base} dbname={database}"), NoTls)
            .expect("connect to the database");
        let installed: bool = client
            .query_one(
                "SELECT EXISTS (SELECT FROM pg_extension WHERE extname = 'rate_limiter')",
                &[],
            )
            .expect("pg_extension")
            .get(0);
        if !installed {
            continue;
        }
        client
            .batch_execute("CREATE EXTENSION IF NOT EXISTS amcheck")
            .expect("create amcheck");
        let rows: i64 = client
            .query_one("SELECT count(*) FROM rate_limiter.rate_limits", &[])
            .expect("count")
            .get(0);
        let corruption: Vec<String> = client
            .query(
                "SELECT format('block %s, offset %s: %s', blkno, offnum, msg)
                 FROM verify_heapam('rate_limiter.rate_limits', check_toast => true)",
                &[],
            )
            .expect("verify_heapam")
            .iter()
            .map(|row| row.get(0))
            .collect();
        assert!(corruption.is_empty(), "{database}: {corruption:#?}");
        for index in [
            "rate_limiter.rate_limits_name_key_shard_key",
            "rate_limiter.definitions_pkey",
        ] {
            client
                .execute(
                    "SELECT bt_index_check($1::text::regclass, heapallindexed => true)",
                    &[&index],
                )
                .unwrap_or_else(|error| panic!("{database}: bt_index_check({index}): {error}"));
        }
        client
            .batch_execute("DROP EXTENSION amcheck")
            .expect("drop amcheck");
        println!("{database}: {rows} state rows, no corruption");
        checked.push(database);
    }
    assert!(!checked.is_empty(), "no database held the extension");
}
