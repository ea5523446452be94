//! `rate_limiter.http_headers()`: the rate-limit fields of an HTTP
//! response, per draft-ietf-httpapi-ratelimit-headers-10, as structured
//! field lists (RFC 9651):
//!
//! - `RateLimit-Policy: "<name>";q=<quota>;w=<window>`: the quota is the
//!   limit's rate, the window its period in seconds;
//! - `RateLimit: "<name>";r=<remaining>;t=<seconds>`: `r` the whole tokens
//!   left (never negative), `t` the seconds until the limit is full again,
//!   or, for a refused call, until `retry_after`;
//! - `Retry-After: <seconds>` (RFC 9110) for a refused call only.
//!
//! Seconds are whole and rounded up (never early). Integers are capped at
//! the largest structured-field integer (999,999,999,999,999); a
//! fractional quota is a decimal with at most three fraction digits.

use super::status;
use crate::errors::{report, CallError};
use pgrx::heap_tuple::PgHeapTuple;
use pgrx::prelude::*;
use pgrx::AllocatedByRust;
use rate_limiter_algorithm::{LimitError, Micros};

/// The largest integer a structured field can carry.
const MAX_INTEGER: f64 = 999_999_999_999_999.0;
const MICROS_PER_SECOND: i128 = 1_000_000;

/// `name` as a structured-field string: printable ASCII, with `\` and `"`
/// escaped. Other bytes cannot be sent (22023).
fn sf_string(name: &[u8]) -> Result<String, LimitError> {
    let mut quoted = String::with_capacity(name.len() + 2);
    quoted.push('"');
    for &byte in name {
        match byte {
            b'"' | b'\\' => {
                quoted.push('\\');
                quoted.push(byte as char);
            }
            0x20..=0x7e => quoted.push(byte as char),
            _ => {
                return Err(LimitError::invalid(
                    "name",
                    "a limit name in an HTTP header must be printable ASCII".to_string(),
                ))
            }
        }
    }
    quoted.push('"');
    Ok(quoted)
}

/// A whole number of at most 15 digits (`value` >= 0 and finite).
fn sf_integer(value: f64) -> String {
    format!("{}", value.min(MAX_INTEGER) as u64)
}

/// `value` (> 0, finite) as an integer when whole, else a decimal with at
/// most three fraction digits (and at most twelve integer digits).
fn sf_number(value: f64) -> String {
    if value.fract() == 0.0 || value >= 1e12 {
        return sf_integer(value.round());
    }
    let decimal = format!("{value:.3}");
    let trimmed = decimal.trim_end_matches('0');
    if trimmed.ends_with('.') {
        format!("{trimmed}0")
    } else {
        trimmed.to_string()
    }
}

/// `micros` in whole seconds, rounded up, at least 0.
fn seconds(micros: i128) -> String {
    let whole = (micros.max(0) + MICROS_PER_SECOND - 1) / MICROS_PER_SECOND;
    sf_integer(whole as f64)
}

/// An interval's length in microseconds (a month as 30 days, as
/// `retry_after` never has months or days anyway).
fn interval_micros(interval: Interval) -> i128 {
    let days = i128::from(interval.months()) * 30 + i128::from(interval.days());
    days * 86_400 * MICROS_PER_SECOND + i128::from(interval.micros())
}

/// `rate_limiter.http_headers(name, key, ok, retry_after, remaining,
/// config)`. See sql/functions.sql.
#[pg_extern(sql = false)]
fn http_headers(
    name: Option<&[u8]>,
    key: Option<&[u8]>,
    ok: Option<bool>,
    retry_after: Option<Interval>,
    remaining: Option<f64>,
    config: Option<pgrx::composite_type!("rate_limiter.config")>,
) -> pgrx::JsonB {
    match headers(name, key, ok, retry_after, remaining, config) {
        Ok(headers) => pgrx::JsonB(headers),
        Err(error) => report(error),
    }
}

fn headers(
    name: Option<&[u8]>,
    key: Option<&[u8]>,
    ok: Option<bool>,
    retry_after: Option<Interval>,
    remaining: Option<f64>,
    config: Option<PgHeapTuple<'_, AllocatedByRust>>,
) -> Result<serde_json::Value, CallError> {
    let shown = status::shown(name, key, config.map(crate::config::header_of))?;
    if remaining.is_some_and(f64::is_nan) {
        return Err(
            LimitError::invalid("remaining", "remaining must be a number".to_string()).into(),
        );
    }
    let retry_after = match (ok, retry_after) {
        (Some(false), None) => {
            return Err(LimitError::null("retry_after").into());
        }
        (_, Some(interval)) => {
            let micros = interval_micros(interval);
            if micros < 0 {
                return Err(LimitError::invalid(
                    "retry_after",
                    "retry_after must not be negative".to_string(),
                )
                .into());
            }
            Some(micros)
        }
        (_, None) => None,
    };
    let (policy, limit) = match shown {
        status::Shown::Limit(name, definition) => {
            fields(name, key, &definition, remaining, ok.zip(retry_after))?
        }
        // A composite (docs/composites.md): one policy per member, each
        // member's tokens as status shows them now.
        status::Shown::Composite(members) => {
            let mut policies = Vec::with_capacity(members.len());
            let mut limits = Vec::with_capacity(members.len());
            for (member, definition) in &members {
                let (policy, limit) = fields(member, key, definition, None, None)?;
                policies.push(policy);
                limits.push(limit);
            }
            (policies.join(", "), limits.join(", "))
        }
    };
    let mut headers = serde_json::Map::new();
    headers.insert("RateLimit-Policy".to_string(), policy.into());
    headers.insert("RateLimit".to_string(), limit.into());
    if let (Some(false), Some(micros)) = (ok, retry_after) {
        headers.insert("Retry-After".to_string(), seconds(micros).into());
    }
    Ok(serde_json::Value::Object(headers))
}

/// The `RateLimit-Policy` and `RateLimit` list members of the limit
/// `name` (`definition` for `key`): `remaining` the call's (`None`: the
/// current value), `refused` the call's `(ok, retry_after)` when given.
fn fields(
    name: &[u8],
    key: Option<&[u8]>,
    definition: &crate::definitions::Definition,
    remaining: Option<f64>,
    refused: Option<(bool, i128)>,
) -> Result<(String, String), CallError> {
    let config = definition.config;
    let label = sf_string(name)?;
    let (current, now) = status::current(name, key, definition)?;
    // The current value as status shows it (docs/semantics.md, "What a
    // call shows"), so that r= is the whole part of what status says.
    let remaining = remaining.unwrap_or_else(|| rate_limiter_algorithm::shown(current.value));
    // Until the limit is full again; for a refused call, until it may retry.
    let until = match refused {
        Some((false, micros)) => micros,
        _ => i128::from(current.full_at) - i128::from(now as Micros),
    };
    Ok((
        format!(
            "{label};q={};w={}",
            sf_number(config.rate),
            seconds(i128::from(window(&config, now as Micros)))
        ),
        format!(
            "{label};r={};t={}",
            sf_integer(remaining.max(0.0).floor()),
            seconds(until)
        ),
    ))
}

fn window(config: &rate_limiter_algorithm::Config, now: Micros) -> Micros {
    match config.calendar {
        Some(calendar) => {
            let start = calendar.0.window_start(now);
            calendar.0.nth_start(start, 1) - start
        }
        None => config.period,
    }
}
