//! Random calls of the concurrency limits (docs/concurrency.md), from a
//! seeded generator, for the differential test of the two editions
//! (tests/portable_differential.rs): `define` of `concurrency(max, lease)`
//! (with and without a default lease, and invalid ones), `undefine`,
//! `acquire` (transaction and timed leases, `throws`, inline configs,
//! several in one statement, each row's call its own because its
//! arguments name the row: a transaction that holds some slots already),
//! `release` and `renew` of known and unknown lease ids, `status`,
//! `prune`, the rate-limit calls a concurrency limit refuses, NULL and
//! invalid arguments, and a clock (`rate_limiter.now_override`) that moves
//! forwards and sometimes back. Each statement is its own transaction, so
//! a transaction lease ends with it; timed leases stay. A lease id is
//! random (unguessable), so the answers show whether there is one, and a
//! `release` or `renew` names it as [`LEASE`], which the test replaces
//! with each edition's own id of the same lease (or an unknown one).

use crate::calls::{chrono_text, literal};
use rand::rngs::StdRng;
use rand::Rng;

/// The names: two that are defined now and then, one only ever inline.
const NAMES: [&str; 3] = ["slots_a", "slots_b", "slots_inline"];
const KEYS: [Option<&str>; 4] = [None, Some("k1"), Some("k2"), Some("ключ")];
/// Leases a call asks for: none (a transaction lease, or the definition's
/// default), timed ones, and invalid ones.
const LEASES: [&str; 10] = [
    "NULL",
    "NULL",
    "NULL",
    "NULL",
    "NULL",
    "'10 seconds'",
    "'2 minutes'",
    "'1 hour'",
    "'0 seconds'",
    "'-1 second'",
];

/// The answer columns of `acquire`: whether there is a lease id,
/// `retry_after` in microseconds.
const ACQUIRED: &str =
    "ok, lease_id IS NOT NULL, in_flight, (extract(epoch FROM retry_after) * 1000000)::bigint";

/// Where a `release` or `renew` names a lease: the test puts an id there.
pub const LEASE: &str = "$LEASE";

/// The settings (the clock) and the statement of the next call; `clock`
/// is microseconds after 2026-01-01, moved here.
pub fn statement(rng: &mut StdRng, clock: &mut i64) -> String {
    *clock += match rng.random_range(0..20) {
        0 => -rng.random_range(0..5_000_000),
        1 => rng.random_range(0..600_000_000),
        _ => rng.random_range(0..4_000_000),
    };
    let at = format!("SET rate_limiter.now_override = '{}'", chrono_text(*clock));
    let name = NAMES[rng.random_range(0..NAMES.len())];
    let key = literal(KEYS[rng.random_range(0..KEYS.len())]);
    let inline = if name == "slots_inline" || rng.random_bool(0.03) {
        format!(", config => {}", config(rng))
    } else {
        String::new()
    };
    let lease = LEASES[rng.random_range(0..LEASES.len())];
    let throws = rng.random_bool(0.2);
    let body = match rng.random_range(0..100) {
        0..=39 => format!(
            "SELECT {ACQUIRED} FROM rate_limiter.acquire('{name}', {key}, wait => '0', lease => {lease}, throws => {throws}{inline})"
        ),
        40..=51 => format!(
            "SELECT a.ok, a.lease_id IS NOT NULL, a.in_flight FROM generate_series(1, {}) AS g, \
             LATERAL rate_limiter.acquire('{name}', {key}, wait => g * interval '0', lease => {}{inline}) AS a",
            rng.random_range(2..=4),
            if rng.random_bool(0.7) { "NULL" } else { lease }
        ),
        52..=59 => format!("SELECT rate_limiter.release('{name}', {LEASE})"),
        60..=65 => format!(
            "SELECT rate_limiter.renew('{name}', {LEASE}, {})",
            if rng.random_bool(0.5) { "NULL" } else { lease }
        ),
        66..=73 => format!(
            "SELECT value, capacity, full_at, shards FROM rate_limiter.status('{name}', {key}{inline})"
        ),
        74..=83 if name != "slots_inline" => format!(
            "SELECT rate_limiter.define('{name}', {}, enforce => {})",
            config(rng),
            rng.random_bool(0.8)
        ),
        84..=85 => format!("SELECT rate_limiter.undefine('{name}')"),
        86..=87 => "SELECT rate_limiter.prune()".to_string(),
        88 => format!("SELECT ok FROM rate_limiter.rate_limit('{name}', {key})"),
        89 => format!("SELECT rate_limiter.rate_reset('{name}', {key})"),
        90 => format!("SELECT * FROM rate_limiter.acquire(NULL, {key})"),
        91 => format!("SELECT * FROM rate_limiter.acquire('{name}', {key}, wait => NULL)"),
        92 => format!("SELECT rate_limiter.release('{name}', NULL)"),
        93 => format!(
            "SELECT * FROM rate_limiter.acquire('{name}', {key}, wait => '-1 second')"
        ),
        _ => format!(
            "SELECT {ACQUIRED} FROM rate_limiter.acquire('{name}', {key}, throws => {throws}{inline})"
        ),
    };
    format!("{at}; {body}")
}

/// A `concurrency(max, lease)` config: max 1 to 3 mostly (so that limits
/// fill), sometimes out of range or NULL; a default lease sometimes, now
/// and then an invalid one.
fn config(rng: &mut StdRng) -> String {
    let max = match rng.random_range(0..40) {
        0 => "0".to_string(),
        1 => "32768".to_string(),
        2 => "NULL".to_string(),
        _ => rng.random_range(1..=3).to_string(),
    };
    let lease = match rng.random_range(0..12) {
        0 | 1 => ", '30 seconds'",
        2 => ", '0'",
        3 if rng.random_bool(0.3) => ", '-5 seconds'",
        _ => "",
    };
    format!("rate_limiter.concurrency({max}{lease})")
}
