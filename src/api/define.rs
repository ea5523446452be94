//! `rate_limiter.define()` and `rate_limiter.undefine()`: named limits
//! written to `rate_limiter.definitions` (through `crate::placement`; on
//! one server `local::define`). Looking a definition up is
//! `crate::definitions`.

use crate::config::{required, ConfigValues};
use crate::errors::{report, CallError};
use crate::placement;
use crate::storage::text_argument;
use pgrx::heap_tuple::PgHeapTuple;
use pgrx::pg_sys::panic::ErrorReport;
use pgrx::prelude::*;
use pgrx::AllocatedByRust;
use pgrx::PgSqlErrorCode;
use rate_limiter_algorithm::LimitError;

const UNDEFINE: &str = "DELETE FROM rate_limiter.definitions WHERE name = $1 RETURNING true";

/// After [`UNDEFINE`] (whose row lock waited for any `override()` naming
/// the limit as a plan), in a new statement that sees what it committed:
/// whether the limit is still some override's plan, and the deletion of
/// the limit's own overrides.
const PLAN_IN_USE: &str =
    "SELECT EXISTS (SELECT FROM rate_limiter.overrides WHERE plan = $1 AND name <> $1)";
const UNDEFINE_OVERRIDES: &str = "DELETE FROM rate_limiter.overrides WHERE name = $1";
const UNDEFINE_BLOCKS: &str = "DELETE FROM rate_limiter.blocks WHERE name = $1";

/// `undefine` of a composite's name (docs/composites.md).
const UNDEFINE_COMPOSITE: &str =
    "DELETE FROM rate_limiter.composites WHERE name = $1 RETURNING true";

/// Taken first by `undefine` and by `define_all` (sql/composites.sql), so
/// that neither misses what the other committed (docs/composites.md).
const LOCK_COMPOSITES: &str = "LOCK TABLE rate_limiter.composites IN SHARE ROW EXCLUSIVE MODE";

/// Whether a composite names the limit as a member (then `undefine` of it
/// is 2BP01), in a statement after [`LOCK_COMPOSITES`]: what a
/// `define_all` committed before it is seen.
const MEMBER_IN_USE: &str =
    "SELECT EXISTS (SELECT FROM rate_limiter.composites WHERE $1 = ANY (members) AND name <> $1)";

/// Whether the name is a composite's (then `define` of it is 22023).
const IS_COMPOSITE: &str = "SELECT EXISTS (SELECT FROM rate_limiter.composites WHERE name = $1)";

/// After the definition is written: its automatic blocks (docs/blocks.md)
/// and a calendar window's time zone (docs/shapes.md), columns of 0.6.0,
/// changed only when they differ.
const DEFINE_BLOCKS: &str = "
    UPDATE rate_limiter.definitions
    SET block_for = $2, max_block = $3, forget_after = $4, time_zone = $5
    WHERE name = $1
      AND (block_for, max_block, forget_after, time_zone) IS DISTINCT FROM ($2, $3, $4, $5)";

/// `define` of a concurrency limit (sql/concurrency.sql).
const DEFINE_CONCURRENCY: &str = "SELECT rate_limiter._define_concurrency($1, $2, $3)";

/// Tokens a shard should hold at least (below this, `define` warns).
const MIN_TOKENS_PER_SHARD: f64 = 5.0;

/// Warns when each shard of a sharded limit would hold fewer than
/// [`MIN_TOKENS_PER_SHARD`] tokens: calls would then often be refused while
/// other shards still have tokens.
fn warn_small_shards(name: &[u8], values: &ConfigValues) {
    if values.shards <= 1 {
        return;
    }
    let capacity = values.capacity.unwrap_or(values.rate);
    let per_shard = capacity / f64::from(values.shards);
    if per_shard < MIN_TOKENS_PER_SHARD {
        ErrorReport::new(
            PgSqlErrorCode::ERRCODE_WARNING,
            format!(
                "each of the {} shards of rate limit \"{}\" holds only {per_shard} tokens",
                values.shards,
                crate::names::for_message(name)
            ),
            "rate_limiter",
        )
        .set_hint(format!(
            "Give each shard at least {MIN_TOKENS_PER_SHARD} tokens (10 or more is better): fewer shards, or a larger capacity (scale rate and period together to keep the same rate)."
        ))
        .report(PgLogLevel::WARNING);
    }
}

/// `rate_limiter.define(name, config, enforce)` (symbol
/// `define_enforcing_wrapper`). See sql/functions.sql. `enforce => false`
/// puts the limit in shadow mode; switching keeps the state (only a change
/// of kind, period or shards discards it).
#[pg_extern(sql = false)]
fn define_enforcing(
    name: Option<&[u8]>,
    config: Option<pgrx::composite_type!("rate_limiter.config")>,
    enforce: Option<bool>,
) {
    define_limit(name, config, required(enforce, "enforce"))
}

/// `rate_limiter.define(name, config)` of versions before 0.4.0 (symbol
/// `define_wrapper`), which the library serves until `ALTER EXTENSION
/// rate_limiter UPDATE`: an enforcing limit.
#[pg_extern(sql = false)]
fn define(name: Option<&[u8]>, config: Option<pgrx::composite_type!("rate_limiter.config")>) {
    define_limit(name, config, Ok(true))
}

