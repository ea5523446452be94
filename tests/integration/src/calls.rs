//! Random calls of every function of the extension, from a seeded
//! generator, for the tests that run long random sequences: the
//! differential test of the two editions (tests/portable_differential.rs)
//! and the extended-protocol sessions (tests/extended_protocol.rs). Every
//! kind (calendar windows in several units and time zones), counts, reserve, throws, shadow mode, inline and defined
//! configs, redefinitions, credits, resets, `rate_limit_all`, `status`,
//! `http_headers`, `prune`, `rate_wait`, per-key overrides (a plan or a
//! config of the key's own, with and without `expires_at` and `enforce`;
//! their removal; `undefine` of a limit that is some key's plan), blocks
//! (by hand, and automatic ones from configs `with_block`), a composite
//! (`define_all` of one to three of the names, and every call of it), invalid
//! arguments, floats at the edges of their range, and a clock
//! (`rate_limiter.now_override`) that moves forwards and sometimes back.

use rand::rngs::StdRng;
use rand::Rng;

pub const NAMES: [&str; 6] = ["alpha", "beta", "gamma", "delta", "inline_a", "inline_b"];
/// The name of the composite the calls define (docs/composites.md).
pub const COMPOSITE: &str = "both";
pub const KEYS: [Option<&str>; 5] = [None, Some("k1"), Some("k2"), Some("ключ"), Some("k'4")];
pub const PERIODS: [&str; 9] = [
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
pub const RATES: [f64; 9] = [1.0, 2.0, 3.0, 10.0, 100.0, 1000.0, 0.5, 2.5e-3, 7.25];

pub fn literal(text: Option<&str>) -> String {
    match text {
        None => "NULL".to_string(),
        Some(text) => format!("'{}'", text.replace('\'', "''")),
    }
}

pub fn float(value: f64) -> String {
    if value.is_nan() {
        "'NaN'::float8".to_string()
    } else if value.is_infinite() {
        format!("'{}Infinity'::float8", if value < 0.0 { "-" } else { "" })
    } else {
        format!("{value:?}::float8")
    }
}

/// A random config: `shards` 1 unless `sharded`.
pub fn config(rng: &mut StdRng, sharded: bool) -> String {
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
    // (Calendar windows are never sharded: a sharded draw is one in ten.)
    let kind = if sharded && rng.random_bool(0.9) {
        rng.random_range(0..3)
    } else {
        rng.random_range(0..4)
    };
    let made = if kind == 3 {
        calendar_config(rng, rate, &capacity, &max_reserved, shards)
    } else if kind == 0 {
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
        if kind == 1 {
            format!(
                "rate_limiter.fixed_window({}, '{period}', {capacity}, {max_reserved}, {shards}, {start})",
                float(rate)
            )
        } else if rng.random_bool(0.9) {
            format!(
                "rate_limiter.sliding_window({}, '{period}', {max_reserved}, {shards}, {start})",
                float(rate)
            )
        } else {
            // A sliding window with a capacity of its own: 22023 unless it
            // is the rate (docs/shapes.md).
            format!(
                "ROW('sliding window', {}, '{period}', {capacity}, {max_reserved}, {shards}, {start}, NULL, NULL, NULL, NULL)::rate_limiter.config",
                float(rate)
            )
        }
    };
    // Sometimes with automatic blocks (docs/blocks.md).
    if rng.random_bool(0.15) {
        let durations = ["1 second", "30 seconds", "5 minutes", "1 day"];
        let block_for = durations[rng.random_range(0..3)];
        format!(
            "rate_limiter.with_block({made}, '{block_for}', {}, '{}')",
            ["NULL", "'1 hour'"][rng.random_range(0..2)],
            durations[rng.random_range(0..durations.len())]
        )
    } else {
        made
    }
}

/// Calendar windows' units (one unknown) and time zones (with daylight
/// saving time, half an hour off UTC, moving by half an hour, an
/// abbreviation, one unknown).
pub const UNITS: [&str; 8] = [
    "minute",
    "hour",
    "day",
    "week",
    "month",
    "quarter",
    "year",
    "fortnight",
];
pub const ZONES: [&str; 7] = [
    "UTC",
    "America/New_York",
    "Asia/Kolkata",
    "Australia/Lord_Howe",
    "Europe/Berlin",
    "PST",
    "Mars/Olympus_Mons",
];

/// A random calendar window (docs/shapes.md): by its constructor, or
/// (when `shards` > 1, or sometimes) a config built by hand that is
/// 22023 for its shards, its period or its time zone.
fn calendar_config(
    rng: &mut StdRng,
    rate: f64,
    capacity: &str,
    max_reserved: &str,
    shards: i32,
) -> String {
    let unit = if rng.random_bool(0.95) {
        UNITS[rng.random_range(0..UNITS.len() - 1)]
    } else {
        UNITS[UNITS.len() - 1]
    };
    let zone = if rng.random_bool(0.95) {
        ZONES[rng.random_range(0..ZONES.len() - 1)]
    } else {
        ZONES[ZONES.len() - 1]
    };
    if shards > 1 || rng.random_bool(0.05) {
        let period = PERIODS[rng.random_range(0..PERIODS.len())];
        return format!(
            "ROW('calendar window', {}, '{period}', {capacity}, {max_reserved}, {shards}, NULL, NULL, NULL, NULL, '{zone}')::rate_limiter.config",
            float(rate)
        );
    }
    format!(
        "rate_limiter.calendar_window({}, '{unit}', '{zone}', {capacity}, {max_reserved})",
        float(rate)
    )
}

/// A random count: mostly small whole numbers, sometimes fractions, zero,
/// large, or invalid.
pub fn count(rng: &mut StdRng) -> String {
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

/// The next call of the sequence, as two parts: the settings to make
/// first (`SET` statements, `;`-separated: the clock and the seed of the
/// choice of shards) and the statement. With `edges`, also the calls that
/// review found raising errors while the state table was open, and floats
/// at the edges of their range (without, the sequence of a seed is the
/// one the differential test has always drawn).
pub fn statement(rng: &mut StdRng, clock: &mut i64, edges: bool) -> (String, String) {
    // The clock: forwards by up to a few minutes, sometimes a long way,
    // sometimes back.
    *clock += match rng.random_range(0..20) {
        0 => -rng.random_range(0..10_000_000),
        1 => rng.random_range(0..100_000_000_000),
        _ => rng.random_range(0..30_000_000),
    };
    // With the edge cases: sometimes past the year 294247, near the end of
    // the timestamp range (where PostgreSQL's extract(epoch) of a
    // timestamptz loses microseconds); and sometimes a few microseconds
    // before the next whole hour, where a window that starts on the hour
    // ends.
    if edges && *clock < 9_000_000_000_000_000_000 && rng.random_bool(0.02) {
        *clock = 9_221_000_000_000_000_000 + rng.random_range(0..1_000_000_000_000);
    }
    if edges && rng.random_bool(0.1) {
        const HOUR: i64 = 3_600_000_000;
        *clock = (clock.div_euclid(HOUR) + 1) * HOUR - rng.random_range(1..8);
    }
    // Each statement seeds the choice of shards afresh: a statement that
    // fails (a refusal with throws => true) rolls back what the portable
    // edition wrote of its generator's state (a setting), while the native
    // extension's generator has moved on; from a fresh seed both draw the
    // same numbers.
    let at = format!(
        "SET rate_limiter.now_override = '{}'; SET rate_limiter.random_seed = {}",
        // 2026-01-01 plus the clock (microseconds).
        chrono_text(*clock),
        rng.random_range(1..1_000_000_000u32)
    );
    // Sometimes the composite (define_all, below), when it is defined.
    let name = if rng.random_bool(0.08) {
        COMPOSITE
    } else {
        NAMES[rng.random_range(0..NAMES.len())]
    };
    // With the edge cases, sometimes a long key: beyond what the state
    // table's index holds (54000 where a row would be written), and long
    // enough that hashing it (a fixed window's phase) is real work.
    let long_key = (edges && rng.random_bool(0.05)).then(|| {
        let length = [300, 2_600, 3_000, 20_000][rng.random_range(0..4)];
        "k".repeat(length)
    });
    let key = match &long_key {
        Some(long) => Some(long.as_str()),
        None => KEYS[rng.random_range(0..KEYS.len())],
    };
    let inline = if name.starts_with("inline") {
        {
            let sharded = rng.random_bool(0.2);
            format!(", config => {}", config(rng, sharded))
        }
    } else {
        String::new()
    };
    let reserve = rng.random_bool(0.2);
    let body = match rng.random_range(0..if edges { 115 } else { 110 }) {
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
        84 if rng.random_bool(0.5) => {
            let name = if rng.random_bool(0.2) { COMPOSITE } else { NAMES[rng.random_range(0..4)] };
            format!("SELECT rate_limiter.undefine({})", literal(Some(name)))
        }
        // A composite of one to three names, one of them sometimes not
        // defined, or an inline one, or the composite itself.
        84 => {
            let mut members: Vec<&str> = Vec::new();
            for _ in 0..rng.random_range(1..=3) {
                let member = match rng.random_range(0..20) {
                    0 => COMPOSITE,
                    1 => "inline_a",
                    _ => NAMES[rng.random_range(0..4)],
                };
                if !members.contains(&member) {
                    members.push(member);
                }
            }
            let members: Vec<String> = members.iter().map(|member| literal(Some(member))).collect();
            format!(
                "SELECT rate_limiter.define_all({}, ARRAY[{}], enforce => {})",
                literal(Some(COMPOSITE)),
                members.join(", "),
                rng.random_bool(0.8)
            )
        }
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
        98..=99 => format!(
            "SELECT rate_limiter.http_headers({}, ok => false)::text",
            literal(Some(name))
        ),
        100..=109 => overriding(rng, *clock),
        // What review found (errors raised while the state table is open):
        // a check that raises its refusal, a credit of an invalid tiny
        // count, and floats at the edges of their range.
        _ => match rng.random_range(0..8) {
            0 => format!(
                "SELECT ok, (extract(epoch FROM retry_after) * 1000000)::bigint, remaining FROM rate_limiter.rate_check({}, {}, {}, reserve => {reserve}, throws => true{inline})",
                literal(Some(name)), literal(key), count(rng)
            ),
            1 => format!(
                "SELECT ok, (extract(epoch FROM retry_after) * 1000000)::bigint, remaining FROM rate_limiter.rate_check({}, {}, 100, throws => true, config => rate_limiter.fixed_window(1, '1 minute', 1e308))",
                literal(Some(name)), literal(key)
            ),
            2 => format!(
                "SELECT rate_limiter.rate_credit({}, {}, {}{inline})",
                literal(Some(name)), literal(key),
                float([-5e-324, 5e-324, -0.0, 1e308, f64::MIN_POSITIVE][rng.random_range(0..5)])
            ),
            3 => format!(
                "SELECT ok, (extract(epoch FROM retry_after) * 1000000)::bigint, remaining FROM rate_limiter.rate_limit({}, {}, {}, reserve => true, config => rate_limiter.token_bucket(0.5, '3 milliseconds', 0.25))",
                literal(Some(name)), literal(key),
                float([1e6, 0.25, 5e-324, 1e308][rng.random_range(0..4)])
            ),
            5 => format!(
                "SELECT ok, (extract(epoch FROM retry_after) * 1000000)::bigint, remaining FROM rate_limiter.rate_limit({}, {}, {}, reserve => {reserve}, config => rate_limiter.token_bucket({}, '{}', shards => {}))",
                literal(Some(name)), literal(key),
                float([5e-324, 1.0, 1e308][rng.random_range(0..3)]),
                float([1.7e308, 1.79e308, f64::MAX][rng.random_range(0..3)]),
                PERIODS[rng.random_range(0..PERIODS.len())],
                [3, 64, 65, 1_000][rng.random_range(0..4)]
            ),
            6 => format!(
                "SELECT ok, (extract(epoch FROM retry_after) * 1000000)::bigint, remaining FROM rate_limiter.rate_limit({}, {}, 5e-324, reserve => {reserve}, config => rate_limiter.fixed_window({}, '{}', shards => {}))",
                literal(Some(name)), literal(key),
                float([3.0, 1e-300, 1e308][rng.random_range(0..3)]),
                PERIODS[rng.random_range(0..PERIODS.len())],
                [3, 64, 65, 1_000][rng.random_range(0..4)]
            ),
            7 => format!(
                "SELECT ok, (extract(epoch FROM retry_after) * 1000000)::bigint, remaining FROM rate_limiter.rate_limit({}, {}, 1, config => rate_limiter.fixed_window(1, '1 hour', start => '{}'))",
                literal(Some(name)), literal(key),
                ["200000-01-01 00:00:00+00", "2000-01-01 00:00:00+00", "4713-01-01 00:00:00+00 BC"][rng.random_range(0..3)]
            ),
            _ => format!(
                "SELECT ok, (extract(epoch FROM retry_after) * 1000000)::bigint, remaining FROM rate_limiter.rate_limit({}, {}, {}, reserve => {reserve}, throws => true, config => rate_limiter.token_bucket({}, '{}', {}, {}))",
                literal(Some(name)), literal(key), count(rng),
                float([1e308, 5e-324, 1e-300, 0.5][rng.random_range(0..4)]),
                PERIODS[rng.random_range(0..PERIODS.len())],
                float([1e308, 5e-324, 1.0][rng.random_range(0..3)]),
                ["NULL", "0", "1e308"][rng.random_range(0..3)]
            ),
        },
    };
    (at, body)
}

/// A call that manages per-key overrides (docs/overrides.md), at `clock`:
/// `override` with a plan (sometimes the limit itself, or a name without a
/// definition) or a config of the key's own, with or without an
/// `expires_at` near the clock (which the sequence's clock then passes, or
/// goes back before) and an `enforce`; `remove_override`; `undefine` of a
/// limit that may be some key's plan; and their invalid arguments.
fn overriding(rng: &mut StdRng, clock: i64) -> String {
    // Mostly the names that are defined now and then; sometimes one that
    // never is.
    let defined_or_not = |rng: &mut StdRng, defined: f64| {
        let names = if rng.random_bool(defined) {
            4
        } else {
            NAMES.len()
        };
        NAMES[rng.random_range(0..names)]
    };
    let name = defined_or_not(rng, 0.9);
    let key = if rng.random_bool(0.03) {
        None
    } else {
        KEYS[rng.random_range(1..KEYS.len())]
    };
    let expires_at = match rng.random_range(0..10) {
        0..=4 => String::new(),
        5 => format!(
            ", expires_at => '{}'",
            ["infinity", "-infinity"][rng.random_range(0..2)]
        ),
        _ => format!(
            ", expires_at => '{}'",
            chrono_text(clock + rng.random_range(-60_000_000..600_000_000))
        ),
    };
    let enforce = match rng.random_range(0..10) {
        0..=5 => String::new(),
        6 => ", enforce => NULL".to_string(),
        7 => ", enforce => true".to_string(),
        _ => ", enforce => false".to_string(),
    };
    match rng.random_range(0..26) {
        // Blocks by hand (docs/blocks.md), and their invalid arguments.
        20..=21 => format!(
            "SELECT rate_limiter.block({}, {}, '{}', {})",
            literal(Some(name)),
            literal(key),
            ["10 seconds", "5 minutes", "1 day", "0 seconds", "-1 second", "1 month"][rng.random_range(0..6)],
            literal([None, Some("why"), Some("ключ")][rng.random_range(0..3)])
        ),
        22 => format!(
            "SELECT rate_limiter.unblock({}, {})",
            literal(Some(name)),
            literal(key)
        ),
        23..=24 => format!(
            "SELECT until, strikes, reason FROM rate_limiter.blocked({}, {})",
            literal(Some(name)),
            literal(key)
        ),
        25 => format!(
            "SELECT rate_limiter.with_block(rate_limiter.token_bucket(1, '1 second'), '{}', {}, {})",
            ["0 seconds", "1 minute", "-1 minute"][rng.random_range(0..3)],
            ["NULL", "'1 second'", "'1 hour'"][rng.random_range(0..3)],
            ["NULL", "'-1 day'", "'1 day'"][rng.random_range(0..3)]
        ),
        0..=5 => format!(
            "SELECT rate_limiter.override({}, {}, plan => {}{expires_at}{enforce})",
            literal(Some(name)),
            literal(key),
            literal(Some(defined_or_not(rng, 0.95)))
        ),
        6..=11 => format!(
            "SELECT rate_limiter.override({}, {}, config => {}{expires_at}{enforce})",
            literal(Some(name)),
            literal(key),
            {
                let sharded = rng.random_bool(0.25);
                config(rng, sharded)
            }
        ),
        12..=15 => format!(
            "SELECT rate_limiter.remove_override({}, {})",
            literal(Some(name)),
            literal(key)
        ),
        16..=17 => format!("SELECT rate_limiter.undefine({})", literal(Some(name))),
        // Both or neither of config and plan, an invalid config.
        18 => format!(
            "SELECT rate_limiter.override({}, {}{})",
            literal(Some(name)),
            literal(key),
            if rng.random_bool(0.5) {
                ", config => rate_limiter.token_bucket(1, '1 second'), plan => 'alpha'"
            } else {
                ""
            }
        ),
        _ => format!(
            "SELECT rate_limiter.override({}, {}, config => ROW('fixed window', {}, '{}', NULL, NULL, {}, NULL, NULL, NULL, NULL)::rate_limiter.config)",
            literal(Some(name)),
            literal(key),
            float([1.0, -1.0, f64::NAN][rng.random_range(0..3)]),
            ["1 minute", "0 seconds"][rng.random_range(0..2)],
            [1, 0][rng.random_range(0..2)]
        ),
    }
}

/// 2026-01-01 00:00:00 UTC plus `micros`, as a timestamptz literal
/// (the proleptic Gregorian date from a day count: Howard Hinnant's
/// `civil_from_days`).
pub fn chrono_text(micros: i64) -> String {
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
