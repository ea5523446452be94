//! `rate_limiter.rate_wait()`: `rate_limit`, but a refused call sleeps
//! until `retry_after` and tries again, until it is admitted or the next
//! try would come after `timeout`.
//!
//! Each try first looks (`rate_check`: no lock, no transaction id) and
//! consumes only when the limit would admit, in a subtransaction: if
//! another transaction took the tokens between the look and the try, the
//! try is refused and its subtransaction rolled back, which releases the
//! row lock, so others can use the limit while this call sleeps. Only the
//! call's final answer is counted in `rate_limiter.stats` (one decision per
//! call, as docs/guarantees.md, "Statistics and shadow mode", says): the
//! admitted try, or the refusal at the timeout.
//!
//! Sleeps on the real clock (the deadline is `clock_timestamp() +
//! timeout`, as `pg_sleep` sleeps), can be cancelled (57014), and
//! `statement_timeout` applies.

use super::composite;
use crate::call::{config_argument, Call};
use crate::composites::Composite;
use crate::errors::{report, CallError};
use crate::placement;
use crate::result_row::{self, ResultRow};
use crate::stats::{self, Counted};
use pgrx::fcinfo::pg_getarg;
use pgrx::heap_tuple::PgHeapTuple;
use pgrx::pg_sys;
use pgrx::prelude::*;
use pgrx::AllocatedByRust;
use rate_limiter_algorithm::{Decision, LimitError, Micros, Verdict};

/// The least a call sleeps after a try lost a race for the tokens.
const MIN_RETRY: Micros = 1_000;

/// Microseconds per day and per month, as PostgreSQL compares intervals
/// (`interval_cmp_value`: a month is 30 days).
const MICROS_PER_DAY: i128 = 86_400_000_000;

/// Whether `interval` is negative, as PostgreSQL orders intervals.
fn negative(interval: &Interval) -> bool {
    let total = i128::from(interval.months()) * 30 * MICROS_PER_DAY
        + i128::from(interval.days()) * MICROS_PER_DAY
        + i128::from(interval.micros());
    total < 0
}

/// `clock_timestamp() + timeout` (calendar arithmetic, as SQL does it).
unsafe fn deadline_after(timeout: Interval) -> Result<i64, CallError> {
    let now = pg_sys::GetCurrentTimestamp();
    // SAFETY: timestamptz_pl_interval takes a timestamptz and an interval;
    // an out-of-range result raises 22008, which is the SQL behaviour.
    let deadline: Option<i64> = pgrx::direct_function_call(
        pg_sys::timestamptz_pl_interval,
        &[Some(pg_sys::Datum::from(now)), timeout.into_datum()],
    );
    deadline.ok_or_else(|| {
        CallError::Limit(LimitError::invalid(
            "timeout",
            "timeout must not be NULL".to_string(),
        ))
    })
}

/// Sleeps `micros` (rounded up to a millisecond) with `pg_sleep`.
unsafe fn sleep(micros: Micros) {
    let seconds = (micros.max(0) as f64 / 1e6).max(0.001);
    pgrx::direct_function_call::<()>(pg_sys::pg_sleep, &[seconds.into_datum()]);
}

/// One try to consume, in a subtransaction that is kept when the try is
/// admitted (or answered as admitted in shadow mode) and rolled back
/// otherwise, also when the try fails with an error (which is then raised
/// again), as a PL/pgSQL `BEGIN ... EXCEPTION` block does.
fn try_consume(call: &Call<'_>) -> Result<(Decision, Counted), CallError> {
    crate::subtransaction::kept_if(|| placement::consume(call), |(decision, _)| decision.ok)
}

/// What one look-and-try ended with.
enum Try {
    /// Admitted (or answered as admitted in shadow mode), and counted.
    Admitted(Decision),
    /// Not admitted: retry after `retry` microseconds (refused by
    /// `member`, a composite's member that refused longest).
    Refused {
        retry: Micros,
        remaining: f64,
        member: Option<Vec<u8>>,
    },
}

/// Looks, and tries when the look says the limit would admit.
unsafe fn look_and_try(call: &Call<'_>, composite: Option<&Composite>) -> Result<Try, CallError> {
    crate::blocks::forget_refusal();
    let (probe, member) = match composite {
        Some(found) => composite::check(call, found)?,
        None => (placement::check(call)?, None),
    };
    if !probe.ok {
        return Ok(Try::Refused {
            retry: probe.retry_after.unwrap_or(MIN_RETRY),
            remaining: probe.remaining,
            member,
        });
    }
    let attempt = match composite {
        Some(found) => {
            let answered = crate::subtransaction::kept_if(
                || composite::consume(call, found),
                |answered| answered.decision.ok,
            )?;
            if answered.decision.ok {
                answered.count();
            }
            answered.decision
        }
        None => {
            let (attempt, counted) = try_consume(call)?;
            if attempt.ok {
                stats::count(call.name, counted);
            }
            attempt
        }
    };
    if attempt.ok {
        return Ok(Try::Admitted(attempt));
    }
    // Another transaction took the tokens between the look and the try:
    // wait as the try says, at least a millisecond.
    Ok(Try::Refused {
        retry: attempt.retry_after.unwrap_or(0).max(MIN_RETRY),
        remaining: attempt.remaining,
        member: None,
    })
}