/// Checks the arguments of `define` (22004, 22023), warns about small
/// shards, and writes the definition.
fn define_limit(
    name: Option<&[u8]>,
    config: Option<PgHeapTuple<'_, AllocatedByRust>>,
    enforce: Result<bool, LimitError>,
) {
    let header = config.map(crate::config::header_of);
    if let Some(header) = header {
        if crate::config::kind_label(header).as_deref() == Some("concurrency") {
            return define_concurrency(name, header, enforce.ok());
        }
    }
    let checked = (|| {
        let name = required(name, "name")?;
        let values = ConfigValues::from_header(required(header, "config")?)?;
        let enforce = enforce?;
        values.to_config()?;
        Ok::<_, LimitError>((name, values, enforce))
    })();
    if let Ok((name, values, _)) = &checked {
        warn_small_shards(name, values);
    }
    let result = match checked {
        Ok((_, _, false)) if !crate::catalog::objects().enforce_column => {
            Err(CallError::NeedsUpdate("shadow mode (enforce => false)"))
        }
        Ok((_, values, _))
            if values.block_for.is_some()
                && crate::catalog::objects().blocks == pgrx::pg_sys::InvalidOid =>
        {
            Err(CallError::NeedsUpdate("automatic blocks (with_block)"))
        }
        Ok((name, values, enforce)) => (|| {
            if values.block_for.is_some() {
                // (Any key: a policy, not one key's block.)
                placement::before_block(name, Some(b""))?;
            }
            crate::security::write_as_owner(c"define()", |client| {
                if crate::catalog::objects().composites != pgrx::pg_sys::InvalidOid {
                    let composite = client
                        .update(IS_COMPOSITE, Some(1), &[text_argument(name)])?
                        .first()
                        .get_one::<bool>()?;
                    if composite == Some(true) {
                        return Err(CallError::Limit(LimitError {
                            hint: Some("Choose another name, or undefine() the composite first."),
                            ..LimitError::invalid(
                                "name",
                                format!(
                                    "\"{}\" is a composite (define_all): a limit needs a name of its own",
                                    crate::names::for_message(name)
                                ),
                            )
                        }));
                    }
                }
                placement::define(client, name, &values, enforce)?;
                if crate::catalog::objects().blocks != pgrx::pg_sys::InvalidOid {
                    client.update(
                        DEFINE_BLOCKS,
                        None,
                        &[
                            text_argument(name),
                            values.block_for.into(),
                            values.max_block.into(),
                            values.forget_after.into(),
                            values.time_zone.into(),
                        ],
                    )?;
                }
                Ok(())
            })
        })(),
        Err(error) => Err(CallError::Limit(error)),
    };
    if let Err(error) = result {
        report(error)
    }
}

/// `define` of a concurrency limit (kind `'concurrency'`): the PL/pgSQL
/// both editions share (sql/concurrency.sql), as the extension's owner
/// (the caller may execute `define`, not the internal function).
fn define_concurrency(name: Option<&[u8]>, config: pg_sys::HeapTupleHeader, enforce: Option<bool>) {
    let config = crate::config::argument(Some(config));
    let name = match name {
        Some(name) => text_argument(name),
        None => pgrx::datum::DatumWithOid::null::<&str>(),
    };
    let written = crate::security::write_as_owner(c"define()", |client| {
        client
            .update(DEFINE_CONCURRENCY, None, &[name, config, enforce.into()])
            .map(|_| ())
            .map_err(CallError::from)
    });
    if let Err(error) = written {
        report(error)
    }
}

/// `rate_limiter.undefine(name)`: true when a definition was deleted,
/// with the limit's overrides and blocks. State rows are left alone. See
/// sql/functions.sql.
///
/// Errors: 22004 (NULL name); 2BP01 (the limit is the plan of an
/// override).
#[pg_extern(sql = false)]
fn undefine(name: Option<&[u8]>) -> bool {
    let name = match required(name, "name") {
        Ok(name) => name,
        Err(error) => report(CallError::Limit(error)),
    };
    let overrides = crate::catalog::objects().overrides != pgrx::pg_sys::InvalidOid;
    let blocks = crate::catalog::objects().blocks != pgrx::pg_sys::InvalidOid;
    let composites = crate::catalog::objects().composites != pgrx::pg_sys::InvalidOid;
    let deleted = crate::security::write_as_owner(c"undefine()", |client| {
        if composites {
            client.update(LOCK_COMPOSITES, None, &[])?;
        }
        let mut deleted = client
            .update(UNDEFINE, None, &[text_argument(name)])
            .map(|table| !table.is_empty())?;
        if overrides {
            let in_use = client
                .update(PLAN_IN_USE, Some(1), &[text_argument(name)])?
                .first()
                .get_one::<bool>()?;
            if in_use == Some(true) {
                return Err(CallError::PlanInUse(name.to_vec()));
            }
            client.update(UNDEFINE_OVERRIDES, None, &[text_argument(name)])?;
        }
        // (After the plans' check, as the portable edition checks.)
        if composites {
            let in_use = client
                .update(MEMBER_IN_USE, Some(1), &[text_argument(name)])?
                .first()
                .get_one::<bool>()?;
            if in_use == Some(true) {
                return Err(CallError::MemberInUse(name.to_vec()));
            }
            deleted |= !client
                .update(UNDEFINE_COMPOSITE, None, &[text_argument(name)])?
                .is_empty();
        }
        if blocks {
            client.update(UNDEFINE_BLOCKS, None, &[text_argument(name)])?;
        }
        Ok(deleted)
    });
    match deleted {
        Ok(deleted) => deleted,
        Err(error) => report(error),
    }
}
