//! The extension is trusted: a database owner who is not a superuser can
//! install it, define limits, and grant an application role the right to
//! use them; that role still has no access to the tables.

use postgres::{Client, NoTls};

fn connect_as(user: &str, database: &str) -> Client {
    let base = std::env::var("RATE_LIMITER_TEST_URL")
        .expect("RATE_LIMITER_TEST_URL is not set: run the tests through scripts/test.sh");
    Client::connect(&format!("{base} user={user} dbname={database}"), NoTls)
        .unwrap_or_else(|e| panic!("connect as {user}: {e}"))
}

#[test]
fn a_database_owner_who_is_not_superuser_can_install_and_grant_it() {
    let mut admin = connect_as("postgres", "postgres");
    // One statement per call: DROP DATABASE cannot run in the implicit
    // transaction of a multi-statement message.
    for sql in [
        "DROP DATABASE IF EXISTS rate_limiter_trusted",
        "DROP ROLE IF EXISTS rate_limiter_owner",
        "DROP ROLE IF EXISTS rate_limiter_app",
        "CREATE ROLE rate_limiter_owner LOGIN",
        "CREATE ROLE rate_limiter_app LOGIN",
    ] {
        admin.batch_execute(sql).unwrap();
    }
    admin
        .batch_execute("CREATE DATABASE rate_limiter_trusted OWNER rate_limiter_owner")
        .unwrap();

    let mut owner = connect_as("rate_limiter_owner", "rate_limiter_trusted");
    let superuser: bool = owner
        .query_one(
            "SELECT rolsuper FROM pg_roles WHERE rolname = current_user",
            &[],
        )
        .unwrap()
        .get(0);
    assert!(!superuser);
    owner
        .batch_execute(
            "CREATE EXTENSION rate_limiter;
             SELECT rate_limiter.define('signup', rate_limiter.token_bucket(1, '1 hour'));
             GRANT USAGE ON SCHEMA rate_limiter TO rate_limiter_app;
             GRANT EXECUTE ON FUNCTION
                 rate_limiter.rate_limit(text, text, float8, boolean, boolean, rate_limiter.config)
             TO rate_limiter_app;",
        )
        .expect("a database owner installs the extension and grants it");

    let mut app = connect_as("rate_limiter_app", "rate_limiter_trusted");
    let sql = "SELECT ok FROM rate_limiter.rate_limit('signup', 'k')";
    assert!(app.query_one(sql, &[]).unwrap().get::<_, bool>(0));
    assert!(
        !app.query_one(sql, &[]).unwrap().get::<_, bool>(0),
        "the second call in the hour is refused"
    );
    for denied in [
        "SELECT * FROM rate_limiter.rate_limits",
        "SELECT rate_limiter.rate_reset('signup', 'k')",
    ] {
        let error = app.query(denied, &[]).unwrap_err();
        assert_eq!(
            error.code(),
            Some(&postgres::error::SqlState::INSUFFICIENT_PRIVILEGE),
            "{denied}"
        );
    }

    drop((owner, app));
    for sql in [
        "DROP DATABASE rate_limiter_trusted WITH (FORCE)",
        "DROP ROLE rate_limiter_owner",
        "DROP ROLE rate_limiter_app",
    ] {
        admin.batch_execute(sql).unwrap();
    }
}
