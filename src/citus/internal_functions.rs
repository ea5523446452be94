//! The bodies and C entry points of the internal functions Citus
//! delegates to the node holding the rows (`_rate_limit_at`,
//! `_rate_state_at`, `_rate_credit_at`), and the checks every one of them
//! makes before it reads or writes (fail closed: 55000, 22023).

use super::credit::credit_local_shards;
use super::delegation::{verdict_number, BLOCKED};
use super::error::Error;
use super::metadata::distribution_value;
use super::read::read_local_shards;
use super::site::{here, spread, Spread};
use super::two_phase_commit::wrote;
use super::value::DistributionValue;
use crate::call::{config_argument, Call};
use crate::catalog;
use crate::errors::{report, CallError};
use crate::local;
use crate::result_row;
use crate::stats::Counted;
use crate::storage::ShardPlaces;
use pgrx::fcinfo::pg_getarg;
use pgrx::heap_tuple::PgHeapTuple;
use pgrx::pg_sys;
use pgrx::prelude::*;
use pgrx::AllocatedByRust;
use rate_limiter_algorithm::{Decision, LimitError, State};

/// The body of `_rate_limit_at` for a global limit with `shards` (>= 2)
/// shards: consumes from the shards on this node only, never waiting for
/// one another transaction holds (see [`consume_spread`]). `dkey` must be
/// the distribution value of one of its shards (22023), placed here
/// (55000).
pub(super) fn spread_at(
    dkey: Option<DistributionValue>,
    call: &Call<'_>,
    consume: bool,
    shards: i16,
) -> Result<(Decision, Option<Counted>), CallError> {
    if !consume {
        return Err(CallError::from(Error::NotOnCluster(
            "rate_check of a global limit with several shards",
        )));
    }
    let (spread, dkey) = delegated_spread(
        "_rate_limit_at",
        RATE_LIMIT_AT_HINT,
        true,
        dkey,
        call.name,
        shards,
    )?;
    let (decision, counted) = local::consume::consume(call, spread.placed(shards, Some(i16::MAX)))?;
    wrote(Some(&dkey))?;
    Ok((decision, Some(counted)))
}

/// What a delegated internal function called for a global limit with
/// `shards` (>= 2) shards checks: as [`checks`], then where the limit's
/// shards live ([`spread`], the metadata locks taken when `writes`), of
/// which the one of `dkey` must be on this node: 55000 when it is
/// elsewhere, 22023 when `dkey` is none of the limit's shards'. The
/// spread and `dkey`.
pub(super) fn delegated_spread(
    function: &str,
    hint: &'static str,
    writes: bool,
    dkey: Option<DistributionValue>,
    name: &[u8],
    shards: i16,
) -> Result<(Spread, DistributionValue), CallError> {
    checks(function, hint, writes)?;
    let spread = spread(name, shards, writes)?;
    if let Some(dkey) = dkey.as_ref() {
        if spread.local.iter().any(|(_, _, local)| local == dkey) {
            let dkey = dkey.clone();
            return Ok((spread, dkey));
        }
    }
    // Not one of this node's shards: a wrong dkey (22023), else a shard
    // on another node (55000).
    one_of_the_shards(dkey, name, shards)?;
    Err(not_here())
}

/// `dkey` when it is the distribution value of one of the shards
/// `0..shards` of the global limit `name`, else 22023.
pub(super) fn one_of_the_shards(
    dkey: Option<DistributionValue>,
    name: &[u8],
    shards: i16,
) -> Result<DistributionValue, CallError> {
    let Some(dkey) = dkey else {
        return Err(wrong_dkey());
    };
    for number in 0..shards {
        if distribution_value(name, None, number)? == dkey {
            return Ok(dkey);
        }
    }
    Err(wrong_dkey())
}

/// The error of a `dkey` that is not the one of the row(s) called for.
pub(super) fn wrong_dkey() -> CallError {
    CallError::Limit(LimitError::invalid(
        "dkey",
        "dkey is not the distribution value of (name, key)".to_string(),
    ))
}

