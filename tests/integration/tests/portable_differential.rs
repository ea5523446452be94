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

const NAMES: [&str; 6] = ["alpha", "beta", "gamma", "delta", "inline_a", "inline_b"];
const KEYS: [Option<&str>; 5] = [None, Some("k1"), Some("k2"), Some("ключ"), Some("k'4")];
const PERIODS: [&str; 9] = [
    "1 second",
    "1 minute",
    "1 hour",
    "7 days",
    "1 month",
    "1 year",
    "1.5 seconds",
    "3 milliseconds",
    "2 days 3 hours",
];
const RATES: [f64; 9] = [1.0, 2.0, 3.0, 10.0, 100.0, 1000.0, 0.5, 2.5e-3, 7.25];

fn literal(text: Option<&str>) -> String {
    match text {
        None => "NULL".to_string(),
        Some(text) => format!("'{}'", text.replace('\'', "''")),
    }
}

fn float(value: f64) -> String {
    if value.is_nan() {
        "'NaN'::float8".to_string()
    } else if value.is_infinite() {
        format!("'{}Infinity'::float8", if value < 0.0 { "-" } else { "" })
    } else {
        format!("{value:?}::float8")
    }
}

/// A random config: `shards` 1 unless `sharded`.
fn config(rng: &mut StdRng, sharded: bool) -> String {
    let rate = RATES[rng.random_range(0..RATES.len())];
    let period = PERIODS[rng.random_range(0..PERIODS.len())];
    let capacity = match rng.random_range(0..4) {
        0 => "NULL".to_string(),
        1 => float(rate * 2.0),
        2 => float(rate * 0.5),
        _ => float(rate),
    };
    let max_reserved = match rng.random_range(0..4) {
        0 | 1 => "NULL".to_string(),
        2 => "0".to_string(),
        _ => float(rate),
    };
    let shards = if sharded { rng.random_range(2..=6) } else { 1 };
    if rng.random_bool(0.5) {
        format!(
            "rate_limiter.token_bucket({}, '{period}', {capacity}, {max_reserved}, {shards})",
            float(rate)
        )
    } else {
        let start = if rng.random_bool(0.5) {
            "NULL".to_string()
        } else {
            format!(
                "'2025-12-31 23:59:{:02}.{:06}+00'",
                rng.random_range(0..60),
                rng.random_range(0..1_000_000)
            )
        };
        format!(
            "rate_limiter.fixed_window({}, '{period}', {capacity}, {max_reserved}, {shards}, {start})",
            float(rate)
        )
    }
}

/// A random count: mostly small whole numbers, sometimes fractions, zero,
/// large, or invalid.
fn count(rng: &mut StdRng) -> String {
    match rng.random_range(0..20) {
        0 => "0".to_string(),
        1 => float(0.25),
        2 => float(rng.random_range(0.0..5.0)),
        3 => float(1e6),
        4 if rng.random_bool(0.3) => float(f64::NAN),
        5 if rng.random_bool(0.3) => float(-1.0),
        _ => rng.random_range(1..4).to_string(),
    }
}

