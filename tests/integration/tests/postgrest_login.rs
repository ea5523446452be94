//! The README's PostgREST login recipe, run as written: wrong passwords are
//! throttled too, because the function answers them with
//! `response.status` = 401 instead of raising (an error would roll the
//! consumption back). Each request runs as PostgREST runs it: a
//! transaction as `web_anon`, the function, then the response settings
//! read back.

use postgres::Client;
use rate_limiter_integration_tests::{fresh_database, readme_sql};

const DATABASE: &str = "rate_limiter_postgrest_login";

/// One "request": calls api.login as web_anon in its own transaction and
/// returns (response.status, the JSON body's message).
fn login(client: &mut Client, email: &str, password: &str) -> (String, String) {
    let mut transaction = client.transaction().unwrap();
    transaction
        .batch_execute("SET LOCAL ROLE web_anon")
        .unwrap();
    let body: serde_json::Value = transaction
        .query_one("SELECT api.login($1, $2)::text", &[&email, &password])
        .map(|row| serde_json::from_str(row.get::<_, &str>(0)).unwrap())
        .unwrap();
    let status: String = transaction
        .query_one(
            "SELECT coalesce(current_setting('response.status', true), '200')",
            &[],
        )
        .unwrap()
        .get(0);
    transaction.commit().unwrap();
    (
        status,
        body["message"].as_str().unwrap_or_default().to_string(),
    )
}

#[test]
fn wrong_passwords_are_throttled_without_raising() {
    let mut client = fresh_database(DATABASE);
    client
        .batch_execute("DROP ROLE IF EXISTS web_anon; CREATE ROLE web_anon NOLOGIN;")
        .unwrap();
    client
        .batch_execute(&readme_sql("postgrest_login"))
        .expect("the README's login recipe runs as written");
    client
        .batch_execute(
            "SET rate_limiter.now_override = '2026-01-01 00:00:00+00';
             INSERT INTO api_private.users VALUES ('bob@example.com', public.crypt('right', public.gen_salt('bf')));",
        )
        .unwrap();
    assert_eq!(
        login(&mut client, "bob@example.com", "right"),
        ("200".to_string(), "welcome".to_string())
    );
    for _ in 0..4 {
        let (status, _) = login(&mut client, "Bob@example.com", "wrong");
        assert_eq!(status, "401");
    }
    // Five attempts in 15 minutes, the wrong ones counted: the sixth is
    // refused even with the right password.
    let (status, message) = login(&mut client, "bob@example.com", "right");
    assert_eq!(status, "429", "{message}");
    let value: f64 = client
        .query_one(
            "SELECT value FROM rate_limiter.rate_limits WHERE name = 'login' AND key = 'bob@example.com'",
            &[],
        )
        .unwrap()
        .get(0);
    assert_eq!(value, 0.0);
    drop(client);
    let base = std::env::var("RATE_LIMITER_TEST_URL").unwrap();
    let mut admin = Client::connect(&base, postgres::NoTls).unwrap();
    admin
        .batch_execute(&format!("DROP DATABASE {DATABASE} WITH (FORCE)"))
        .unwrap();
    admin.batch_execute("DROP ROLE web_anon").unwrap();
}
