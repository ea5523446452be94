//! Running a statement on the node that holds a row, inside the caller's
//! distributed transaction: Citus delegates the `_at` functions
//! (`_rate_limit_at`, `_rate_state_at`, `_rate_credit_at`, `_prune_at`) by
//! their distribution argument. The kept plan of `_rate_limit_at`'s
//! statement, the arguments every delegated call starts with, and how a
//! verdict travels.
use super::error::Error;
use super::value::DistributionValue;
use crate::errors::CallError;
use pgrx::datum::DatumWithOid;
use pgrx::pg_sys;
use pgrx::prelude::*;
use rate_limiter_algorithm::Verdict;
use std::cell::RefCell;

/// The statement that runs a call on the node holding its row: Citus
/// delegates `_rate_limit_at` (a distributed function colocated with the
/// state table, `force_delegation`) by its first argument, which planning
/// turns into a constant (never NULL: a NULL crashes Citus 13.2.2).
const ELSEWHERE: &std::ffi::CStr =
    c"SELECT ok, retry_after, remaining, verdict, reserved, near_limit, contended \
     FROM rate_limiter._rate_limit_at($1, $2, $3, $4, $5, $6, $7, $8, $9)";

/// The columns of [`ELSEWHERE`]'s row: `ok`, `retry_after`,
/// `remaining`, `verdict`, `reserved`, `near_limit`, `contended`.
pub(super) type ElsewhereRow = (
    Option<bool>,
    Option<i64>,
    Option<f64>,
    Option<i16>,
    Option<bool>,
    Option<bool>,
    Option<bool>,
);

/// [`ELSEWHERE`] parsed and analyzed once per backend (`SPI_keepplan`)
/// for one list of argument types, planned for each call with its
/// arguments as constants (`CURSOR_OPT_CUSTOM_PLAN`: Citus delegates a
/// call only when its distribution argument is a constant, which a
/// generic plan's parameter is not). PostgreSQL's plan cache analyzes it
/// again when an object it uses changes.
struct KeptPlan {
    types: Vec<pg_sys::Oid>,
    plan: pg_sys::SPIPlanPtr,
}

thread_local! {
    /// The kept plans of this backend, one per list of argument types
    /// (the type of `dkey`, and of the config once the extension was
    /// created again). Never freed: at most a few per backend.
    static KEPT_PLANS: RefCell<Vec<KeptPlan>> = const { RefCell::new(Vec::new()) };
}

/// The kept plan of [`ELSEWHERE`] for the argument types `types`, made on
/// first use; `None` when `plan_cache_mode` forces generic plans (which
/// the plan cache applies before the cursor option), or when it cannot be
/// made. Saves parsing and analyzing the statement on every call. Needs
/// an SPI connection.
fn kept_plan(types: &[pg_sys::Oid]) -> Option<pg_sys::SPIPlanPtr> {
    // SAFETY: reads a setting.
    if unsafe { pg_sys::plan_cache_mode }
        == pg_sys::PlanCacheMode::PLAN_CACHE_MODE_FORCE_GENERIC_PLAN as i32
    {
        return None;
    }
    let kept = KEPT_PLANS.with(|plans| {
        plans
            .borrow()
            .iter()
            .find(|kept| kept.types == types)
            .map(|kept| kept.plan)
    });
    if kept.is_some() {
        return kept;
    }
    let mut types = types.to_vec();
    // SAFETY: prepares in the current SPI connection and moves the plan
    // to a memory context of its own that lives as long as the backend.
    let plan = unsafe {
        let plan = pg_sys::SPI_prepare_cursor(
            ELSEWHERE.as_ptr(),
            types.len() as i32,
            types.as_mut_ptr(),
            pg_sys::CURSOR_OPT_CUSTOM_PLAN as i32,
        );
        if plan.is_null() || pg_sys::SPI_keepplan(plan) != 0 {
            return None;
        }
        plan
    };
    KEPT_PLANS.with(|plans| plans.borrow_mut().push(KeptPlan { types, plan }));
    Some(plan)
}

