//! The functions other than `rate_limit` reach the row where it lives:
//! `status`, `http_headers`, `postgrest_limit`, `rate_credit`, `rate_wait`,
//! and the calling node's `now_override` in every delegated call.

use super::*;

#[test]
#[ignore = "needs the Citus cluster of scripts/test.sh"]
fn status_http_headers_and_postgrest_limit_read_the_row_where_it_lives() {
    make_distributed();
    forget("status");
    let urls = urls();
    let mut coordinator = coordinator();
    coordinator
        .batch_execute(
            "SELECT rate_limiter.define('status', rate_limiter.token_bucket(10, '1000 days')); \
             SELECT rate_limiter.define('status-sharded', rate_limiter.token_bucket(80, '1000 days', shards => 8))",
        )
        .expect("define");
    let (one, two) = keys_on_each_worker(&mut coordinator, "status-");
    coordinator
        .execute(
            "SELECT * FROM rate_limiter.rate_limit('status', $1, 3)",
            &[&one],
        )
        .expect("rate_limit");
    coordinator
        .execute(
            "SELECT * FROM rate_limiter.rate_limit('status-sharded', $1)",
            &[&two],
        )
        .expect("rate_limit");
    for (node, url) in urls.iter().enumerate() {
        let mut client = connect(url);
        for (name, key, value, capacity, shards) in [
            ("status", &one, 7.0, 10.0, 1),
            ("status", &two, 10.0, 10.0, 1),
            ("status-sharded", &two, 79.0, 80.0, 8),
        ] {
            let row = client
                .query_one(
                    "SELECT round(value::numeric, 3)::float8, capacity, shards \
                     FROM rate_limiter.status($1, $2)",
                    &[&name, key],
                )
                .unwrap_or_else(|error| panic!("status({name}, {key}) on node {node}: {error}"));
            assert_eq!(
                (
                    row.get::<_, f64>(0),
                    row.get::<_, f64>(1),
                    row.get::<_, i32>(2)
                ),
                (value, capacity, shards),
                "status({name}, {key}) on node {node}"
            );
        }
        let headers: String = client
            .query_one(
                "SELECT rate_limiter.http_headers('status', $1)->>'RateLimit'",
                &[&one],
            )
            .expect("http_headers")
            .get(0);
        assert!(
            headers.starts_with("\"status\";r=7;"),
            "node {node}: {headers}"
        );
    }
    // PostgREST: a GET (read-only) reports, a POST consumes and reports.
    let mut client = connect(&urls[0]);
    for (read_only, remaining) in [(true, 7), (false, 6)] {
        let mut transaction = client
            .build_transaction()
            .read_only(read_only)
            .start()
            .expect("begin");
        transaction
            .execute("SELECT rate_limiter.postgrest_limit('status', $1)", &[&one])
            .expect("postgrest_limit");
        let headers: String = transaction
            .query_one("SELECT current_setting('response.headers')", &[])
            .expect("response.headers")
            .get(0);
        assert!(
            headers.contains(&format!("status\\\";r={remaining};t=")),
            "read only {read_only}: {headers}"
        );
        transaction.commit().expect("commit");
    }
    assert_eq!(stored(&mut coordinator, "status", &one), Some(6.0));
    // A global limit with several shards: its shards spread over both
    // workers, and status, rate_check and http_headers read every one of
    // them from any node.
    let nodes = shard_nodes(&mut coordinator, "status-sharded", 8);
    assert!(nodes.contains(&1) && nodes.contains(&2), "{nodes:?}");
    for url in &urls {
        let mut client = connect(url);
        for _ in 0..5 {
            assert!(consume(&mut client, "status-sharded", None));
        }
    }
    let values = shard_values(&mut coordinator, "status-sharded", 8);
    let used: Vec<usize> = (0..8).filter(|shard| values[*shard].is_some()).collect();
    assert!(
        used.iter().any(|shard| nodes[*shard] == 1) && used.iter().any(|shard| nodes[*shard] == 2),
        "calls consumed on both workers: {values:?} on {nodes:?}"
    );
    for (node, url) in urls.iter().enumerate() {
        let mut client = connect(url);
        let row = client
            .query_one(
                "SELECT round(value::numeric, 3)::float8, capacity, shards                  FROM rate_limiter.status('status-sharded')",
                &[],
            )
            .unwrap_or_else(|error| panic!("status on node {node}: {error}"));
        assert_eq!(
            (
                row.get::<_, f64>(0),
                row.get::<_, f64>(1),
                row.get::<_, i32>(2)
            ),
            (65.0, 80.0, 8),
            "status of the sharded global limit on node {node}"
        );
        let check = client
            .query_one(
                "SELECT ok, round(remaining::numeric, 3)::float8 FROM rate_limiter.rate_check('status-sharded')",
                &[],
            )
            .unwrap_or_else(|error| panic!("rate_check on node {node}: {error}"));
        assert!(check.get::<_, bool>(0));
        assert_eq!(
            check.get::<_, f64>(1),
            64.0,
            "rate_check's remaining: the sum over every shard, after the call"
        );
        let headers: String = client
            .query_one(
                "SELECT rate_limiter.http_headers('status-sharded')->>'RateLimit'",
                &[],
            )
            .expect("http_headers")
            .get(0);
        assert!(
            headers.starts_with("\"status-sharded\";r=65;"),
            "node {node}: {headers}"
        );
    }
    // Nothing written by them.
    assert_eq!(shard_values(&mut coordinator, "status-sharded", 8), values);
    forget("status");
}

