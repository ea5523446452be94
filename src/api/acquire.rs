//! `rate_limiter.acquire()` natively (docs/concurrency.md). Its common
//! case, a defined concurrency limit without a default lease, a
//! transaction lease and a free slot whose row exists, is taken here: the
//! definition from a per-backend cache (`crate::slot_definitions`) and the
//! slot's row locked on the direct storage path
//! (`crate::storage::take_free_slot`, which stands in for `FOR UPDATE SKIP
//! LOCKED`). Everything else (refusals, waits, timed leases, new slot
//! rows, inline configs, REPEATABLE READ, errors) is the PL/pgSQL both
//! editions share, `rate_limiter._acquire` (sql/concurrency.sql), whose
//! first try is the statement the direct path stands in for: the answer is
//! the same either way.

use crate::errors::{report, CallError, Refusal};
use crate::storage::text_argument;
use pgrx::datum::DatumWithOid;
use pgrx::prelude::*;

/// Everything but the common case.
const GENERAL: &str = "SELECT ok, lease_id, in_flight, retry_after FROM rate_limiter._acquire($1, $2, $3, $4, $5, $6)";

/// The transaction-local setting in which a transaction's transaction
/// leases are listed (sql/concurrency.sql, `_held_slots`).
const HELD: &std::ffi::CStr = c"rate_limiter_internal.held_slots";

type Row = (bool, Option<i64>, Option<i32>, Option<Interval>);

#[pg_extern(sql = false)]
fn acquire(
    name: Option<&[u8]>,
    key: Option<&[u8]>,
    wait: Option<Interval>,
    lease: Option<Interval>,
    throws: Option<bool>,
    config: Option<pgrx::composite_type!("rate_limiter.config")>,
) -> TableIterator<
    'static,
    (
        name!(ok, bool),
        name!(lease_id, Option<i64>),
        name!(in_flight, Option<i32>),
        name!(retry_after, Option<Interval>),
    ),
> {
    let config = config.map(crate::config::header_of);
    let common = match (name, wait, throws, lease, config) {
        (Some(name), Some(wait), Some(_), None, None)
            if wait.months() >= 0
                && wait.days() >= 0
                && wait.micros() >= 0
                && name.is_ascii()
                && key.is_none_or(<[u8]>::is_ascii)
                && nothing_held() =>
        {
            Some(name)
        }
        _ => None,
    };
    let answer = (|| {
        if let Some(name) = common {
            if let Some(slot) = take_free_slot(name, key)? {
                hold(name, key, slot)?;
                crate::stats::count(
                    name,
                    crate::stats::Counted {
                        verdict: rate_limiter_algorithm::Verdict::Admitted,
                        count: 1.0,
                        reserved: false,
                        near_limit: false,
                        contended: false,
                        blocked: false,
                    },
                );
                return Ok((true, None, None, None));
            }
        }
        // throws => true: refused, the refusal is raised here (its
        // SQLSTATE would not pass through the SPI call).
        let row = general(name, key, wait, lease, throws.map(|_| false), config)?;
        if throws == Some(true) && !row.0 {
            return Err(Raise::Refused(refusal(name, key, row.2, row.3)?));
        }
        Ok(row)
    })();
    match answer {
        Ok(row) => TableIterator::once(row),
        Err(Raise::Refused(refusal)) => refusal.raise(),
        Err(Raise::Error(error)) => report(error),
    }
}

/// Why `acquire` does not answer with a row.
enum Raise {
    Refused(Refusal),
    Error(CallError),
}

impl<E: Into<CallError>> From<E> for Raise {
    fn from(error: E) -> Self {
        Raise::Error(error.into())
    }
}

/// The refusal of (name, key) with `throws => true`: its texts made by
/// `rate_limiter._concurrency_refusal`, as `_acquire` raises them.
fn refusal(
    name: Option<&[u8]>,
    key: Option<&[u8]>,
    in_flight: Option<i32>,
    retry_after: Option<Interval>,
) -> Result<Refusal, CallError> {
    let arguments = [
        name.map_or_else(DatumWithOid::null::<&str>, text_argument),
        key.map_or_else(DatumWithOid::null::<&str>, text_argument),
        in_flight.map_or_else(DatumWithOid::null::<i32>, DatumWithOid::from),
        retry_after.map_or_else(DatumWithOid::null::<Interval>, DatumWithOid::from),
    ];
    // The texts leave SPI as Rust strings: memory palloc'd inside
    // Spi::connect is SPI's, freed when it returns (an assertion-enabled
    // server overwrites it: the raised message would be garbage).
    let (message, detail, hint) = crate::security::as_owner(|| {
        pgrx::spi::Spi::connect_mut(|client| {
            let table = client.update(REFUSAL, Some(1), &arguments)?;
            let row = table.first();
            let text = |column: usize| -> Result<String, CallError> {
                Ok(row.get::<String>(column)?.unwrap_or_default())
            };
            Ok::<_, CallError>((text(1)?, text(2)?, text(3)?))
        })
    })?;
    Ok(Refusal::from_texts(&message, &detail, &hint))
}