/// What every delegated internal function checks first: the tables are
/// distributed (55000), and a writing call runs inside a transaction
/// block (55000: Citus runs a delegated call inside the caller's
/// distributed transaction, and anything else would commit on its own).
/// `function` is its name; `hint` names the public function to call
/// instead.
pub(super) fn checks(function: &str, hint: &'static str, writes: bool) -> Result<(), CallError> {
    if !catalog::objects().elsewhere {
        return Err(CallError::from(Error::Unusable(
            format!("rate_limiter.{function}() was called, but rate_limiter.rate_limits is not distributed"),
            hint,
        )));
    }
    // SAFETY: reads the transaction state.
    if writes && !unsafe { pg_sys::IsTransactionBlock() } {
        return Err(CallError::from(Error::Unusable(
            format!("rate_limiter.{function}() writes only inside a transaction block"),
            hint,
        )));
    }
    Ok(())
}

/// What every delegated internal function checks first, and the
/// distribution value of (name, key): the tables are distributed (55000),
/// a writing call runs inside a transaction block (55000: Citus runs a
/// delegated call inside the caller's distributed transaction, and
/// anything else would commit on its own), and `dkey` is that value
/// (22023). `function` is its name; `hint` names the public function to
/// call instead.
pub(super) fn delegated(
    function: &str,
    hint: &'static str,
    writes: bool,
    dkey: Option<DistributionValue>,
    name: &[u8],
    key: Option<&[u8]>,
) -> Result<DistributionValue, CallError> {
    checks(function, hint, writes)?;
    let expected = distribution_value(name, key, 0)?;
    if dkey.as_ref() != Some(&expected) {
        return Err(wrong_dkey());
    }
    Ok(expected)
}

/// The hint of `_rate_state_at`'s refusals.
pub(super) const STATE_AT_HINT: &str = "It is internal: call rate_limiter.status().";

/// The hint of `_rate_limit_at`'s refusals.
pub(super) const RATE_LIMIT_AT_HINT: &str = "It is internal: call rate_limiter.rate_limit(), which reaches the node holding the row inside your transaction.";

/// The error of a delegated call that reached a node without its rows.
pub(super) fn not_here() -> CallError {
    CallError::from(Error::Unusable(
        "the row of this limit is not on this node".into(),
        "Retry the transaction: a shard move may have switched the row to another node meanwhile. If it keeps failing, Citus did not delegate the call to the node holding the row (plan_cache_mode = force_generic_plan, or a session where Citus stopped delegating: reconnect).",
    ))
}

/// The body of `_rate_limit_at`: the call as the node holding its row
/// makes it, or an error (see [`delegated`]; 55000 if the row is not
/// here). `own_transaction`: the caller made the call its transaction's
/// only work (`single_statement`), so it may commit as a statement of its
/// own here, outside a transaction block (a global limit with several
/// shards never is: it still needs one).
pub(super) fn at(
    dkey: Option<DistributionValue>,
    call: &Call<'_>,
    consume: bool,
    own_transaction: bool,
) -> Result<(Decision, Option<Counted>), CallError> {
    if let Some(shards) = call.spread_shards()? {
        return spread_at(dkey, call, consume, shards);
    }
    let expected = delegated(
        "_rate_limit_at",
        RATE_LIMIT_AT_HINT,
        consume && !own_transaction,
        dkey,
        call.name,
        call.key,
    )?;
    let answer = here(&expected, consume, |target| {
        if consume {
            local::consume::consume(call, ShardPlaces::In(target))
                .map(|(decision, counted)| (decision, Some(counted)))
        } else {
            local::consume::check(call, target).map(|decision| (decision, None))
        }
    })?;
    answer.ok_or_else(not_here)
}

/// Version 1 calling convention, for every entry point below.
pub(super) const CALLING_CONVENTION: pg_sys::Pg_finfo_record =
    pg_sys::Pg_finfo_record { api_version: 1 };

/// Runs the body of a delegated internal function with the calling node's
/// clock: `clock` is the position of its `now_override timestamptz`
/// argument, if it has one (see `clock::with_callers_override`).
///
/// # Safety
/// `fcinfo` holds the function's arguments.
pub(super) unsafe fn with_callers_clock(
    fcinfo: pg_sys::FunctionCallInfo,
    clock: Option<usize>,
    body: impl FnOnce() -> pg_sys::Datum,
) -> pg_sys::Datum {
    let callers = clock.and_then(|position| pg_getarg::<i64>(fcinfo, position));
    let outcome =
        super::shard_query::delegated(|| crate::clock::with_callers_override(callers, body));
    match outcome {
        Ok(datum) => datum,
        Err(error) => report(error),
    }
}