#[test]
#[ignore = "needs the Citus cluster of scripts/test.sh"]
fn rate_credit_reaches_the_row_where_it_lives_inside_the_transaction() {
    make_distributed();
    forget("credit");
    let urls = urls();
    let (mut client, notices) = connect_with_notices(&urls[0]);
    define(&mut client, "credit", 10.0);
    let (one, two) = keys_on_each_worker(&mut client, "credit-");
    for key in [&one, &two] {
        client
            .execute(
                "SELECT * FROM rate_limiter.rate_limit('credit', $1, 5)",
                &[key],
            )
            .expect("rate_limit");
    }
    let credit = |client: &mut postgres::Transaction<'_>, key: &str, count: f64| -> f64 {
        client
            .query_one(
                "SELECT rate_limiter.rate_credit('credit', $1, $2)",
                &[&key, &count],
            )
            .expect("rate_credit")
            .get(0)
    };
    // Rolled back: nothing credited on either worker.
    let mut transaction = client.transaction().expect("begin");
    assert_eq!(credit(&mut transaction, &one, 2.0).round(), 7.0);
    assert_eq!(credit(&mut transaction, &two, 3.0).round(), 8.0);
    transaction.rollback().expect("rollback");
    assert_eq!(stored(&mut client, "credit", &one), Some(5.0));
    assert_eq!(stored(&mut client, "credit", &two), Some(5.0));
    // Committed: both, with two-phase commit.
    client
        .batch_execute("SET citus.log_remote_commands = on")
        .expect("log remote commands");
    taken(&notices);
    let mut transaction = client.transaction().expect("begin");
    credit(&mut transaction, &one, 2.0);
    credit(&mut transaction, &two, 3.0);
    transaction.commit().expect("commit");
    let log = taken(&notices);
    assert!(
        log.iter().any(|line| line.contains("PREPARE TRANSACTION")),
        "two workers commit with 2PC: {log:#?}"
    );
    assert_eq!(stored(&mut client, "credit", &one), Some(7.0));
    assert_eq!(stored(&mut client, "credit", &two), Some(8.0));
    // From worker 1: its own row (never above capacity) and worker 2's.
    let mut worker = connect(&urls[1]);
    let mut transaction = worker.transaction().expect("begin");
    assert_eq!(credit(&mut transaction, &one, 10.0).round(), 10.0);
    assert_eq!(credit(&mut transaction, &two, 1.0).round(), 9.0);
    transaction.commit().expect("commit");
    assert_eq!(stored(&mut client, "credit", &one), Some(10.0));
    assert_eq!(stored(&mut client, "credit", &two), Some(9.0));
    // An inline config travels to the node holding the row.
    let inline = "rate_limiter.token_bucket(5, '1000 days')";
    client
        .execute(
            &format!(
                "SELECT * FROM rate_limiter.rate_limit('credit-inline', $1, 2, config => {inline})"
            ),
            &[&two],
        )
        .expect("rate_limit with an inline config");
    let value: f64 = client
        .query_one(
            &format!("SELECT rate_limiter.rate_credit('credit-inline', $1, 1, {inline})"),
            &[&two],
        )
        .expect("rate_credit with an inline config")
        .get(0);
    assert_eq!(value.round(), 4.0);
    forget("credit");
}

#[test]
#[ignore = "needs the Citus cluster of scripts/test.sh"]
fn rate_wait_consumes_where_the_row_lives_and_times_out_without_consuming() {
    make_distributed();
    forget("wait");
    let mut coordinator = coordinator();
    define(&mut coordinator, "wait", 10.0);
    let (one, two) = keys_on_each_worker(&mut coordinator, "wait-");
    for (node, url) in NODES.iter().zip(urls()) {
        let mut client = connect(&url);
        for key in [&one, &two] {
            let before = stored(&mut coordinator, "wait", key).unwrap_or(10.0);
            let ok: bool = client
                .query_one(
                    "SELECT ok FROM rate_limiter.rate_wait('wait', $1, 2)",
                    &[key],
                )
                .expect("rate_wait")
                .get(0);
            assert!(ok, "{node}");
            assert_eq!(
                stored(&mut coordinator, "wait", key),
                Some(before - 2.0),
                "{node}"
            );
            // More than the limit holds: refused at once, nothing consumed.
            let ok: bool = client
                .query_one(
                    "SELECT ok FROM rate_limiter.rate_wait('wait', $1, 9, timeout => '0 seconds')",
                    &[key],
                )
                .expect("rate_wait")
                .get(0);
            assert!(!ok, "{node}");
            assert_eq!(
                stored(&mut coordinator, "wait", key),
                Some(before - 2.0),
                "{node}"
            );
        }
    }
    forget("wait");
}

