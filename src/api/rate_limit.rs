//! The core SQL functions: `rate_limiter.rate_limit()` (consume),
//! `rate_limiter.rate_check()` (the same answer, no lock, no write) and
//! `rate_limiter.rate_reset()` (forget the state).
//!
//! Order of work in a call: argument checks (NULLs are 22004 before
//! anything is looked up), then `crate::placement` (on one server
//! `local::consume`): the config (inline, else the definition, else 42704),
//! the row lock, the clock, the math, the write. Errors are raised only
//! after SPI is finished; a refusal with `throws => true` is raised as the
//! very last step.

use super::composite;
use crate::call::{config_argument, Call};
use crate::config::required;
use crate::errors::{raise_refused, report, CallError, Refusal};
use crate::placement;
use crate::result_row::{self, ResultRow};
use crate::security::write_as_owner;
use crate::stats;
use crate::storage;
use pgrx::fcinfo::{pg_getarg, pg_getarg_datum};
use pgrx::heap_tuple::PgHeapTuple;
use pgrx::pg_sys;
use pgrx::prelude::*;
use pgrx::varlena::{varatt_is_1b_e, varatt_is_4b_c, varlena_to_byte_slice};
use pgrx::AllocatedByRust;
use rate_limiter_algorithm::Decision;

/// What a call decided, and for a composite's refusal the refusal to
/// raise with `throws => true` (it names the member that refused longest).
type Decided = (Decision, Option<Refusal>);

/// `rate_limit`'s body: consume, and count the decision (a composite's
/// name: its members', docs/composites.md).
fn consume_counted(call: &Call<'_>) -> Result<Decided, CallError> {
    let found = match composite::known(call)? {
        Some(found) => found,
        None => match placement::consume(call) {
            Ok((decision, counted)) => {
                stats::count(call.name, counted);
                return Ok((decision, None));
            }
            Err(error) => match composite::instead(call, &error)? {
                Some(found) => found,
                None => return Err(error),
            },
        },
    };
    let answered = composite::consume(call, &found)?;
    answered.count();
    Ok((answered.decision, answered.refusal))
}

/// `rate_check`'s body (a composite's name: its members').
fn check(call: &Call<'_>) -> Result<Decided, CallError> {
    match placement::check(call) {
        Ok(decision) => Ok((decision, None)),
        Err(error) => match composite::instead(call, &error)? {
            Some(found) => {
                let answered = composite::check_answered(call, &found)?;
                Ok((answered.decision, answered.refusal))
            }
            None => Err(error),
        },
    }
}

/// Turns a decision into the result row, or raises the refusal when the
/// call has `throws => true`. `name` and `key` borrow the arguments, so
/// nothing needs dropping when the refusal is raised.
fn finish(
    name: &[u8],
    key: Option<&[u8]>,
    throws: bool,
    (decision, refusal): Decided,
) -> ResultRow {
    if let (false, true, Some(refusal)) = (decision.ok, throws, refusal) {
        refusal.raise();
    }
    if !decision.ok && throws {
        let blocked = crate::blocks::refusal_reason(name, key);
        raise_refused(
            name,
            key,
            decision.retry_after.unwrap_or(0),
            decision.remaining,
            blocked,
        );
    }
    ResultRow {
        ok: decision.ok,
        retry_after: decision.retry_after.map(crate::result_row::interval),
        remaining: decision.remaining,
    }
}

/// Argument `number` of the call `fcinfo`, a `text`, as its bytes (NULL:
/// `None`): what `pg_getarg::<&[u8]>` gives, which always calls
/// `pg_detoast_datum_packed`; here that call is made only when it would
/// do something, for a value compressed or stored out of line (fmgr.c:
/// `VARATT_IS_COMPRESSED || VARATT_IS_EXTERNAL`), and otherwise the
/// value is read where it is, as the function would return it.
///
/// # Safety
/// Argument `number` of `fcinfo` must be a `text`.
unsafe fn text_argument<'a>(fcinfo: pg_sys::FunctionCallInfo, number: usize) -> Option<&'a [u8]> {
    let mut varlena = pg_getarg_datum(fcinfo, number)?.cast_mut_ptr::<pg_sys::varlena>();
    if varlena.is_null() {
        return None;
    }
    if varatt_is_4b_c(varlena) || varatt_is_1b_e(varlena) {
        varlena = pg_sys::pg_detoast_datum_packed(varlena);
    }
    Some(varlena_to_byte_slice(varlena))
}