/// The texts of a refusal.
const REFUSAL: &str =
    "SELECT message, detail, hint FROM rate_limiter._concurrency_refusal($1, $2, $3, $4)";

/// Whether this transaction holds no transaction lease yet (its own row
/// lock would not be passed over).
fn nothing_held() -> bool {
    // SAFETY: reads a setting (missing_ok: NULL when it was never set).
    let value = unsafe { pg_sys::GetConfigOption(HELD.as_ptr(), true, false) };
    value.is_null() || unsafe { *value } == 0
}

/// The common case: the defined limit's free slot whose row exists,
/// locked directly (`crate::storage::take_free_slot`), or `None` (no such
/// definition, no free slot with a row, or a case the direct path leaves
/// to the general one).
fn take_free_slot(name: &[u8], key: Option<&[u8]>) -> Result<Option<i16>, CallError> {
    let Some(max) = crate::slot_definitions::slots(name)? else {
        return Ok(None);
    };
    crate::storage::take_free_slot(name, key, max, crate::clock::now())
}

/// Lists the slot in this transaction's [`HELD`], as `_acquire` does (the
/// list was empty: [`nothing_held`]). Name and key are ASCII.
fn hold(name: &[u8], key: Option<&[u8]>, slot: i16) -> Result<(), CallError> {
    let text =
        |bytes: &[u8]| serde_json::Value::String(String::from_utf8_lossy(bytes).into_owned());
    let held = serde_json::json!([{
        "n": text(name),
        "k": key.map_or(serde_json::Value::Null, text),
        "slot": slot,
    }])
    .to_string();
    // (serde_json writes a control character as \u00XX: never a NUL.)
    let held = std::ffi::CString::new(held).map_err(|_| {
        CallError::Limit(rate_limiter_algorithm::LimitError::invalid(
            "name",
            "name and key must not contain NUL".to_string(),
        ))
    })?;
    // SAFETY: a transaction-local value of a placeholder setting, as
    // set_config(..., true) makes it.
    unsafe {
        pg_sys::set_config_option(
            HELD.as_ptr(),
            held.as_ptr(),
            pg_sys::GucContext::PGC_USERSET,
            pg_sys::GucSource::PGC_S_SESSION,
            pg_sys::GucAction::GUC_ACTION_LOCAL,
            true,
            0,
            false,
        );
    }
    Ok(())
}

/// `rate_limiter._acquire` with the call's arguments, as the extension's
/// owner (the caller may execute `acquire`, not the internal function).
fn general(
    name: Option<&[u8]>,
    key: Option<&[u8]>,
    wait: Option<Interval>,
    lease: Option<Interval>,
    throws: Option<bool>,
    config: Option<pg_sys::HeapTupleHeader>,
) -> Result<Row, CallError> {
    let arguments = [
        name.map_or_else(DatumWithOid::null::<&str>, text_argument),
        key.map_or_else(DatumWithOid::null::<&str>, text_argument),
        wait.map_or_else(DatumWithOid::null::<Interval>, DatumWithOid::from),
        lease.map_or_else(DatumWithOid::null::<Interval>, DatumWithOid::from),
        throws.map_or_else(DatumWithOid::null::<bool>, DatumWithOid::from),
        crate::config::argument(config),
    ];
    crate::security::as_owner(|| {
        pgrx::spi::Spi::connect_mut(|client| {
            let table = client.update(GENERAL, Some(1), &arguments)?;
            let row = table.first();
            Ok((
                crate::config::required(row.get::<bool>(1)?, "ok")?,
                row.get::<i64>(2)?,
                row.get::<i32>(3)?,
                row.get::<Interval>(4)?,
            ))
        })
    })
}
