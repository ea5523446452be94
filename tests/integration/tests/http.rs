//! `rate_limiter.http_headers()` against an RFC 9651 structured-field
//! parser (the `sfv` crate), not a regex: `RateLimit-Policy` and
//! `RateLimit` parse as lists of one item, a string naming the limit, with
//! the draft-10 parameters (q, w; r, t) of the right types and values;
//! `Retry-After` is a whole number of seconds; seconds are rounded up.

use rate_limiter_integration_tests::connect;
use serde_json::Value;
use sfv::{BareItem, List, ListEntry, Parser};

/// The one item of a structured-field list: (string, parameters by name).
fn item(field: &str) -> (String, Vec<(String, BareItem)>) {
    let list: List = Parser::new(field)
        .parse()
        .unwrap_or_else(|e| panic!("{field:?} is not a structured-field list: {e}"));
    assert_eq!(list.len(), 1, "{field}");
    let ListEntry::Item(item) = &list[0] else {
        panic!("{field}: not an item")
    };
    let name = match &item.bare_item {
        BareItem::String(name) => name.as_str().to_string(),
        other => panic!("{field}: the item is {other:?}, not a string"),
    };
    let params = item
        .params
        .iter()
        .map(|(key, value)| (key.as_str().to_string(), value.clone()))
        .collect();
    (name, params)
}

fn integer(params: &[(String, BareItem)], key: &str) -> i64 {
    let value = params
        .iter()
        .find(|(name, _)| name == key)
        .unwrap_or_else(|| panic!("no {key} in {params:?}"));
    match &value.1 {
        BareItem::Integer(integer) => i64::from(*integer),
        other => panic!("{key} is {other:?}, not an integer"),
    }
}

/// The headers `call` (an http_headers call) returns, parsed.
fn headers(client: &mut postgres::Client, call: &str) -> serde_json::Map<String, Value> {
    let sql = format!("SELECT ({call})::text");
    let row = client
        .query_one(&sql, &[])
        .unwrap_or_else(|e| panic!("{sql}: {e}"));
    let Ok(Value::Object(headers)) = serde_json::from_str::<Value>(row.get(0)) else {
        panic!("not a JSON object")
    };
    headers
}

fn field<'a>(headers: &'a serde_json::Map<String, Value>, name: &str) -> &'a str {
    headers[name]
        .as_str()
        .unwrap_or_else(|| panic!("{name} is not a string"))
}

#[test]
fn headers_are_structured_field_lists_with_the_draft_parameters() {
    let mut client = connect();
    client
        .batch_execute("SET rate_limiter.now_override = '2026-01-01 00:00:00+00'")
        .unwrap();
    let name = r#"api "v2" \ quoted"#;
    let config = "rate_limiter.token_bucket(10, '1 minute', capacity => 3)";
    // Two calls leave one token; full again after 2 x 6 s.
    for _ in 0..2 {
        client
            .query_one(
                &format!("SELECT ok FROM rate_limiter.rate_limit($1, 'k', config => {config})"),
                &[&name],
            )
            .unwrap();
    }
    let escaped = name.replace('\'', "''");
    let admitted = headers(
        &mut client,
        &format!(
            "rate_limiter.http_headers('{escaped}', 'k', true, NULL, 1.7, config => {config})"
        ),
    );
    let (policy_name, policy) = item(field(&admitted, "RateLimit-Policy"));
    assert_eq!(policy_name, name);
    assert_eq!(integer(&policy, "q"), 10);
    assert_eq!(integer(&policy, "w"), 60);
    let (limit_name, limit) = item(field(&admitted, "RateLimit"));
    assert_eq!(limit_name, name);
    assert_eq!(integer(&limit, "r"), 1, "floor of the remaining tokens");
    assert_eq!(integer(&limit, "t"), 12);
    assert!(!admitted.contains_key("Retry-After"));

    // Refused: t and Retry-After are the retry_after, rounded up.
    let refused = headers(
        &mut client,
        &format!("rate_limiter.http_headers('{escaped}', 'k', false, '4.2 seconds', -3, config => {config})"),
    );
    let (_, limit) = item(field(&refused, "RateLimit"));
    assert_eq!(integer(&limit, "r"), 0, "debt shows as nothing left");
    assert_eq!(integer(&limit, "t"), 5);
    let retry: sfv::Item = Parser::new(field(&refused, "Retry-After")).parse().unwrap();
    assert_eq!(retry.bare_item, BareItem::Integer(5.into()));

    // A fractional quota is a decimal; a huge one is capped to a valid integer.
    let fractional = headers(
        &mut client,
        "rate_limiter.http_headers('f', config => rate_limiter.token_bucket(2.5, '90 seconds'))",
    );
    let (_, policy) = item(field(&fractional, "RateLimit-Policy"));
    let q = policy.iter().find(|(key, _)| key == "q").unwrap();
    assert!(
        matches!(q.1, BareItem::Decimal(d) if f64::from(d) == 2.5),
        "{q:?}"
    );
    assert_eq!(integer(&policy, "w"), 90);
    let huge = headers(
        &mut client,
        "rate_limiter.http_headers('h', remaining => 1e300, config => rate_limiter.token_bucket(1e300, '1 second'))",
    );
    for field_name in ["RateLimit-Policy", "RateLimit"] {
        item(field(&huge, field_name));
    }
    client
        .query_one("SELECT rate_limiter.rate_reset($1, 'k')", &[&name])
        .unwrap();
}
