//! Every example in the README that claims a result, run as written and
//! checked against what it claims, on the native extension and on the
//! portable edition (the same answers: docs/guarantees.md, "Portable
//! edition").
//!
//! An example is the block between `<!-- example-NAME:begin -->` and
//! `<!-- example-NAME:end -->` (found by `readme_sql`'s rules: in README.md
//! or one docs/*.md file). A ```sql block is run through psql as written;
//! its claimed result is its comment lines that start with two spaces
//! (`--  ok | retry_after`: psql's aligned output, as a reader sees it). A
//! plain ``` block is an output (an error's ERROR, DETAIL and HINT); the
//! test runs the statement that gives it. Each example starts from an
//! empty state with the clock stopped at 2026-01-01 00:00:00 UTC and the
//! set-up below, which says what the example's own comment assumes ("the
//! bucket has 2 left"). Every claimed line must appear in psql's output,
//! in order, compared with runs of spaces made one (psql pads columns to
//! their widths, the README to its own).

use rate_limiter_integration_tests::doc_blocks::psql_with;
use rate_limiter_integration_tests::{drop_database, portable, test_env};
use std::path::PathBuf;

const NATIVE: &str = "rate_limiter_doc_examples";
const PORTABLE: &str = "rate_limiter_doc_examples_portable";

/// Before every example: an empty state, the clock stopped, UTC.
const START: &str = "DELETE FROM rate_limiter.composites; DELETE FROM rate_limiter.definitions; DELETE FROM rate_limiter.rate_limits;
SET rate_limiter.now_override = '2026-01-01 00:00:00+00'; SET TimeZone = 'UTC';";

struct Example {
    marker: &'static str,
    /// What the example's text assumes, run first (its output not compared).
    setup: &'static str,
    /// For an output block: the statement that gives it.
    statement: Option<&'static str>,
}

const EXAMPLES: &[Example] = &[
    Example {
        marker: "example-reservation",
        setup: "SELECT rate_limiter.define('llm_tokens', rate_limiter.token_bucket(40000, '1 minute', max_reserved => 40000));
                SELECT rate_limiter.rate_limit('llm_tokens', key => 'acme', count => 21000);",
        statement: None,
    },
    Example {
        marker: "example-token-bucket",
        setup: "",
        statement: None,
    },
    Example {
        marker: "example-sliding-window",
        setup: "",
        statement: None,
    },
    Example {
        marker: "example-sliding-window-refusal",
        setup: "",
        statement: None,
    },
    Example {
        marker: "example-calendar-window",
        setup: "",
        statement: None,
    },
    Example {
        marker: "example-calendar-window-month",
        setup: "",
        statement: None,
    },
    Example {
        marker: "example-define-all",
        setup: "",
        statement: None,
    },
    Example {
        marker: "example-composite",
        setup: "",
        statement: None,
    },
    Example {
        marker: "example-refusal",
        setup: "SELECT rate_limiter.define('login', rate_limiter.token_bucket(5, '1 minute'));
                SELECT rate_limiter.rate_limit('login', 'eve', 5);",
        statement: Some("SELECT * FROM rate_limiter.rate_limit('login', 'eve', throws => true);"),
    },
    Example {
        marker: "example-rate-limit",
        setup: "SELECT rate_limiter.define('send_message', rate_limiter.token_bucket(10, '1 minute'));
                SELECT rate_limiter.rate_limit('send_message', key => '42', count => 10);",
        statement: None,
    },
    Example {
        marker: "example-rate-limit-all",
        setup: "SELECT rate_limiter.define('user_calls', rate_limiter.token_bucket(10, '1 minute'));
                SELECT rate_limiter.define('org_calls', rate_limiter.token_bucket(15, '1 minute'));
                SELECT rate_limiter.rate_limit('user_calls', 'alice', 8);
                SELECT rate_limiter.rate_limit('org_calls', 'acme', 8);",
        statement: None,
    },
    Example {
        marker: "example-rate-wait",
        setup: "SELECT rate_limiter.define('wait_hourly', rate_limiter.token_bucket(2, '1 hour'));
                SELECT rate_limiter.rate_limit('wait_hourly', 'k', 2);",
        statement: None,
    },
    Example {
        marker: "example-status",
        setup: "SELECT rate_limiter.define('api', rate_limiter.token_bucket(10, '1 minute', capacity => 3));
                SELECT rate_limiter.rate_limit('api', 'alice', 2);",
        statement: None,
    },
    Example {
        marker: "example-http-headers",
        setup: "SELECT rate_limiter.define('api', rate_limiter.token_bucket(10, '1 minute', capacity => 3));
                SELECT rate_limiter.rate_limit('api', 'alice', 3);",
        statement: None,
    },
    Example {
        marker: "example-postgrest-limit",
        setup: "SELECT rate_limiter.define('api', rate_limiter.token_bucket(2, '1 minute'));",
        statement: None,
    },
    Example {
        marker: "example-postgrest-refusal",
        setup: "SELECT rate_limiter.define('api', rate_limiter.token_bucket(2, '1 minute'));
                SELECT rate_limiter.rate_limit('api', 'user-1', 2);",
        statement: Some("SELECT rate_limiter.postgrest_limit('api', 'user-1');"),
    },
];

