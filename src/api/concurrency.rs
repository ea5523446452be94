//! The native helpers of the concurrency limits' PL/pgSQL, which both
//! editions share (sql/concurrency.sql; the portable edition has its own
//! in portable/sql/): the clock and a name as messages show it.

use pgrx::prelude::*;

/// `rate_limiter._clock()`: [`crate::clock::now`] (rate_limiter.now_override
/// when set, else the real clock) as a `timestamptz`.
#[pg_extern(sql = false)]
fn clock() -> TimestampWithTimeZone {
    let now = crate::clock::now();
    // SAFETY: microseconds since 2000-01-01 are a timestamptz datum.
    unsafe {
        TimestampWithTimeZone::from_datum(pg_sys::Datum::from(now), false)
            .unwrap_or_else(|| error!("the clock is out of range"))
    }
}

/// `rate_limiter._for_message(value)`: [`crate::names::for_message`].
#[pg_extern(sql = false)]
fn for_message(value: &[u8]) -> String {
    crate::names::for_message(value)
}
