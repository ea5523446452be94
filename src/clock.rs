//! The current time of a rate-limit call.

use crate::settings;
use pgrx::pg_sys;
use rate_limiter_algorithm::Micros;

/// The current time in microseconds since 2000-01-01 UTC:
/// `rate_limiter.now_override` when set, else the real clock
/// (`clock_timestamp()`, not the transaction start). Callers read it after
/// the row lock is held, so a caller that waited is charged at the time it
/// actually proceeds.
pub fn now() -> Micros {
    settings::now_override().unwrap_or_else(|| unsafe { pg_sys::GetCurrentTimestamp() })
}