/// Runs `body` for the arguments of the call `fcinfo` (`name, key, count,
/// reserve, throws, config`) and returns its result row.
///
/// # Safety
/// `fcinfo` must be a call of a function with those six arguments.
unsafe fn run(
    fcinfo: pg_sys::FunctionCallInfo,
    body: impl FnOnce(&Call<'_>) -> Result<Decided, CallError>,
) -> pg_sys::Datum {
    answer(fcinfo, decide(fcinfo, body))
}

/// The arguments of the call `fcinfo` that its answer needs (`name`,
/// `key`, `throws`), and `body`'s decision for the call, or the error to
/// raise. Raises nothing itself: the caller raises, after whatever it
/// set up around the call (a kept scan's context) is undone.
///
/// # Safety
/// As [`run`].
unsafe fn decide<'a>(
    fcinfo: pg_sys::FunctionCallInfo,
    body: impl FnOnce(&Call<'_>) -> Result<Decided, CallError>,
) -> Result<(&'a [u8], Option<&'a [u8]>, bool, Decided), CallError> {
    let call = match Call::new(
        text_argument(fcinfo, 0),
        text_argument(fcinfo, 1),
        pg_getarg::<f64>(fcinfo, 2),
        pg_getarg::<bool>(fcinfo, 3),
        pg_getarg::<bool>(fcinfo, 4),
        pg_getarg::<PgHeapTuple<'_, AllocatedByRust>>(fcinfo, 5),
    ) {
        Ok(call) => Call {
            config_argument: config_argument(fcinfo, 5),
            function: Some((*(*fcinfo).flinfo).fn_oid),
            ..call
        },
        Err(error) => return Err(CallError::Limit(error)),
    };
    let (name, key, throws) = (call.name, call.key, call.throws);
    crate::blocks::forget_refusal();
    body(&call).map(|decision| (name, key, throws, decision))
}

/// Returns the result row of a decision made by [`decide`], or raises its
/// error, or its refusal when the call has `throws => true` (a longjmp
/// past every Rust frame above: nothing there may need dropping).
///
/// # Safety
/// `fcinfo` is the call's own.
unsafe fn answer(
    fcinfo: pg_sys::FunctionCallInfo,
    decided: Result<(&[u8], Option<&[u8]>, bool, Decided), CallError>,
) -> pg_sys::Datum {
    match decided {
        Ok((name, key, throws, decision)) => {
            result_row::put(fcinfo, finish(name, key, throws, decision))
        }
        Err(error) => report(error),
    }
}

/// PostgreSQL's "version 1 calling convention" record for the two entry
/// points below (what `PG_FUNCTION_INFO_V1` declares in C).
const CALLING_CONVENTION: pg_sys::Pg_finfo_record = pg_sys::Pg_finfo_record { api_version: 1 };

/// `rate_limiter.rate_limit(name, key, count, reserve, throws, config)`:
/// consumes `count` tokens if it can. See sql/functions.sql. A plain C
/// entry point rather than `#[pg_extern]`, to return its row in
/// materialize mode (see `result_row`).
#[no_mangle]
#[pg_guard]
pub unsafe extern "C-unwind" fn rate_limit_wrapper(
    fcinfo: pg_sys::FunctionCallInfo,
) -> pg_sys::Datum {
    run(fcinfo, consume_counted)
}

#[no_mangle]
pub extern "C" fn pg_finfo_rate_limit_wrapper() -> &'static pg_sys::Pg_finfo_record {
    &CALLING_CONVENTION
}

/// `rate_limiter.rate_check(...)`: the answer `rate_limit` would give, with
/// no lock and no write. See sql/functions.sql.
#[no_mangle]
#[pg_guard]
pub unsafe extern "C-unwind" fn rate_check_wrapper(
    fcinfo: pg_sys::FunctionCallInfo,
) -> pg_sys::Datum {
    // The statement's reads may keep their open scan for its executor
    // (storage::read_cache): the per-query memory of the caller's
    // expression context, as PostgreSQL's set-returning function API
    // gives it.
    let info = (*fcinfo).resultinfo as *mut pg_sys::ReturnSetInfo;
    let context = if !info.is_null()
        && (*info).type_ == pg_sys::NodeTag::T_ReturnSetInfo
        && !(*info).econtext.is_null()
    {
        (*(*info).econtext).ecxt_per_query_memory
    } else {
        std::ptr::null_mut()
    };
    // The decision is made with the kept scan allowed; its answer (and a
    // refusal raised with `throws => true`, which longjmps past every
    // Rust frame) only after `within` has returned, so that nothing of
    // this call's is left set when the statement fails.
    let decided = storage::read_cache::within(context, || decide(fcinfo, check));
    answer(fcinfo, decided)
}

#[no_mangle]
pub extern "C" fn pg_finfo_rate_check_wrapper() -> &'static pg_sys::Pg_finfo_record {
    &CALLING_CONVENTION
}

/// `rate_limiter.rate_reset(name, key)`: forgets the state of (name, key)
/// on every shard (of a composite: of every member's). See
/// sql/functions.sql.
#[pg_extern(sql = false)]
fn rate_reset(name: Option<&[u8]>, key: Option<&[u8]>) {
    let name = match required(name, "name") {
        Ok(name) => name,
        Err(error) => report(CallError::Limit(error)),
    };
    if let Err(error) = placement::before_call(c"rate_reset()") {
        report(error)
    }
    // A composite's name: every member's state for the key.
    let members = match composite::of(name, false) {
        Ok(found) => found.map(|found| found.members.clone()),
        Err(error) => report(error),
    };
    let deleted = write_as_owner(c"rate_reset()", |client| match &members {
        Some(members) => members
            .iter()
            .try_for_each(|member| storage::delete(client, member, key)),
        None => storage::delete(client, name, key),
    });
    if let Err(error) = deleted {
        report(CallError::Spi(error))
    }
}