/// Declares the C entry points of a delegated internal function's four
/// overloads (`dkey text`, `dkey bigint`, `dkey uuid` and `dkey integer`) and their
/// calling-convention records: each reads its first argument as a
/// [`DistributionValue`] and calls `$body(fcinfo, dkey)` (`unsafe
/// fn(pg_sys::FunctionCallInfo, Option<DistributionValue>) ->
/// pg_sys::Datum`). `$clock`: the position of its `now_override
/// timestamptz` argument (the delegating node's clock, which `$body` then
/// runs with), or `None` for a function that reads no clock.
macro_rules! delegated_entry_points {
    ($function:literal, $body:ident, $clock:expr,
     $text:ident, $text_finfo:ident, $bigint:ident, $bigint_finfo:ident,
     $uuid:ident, $uuid_finfo:ident, $integer:ident, $integer_finfo:ident) => {
        #[doc = concat!("`rate_limiter.", $function, "(dkey text, ...)`: see sql/citus_internal_functions.sql.")]
        ///
        /// # Safety
        /// Called by PostgreSQL with the function's arguments.
        #[no_mangle]
        #[pg_guard]
        pub unsafe extern "C-unwind" fn $text(fcinfo: pg_sys::FunctionCallInfo) -> pg_sys::Datum {
            let dkey = pg_getarg::<&[u8]>(fcinfo, 0)
                .map(|bytes| DistributionValue::Text(bytes.to_vec()));
            $crate::citus::internal_functions::with_callers_clock(fcinfo, $clock, || $body(fcinfo, dkey))
        }

        #[doc = concat!("`rate_limiter.", $function, "(dkey bigint, ...)`: the same, on a state table distributed by a bigint column.")]
        ///
        /// # Safety
        /// Called by PostgreSQL with the function's arguments.
        #[no_mangle]
        #[pg_guard]
        pub unsafe extern "C-unwind" fn $bigint(fcinfo: pg_sys::FunctionCallInfo) -> pg_sys::Datum {
            let dkey = pg_getarg::<i64>(fcinfo, 0).map(DistributionValue::BigInt);
            $crate::citus::internal_functions::with_callers_clock(fcinfo, $clock, || $body(fcinfo, dkey))
        }

        #[doc = concat!("`rate_limiter.", $function, "(dkey uuid, ...)`: the same, on a state table distributed by a uuid column.")]
        ///
        /// # Safety
        /// Called by PostgreSQL with the function's arguments.
        #[no_mangle]
        #[pg_guard]
        pub unsafe extern "C-unwind" fn $uuid(fcinfo: pg_sys::FunctionCallInfo) -> pg_sys::Datum {
            let dkey = pg_getarg::<pgrx::datum::Uuid>(fcinfo, 0)
                .map(|uuid| DistributionValue::Uuid(*uuid.as_bytes()));
            $crate::citus::internal_functions::with_callers_clock(fcinfo, $clock, || $body(fcinfo, dkey))
        }

        #[doc = concat!("`rate_limiter.", $function, "(dkey integer, ...)`: the same, on a state table distributed by an integer column.")]
        ///
        /// # Safety
        /// Called by PostgreSQL with the function's arguments.
        #[no_mangle]
        #[pg_guard]
        pub unsafe extern "C-unwind" fn $integer(fcinfo: pg_sys::FunctionCallInfo) -> pg_sys::Datum {
            let dkey = pg_getarg::<i32>(fcinfo, 0).map(DistributionValue::Integer);
            $crate::citus::internal_functions::with_callers_clock(fcinfo, $clock, || $body(fcinfo, dkey))
        }

        #[no_mangle]
        pub extern "C" fn $integer_finfo() -> &'static pg_sys::Pg_finfo_record {
            &CALLING_CONVENTION
        }

        #[no_mangle]
        pub extern "C" fn $text_finfo() -> &'static pg_sys::Pg_finfo_record {
            &CALLING_CONVENTION
        }

        #[no_mangle]
        pub extern "C" fn $bigint_finfo() -> &'static pg_sys::Pg_finfo_record {
            &CALLING_CONVENTION
        }

        #[no_mangle]
        pub extern "C" fn $uuid_finfo() -> &'static pg_sys::Pg_finfo_record {
            &CALLING_CONVENTION
        }
    };
}

pub(super) use delegated_entry_points;

delegated_entry_points!(
    "_rate_limit_at",
    rate_limit_at,
    Some(7),
    _rate_limit_at_wrapper,
    pg_finfo__rate_limit_at_wrapper,
    _rate_limit_at_bigint_wrapper,
    pg_finfo__rate_limit_at_bigint_wrapper,
    _rate_limit_at_uuid_wrapper,
    pg_finfo__rate_limit_at_uuid_wrapper,
    _rate_limit_at_integer_wrapper,
    pg_finfo__rate_limit_at_integer_wrapper
);