#[test]
#[ignore = "needs the Citus cluster of scripts/test.sh"]
fn a_delegated_call_uses_the_calling_nodes_now_override() {
    make_distributed();
    forget("clock");
    let urls = urls();
    let mut coordinator = coordinator();
    coordinator
        .batch_execute(
            "SELECT rate_limiter.define('clock', rate_limiter.token_bucket(10, '1 hour'))",
        )
        .expect("define");
    let (one, two) = keys_on_each_worker(&mut coordinator, "clock-");
    let stored_ts = |client: &mut Client, key: &str| -> String {
        client
            .query_one(
                "SELECT to_char(ts AT TIME ZONE 'UTC', 'YYYY-MM-DD HH24:MI:SS') FROM rate_limiter.rate_limits \
                 WHERE dkey = $1 AND name = 'clock' AND key = $1",
                &[&key],
            )
            .expect("the stored ts")
            .get(0)
    };
    // The coordinator's override decides the calls it delegates to either
    // worker: consume, check, rate_limit_all and rate_credit.
    coordinator
        .batch_execute("SET rate_limiter.now_override = '2030-01-01 00:00:00+00'")
        .expect("set the clock");
    for key in [&one, &two] {
        assert!(coordinator
            .query_one(
                "SELECT ok FROM rate_limiter.rate_limit('clock', $1, 10)",
                &[key]
            )
            .expect("rate_limit")
            .get::<_, bool>(0));
        assert_eq!(stored_ts(&mut coordinator, key), "2030-01-01 00:00:00");
    }
    coordinator
        .batch_execute("SET rate_limiter.now_override = '2030-01-01 00:06:00+00'")
        .expect("six minutes later: one token");
    let checked: f64 = coordinator
        .query_one(
            "SELECT remaining FROM rate_limiter.rate_check('clock', $1, 0)",
            &[&two],
        )
        .expect("rate_check")
        .get(0);
    assert!((checked - 1.0).abs() < 1e-9, "{checked}");
    let answers = consume_all(&mut coordinator, "clock", &[(&one, 1.0), (&two, 1.0)])
        .expect("rate_limit_all");
    assert_eq!(answers, [true, true]);
    assert_eq!(stored_ts(&mut coordinator, &two), "2030-01-01 00:06:00");
    let retry: String = coordinator
        .query_one(
            "SELECT retry_after::text FROM rate_limiter.rate_limit('clock', $1)",
            &[&two],
        )
        .expect("rate_limit")
        .get(0);
    assert_eq!(retry, "00:06:00", "the next token in exactly 6 minutes");
    coordinator
        .batch_execute("SET rate_limiter.now_override = '2030-01-01 00:12:00+00'")
        .expect("later");
    let value: f64 = coordinator
        .query_one("SELECT rate_limiter.rate_credit('clock', $1, 2)", &[&two])
        .expect("rate_credit")
        .get(0);
    assert!(
        (value - 3.0).abs() < 1e-9,
        "1 refilled + 2 credited: {value}"
    );
    assert_eq!(stored_ts(&mut coordinator, &two), "2030-01-01 00:12:00");
    // Only a superuser may send a clock: a role that may call the
    // internal function but is no superuser gets 42501.
    coordinator
        .batch_execute(
            "DROP ROLE IF EXISTS clock_caller; CREATE ROLE clock_caller; \
             GRANT USAGE ON SCHEMA rate_limiter TO clock_caller; \
             GRANT EXECUTE ON FUNCTION rate_limiter._rate_limit_at(text, text, text, float8, boolean, rate_limiter.config, boolean, timestamptz, boolean) TO clock_caller",
        )
        .expect("a role");
    let mut worker = connect(&urls[2]);
    let mut transaction = worker.transaction().expect("begin");
    transaction
        .batch_execute("SET LOCAL ROLE clock_caller")
        .expect("set role");
    let error = transaction
        .query(
            "SELECT * FROM rate_limiter._rate_limit_at($1, 'clock', $1, 1, false, NULL, true, '2031-01-01')",
            &[&two],
        )
        .expect_err("not a superuser");
    assert_eq!(
        error.code(),
        Some(&SqlState::INSUFFICIENT_PRIVILEGE),
        "{error}"
    );
    transaction.rollback().expect("rollback");
    assert_eq!(stored_ts(&mut coordinator, &two), "2030-01-01 00:12:00");
    coordinator
        .batch_execute(
            "REVOKE ALL ON FUNCTION rate_limiter._rate_limit_at(text, text, text, float8, boolean, rate_limiter.config, boolean, timestamptz, boolean) FROM clock_caller; \
             REVOKE ALL ON SCHEMA rate_limiter FROM clock_caller; DROP ROLE clock_caller",
        )
        .expect("drop the role");
    forget("clock");
}