/// The block of `marker`: its text between the fences, and whether it is SQL.
fn block(marker: &str) -> (String, bool) {
    let root = PathBuf::from(concat!(env!("CARGO_MANIFEST_DIR"), "/../.."));
    let mut files = vec![root.join("README.md")];
    let mut docs: Vec<PathBuf> = std::fs::read_dir(root.join("docs"))
        .expect("read docs/")
        .map(|entry| entry.expect("an entry of docs/").path())
        .filter(|path| path.extension().is_some_and(|ext| ext == "md"))
        .collect();
    docs.sort();
    files.extend(docs);
    let (begin, end) = (
        format!("<!-- {marker}:begin -->"),
        format!("<!-- {marker}:end -->"),
    );
    let mut found: Vec<String> = files
        .iter()
        .filter_map(|path| {
            let text = std::fs::read_to_string(path).expect("read a document");
            let start = text.find(&begin)?;
            let stop = start + text[start..].find(&end).expect("the end marker");
            Some(text[start + begin.len()..stop].to_string())
        })
        .collect();
    assert_eq!(found.len(), 1, "{begin} must be in exactly one document");
    let inside = found.remove(0);
    let open = inside.find("```").expect("a fenced block");
    let fence_end = open + inside[open..].find('\n').expect("the fence's line");
    let sql = inside[open..fence_end].trim() == "```sql";
    let close = fence_end + inside[fence_end..].find("```").expect("the closing fence");
    (inside[fence_end + 1..close].to_string(), sql)
}

/// A line as compared: trimmed, runs of spaces made one.
fn normal(line: &str) -> String {
    line.split_whitespace().collect::<Vec<_>>().join(" ")
}

/// What a block claims: for SQL, its comment lines that start with two
/// spaces; for an output block, every line (the MESSAGE line of a
/// PostgREST error is psql's ERROR line: PostgREST reads the field by that
/// name).
fn claims(text: &str, sql: bool) -> Vec<String> {
    text.lines()
        .filter_map(|line| {
            if sql {
                line.strip_prefix("--  ").map(normal)
            } else if let Some(message) = line.strip_prefix("MESSAGE:") {
                Some(normal(&format!("ERROR: {message}")))
            } else {
                Some(normal(line)).filter(|line| !line.is_empty())
            }
        })
        .collect()
}

/// Runs `script` with psql from standard input (so errors carry no file
/// position) in `database`, quietly, through every error: what it
/// printed, standard output first.
fn psql(database: &str, script: &str) -> String {
    psql_with(database, "postgres", script, &["-q"]).1
}

/// Runs every example in `database` and checks its claims.
fn run_examples(database: &str) {
    for example in EXAMPLES {
        let (text, sql) = block(example.marker);
        let claimed = claims(&text, sql);
        assert!(!claimed.is_empty(), "{}: claims nothing", example.marker);
        let statement = match (sql, example.statement) {
            (true, None) => text.clone(),
            (false, Some(statement)) => statement.to_string(),
            _ => panic!(
                "{}: a SQL block runs itself, an output block needs its statement",
                example.marker
            ),
        };
        let script = format!(
            "\\o /dev/null\n{START}\n{}\n\\o\n{statement}\n",
            example.setup
        );
        let output = psql(database, &script);
        let lines: Vec<String> = output.lines().map(normal).collect();
        let mut from = 0;
        for claim in &claimed {
            match lines[from..].iter().position(|line| line == claim) {
                Some(at) => from += at + 1,
                None => panic!(
                    "{} in {database}: the documentation claims\n  {claim}\nbut psql printed (from the claim before on):\n{}",
                    example.marker,
                    lines[from..].join("\n")
                ),
            }
        }
    }
}

#[test]
fn every_example_that_claims_a_result_gives_it() {
    drop_database(NATIVE);
    let mut admin = postgres::Client::connect(&test_env("RATE_LIMITER_TEST_URL"), postgres::NoTls)
        .expect("connect to the test server");
    admin
        .batch_execute(&format!("CREATE DATABASE {NATIVE}"))
        .expect("create the database");
    rate_limiter_integration_tests::connect_to(NATIVE, "postgres")
        .batch_execute("CREATE EXTENSION rate_limiter")
        .expect("create the extension");
    run_examples(NATIVE);
    drop_database(NATIVE);
}

#[test]
fn every_example_gives_the_same_result_on_the_portable_edition() {
    drop(portable::fresh_database(PORTABLE, "postgres"));
    run_examples(PORTABLE);
    drop_database(PORTABLE);
}
