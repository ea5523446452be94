//! The current time of a rate-limit call.

use crate::errors::CallError;
use crate::settings;
use pgrx::datum::DatumWithOid;
use pgrx::pg_sys;
use rate_limiter_algorithm::Micros;
use std::cell::Cell;

thread_local! {
    /// The `rate_limiter.now_override` of the node that delegated the call
    /// running now (Citus), while it runs.
    static CALLERS_OVERRIDE: Cell<Option<Micros>> = const { Cell::new(None) };
}

/// The current time in microseconds since 2000-01-01 UTC:
/// `rate_limiter.now_override` when set (during a call delegated by another
/// node, that node's, see [`with_callers_override`]), else the real clock
/// (`clock_timestamp()`, not the transaction start). Callers read it after
/// the row lock is held, so a caller that waited is charged at the time it
/// actually proceeds.
pub fn now() -> Micros {
    CALLERS_OVERRIDE
        .with(Cell::get)
        .or_else(settings::now_override)
        .unwrap_or_else(current_timestamp)
}

/// Seconds from 1970-01-01 (Unix time) to 2000-01-01 (PostgreSQL's
/// epoch): `(POSTGRES_EPOCH_JDATE - UNIX_EPOCH_JDATE) * SECS_PER_DAY`.
const UNIX_TO_POSTGRES_EPOCH: i64 = 10_957 * 86_400;

/// The real clock in microseconds since 2000-01-01 UTC, as PostgreSQL's
/// `GetCurrentTimestamp()` (utils/adt/timestamp.c, the same in 15 to 18)
/// computes it: `gettimeofday`, then seconds and microseconds counted from
/// PostgreSQL's epoch. Made here rather than called: a call from Rust into
/// PostgreSQL is wrapped by pgrx in a `sigsetjmp` (about 120 instructions,
/// more than the function), and this one cannot raise an error.
fn current_timestamp() -> Micros {
    let mut now = libc::timeval {
        tv_sec: 0,
        tv_usec: 0,
    };
    // SAFETY: gettimeofday writes the timeval it is given; with no time
    // zone argument it cannot fail.
    unsafe { libc::gettimeofday(&mut now, std::ptr::null_mut()) };
    (now.tv_sec as i64 - UNIX_TO_POSTGRES_EPOCH) * 1_000_000 + now.tv_usec as i64
}

/// What a call delegated to another node (Citus) sends as its
/// `now_override` argument: this session's `rate_limiter.now_override`
/// when it is set and the current user is a superuser (who alone may set
/// it), else NULL (the node holding the row then uses its own clock).
pub fn override_to_send() -> DatumWithOid<'static> {
    // SAFETY: reads the current user's superuser flag.
    match settings::now_override().filter(|_| unsafe { pg_sys::superuser() }) {
        Some(micros) => {
            // SAFETY: a timestamptz datum is its microseconds since 2000.
            unsafe { DatumWithOid::new(pg_sys::Datum::from(micros), pg_sys::TIMESTAMPTZOID) }
        }
        None => DatumWithOid::null_oid(pg_sys::TIMESTAMPTZOID),
    }
}

/// Runs `body` (a delegated call) with the clock of the node that
/// delegated it: `callers` is its `now_override` argument. A non-NULL one
/// needs a superuser, as setting `rate_limiter.now_override` does (42501).
pub fn with_callers_override<R>(
    callers: Option<Micros>,
    body: impl FnOnce() -> R,
) -> Result<R, CallError> {
    if callers.is_none() {
        return Ok(body());
    }
    // SAFETY: reads the current user's superuser flag.
    if !unsafe { pg_sys::superuser() } {
        return Err(CallError::ClockNotAllowed);
    }
    struct Restore(Option<Micros>);
    impl Drop for Restore {
        fn drop(&mut self) {
            CALLERS_OVERRIDE.with(|cell| cell.set(self.0));
        }
    }
    let _restore = Restore(CALLERS_OVERRIDE.with(|cell| cell.replace(callers)));
    Ok(body())
}

/// Forgets a delegating node's clock (at the end of a transaction, in case
/// a call ended without unwinding).
pub fn forget_callers_override() {
    CALLERS_OVERRIDE.with(|cell| cell.set(None));
}
