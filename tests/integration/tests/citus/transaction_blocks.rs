//! A call that is its transaction's only work reaches the row's node in one
//! round trip; a call with anything after it keeps the transaction block.

use super::*;

/// What one statement of a [`pipeline`] answered.
#[derive(Debug, PartialEq)]
enum Answer {
    /// The first column of each row, as text.
    Rows(Vec<String>),
    /// The SQLSTATE of its error.
    Error(String),
    /// Not run: an earlier statement of the pipeline failed.
    Skipped,
}

/// Sends `statements` to the node of `url` as one pipeline of the extended
/// protocol: Parse, Bind, Execute for each, then a single Sync, as libpq's
/// pipeline mode and the batches of several drivers do. Outside a
/// transaction block PostgreSQL runs them in one implicit transaction,
/// unless a statement must commit at once (as `VACUUM` must). `first` runs
/// before, on the same connection, as a pipeline of its own.
fn pipeline(url: &str, first: &str, statements: &[&str]) -> Vec<Answer> {
    use bytes::BytesMut;
    use postgres_protocol::message::{backend::Message, frontend};
    use std::io::{Read, Write};

    let mut stream = std::net::TcpStream::connect(("127.0.0.1", port_of(url) as u16))
        .unwrap_or_else(|error| panic!("connect to {url}: {error}"));
    let mut out = BytesMut::new();
    frontend::startup_message([("user", "postgres"), ("database", "postgres")], &mut out)
        .expect("startup message");
    stream.write_all(&out).expect("send the startup message");
    let mut input = BytesMut::new();
    let mut next = |stream: &mut std::net::TcpStream| loop {
        if let Some(message) = Message::parse(&mut input).expect("a protocol message") {
            return message;
        }
        let mut chunk = [0u8; 8192];
        let read = stream.read(&mut chunk).expect("read from the server");
        assert!(read > 0, "the server closed the connection");
        input.extend_from_slice(&chunk[..read]);
    };
    loop {
        match next(&mut stream) {
            Message::ReadyForQuery(_) => break,
            Message::ErrorResponse(_) => panic!("{url} refused the connection"),
            _ => {}
        }
    }
    let mut answers = Vec::new();
    for statements in [&[first][..], statements] {
        answers = run_pipeline(&mut stream, statements, &mut next);
    }
    let mut out = BytesMut::new();
    frontend::terminate(&mut out);
    let _ = stream.write_all(&out);
    answers
}

/// Sends `statements` as one pipeline on `stream`, `next` reading the
/// server's messages: what each statement answered.
fn run_pipeline(
    stream: &mut std::net::TcpStream,
    statements: &[&str],
    next: &mut impl FnMut(&mut std::net::TcpStream) -> postgres_protocol::message::backend::Message,
) -> Vec<Answer> {
    use bytes::BytesMut;
    use fallible_iterator::FallibleIterator;
    use postgres_protocol::message::{backend::Message, frontend};
    use std::io::Write;

    let mut out = BytesMut::new();
    for statement in statements {
        frontend::parse("", statement, [], &mut out).expect("Parse");
        frontend::bind(
            "",
            "",
            [],
            std::iter::empty::<i32>(),
            |_, _| Ok(postgres_protocol::IsNull::No),
            [],
            &mut out,
        )
        .map_err(|_| "Bind")
        .expect("Bind");
        frontend::execute("", 0, &mut out).expect("Execute");
    }
    frontend::sync(&mut out);
    stream.write_all(&out).expect("send the pipeline");
    let mut answers = Vec::new();
    let mut rows = Vec::new();
    loop {
        match next(stream) {
            Message::DataRow(row) => {
                // The first column; NULL as an empty string.
                let first = row.ranges().next().expect("a column").flatten();
                rows.push(
                    first
                        .map(|range| String::from_utf8_lossy(&row.buffer()[range]).into_owned())
                        .unwrap_or_default(),
                );
            }
            Message::CommandComplete(_) => answers.push(Answer::Rows(std::mem::take(&mut rows))),
            Message::ErrorResponse(error) => {
                let code = error
                    .fields()
                    .find(|field| Ok(field.type_() == b'C'))
                    .expect("error fields")
                    .map(|field| String::from_utf8_lossy(field.value_bytes()).into_owned());
                answers.push(Answer::Error(code.unwrap_or_default()));
            }
            Message::ReadyForQuery(_) => break,
            _ => {}
        }
    }
    while answers.len() < statements.len() {
        answers.push(Answer::Skipped);
    }
    answers
}

