//! The native helpers of the concurrency limits' PL/pgSQL, which both
//! editions share (sql/concurrency.sql; the portable edition has its own
//! in portable/sql/): the clock, a name as messages show it, and the
//! statistics of `acquire`.

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

/// `rate_limiter._stats_count(name, verdict)`: counts one decision of
/// `acquire` in `rate_limiter.stats` (docs/monitoring.md): verdict 0
/// admitted (one token: a slot), 1 refused, 2 refused in shadow mode
/// (answered as admitted). Any other verdict counts nothing. (The
/// portable edition, which has no statistics, has a no-op.)
#[pg_extern(sql = false)]
fn stats_count(name: &[u8], verdict: i32) {
    let verdict = match verdict {
        0 => rate_limiter_algorithm::Verdict::Admitted,
        1 => rate_limiter_algorithm::Verdict::Refused,
        2 => rate_limiter_algorithm::Verdict::ShadowRefused,
        _ => return,
    };
    crate::stats::count(
        name,
        crate::stats::Counted {
            verdict,
            count: 1.0,
            reserved: false,
            near_limit: false,
            contended: false,
            blocked: false,
        },
    );
}

/// `rate_limiter._slots_elsewhere()`: whether the state table is stored
/// elsewhere, i.e. distributed by Citus (docs/citus.md, "Concurrency
/// limits"): the slots' statements then name the key's distribution
/// value, so that each routes to the node holding the key's slots. (The
/// portable edition, which is never distributed, answers false.)
#[pg_extern(sql = false)]
fn slots_elsewhere() -> bool {
    crate::catalog::objects().elsewhere
}