delegated_entry_points!(
    "_rate_state_at",
    rate_state_at,
    None,
    _rate_state_at_wrapper,
    pg_finfo__rate_state_at_wrapper,
    _rate_state_at_bigint_wrapper,
    pg_finfo__rate_state_at_bigint_wrapper,
    _rate_state_at_uuid_wrapper,
    pg_finfo__rate_state_at_uuid_wrapper,
    _rate_state_at_integer_wrapper,
    pg_finfo__rate_state_at_integer_wrapper
);

delegated_entry_points!(
    "_rate_credit_at",
    rate_credit_at,
    Some(5),
    _rate_credit_at_wrapper,
    pg_finfo__rate_credit_at_wrapper,
    _rate_credit_at_bigint_wrapper,
    pg_finfo__rate_credit_at_bigint_wrapper,
    _rate_credit_at_uuid_wrapper,
    pg_finfo__rate_credit_at_uuid_wrapper,
    _rate_credit_at_integer_wrapper,
    pg_finfo__rate_credit_at_integer_wrapper
);

/// The body of both `_rate_limit_at` wrappers, `dkey` their first argument.
///
/// # Safety
/// `fcinfo` holds `_rate_limit_at`'s nine arguments.
pub(super) unsafe fn rate_limit_at(
    fcinfo: pg_sys::FunctionCallInfo,
    dkey: Option<DistributionValue>,
) -> pg_sys::Datum {
    let consume = pg_getarg::<bool>(fcinfo, 6).unwrap_or(false);
    let own_transaction = pg_getarg::<bool>(fcinfo, 8).unwrap_or(false);
    let call = match Call::new(
        pg_getarg::<&[u8]>(fcinfo, 1),
        pg_getarg::<&[u8]>(fcinfo, 2),
        pg_getarg::<f64>(fcinfo, 3),
        pg_getarg::<bool>(fcinfo, 4),
        Some(false),
        pg_getarg::<PgHeapTuple<'_, AllocatedByRust>>(fcinfo, 5),
    ) {
        Ok(call) => Call {
            config_argument: config_argument(fcinfo, 5),
            ..call
        },
        Err(error) => report(CallError::Limit(error)),
    };
    crate::blocks::forget_refusal();
    match at(dkey, &call, consume, own_transaction) {
        Ok((decision, counted)) => result_row::put_rows(
            fcinfo,
            [[
                Some(pg_sys::Datum::from(decision.ok)),
                decision.retry_after.and_then(IntoDatum::into_datum),
                decision.remaining.into_datum(),
                match counted {
                    Some(counted) if counted.blocked => Some(pg_sys::Datum::from(BLOCKED)),
                    Some(counted) => Some(pg_sys::Datum::from(verdict_number(counted.verdict))),
                    // A check refused by the key's block says so.
                    None => (!decision.ok && crate::blocks::refused_by_block(call.name, call.key))
                        .then(|| pg_sys::Datum::from(BLOCKED)),
                },
                counted.map(|counted| pg_sys::Datum::from(counted.reserved)),
                counted.map(|counted| pg_sys::Datum::from(counted.near_limit)),
                counted.map(|counted| pg_sys::Datum::from(counted.contended)),
            ]],
        ),
        Err(error) => report(error),
    }
}

/// The body of `_rate_state_at`: the stored rows of (name, key) on this
/// node, which must hold them (a global limit with several shards: the
/// rows of its shards on this node, which must hold the one of `dkey`).
pub(super) fn state_at(
    dkey: Option<DistributionValue>,
    name: Option<&[u8]>,
    key: Option<&[u8]>,
    shards: Option<i16>,
) -> Result<Vec<Option<State>>, CallError> {
    let name = crate::config::required(name, "name")?;
    let shards = crate::config::required(shards, "shards")?;
    if shards < 1 {
        return Err(CallError::Limit(LimitError::invalid(
            "shards",
            "shards must be at least 1".to_string(),
        )));
    }
    if key.is_none() && shards > 1 {
        let (spread, _) =
            delegated_spread("_rate_state_at", STATE_AT_HINT, false, dkey, name, shards)?;
        return Ok(read_local_shards(name, &spread, shards));
    }
    let expected = delegated("_rate_state_at", STATE_AT_HINT, false, dkey, name, key)?;
    here(&expected, false, |target| {
        Ok(crate::storage::read_shards(
            super::read::key_rows(name, key, shards),
            target,
        ))
    })?
    .ok_or_else(not_here)
}