/// The statements of `log` (Citus's `citus.log_remote_commands`) that open
/// or end a transaction block on another node.
fn transaction_blocks(log: &[String]) -> Vec<&String> {
    log.iter()
        .filter(|line| line.contains("issuing BEGIN") || line.contains("issuing COMMIT"))
        .collect()
}

#[test]
#[ignore = "needs the Citus cluster of scripts/test.sh"]
fn a_call_that_is_its_transactions_only_work_reaches_the_row_in_one_round_trip() {
    make_distributed();
    forget("alone");
    let mut coordinator = coordinator();
    define(&mut coordinator, "alone", 100.0);
    let (one, two) = keys_on_each_worker(&mut coordinator, "alone-");
    let urls = urls();
    let statements = [
        "SELECT * FROM rate_limiter.rate_limit($1, $2)",
        "SELECT ok, remaining FROM rate_limiter.rate_limit($1, $2)",
        "SELECT rate_limiter.rate_limit($1, $2)",
        "SELECT * FROM rate_limiter.rate_check($1, $2)",
    ];
    // From the coordinator for rows on both workers, and from worker 2
    // for a row on worker 1.
    for (url, key) in [(&urls[0], &one), (&urls[0], &two), (&urls[2], &one)] {
        let (mut client, notices) = connect_with_notices(url);
        client
            .batch_execute("SET citus.log_remote_commands = on")
            .expect("log remote commands");
        // The session's first call reads the definition: not asserted on.
        assert!(consume(&mut client, "alone", Some(key)));
        for statement in statements {
            // A relcache invalidation before each call, as autovacuum or
            // any DDL can send at any moment: the call after it looks the
            // catalog up again, which must not give its transaction an id
            // (that made Citus open a transaction block on the worker).
            coordinator
                .batch_execute(
                    "SELECT rate_limiter._invalidate_definitions('rate_limiter.rate_limits'::regclass)",
                )
                .expect("send a relcache invalidation");
            taken(&notices);
            client
                .query(statement, &[&"alone", key])
                .unwrap_or_else(|error| panic!("{statement}: {error}"));
            let log = taken(&notices);
            assert!(
                log.iter().any(|line| line.contains("_rate_limit_at(")),
                "the call went to the row's worker ({url}, {statement}): {log:#?}"
            );
            assert_eq!(
                transaction_blocks(&log),
                Vec::<&String>::new(),
                "one statement, no transaction block ({url}, {statement})"
            );
        }
        // The simple protocol too.
        taken(&notices);
        client
            .simple_query(&format!(
                "SELECT * FROM rate_limiter.rate_limit('alone', '{key}')"
            ))
            .expect("rate_limit");
        let log = taken(&notices);
        assert!(
            log.iter().any(|line| line.contains("_rate_limit_at(")),
            "{log:#?}"
        );
        assert_eq!(transaction_blocks(&log), Vec::<&String>::new(), "{log:#?}");
    }
    // Every call committed where its row lives: 5 calls on `two`, 5 from
    // each of two nodes on `one` (rate_check consumes nothing).
    assert_eq!(stored(&mut coordinator, "alone", &two), Some(95.0));
    assert_eq!(stored(&mut coordinator, "alone", &one), Some(90.0));
    // The delegated statement is planned for each call with its arguments
    // as constants, also after many calls in one session and when the
    // session forces generic plans.
    for mode in ["auto", "force_generic_plan"] {
        let mut client = connect(&urls[0]);
        client
            .batch_execute(&format!("SET plan_cache_mode = {mode}"))
            .expect("plan_cache_mode");
        for _ in 0..10 {
            assert!(consume(&mut client, "alone", Some(&two)), "{mode}");
        }
    }
    assert_eq!(stored(&mut coordinator, "alone", &two), Some(75.0));
    forget("alone");
}