/// Runs [`ELSEWHERE`] with `arguments` in the current SPI connection, by
/// its kept plan (else as a one-shot plan, which is always custom),
/// read-only while this transaction has no transaction id (as pgrx's
/// `select`): its one row, all NULL if it returned none.
pub(super) fn run_elsewhere(
    arguments: &[DatumWithOid<'_>],
) -> Result<ElsewhereRow, pgrx::spi::SpiError> {
    let mut types = Vec::with_capacity(arguments.len());
    let mut values = Vec::with_capacity(arguments.len());
    let mut nulls: Vec<std::ffi::c_char> = Vec::with_capacity(arguments.len());
    for argument in arguments {
        types.push(argument.oid());
        let datum = argument.datum();
        nulls.push(if datum.is_some() { b' ' } else { b'n' } as std::ffi::c_char);
        values.push(datum.map_or(pg_sys::Datum::from(0), |datum| datum.sans_lifetime()));
    }
    // SAFETY: executes the statement with as many arguments as it has
    // parameters, of their types, and reads the row it returned while the
    // SPI connection is open (every column is passed by value).
    unsafe {
        let read_only = pg_sys::GetCurrentTransactionIdIfAny() == pg_sys::InvalidTransactionId;
        let status = match kept_plan(&types) {
            Some(plan) => {
                pg_sys::SPI_execute_plan(plan, values.as_mut_ptr(), nulls.as_ptr(), read_only, 1)
            }
            None => pg_sys::SPI_execute_with_args(
                ELSEWHERE.as_ptr(),
                types.len() as i32,
                types.as_mut_ptr(),
                values.as_mut_ptr(),
                nulls.as_ptr(),
                read_only,
                1,
            ),
        };
        Spi::check_status(status)?;
        let table = pg_sys::SPI_tuptable;
        if table.is_null() || pg_sys::SPI_processed != 1 {
            return Ok((None, None, None, None, None, None, None));
        }
        let tuple = *(*table).vals;
        let descriptor = (*table).tupdesc;
        let column = |number: i32| {
            let mut is_null = false;
            let datum = pg_sys::SPI_getbinval(tuple, descriptor, number, &mut is_null);
            (datum, is_null)
        };
        let boolean = |number| {
            let (datum, is_null) = column(number);
            bool::from_datum(datum, is_null)
        };
        let (retry_after, remaining, verdict) = (column(2), column(3), column(4));
        Ok((
            boolean(1),
            i64::from_datum(retry_after.0, retry_after.1),
            f64::from_datum(remaining.0, remaining.1),
            i16::from_datum(verdict.0, verdict.1),
            boolean(5),
            boolean(6),
            boolean(7),
        ))
    }
}

/// The SPI arguments of a delegated call: `dkey`, then `name` and `key`
/// as text (a NULL key for a global limit).
pub(super) fn row_arguments<'a>(
    dkey: &'a DistributionValue,
    name: &'a [u8],
    key: Option<&'a [u8]>,
) -> [DatumWithOid<'a>; 3] {
    // SAFETY: the bytes of text values become varlenas of type text.
    unsafe {
        [
            dkey.argument(),
            DatumWithOid::new(name, pg_sys::TEXTOID),
            match key {
                Some(key) => DatumWithOid::new(key, pg_sys::TEXTOID),
                None => DatumWithOid::null_oid(pg_sys::TEXTOID),
            },
        ]
    }
}

/// How a verdict travels between nodes (`_rate_limit_at`'s `verdict`):
/// 0 admitted, 1 refused, 2 refused in shadow mode, 3 refused by a block
/// ([`BLOCKED`]).
pub(super) fn verdict_number(verdict: Verdict) -> i16 {
    match verdict {
        Verdict::Admitted => 0,
        Verdict::Refused => 1,
        Verdict::ShadowRefused => 2,
    }
}

/// The verdict number of a call refused by its key's block
/// (docs/blocks.md): counted as refused and as blocked; a checking call
/// sends it too.
pub(super) const BLOCKED: i16 = 3;

pub(super) fn verdict_of(number: i16) -> Verdict {
    match number {
        0 => Verdict::Admitted,
        1 | BLOCKED => Verdict::Refused,
        _ => Verdict::ShadowRefused,
    }
}

/// Runs `statement`, the call of the delegated internal function
/// `function` with `arguments`, through a writing SPI connection, inside
/// this transaction: the first column of its one row.
///
/// Errors: 55000 when it returned no row or NULL; those of the call.
pub(super) fn one_value_elsewhere<T: FromDatum + IntoDatum>(
    statement: &str,
    arguments: &[DatumWithOid<'_>],
    function: &str,
) -> Result<T, CallError> {
    Spi::connect_mut(|client| {
        client
            .update(statement, Some(1), arguments)?
            .first()
            .get::<T>(1)
    })?
    .ok_or_else(|| {
        CallError::from(Error::Unusable(
            format!("rate_limiter.{function}() on another node returned no answer"),
            "Check that every node runs the same version of rate_limiter.",
        ))
    })
}