/// The body of the `_rate_state_at` wrappers: one result row per stored
/// shard, and for a sliding window's row whose previous window admitted
/// something, a second row numbered `-1 - shard` holding that count as
/// its value.
///
/// # Safety
/// `fcinfo` holds `_rate_state_at`'s four arguments.
pub(super) unsafe fn rate_state_at(
    fcinfo: pg_sys::FunctionCallInfo,
    dkey: Option<DistributionValue>,
) -> pg_sys::Datum {
    let rows = state_at(
        dkey,
        pg_getarg::<&[u8]>(fcinfo, 1),
        pg_getarg::<&[u8]>(fcinfo, 2),
        pg_getarg::<i16>(fcinfo, 3),
    )
    .and_then(|states| {
        let mut rows = Vec::new();
        for (shard, state) in states.into_iter().enumerate() {
            if let Some(state) = state {
                let ts = crate::storage::timestamp(state.ts)?;
                rows.push([
                    Some(pg_sys::Datum::from(shard as i16)),
                    state.value.into_datum(),
                    ts.into_datum(),
                ]);
                // A sliding window's previous-window count rides in a row
                // of its own, numbered -1 - shard (the released result
                // type has no column for it: super::read::read_elsewhere).
                if state.previous != 0.0 {
                    rows.push([
                        Some(pg_sys::Datum::from(-1 - shard as i16)),
                        state.previous.into_datum(),
                        ts.into_datum(),
                    ]);
                }
            }
        }
        Ok(rows)
    });
    match rows {
        Ok(rows) => result_row::put_rows(fcinfo, rows),
        Err(error) => report(error),
    }
}

/// The body of `_rate_credit_at`: the credit on this node, which must hold
/// the rows, inside a transaction block, for a role that may call
/// `rate_credit` (42501 otherwise: EXECUTE on this function alone must not
/// let an application role refill its own limits).
pub(super) fn credit_at(
    dkey: Option<DistributionValue>,
    name: Option<&[u8]>,
    key: Option<&[u8]>,
    count: Option<f64>,
    config: Option<PgHeapTuple<'_, AllocatedByRust>>,
) -> Result<f64, CallError> {
    let name = crate::config::required(name, "name")?;
    let count = crate::config::required(count, "count")?;
    let inline = crate::config::inline_config(config)?;
    rate_limiter_algorithm::validate_credit(count)?;
    // It credits as rate_credit does: only for a role that may call that.
    crate::security::require_execute(
        "rate_limiter.rate_credit(pg_catalog.text, pg_catalog.text, pg_catalog.float8, rate_limiter.config)",
        "rate_limiter.rate_credit()",
    )?;
    const HINT: &str = "It is internal: call rate_limiter.rate_credit(), which reaches the node holding the row inside your transaction.";
    if key.is_none() {
        let shards = crate::definitions::resolve(name, None, inline)?
            .config
            .shards;
        if shards > 1 {
            // A global limit's shards on this node, which must hold the
            // one of dkey.
            let shards = shards as i16;
            let (spread, _) = delegated_spread("_rate_credit_at", HINT, true, dkey, name, shards)?;
            return credit_local_shards(name, count, inline, &spread, shards);
        }
    }
    let expected = delegated("_rate_credit_at", HINT, true, dkey, name, key)?;
    here(&expected, true, |target| {
        local::credit::credit(name, key, count, inline, ShardPlaces::In(target))
    })?
    .ok_or_else(not_here)
}

/// The body of both `_rate_credit_at` wrappers.
///
/// # Safety
/// `fcinfo` holds `_rate_credit_at`'s five arguments.
pub(super) unsafe fn rate_credit_at(
    fcinfo: pg_sys::FunctionCallInfo,
    dkey: Option<DistributionValue>,
) -> pg_sys::Datum {
    match credit_at(
        dkey,
        pg_getarg::<&[u8]>(fcinfo, 1),
        pg_getarg::<&[u8]>(fcinfo, 2),
        pg_getarg::<f64>(fcinfo, 3),
        pg_getarg::<PgHeapTuple<'_, AllocatedByRust>>(fcinfo, 4),
    ) {
        Ok(value) => value.into_datum().unwrap_or(pg_sys::Datum::from(0)),
        Err(error) => report(error),
    }
}