/// Tries until admitted or out of time (see the module documentation); the
/// final answer, counted.
unsafe fn wait(
    call: &Call<'_>,
    composite: Option<&Composite>,
    deadline: i64,
) -> Result<Decision, CallError> {
    loop {
        // Each try sees what committed while the call slept, as each
        // statement of a PL/pgSQL function would: a new snapshot under
        // READ COMMITTED (the transaction's under REPEATABLE READ).
        pg_sys::CommandCounterIncrement();
        pg_sys::PushActiveSnapshot(pg_sys::GetTransactionSnapshot());
        let outcome = look_and_try(call, composite);
        pg_sys::PopActiveSnapshot();
        let (retry, remaining, member) = match outcome? {
            Try::Admitted(decision) => return Ok(decision),
            Try::Refused {
                retry,
                remaining,
                member,
            } => (retry, remaining, member),
        };
        if pg_sys::GetCurrentTimestamp().saturating_add(retry) > deadline {
            // (A composite's refusal counts for the member that refused
            // longest, as its rate_limit would.)
            let name = member.as_deref().unwrap_or(call.name);
            stats::count(
                name,
                Counted {
                    verdict: Verdict::Refused,
                    count: call.request.count,
                    reserved: false,
                    near_limit: false,
                    contended: false,
                    blocked: crate::blocks::refusal_reason(name, call.key).is_some(),
                },
            );
            return Ok(Decision {
                ok: false,
                retry_after: Some(retry),
                remaining,
                new_state: None,
            });
        }
        sleep(retry);
    }
}

/// PostgreSQL's "version 1 calling convention" record.
const CALLING_CONVENTION: pg_sys::Pg_finfo_record = pg_sys::Pg_finfo_record { api_version: 1 };

/// `rate_limiter.rate_wait(name, key, count, timeout, config)`. See
/// sql/functions.sql. Errors, in this order: 22004 NULL timeout; 22023
/// negative timeout; 25006 in a read-only transaction; then as
/// `rate_limit` (22004, 42704, 42501, 54000, 22023).
#[no_mangle]
#[pg_guard]
pub unsafe extern "C-unwind" fn rate_wait_wrapper(
    fcinfo: pg_sys::FunctionCallInfo,
) -> pg_sys::Datum {
    let Some(timeout) = pg_getarg::<Interval>(fcinfo, 3) else {
        report(CallError::Limit(LimitError::null("timeout")))
    };
    if negative(&timeout) {
        report(CallError::Limit(LimitError::invalid(
            "timeout",
            "timeout must not be negative".to_string(),
        )))
    }
    if pg_sys::XactReadOnly {
        ereport!(
            PgLogLevel::ERROR,
            PgSqlErrorCode::ERRCODE_READ_ONLY_SQL_TRANSACTION,
            "cannot execute rate_wait() in a read-only transaction"
        );
    }
    let call = match Call::new(
        pg_getarg::<&[u8]>(fcinfo, 0),
        pg_getarg::<&[u8]>(fcinfo, 1),
        pg_getarg::<f64>(fcinfo, 2),
        Some(false),
        Some(false),
        pg_getarg::<PgHeapTuple<'_, AllocatedByRust>>(fcinfo, 4),
    ) {
        Ok(call) => Call {
            config_argument: config_argument(fcinfo, 4),
            ..call
        },
        Err(error) => report(CallError::Limit(error)),
    };
    // A composite's name (docs/composites.md): every try is one of its
    // members' rate_limit_all.
    let outcome = composite::of(call.name, call.config.is_some()).and_then(|found| {
        deadline_after(timeout).and_then(|deadline| wait(&call, found.as_deref(), deadline))
    });
    match outcome {
        Ok(decision) => result_row::put(
            fcinfo,
            ResultRow {
                ok: decision.ok,
                retry_after: decision.retry_after.map(crate::result_row::interval),
                remaining: decision.remaining,
            },
        ),
        Err(error) => report(error),
    }
}

#[no_mangle]
pub extern "C" fn pg_finfo_rate_wait_wrapper() -> &'static pg_sys::Pg_finfo_record {
    &CALLING_CONVENTION
}
