//! docs/guarantees.md, "Portable edition": the portable edition answers
//! exactly as the native extension. One session on each (the native
//! extension in one database, the portable edition in another, on the same
//! server) runs the same random sequence of calls, from a seeded
//! generator: both kinds, counts, reserve, throws, shadow mode, inline and
//! defined configs, redefinitions, credits, resets, `rate_limit_all`,
//! `status`, `http_headers`, `prune`, per-key overrides and plans
//! (`override`, `remove_override`, `undefine` of a plan in use), invalid
//! arguments, and a clock (`rate_limiter.now_override`) that moves
//! forwards and sometimes back (past overrides' `expires_at`, and before
//! it again).
//! Every answer must be the same: `ok`, `retry_after` (to the microsecond),
//! `remaining` (the same float, or within 1e-9 relative), every other
//! column, and for an error its SQLSTATE, message, detail and hint; and
//! after every call the state tables must hold the same rows, each with
//! the same regime (docs/overrides.md, "The key's state"), and the same
//! overrides (the definitions every 250 calls). Sharded
//! limits too: both sessions seed the choice of shards
//! (`rate_limiter.random_seed`, SplitMix64 in both editions), so their
//! shard choices are the same.
//!
//! The concurrency limits (docs/concurrency.md) in a sequence of their
//! own (`concurrency_calls`), the slots' state rows and the timed leases
//! compared after every call.
//!
//! `RATE_LIMITER_TEST_SEED` replays a sequence; the seed used is printed.

use postgres::{Client, SimpleQueryMessage};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use rate_limiter_integration_tests::calls::statement;
use rate_limiter_integration_tests::concurrency_calls;
use rate_limiter_integration_tests::{fresh_database, portable};

const NATIVE: &str = "rate_limiter_differential_native";
const PORTABLE: &str = "rate_limiter_differential_portable";
/// Calls of the long sequence, from one state that builds up.
const CALLS: usize = 8_000;
/// Short sequences, each from no state and no definitions, with the edge
/// cases of the generator (floats at the edges of their range, the calls
/// that raise while the state table is open).
const SEQUENCES: u64 = 5_000;
/// Calls in each short sequence.
const SEQUENCE_CALLS: usize = 3;
/// Calls of the concurrency limits' sequence.
const CONCURRENCY_CALLS: usize = 3_000;

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

