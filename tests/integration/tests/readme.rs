//! The README's first example, run exactly as written (the block between
//! `<!-- first-example:begin -->` and `<!-- first-example:end -->`) in a new
//! database without the extension, as a new user would paste it: it
//! creates the extension, defines the limit it calls, and its transaction
//! sends the message; what its comments claim then holds (the eleventh
//! message of the minute is refused, with a retry_after).

use postgres::{Client, NoTls};
use rate_limiter_integration_tests::{drop_database, readme_sql, test_env};

const DATABASE: &str = "rate_limiter_readme";

#[test]
fn the_first_example_works_as_written_in_a_new_database() {
    drop_database(DATABASE);
    let base = test_env("RATE_LIMITER_TEST_URL");
    Client::connect(&base, NoTls)
        .expect("connect to the test server")
        .batch_execute(&format!("CREATE DATABASE {DATABASE}"))
        .expect("create the database");
    let mut client =
        Client::connect(&format!("{base} dbname={DATABASE}"), NoTls).expect("connect to it");
    let example = readme_sql("first-example");
    assert!(example.contains("CREATE EXTENSION rate_limiter"));
    client
        .batch_execute(&example)
        .expect("the README's first example runs as written");
    let sent: i64 = client
        .query_one("SELECT count(*) FROM messages WHERE sender = 42", &[])
        .expect("the message")
        .get(0);
    assert_eq!(sent, 1, "the message was sent");
    // 10 a minute: 9 more go, the eleventh is refused with a retry_after.
    for _ in 0..9 {
        let ok: bool = client
            .query_one(
                "SELECT ok FROM rate_limiter.rate_limit('send_message', key => '42')",
                &[],
            )
            .expect("rate_limit")
            .get(0);
        assert!(ok);
    }
    let row = client
        .query_one(
            "SELECT ok, retry_after IS NOT NULL FROM rate_limiter.rate_limit('send_message', key => '42')",
            &[],
        )
        .expect("rate_limit");
    assert_eq!(
        (row.get::<_, bool>(0), row.get::<_, bool>(1)),
        (false, true)
    );
    drop(client);
    drop_database(DATABASE);
}