#[test]
#[ignore = "needs the Citus cluster of scripts/test.sh"]
fn a_call_with_anything_after_it_in_its_transaction_is_undone_when_that_fails() {
    make_distributed();
    forget("after");
    let mut coordinator = coordinator();
    define(&mut coordinator, "after", 100.0);
    let (one, two) = keys_on_each_worker(&mut coordinator, "after-");
    let url = &urls()[0];
    let (mut client, notices) = connect_with_notices(url);
    client
        .batch_execute(
            "SET citus.log_remote_commands = on;
             CREATE TEMP TABLE refusals (ok boolean CHECK (ok IS NULL));
             CREATE FUNCTION pg_temp.after_a_cursor(key text) RETURNS void
             LANGUAGE plpgsql AS $$
             DECLARE answer record;
             BEGIN
                 FOR answer IN SELECT * FROM rate_limiter.rate_limit('after', key) LOOP
                 END LOOP;
                 RAISE EXCEPTION 'after the call';
             END $$;",
        )
        .expect("set up");
    // Warm up the session: its first call reads the definition.
    assert!(consume(&mut client, "after", Some(&two)));
    // Each fails after the call made its consumption on worker 1's row:
    // the failure undoes it there.
    let failing: [(&str, SqlState); 4] = [
        (
            "SELECT ok, 1 / (remaining * 0)::int FROM rate_limiter.rate_limit('after', $1)",
            SqlState::DIVISION_BY_ZERO,
        ),
        (
            "INSERT INTO refusals SELECT ok FROM rate_limiter.rate_limit('after', $1)",
            SqlState::CHECK_VIOLATION,
        ),
        (
            "SELECT pg_temp.after_a_cursor($1)",
            SqlState::RAISE_EXCEPTION,
        ),
        (
            "WITH answer AS (SELECT * FROM rate_limiter.rate_limit('after', $1)) \
             SELECT 1 / (remaining * 0)::int FROM answer",
            SqlState::DIVISION_BY_ZERO,
        ),
    ];
    for (statement, code) in failing {
        // The notices of the last statement's rollback arrive after its
        // error: read them before.
        client.batch_execute("SELECT 1").expect("SELECT 1");
        taken(&notices);
        let error = client
            .query(statement, &[&one])
            .expect_err("the statement fails after the call");
        assert_eq!(error.code(), Some(&code), "{statement}: {error}");
        let log = taken(&notices);
        assert!(
            log.iter().any(|line| line.contains("_rate_limit_at(")),
            "the call went to worker 1 ({statement}): {log:#?}"
        );
        assert!(
            !transaction_blocks(&log).is_empty(),
            "in a transaction block ({statement}): {log:#?}"
        );
        assert_eq!(stored(&mut coordinator, "after", &one), None, "{statement}");
    }
    // A simple query of two statements (one implicit transaction), and a
    // DO block.
    for statements in [
        format!("SELECT * FROM rate_limiter.rate_limit('after', '{one}'); SELECT 1 / 0"),
        format!(
            "DO $$ BEGIN PERFORM rate_limiter.rate_limit('after', '{one}'); \
             RAISE EXCEPTION 'after the call'; END $$"
        ),
    ] {
        client
            .simple_query(&statements)
            .expect_err("the second part fails");
        assert_eq!(
            stored(&mut coordinator, "after", &one),
            None,
            "{statements}"
        );
    }
    // A pipeline whose call is not its first statement: one transaction,
    // undone. (Each pipeline's session first makes a call that reads the
    // definition.)
    let call = format!("SELECT ok FROM rate_limiter.rate_limit('after', '{one}')");
    let warm_up = format!("SELECT ok FROM rate_limiter.rate_limit('after', '{two}')");
    assert_eq!(
        pipeline(
            url,
            &warm_up,
            &["SELECT 1", &call, "SELECT 1 / (length(version()) * 0)"]
        ),
        [
            Answer::Rows(vec!["1".into()]),
            Answer::Rows(vec!["t".into()]),
            Answer::Error("22012".into()),
        ]
    );
    assert_eq!(stored(&mut coordinator, "after", &one), None);
    // A pipeline that starts with the call: the statements after it share
    // its implicit transaction (the lock the call's planning took on the
    // state table is still held by the next statement), so the call keeps
    // its block there and the later failure undoes it too.
    let locks = "SELECT count(*) FROM pg_locks WHERE pid = pg_backend_pid() \
                 AND locktype = 'relation' AND relation = 'rate_limiter.rate_limits'::regclass";
    assert_eq!(
        pipeline(
            url,
            &warm_up,
            &[&call, locks, "SELECT 1 / (length(version()) * 0)"]
        ),
        [
            Answer::Rows(vec!["t".into()]),
            Answer::Rows(vec!["1".into()]),
            Answer::Error("22012".into()),
        ]
    );
    assert_eq!(stored(&mut coordinator, "after", &one), None);
    // Without a failure, the pipeline commits the call with the rest.
    assert_eq!(
        pipeline(url, &warm_up, &["SELECT 1", &call, locks]),
        [
            Answer::Rows(vec!["1".into()]),
            Answer::Rows(vec!["t".into()]),
            Answer::Rows(vec!["1".into()]),
        ]
    );
    assert_eq!(stored(&mut coordinator, "after", &one), Some(99.0));
    forget("after");
}
