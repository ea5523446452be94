//! What a client driver sees: the SQLSTATE and JSON DETAIL of throws,
//! the result columns, and that errors leave the connection usable.

use postgres::error::SqlState;
use rate_limiter_integration_tests::{connect, unique_name};

#[test]
fn throws_raises_rl429_with_a_json_detail() {
    let mut client = connect();
    let name = unique_name("throws");
    client
        .batch_execute("SET rate_limiter.now_override = '2026-01-01 00:00:00+00'")
        .unwrap();
    let config = "rate_limiter.token_bucket(3, '1 second', capacity => 1)";
    let sql = format!(
        "SELECT ok FROM rate_limiter.rate_limit($1, $2, throws => true, config => {config})"
    );
    let key = Some("user-7");
    assert!(client
        .query_one(&sql, &[&name, &key])
        .unwrap()
        .get::<_, bool>(0));
    let error = client.query_one(&sql, &[&name, &key]).unwrap_err();
    let db = error.as_db_error().expect("a server error");
    assert_eq!(db.code().code(), "RL429");
    assert!(
        db.message().contains(&name) && db.message().contains("user-7"),
        "{}",
        db.message()
    );
    let detail: serde_json::Value = serde_json::from_str(db.detail().unwrap()).unwrap();
    assert_eq!(detail["name"], name.as_str());
    assert_eq!(detail["key"], "user-7");
    // 1 token at 3 per second: 333333.33 us, rounded up to 333334 us.
    let retry_after_ms = detail["retry_after_ms"].as_f64().unwrap();
    assert!(retry_after_ms >= 1000.0 / 3.0, "{retry_after_ms}");
    assert_eq!(retry_after_ms, 333.334);

    // The global limit: key is JSON null. And a settable SQLSTATE.
    client
        .batch_execute("SET rate_limiter.sqlstate = 'PT429'")
        .unwrap();
    let global: Option<&str> = None;
    client.query_one(&sql, &[&name, &global]).unwrap();
    let error = client.query_one(&sql, &[&name, &global]).unwrap_err();
    let db = error.as_db_error().unwrap();
    assert_eq!(db.code().code(), "PT429");
    let detail: serde_json::Value = serde_json::from_str(db.detail().unwrap()).unwrap();
    assert!(detail["key"].is_null());

    // The connection is still usable.
    assert_eq!(
        client.query_one("SELECT 1", &[]).unwrap().get::<_, i32>(0),
        1
    );
}

#[test]
fn result_columns_have_the_documented_types() {
    let mut client = connect();
    let name = unique_name("columns");
    client
        .batch_execute("SET rate_limiter.now_override = '2026-01-01 00:00:00+00'")
        .unwrap();
    let sql = "SELECT ok, extract(epoch FROM retry_after)::float8, remaining \
               FROM rate_limiter.rate_limit($1, count => $2, config => rate_limiter.token_bucket(10, '1 minute'))";
    let row = client.query_one(sql, &[&name, &10.0f64]).unwrap();
    assert!(row.get::<_, bool>(0));
    assert_eq!(row.get::<_, Option<f64>>(1), None);
    assert_eq!(row.get::<_, f64>(2), 0.0);
    let row = client.query_one(sql, &[&name, &2.0f64]).unwrap();
    assert!(!row.get::<_, bool>(0));
    assert_eq!(row.get::<_, Option<f64>>(1), Some(12.0));
}

#[test]
fn errors_carry_standard_sqlstates_and_the_backend_survives() {
    let mut client = connect();
    let cases: &[(&str, SqlState)] = &[
        ("SELECT * FROM rate_limiter.rate_limit(NULL)", SqlState::NULL_VALUE_NOT_ALLOWED),
        ("SELECT * FROM rate_limiter.rate_limit('no such limit anywhere')", SqlState::UNDEFINED_OBJECT),
        ("SELECT rate_limiter.token_bucket('NaN', '1 minute')", SqlState::INVALID_PARAMETER_VALUE),
        ("SELECT rate_limiter.token_bucket(1, '1 minute', shards => 32768)", SqlState::INVALID_PARAMETER_VALUE),
        (
            "SELECT * FROM rate_limiter.rate_limit('x', count => 1e308, config => rate_limiter.token_bucket(1, '1 minute'))",
            SqlState::INVALID_PARAMETER_VALUE,
        ),
        (
            "SELECT * FROM rate_limiter.rate_limit('x', count => 1e308, reserve => true, config => rate_limiter.token_bucket(1e-300, '1 microsecond', capacity => 0))",
            SqlState::NUMERIC_VALUE_OUT_OF_RANGE,
        ),
    ];
    for (sql, expected) in cases {
        let error = client.query(*sql, &[]).unwrap_err();
        assert_eq!(error.code(), Some(expected), "{sql}: {error:?}");
        assert_eq!(
            client.query_one("SELECT 1", &[]).unwrap().get::<_, i32>(0),
            1,
            "after {sql}"
        );
    }
}
