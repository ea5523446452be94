//! SPEC §12 ("Two editions, one contract"): the portable edition answers
//! exactly as the native extension. One session on each (the native
//! extension in one database, the portable edition in another, on the same
//! server) runs the same random sequence of calls, from a seeded
//! generator: both kinds, counts, reserve, throws, shadow mode, inline and
//! defined configs, redefinitions, credits, resets, `rate_limit_all`,
//! `status`, `http_headers`, `prune`, invalid arguments, and a clock
//! (`rate_limiter.now_override`) that moves forwards and sometimes back.
//! Every answer must be the same: `ok`, `retry_after` (to the microsecond),
//! `remaining` (the same float, or within 1e-9 relative), every other
//! column, and for an error its SQLSTATE, message, detail and hint; and
//! after every call the state tables must hold the same rows (the
//! definitions every 250 calls). Sharded
//! limits too: both sessions seed the choice of shards
//! (`rate_limiter.random_seed`, SplitMix64 in both editions), so their
//! shard choices are the same.
//!
//! `RATE_LIMITER_TEST_SEED` replays a sequence; the seed used is printed.

use postgres::{Client, SimpleQueryMessage};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use rate_limiter_integration_tests::calls::statement;
use rate_limiter_integration_tests::{fresh_database, portable};

const NATIVE: &str = "rate_limiter_differential_native";
const PORTABLE: &str = "rate_limiter_differential_portable";
const CALLS: usize = 12_000;

/// What a statement gave: its rows as text, or its error.
#[derive(Debug, Clone, PartialEq)]
enum Outcome {
    Rows(Vec<Vec<Option<String>>>),
    Error {
        code: String,
        message: String,
        detail: Option<String>,
        hint: Option<String>,
    },
}

fn run(client: &mut Client, sql: &str) -> Outcome {
    match client.simple_query(sql) {
        Ok(messages) => Outcome::Rows(
            messages
                .into_iter()
                .filter_map(|message| match message {
                    SimpleQueryMessage::Row(row) => Some(
                        (0..row.len())
                            .map(|i| row.get(i).map(str::to_string))
                            .collect(),
                    ),
                    _ => None,
                })
                .collect(),
        ),
        Err(error) => {
            let db = error
                .as_db_error()
                .unwrap_or_else(|| panic!("{sql}: {error}"));
            Outcome::Error {
                code: db.code().code().to_string(),
                message: db.message().to_string(),
                detail: db.detail().map(str::to_string),
                hint: db.hint().map(str::to_string),
            }
        }
    }
}

/// Whether two values of one column agree: the same text, or two floats
/// within 1e-9 relative (1e-12 absolute near zero).
fn same_value(a: &Option<String>, b: &Option<String>) -> bool {
    match (a, b) {
        (Some(a), Some(b)) if a != b => match (a.parse::<f64>(), b.parse::<f64>()) {
            (Ok(x), Ok(y)) => {
                x.is_finite()
                    && y.is_finite()
                    && ((x - y).abs() <= 1e-9 * x.abs().max(y.abs()) || (x - y).abs() <= 1e-12)
            }
            _ => false,
        },
        _ => a == b,
    }
}

fn same(a: &Outcome, b: &Outcome) -> bool {
    match (a, b) {
        (Outcome::Rows(a), Outcome::Rows(b)) => {
            a.len() == b.len()
                && a.iter().zip(b).all(|(x, y)| {
                    x.len() == y.len() && x.iter().zip(y).all(|(v, w)| same_value(v, w))
                })
        }
        _ => a == b,
    }
}

#[test]
fn the_portable_edition_answers_as_the_native_extension() {
    let seed: u64 = std::env::var("RATE_LIMITER_TEST_SEED")
        .ok()
        .and_then(|seed| seed.parse().ok())
        .unwrap_or_else(rand::random);
    eprintln!("RATE_LIMITER_TEST_SEED={seed}");
    let mut rng = StdRng::seed_from_u64(seed);
    let mut native = fresh_database(NATIVE);
    let mut portable = portable::fresh_database(PORTABLE, "postgres");
    let setup =
        "SET rate_limiter.random_seed = 7; SET TimeZone = 'UTC'; SET extra_float_digits = 1";
    native
        .batch_execute(setup)
        .expect("set up the native session");
    portable
        .batch_execute(setup)
        .expect("set up the portable session");
    let mut clock = 0i64;
    let mut differences = Vec::new();
    let mut errors = 0;
    let mut recent = std::collections::VecDeque::new();
    // RATE_LIMITER_TEST_STOP_AT=N stops before call N, leaving both
    // databases as they were then (to replay a difference by hand).
    let stop_at: usize = std::env::var("RATE_LIMITER_TEST_STOP_AT")
        .ok()
        .and_then(|call| call.parse().ok())
        .unwrap_or(CALLS);
    for call in 0..CALLS.min(stop_at) {
        let (settings, body) = statement(&mut rng, &mut clock, false);
        let sql = format!("{settings}; {body}");
        let (a, b) = (run(&mut native, &sql), run(&mut portable, &sql));
        if matches!(a, Outcome::Error { .. }) {
            errors += 1;
        }
        if !same(&a, &b) {
            differences.push(format!(
                "call {call}: {sql}\n  native:   {a:?}\n  portable: {b:?}"
            ));
        }
        recent.push_back(sql.clone());
        if recent.len() > 8 {
            recent.pop_front();
        }
        // The state after every call, so that a difference shows at the
        // call that made it, with the calls before it.
        let rows =
            "SELECT name, key, shard, value, ts FROM rate_limiter.rate_limits ORDER BY 1, 2, 3";
        let (a, b) = (run(&mut native, rows), run(&mut portable, rows));
        if !same(&a, &b) {
            differences.push(format!(
                "state after call {call}, after:\n    {}\n  native:   {a:?}\n  portable: {b:?}",
                Vec::from(recent.clone()).join("\n    ")
            ));
            break;
        }
        if call % 250 == 249 || call == CALLS - 1 {
            let definitions = "SELECT * FROM rate_limiter.definitions ORDER BY name";
            let (a, b) = (
                run(&mut native, definitions),
                run(&mut portable, definitions),
            );
            if !same(&a, &b) {
                differences.push(format!(
                    "definitions after call {call}:\n  native:   {a:?}\n  portable: {b:?}"
                ));
            }
        }
        if differences.len() >= 10 {
            break;
        }
    }
    eprintln!("{CALLS} calls compared, {errors} of them errors on both");
    assert!(
        differences.is_empty(),
        "the editions differ (RATE_LIMITER_TEST_SEED={seed}):\n{}",
        differences.join("\n")
    );
    assert!(
        errors > 100 && errors < CALLS / 2,
        "{errors} errors: the sequence exercises both paths"
    );
}
