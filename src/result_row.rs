//! Returning the result rows of set-returning functions: the one row
//! `(ok, retry_after, remaining)` of `rate_limit` and `rate_check`, and the
//! rows of `rate_limit_all`, all declared `RETURNS TABLE` (see
//! PGRX-NOTES: that is what makes every calling form call them once).
//!
//! The rows go back in materialize mode, described by the descriptor the
//! caller expects (`ReturnSetInfo.expectedDesc`): one function call per
//! result, no per-call memory context and no result type looked up in the
//! catalog, which is what a value-per-call set-returning function costs
//! (about 10% of a `rate_check`). When a caller gives no expected
//! descriptor, PostgreSQL's `InitMaterializedSRF` builds one.

use pgrx::pg_sys;
use pgrx::prelude::*;

/// `micros` microseconds as an `interval` of that many microseconds (no
/// days or months), exactly: pgrx's `Interval::from_micros` goes through
/// seconds in an `f64`, which rounds beyond 2^53 microseconds (about 285
/// years), while the portable edition's `interval` is exact.
pub fn interval(micros: i64) -> Interval {
    Interval::new(0, 0, micros)
        .unwrap_or_else(|_| unreachable!("no months or days: no sign to mismatch"))
}

/// The result row of a call.
pub struct ResultRow {
    pub ok: bool,
    /// NULL when admitted without debt.
    pub retry_after: Option<Interval>,
    pub remaining: f64,
}

/// Hands `row` to the caller of the set-returning function called with
/// `fcinfo`, and returns the function's (unused) result datum.
///
/// Errors: `0A000` when called where a set cannot be accepted.
///
/// # Safety
/// `fcinfo` must be the call's own `FunctionCallInfo`.
pub unsafe fn put(fcinfo: pg_sys::FunctionCallInfo, row: ResultRow) -> pg_sys::Datum {
    let retry_after = row.retry_after.and_then(IntoDatum::into_datum);
    let values = [
        Some(pg_sys::Datum::from(row.ok)),
        retry_after,
        // Shown without float noise (docs/semantics.md, "What a call shows").
        rate_limiter_algorithm::shown(row.remaining).into_datum(),
    ];
    put_rows(fcinfo, [values])
}

/// Hands `rows` (each a value per result column, `None` = NULL) to the
/// caller of the set-returning function called with `fcinfo`, in
/// materialize mode, and returns the function's (unused) result datum.
///
/// Errors: `0A000` when called where a set cannot be accepted.
///
/// # Safety
/// `fcinfo` must be the call's own `FunctionCallInfo`, and each row must
/// match the function's result columns.
pub unsafe fn put_rows<const COLUMNS: usize>(
    fcinfo: pg_sys::FunctionCallInfo,
    rows: impl IntoIterator<Item = [Option<pg_sys::Datum>; COLUMNS]>,
) -> pg_sys::Datum {
    let info = (*fcinfo).resultinfo as *mut pg_sys::ReturnSetInfo;
    if info.is_null()
        || (*info).type_ != pg_sys::NodeTag::T_ReturnSetInfo
        || (*info).allowedModes & pg_sys::SetFunctionReturnMode::SFRM_Materialize as i32 == 0
    {
        ereport!(
            PgLogLevel::ERROR,
            PgSqlErrorCode::ERRCODE_FEATURE_NOT_SUPPORTED,
            "set-valued function called in context that cannot accept a set"
        );
    }
    let descriptor = if (*info).expectedDesc.is_null() {
        pg_sys::InitMaterializedSRF(fcinfo, 0);
        (*info).setDesc
    } else {
        let context = pg_sys::MemoryContextSwitchTo((*(*info).econtext).ecxt_per_query_memory);
        let random_access = (*info).allowedModes
            & pg_sys::SetFunctionReturnMode::SFRM_Materialize_Random as i32
            != 0;
        (*info).setResult = pg_sys::tuplestore_begin_heap(random_access, false, pg_sys::work_mem);
        // No setDesc: the caller reads the rows with the descriptor it
        // expects (and would free a setDesc after each call).
        (*info).setDesc = std::ptr::null_mut();
        (*info).returnMode = pg_sys::SetFunctionReturnMode::SFRM_Materialize;
        pg_sys::MemoryContextSwitchTo(context);
        (*info).expectedDesc
    };
    for row in rows {
        let mut values = row.map(|value| value.unwrap_or(pg_sys::Datum::from(0)));
        let mut nulls = row.map(|value| value.is_none());
        pg_sys::tuplestore_putvalues(
            (*info).setResult,
            descriptor,
            values.as_mut_ptr(),
            nulls.as_mut_ptr(),
        );
    }
    (*fcinfo).isnull = true;
    pg_sys::Datum::from(0)
}
