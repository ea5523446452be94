//! `rate_limiter.override()` and `rate_limiter.remove_override()`: a key's
//! own configuration, written to `rate_limiter.overrides` as the
//! extension's owner (docs/overrides.md). Reading it is
//! `crate::overrides`; which configuration a call uses,
//! `crate::definitions::resolve`.
//!
//! Neither touches state rows: a row records the regime it was written
//! under (`crate::overrides::regime`), so a key whose kind, period or
//! shards change starts full at its next call, and otherwise carries on
//! capped at the new capacity, whichever way the change came (an override
//! set, replaced, removed or expired, its plan redefined).

use crate::config::{required, ConfigValues};
use crate::definitions;
use crate::errors::{report, CallError};
use crate::storage::text_argument;
use pgrx::datum::DatumWithOid;
use pgrx::heap_tuple::PgHeapTuple;
use pgrx::prelude::*;
use pgrx::AllocatedByRust;
use rate_limiter_algorithm::LimitError;

/// Writes the override, holding a share lock on the definitions it names
/// (so a concurrent `undefine` of either waits for it, and then sees it);
/// no row when one of them is gone.
const OVERRIDE: &str = "
    WITH named AS (
        SELECT count(*) AS found FROM (
            SELECT 1 FROM rate_limiter.definitions
            WHERE name = $1 OR name = $3
            FOR SHARE
        ) AS locked
    )
    INSERT INTO rate_limiter.overrides AS o
        (name, key, plan, kind, rate, period, capacity, max_reserved, shards, start, enforce, expires_at,
         block_for, max_block, forget_after, time_zone)
    SELECT $1, $2, $3, $4::rate_limiter.kind, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14, $15, $16
    FROM named
    WHERE named.found = CASE WHEN $3 IS NULL THEN 1 ELSE 2 END
    ON CONFLICT (name, key) DO UPDATE SET
        plan = excluded.plan, kind = excluded.kind, rate = excluded.rate,
        period = excluded.period, capacity = excluded.capacity,
        max_reserved = excluded.max_reserved, shards = excluded.shards,
        start = excluded.start, enforce = excluded.enforce,
        expires_at = excluded.expires_at, block_for = excluded.block_for,
        max_block = excluded.max_block, forget_after = excluded.forget_after,
        time_zone = excluded.time_zone
    RETURNING 1";

const REMOVE: &str =
    "DELETE FROM rate_limiter.overrides WHERE name = $1 AND key = $2 RETURNING true";

/// The checks every managing call of overrides makes first: the tables of
/// 0.6.0 (55000), a role that may call `define` (42501, naming
/// `function`), and a defined `name` (42704).
fn managing(function: &'static str, name: &[u8]) -> Result<(), CallError> {
    if crate::catalog::objects().overrides == pgrx::pg_sys::InvalidOid {
        return Err(CallError::NeedsUpdate("overrides"));
    }
    if !definitions::may_define() {
        return Err(CallError::ManagingOnly(function));
    }
    crate::placement::before_override()?;
    if definitions::lookup(name)?.is_none() {
        return Err(CallError::Undefined(name.to_vec()));
    }
    Ok(())
}

/// `rate_limiter.override(name, key, config, plan, expires_at, enforce)`
/// (symbol `override_key_wrapper`: `override` is a Rust keyword). See
/// sql/functions.sql.
///
/// Errors, in this order: 22004 (NULL name or key); 22023 (both or
/// neither of config and plan, a plan naming the limit itself, an invalid
/// config); 55000 (tables older than 0.6.0); 42501 (a role that may not
/// call `define`); 42704 (undefined name or plan).
#[pg_extern(sql = false)]
fn override_key(
    name: Option<&[u8]>,
    key: Option<&[u8]>,
    config: Option<pgrx::composite_type!("rate_limiter.config")>,
    plan: Option<&[u8]>,
    expires_at: Option<TimestampWithTimeZone>,
    enforce: Option<bool>,
) {
    if let Err(error) = set_override(name, key, config, plan, expires_at, enforce) {
        report(error)
    }
}

fn set_override(
    name: Option<&[u8]>,
    key: Option<&[u8]>,
    config: Option<PgHeapTuple<'_, AllocatedByRust>>,
    plan: Option<&[u8]>,
    expires_at: Option<TimestampWithTimeZone>,
    enforce: Option<bool>,
) -> Result<(), CallError> {
    let name = required(name, "name")?;
    let key = required(key, "key")?;
    let values = config.map(ConfigValues::from_tuple).transpose()?;
    if values.is_some() == plan.is_some() {
        return Err(CallError::Limit(LimitError::invalid(
            "config",
            "give exactly one of config and plan".to_string(),
        )));
    }
    if let Some(values) = &values {
        values.to_config()?;
    }
    if plan == Some(name) {
        return Err(CallError::Limit(LimitError::invalid(
            "plan",
            "a limit cannot be its own key's plan".to_string(),
        )));
    }
    managing("rate_limiter.override()", name)?;
    if values.is_some_and(|values| values.block_for.is_some()) {
        crate::placement::before_block(name, Some(key))?;
    }
    if let Some(plan) = plan {
        if definitions::lookup(plan)?.is_none() {
            return Err(CallError::Undefined(plan.to_vec()));
        }
    }
    let arguments: [DatumWithOid<'_>; 16] = [
        text_argument(name),
        text_argument(key),
        plan.map_or_else(|| Option::<&str>::None.into(), text_argument),
        values.map(|values| values.kind.label()).into(),
        values.map(|values| values.rate).into(),
        values.map(|values| values.period).into(),
        values.and_then(|values| values.capacity).into(),
        values.and_then(|values| values.max_reserved).into(),
        values.map(|values| values.shards).into(),
        values.and_then(|values| values.start).into(),
        enforce.into(),
        expires_at.into(),
        values.and_then(|values| values.block_for).into(),
        values.and_then(|values| values.max_block).into(),
        values.and_then(|values| values.forget_after).into(),
        values.and_then(|values| values.time_zone).into(),
    ];
    let written = crate::security::write_as_owner(c"override()", |client| {
        client
            .update(OVERRIDE, None, &arguments)
            .map(|table| !table.is_empty())
    })?;
    if !written {
        // undefine() of the limit or the plan committed meanwhile.
        return Err(CallError::Undefined(plan.unwrap_or(name).to_vec()));
    }
    Ok(())
}

/// `rate_limiter.remove_override(name, key)`: true when there was one.
/// See sql/functions.sql. Errors: 22004 (NULL name or key); 55000; 42501;
/// 42704 (undefined name), as [`override_key`].
#[pg_extern(sql = false)]
fn remove_override(name: Option<&[u8]>, key: Option<&[u8]>) -> bool {
    let removed = (|| {
        let name = required(name, "name")?;
        let key = required(key, "key")?;
        managing("rate_limiter.remove_override()", name)?;
        crate::security::write_as_owner(c"remove_override()", |client| {
            client
                .update(REMOVE, None, &[text_argument(name), text_argument(key)])
                .map(|table| !table.is_empty())
        })
        .map_err(CallError::Spi)
    })();
    match removed {
        Ok(removed) => removed,
        Err(error) => report(error),
    }
}