/// The error of a statement as an outcome.
fn error_outcome(sql: &str, error: postgres::Error) -> Outcome {
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

/// Runs `settings` (`; `-separated `SET`s) and then `body` over the
/// extended query protocol (each its own Parse, Bind, Execute, Sync: what
/// psycopg 3, JDBC and pgx send), the body's rows read as JSON objects
/// (`row_to_json`) and given back as their values' text, in key order.
fn run_extended(client: &mut Client, settings: &str, body: &str) -> Outcome {
    for setting in settings.split("; ") {
        if let Err(error) = client.execute(setting, &[]) {
            return error_outcome(setting, error);
        }
    }
    let sql = format!("SELECT pg_catalog.row_to_json(q)::text FROM ({body}) AS q");
    match client.query(&sql, &[]) {
        Ok(rows) => Outcome::Rows(
            rows.iter()
                .map(|row| {
                    let json: String = row.get(0);
                    let object: serde_json::Map<String, serde_json::Value> =
                        serde_json::from_str(&json).expect("row_to_json gives an object");
                    object
                        .into_values()
                        .map(|value| match value {
                            serde_json::Value::Null => None,
                            serde_json::Value::String(text) => Some(text),
                            other => Some(other.to_string()),
                        })
                        .collect()
                })
                .collect(),
        ),
        Err(error) => error_outcome(&sql, error),
    }
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
        Err(error) => error_outcome(sql, error),
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

/// The two sessions and what comparing them found.
struct Pair {
    native: Client,
    portable: Client,
    differences: Vec<String>,
    errors: usize,
    calls: usize,
    /// Calls after which some key had an override, and after which some
    /// state row was of a regime other than its definition's: what shows
    /// that the sequence exercised overrides.
    overridden: usize,
    other_regimes: usize,
    recent: std::collections::VecDeque<String>,
}

/// What a short sequence starts with defined, so that its few calls do
/// more than find the names undefined: two limits, a key of one on the
/// other as its plan (another kind, period and shards: another regime),
/// and a key of the other with a config of its own until 30 seconds after
/// the sequence's clock starts (which it may pass).
const DEFINED: &str =
    "SELECT rate_limiter.define('alpha', rate_limiter.token_bucket(10, '1 minute')); \
    SELECT rate_limiter.define('beta', rate_limiter.fixed_window(10, '1 second', shards => 2)); \
    SELECT rate_limiter.override('alpha', 'k1', plan => 'beta'); \
    SELECT rate_limiter.override('beta', 'ключ', config => rate_limiter.token_bucket(5, '1 second'), \
                                 expires_at => '2026-01-01 00:00:30+00')";

/// The settings each session starts with, and has again after a reset.
const SETUP: &str =
    "SET rate_limiter.random_seed = 7; SET TimeZone = 'UTC'; SET extra_float_digits = 1";

impl Pair {
    /// Runs `sql` on both and compares the answers, then the state rows;
    /// `false` when the states differ (the sequence cannot go on).
    fn call(&mut self, label: &str, sql: &str) -> bool {
        let (a, b) = (run(&mut self.native, sql), run(&mut self.portable, sql));
        self.compare(label, sql, a, b)
    }

    /// As [`Pair::call`], over the extended query protocol ([`run_extended`]).
    fn call_extended(&mut self, label: &str, settings: &str, body: &str) -> bool {
        let (a, b) = (
            run_extended(&mut self.native, settings, body),
            run_extended(&mut self.portable, settings, body),
        );
        self.compare(
            label,
            &format!("{settings}; {body} (extended protocol)"),
            a,
            b,
        )
    }

    /// Records whether the answers `a` (native) and `b` (portable) to
    /// `sql` agree, then compares the state rows.
    fn compare(&mut self, label: &str, sql: &str, a: Outcome, b: Outcome) -> bool {
        self.calls += 1;
        if matches!(a, Outcome::Error { .. }) {
            self.errors += 1;
        }
        if !same(&a, &b) {
            self.differences.push(format!(
                "{label}: {sql}\n  native:   {a:?}\n  portable: {b:?}"
            ));
        }
        self.recent.push_back(sql.to_string());
        if self.recent.len() > 8 {
            self.recent.pop_front();
        }
        // The state after every call, so that a difference shows at the
        // call that made it, with the calls before it: the state rows
        // (with the regime each was written under) and the overrides.
        for (counted, rows) in [
            (
                &mut self.other_regimes,
                "SELECT name, key, shard, value, ts, regime FROM rate_limiter.rate_limits ORDER BY 1, 2, 3",
            ),
            (
                &mut self.overridden,
                "SELECT *, true FROM rate_limiter.overrides ORDER BY name, key",
            ),
        ] {
            let (a, b) = (run(&mut self.native, rows), run(&mut self.portable, rows));
            if !same(&a, &b) {
                self.differences.push(format!(
                    "state after {label} ({rows}), after:\n    {}\n  native:   {a:?}\n  portable: {b:?}",
                    Vec::from(self.recent.clone()).join("\n    ")
                ));
                return false;
            }
            // What is counted: a row whose last column is not NULL (a
            // state row's regime; any override).
            if let Outcome::Rows(found) = &a {
                if found
                    .iter()
                    .any(|row| row.last().is_some_and(Option::is_some))
                {
                    *counted += 1;
                }
            }
        }
        true
    }

    /// Compares the definitions.
    fn definitions(&mut self, label: &str) {
        let definitions = "SELECT d::text FROM rate_limiter.definitions AS d \
                           UNION ALL SELECT c::text FROM rate_limiter.composites AS c ORDER BY 1";
        let (a, b) = (
            run(&mut self.native, definitions),
            run(&mut self.portable, definitions),
        );
        if !same(&a, &b) {
            self.differences.push(format!(
                "definitions after {label}:\n  native:   {a:?}\n  portable: {b:?}"
            ));
        }
    }

    /// Both databases without state or definitions, both sessions with
    /// their settings as at the start.
    fn reset(&mut self) {
        let sql = format!(
            "RESET ALL; DELETE FROM rate_limiter.rate_limits; DELETE FROM rate_limiter.overrides; \
             DELETE FROM rate_limiter.blocks; DELETE FROM rate_limiter.composites; \
             DELETE FROM rate_limiter.definitions; {SETUP}; {DEFINED}"
        );
        self.native
            .batch_execute(&sql)
            .expect("reset the native database");
        self.portable
            .batch_execute(&sql)
            .expect("reset the portable database");
        self.recent.clear();
    }
}

/// The seed of the run: `RATE_LIMITER_TEST_SEED`, else a random one; printed.
fn seed() -> u64 {
    let seed: u64 = std::env::var("RATE_LIMITER_TEST_SEED")
        .ok()
        .and_then(|seed| seed.parse().ok())
        .unwrap_or_else(rand::random);
    eprintln!("RATE_LIMITER_TEST_SEED={seed}");
    seed
}

/// The two sessions, in databases of their own named after `suffix` (so
/// that the tests of this file can run at once).
fn pair(suffix: &str) -> Pair {
    let mut native = fresh_database(&format!("{NATIVE}{suffix}"));
    let mut portable = portable::fresh_database(&format!("{PORTABLE}{suffix}"), "postgres");
    native
        .batch_execute(SETUP)
        .expect("set up the native session");
    portable
        .batch_execute(SETUP)
        .expect("set up the portable session");
    Pair {
        native,
        portable,
        differences: Vec::new(),
        errors: 0,
        calls: 0,
        overridden: 0,
        other_regimes: 0,
        recent: std::collections::VecDeque::new(),
    }
}

#[test]
fn the_portable_edition_answers_as_the_native_extension() {
    let seed = seed();
    let mut rng = StdRng::seed_from_u64(seed);
    let mut pair = pair("");
    let mut clock = 0i64;
    // RATE_LIMITER_TEST_STOP_AT=N stops before call N, leaving both
    // databases as they were then (to replay a difference by hand).
    let stop_at: usize = std::env::var("RATE_LIMITER_TEST_STOP_AT")
        .ok()
        .and_then(|call| call.parse().ok())
        .unwrap_or(CALLS);
    for call in 0..CALLS.min(stop_at) {
        let (settings, body) = statement(&mut rng, &mut clock, false);
        if !pair.call(&format!("call {call}"), &format!("{settings}; {body}")) {
            break;
        }
        if call % 250 == 249 || call == CALLS - 1 {
            pair.definitions(&format!("call {call}"));
        }
        if pair.differences.len() >= 10 {
            break;
        }
    }
    eprintln!(
        "{CALLS} calls compared, {} of them errors on both; {} with a key overridden, {} with a state row of another regime",
        pair.errors, pair.overridden, pair.other_regimes
    );
    assert!(
        pair.differences.is_empty(),
        "the editions differ (RATE_LIMITER_TEST_SEED={seed}):\n{}",
        pair.differences.join("\n")
    );
    assert!(
        pair.errors > 100 && pair.errors < CALLS / 2,
        "{} errors: the sequence exercises both paths",
        pair.errors
    );
    assert!(
        pair.overridden > CALLS / 10 && pair.other_regimes > CALLS / 20,
        "{} calls with an override, {} with a row of another regime: the sequence exercises overrides",
        pair.overridden,
        pair.other_regimes
    );
}

/// Many short sequences, each from no state, every other one over the
/// extended query protocol: sequence `n` of a run with
/// seed S draws from seed S + n (`RATE_LIMITER_TEST_SEED=S` and
/// `RATE_LIMITER_TEST_SEQUENCE=n` replay it alone). Run where
/// `RATE_LIMITER_TEST_ONCE` is not 0 (scripts/test.sh: in the first
/// version's run only; the long sequence above runs on every version).
#[test]
fn short_sequences_from_no_state_with_edge_cases_answer_alike() {
    if std::env::var("RATE_LIMITER_TEST_ONCE").as_deref() == Ok("0") {
        eprintln!("RATE_LIMITER_TEST_ONCE=0: the short sequences run in another version's run");
        return;
    }
    let seed = seed();
    let only: Option<u64> = std::env::var("RATE_LIMITER_TEST_SEQUENCE")
        .ok()
        .and_then(|n| n.parse().ok());
    let mut pair = pair("_short");
    let mut failed = Vec::new();
    for sequence in 0..SEQUENCES {
        if only.is_some_and(|only| only != sequence) {
            continue;
        }
        let mut rng = StdRng::seed_from_u64(seed.wrapping_add(sequence));
        let mut clock = 0i64;
        pair.reset();
        let before = pair.differences.len();
        for call in 0..SEQUENCE_CALLS {
            let (settings, body) = statement(&mut rng, &mut clock, true);
            let label = format!("sequence {sequence}, call {call}");
            // Every other sequence over the extended query protocol.
            let agreed = if sequence % 2 == 1 {
                pair.call_extended(&label, &settings, &body)
            } else {
                pair.call(&label, &format!("{settings}; {body}"))
            };
            if !agreed {
                break;
            }
        }
        pair.definitions(&format!("sequence {sequence}"));
        if pair.differences.len() > before {
            failed.push(sequence);
        }
        if pair.differences.len() >= 10 {
            break;
        }
    }
    eprintln!(
        "{SEQUENCES} sequences of {SEQUENCE_CALLS} calls: {} calls compared, {} of them errors on both",
        pair.calls, pair.errors
    );
    assert!(
        pair.differences.is_empty(),
        "the editions differ (RATE_LIMITER_TEST_SEED={seed}, sequences {failed:?}):\n{}",
        pair.differences.join("\n")
    );
}

/// The concurrency limits answer alike: a random sequence of their calls
/// (`concurrency_calls`), the state rows and `rate_limiter.leases`
/// compared after every call. Both editions run the same PL/pgSQL except
/// the native `acquire`'s common case (a free slot whose row exists,
/// taken on the direct storage path) and the rate-limit calls' refusal of
/// a concurrency limit. Lease ids are random: a `release` or `renew`
/// names, in each edition, its own id of the same lease (the n-th by
/// name, key and slot), or an id neither gave.
#[test]
fn concurrency_limits_answer_alike() {
    let seed = seed();
    let mut rng = StdRng::seed_from_u64(seed);
    let mut pair = pair("_slots");
    // Both names defined at the start (the sequence redefines and drops
    // them).
    let defined = "SELECT rate_limiter.define('slots_a', rate_limiter.concurrency(2)); \
                   SELECT rate_limiter.define('slots_b', rate_limiter.concurrency(1, '30 seconds'))";
    pair.native
        .batch_execute(defined)
        .expect("define on the native database");
    pair.portable
        .batch_execute(defined)
        .expect("define on the portable database");
    let mut clock = 0i64;
    let mut taken = std::collections::HashSet::new();
    let ids = "SELECT id FROM rate_limiter.leases ORDER BY name, key, slot";
    let leases =
        "SELECT name, key, slot, duration FROM rate_limiter.leases ORDER BY name, key, slot";
    for call in 0..CONCURRENCY_CALLS {
        let sql = concurrency_calls::statement(&mut rng, &mut clock);
        let label = format!("concurrency call {call}");
        let (a, b) = if sql.contains(concurrency_calls::LEASE) {
            let (native_ids, portable_ids) = (
                first_column(run(&mut pair.native, ids)),
                first_column(run(&mut pair.portable, ids)),
            );
            let n = rng.random_range(0..=native_ids.len());
            let (native_id, portable_id) = match (native_ids.get(n), portable_ids.get(n)) {
                (Some(a), Some(b)) => (a.clone(), b.clone()),
                _ => ("42".to_string(), "42".to_string()),
            };
            (
                run(
                    &mut pair.native,
                    &sql.replace(concurrency_calls::LEASE, &native_id),
                ),
                run(
                    &mut pair.portable,
                    &sql.replace(concurrency_calls::LEASE, &portable_id),
                ),
            )
        } else {
            (run(&mut pair.native, &sql), run(&mut pair.portable, &sql))
        };
        if !pair.compare(&label, &sql, a, b) {
            break;
        }
        let (a, b) = (
            run(&mut pair.native, leases),
            run(&mut pair.portable, leases),
        );
        if !same(&a, &b) {
            pair.differences.push(format!(
                "leases after {label}: {sql}\n  native:   {a:?}\n  portable: {b:?}"
            ));
            break;
        }
        taken.extend(first_column(run(&mut pair.native, ids)));
        if pair.differences.len() >= 10 {
            break;
        }
    }
    pair.definitions("the concurrency calls");
    eprintln!(
        "{CONCURRENCY_CALLS} concurrency calls compared, {} of them errors on both; {} timed leases taken",
        pair.errors,
        taken.len()
    );
    assert!(
        pair.differences.is_empty(),
        "the editions differ (RATE_LIMITER_TEST_SEED={seed}):\n{}",
        pair.differences.join("\n")
    );
    assert!(
        pair.errors > 100 && pair.errors < CONCURRENCY_CALLS / 2 && taken.len() > 50,
        "{} errors, {} timed leases: the sequence exercises both paths",
        pair.errors,
        taken.len()
    );
}

/// The first column of every row of `outcome` (none for an error).
fn first_column(outcome: Outcome) -> Vec<String> {
    match outcome {
        Outcome::Rows(rows) => rows
            .into_iter()
            .filter_map(|row| row.into_iter().next().flatten())
            .collect(),
        Outcome::Error { .. } => Vec::new(),
    }
}