/// The next statement of the sequence.
fn statement(rng: &mut StdRng, clock: &mut i64) -> String {
    // The clock: forwards by up to a few minutes, sometimes a long way,
    // sometimes back.
    *clock += match rng.random_range(0..20) {
        0 => -rng.random_range(0..10_000_000),
        1 => rng.random_range(0..100_000_000_000),
        _ => rng.random_range(0..30_000_000),
    };
    // Each statement seeds the choice of shards afresh: a statement that
    // fails (a refusal with throws => true) rolls back what the portable
    // edition wrote of its generator's state (a setting), while the native
    // extension's generator has moved on; from a fresh seed both draw the
    // same numbers.
    let at = format!(
        "SET rate_limiter.now_override = '{}'; SET rate_limiter.random_seed = {}; ",
        // 2026-01-01 plus the clock (microseconds).
        chrono_text(*clock),
        rng.random_range(1..1_000_000_000u32)
    );
    let name = NAMES[rng.random_range(0..NAMES.len())];
    let key = KEYS[rng.random_range(0..KEYS.len())];
    let inline = if name.starts_with("inline") {
        {
            let sharded = rng.random_bool(0.2);
            format!(", config => {}", config(rng, sharded))
        }
    } else {
        String::new()
    };
    let reserve = rng.random_bool(0.2);
    let body = match rng.random_range(0..100) {
        0..=34 => format!(
            "SELECT ok, (extract(epoch FROM retry_after) * 1000000)::bigint, remaining FROM rate_limiter.rate_limit({}, {}, {}, reserve => {reserve}, throws => {}{inline})",
            literal(Some(name)), literal(key), count(rng), rng.random_bool(0.1)
        ),
        35..=44 => format!(
            "SELECT ok, (extract(epoch FROM retry_after) * 1000000)::bigint, remaining FROM rate_limiter.rate_check({}, {}, {}, reserve => {reserve}{inline})",
            literal(Some(name)), literal(key), count(rng)
        ),
        45..=52 => {
            let requests: Vec<String> = (0..rng.random_range(1..=3))
                .map(|_| {
                    let name = NAMES[rng.random_range(0..4)];
                    let key = KEYS[rng.random_range(0..KEYS.len())];
                    format!("({}, {}, {}, NULL)", literal(Some(name)), literal(key), count(rng))
                })
                .collect();
            format!(
                "SELECT name, key, ok, (extract(epoch FROM retry_after) * 1000000)::bigint, remaining FROM rate_limiter.rate_limit_all(ARRAY[{}]::rate_limiter.request[], reserve => {reserve}, throws => {})",
                requests.join(", "),
                rng.random_bool(0.1)
            )
        }
        53..=60 => format!(
            "SELECT rate_limiter.rate_credit({}, {}, {}{inline})",
            literal(Some(name)), literal(key), count(rng)
        ),
        61..=66 => format!(
            "SELECT value, capacity, full_at, shards FROM rate_limiter.status({}, {}{inline})",
            literal(Some(name)), literal(key)
        ),
        67..=71 => {
            let ok = rng.random_bool(0.5);
            format!(
                "SELECT rate_limiter.http_headers({}, {}, {ok}, {}, {}{inline})::text",
                literal(Some(name)),
                literal(key),
                if ok { "NULL".to_string() } else { format!("'{} microseconds'", rng.random_range(0..100_000_000)) },
                if rng.random_bool(0.5) { "NULL".to_string() } else { float(rng.random_range(-3.0..50.0)) }
            )
        }
        72..=74 => format!("SELECT rate_limiter.rate_reset({}, {})", literal(Some(name)), literal(key)),
        75..=83 => {
            let name = NAMES[rng.random_range(0..4)];
            format!(
                "SELECT rate_limiter.define({}, {}, enforce => {})",
                literal(Some(name)),
                {
                    let sharded = rng.random_bool(0.25);
                    config(rng, sharded)
                },
                rng.random_bool(0.85)
            )
        }
        84 => format!("SELECT rate_limiter.undefine({})", literal(Some(NAMES[rng.random_range(0..4)]))),
        85..=86 => format!(
            "SELECT rate_limiter.prune({})",
            if rng.random_bool(0.5) { "NULL".to_string() } else { format!("'{} seconds'", rng.random_range(0..100_000)) }
        ),
        87..=89 => format!(
            "SELECT ok, (extract(epoch FROM retry_after) * 1000000)::bigint, remaining FROM rate_limiter.rate_wait({}, {}, {}, timeout => '0'{inline})",
            literal(Some(name)), literal(key), count(rng)
        ),
        // Invalid arguments and configs.
        90 => format!("SELECT * FROM rate_limiter.rate_limit(NULL, {})", literal(key)),
        91 => format!(
            "SELECT * FROM rate_limiter.rate_limit({}, config => rate_limiter.token_bucket({}, '{}'))",
            literal(Some(name)),
            float([0.0, -1.0, f64::NAN, f64::INFINITY][rng.random_range(0..4)]),
            PERIODS[rng.random_range(0..PERIODS.len())]
        ),
        92 => format!(
            "SELECT * FROM rate_limiter.rate_limit({}, config => rate_limiter.token_bucket(1, '{}'))",
            literal(Some(name)),
            ["0 seconds", "-1 second", "1 month -30 days"][rng.random_range(0..3)]
        ),
        93 => "SELECT rate_limiter.define('alpha', rate_limiter.fixed_window(1, '1 minute', shards => 0))".to_string(),
        94 => format!(
            "SELECT * FROM rate_limiter.rate_limit_all(ARRAY[({}, NULL, 1, NULL), NULL]::rate_limiter.request[])",
            literal(Some(name))
        ),
        95 => "SELECT * FROM rate_limiter.rate_limit('undefined_limit')".to_string(),
        96 => format!(
            "SELECT * FROM rate_limiter.rate_credit({}, {}, 'NaN')",
            literal(Some(name)),
            literal(key)
        ),
        97 => format!(
            "SELECT * FROM rate_limiter.rate_limit({}, config => rate_limiter.fixed_window(1, '1 hour', start => '2026-01-01'), count => 2)",
            literal(Some(name))
        ),
        _ => format!(
            "SELECT rate_limiter.http_headers({}, ok => false)::text",
            literal(Some(name))
        ),
    };
    format!("{at}{body}")
}

/// 2026-01-01 00:00:00 UTC plus `micros`, as a timestamptz literal
/// (the proleptic Gregorian date from a day count: Howard Hinnant's
/// `civil_from_days`).
fn chrono_text(micros: i64) -> String {
    let seconds = 1_767_225_600 + micros.div_euclid(1_000_000);
    let fraction = micros.rem_euclid(1_000_000);
    let (days, of_day) = (seconds.div_euclid(86_400), seconds.rem_euclid(86_400));
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i64::from(month <= 2);
    format!(
        "{year:04}-{month:02}-{day:02} {:02}:{:02}:{:02}.{fraction:06}+00",
        of_day / 3600,
        of_day / 60 % 60,
        of_day % 60
    )
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
        let sql = statement(&mut rng, &mut clock);
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
