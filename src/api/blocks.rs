//! `rate_limiter.block()`, `rate_limiter.unblock()` and
//! `rate_limiter.blocked()` (docs/blocks.md): a key refused until an
//! instant, written to `rate_limiter.blocks` as the extension's owner.
//! Reading a key's block is `crate::blocks`; the refusal is decided in
//! `crate::definitions::resolve`.

use crate::config::required;
use crate::definitions;
use crate::errors::{report, CallError};
use crate::storage::{text_argument, timestamp};
use pgrx::datum::DatumWithOid;
use pgrx::prelude::*;
use rate_limiter_algorithm::LimitError;

/// Writes the block, holding a share lock on the definition (so a
/// concurrent `undefine` waits for it, and then deletes it); no row when
/// the definition is gone. `$3` is now, `$4` the duration, `$5` the
/// reason. A block extends, never shortens, the key's block; a block that
/// starts while the key is not blocked adds a strike, and takes the new
/// reason.
const BLOCK: &str = "
    WITH named AS (
        SELECT 1 FROM rate_limiter.definitions WHERE name = $1 FOR SHARE
    )
    INSERT INTO rate_limiter.blocks AS b (name, key, until, strikes, reason)
    SELECT $1, $2, $3 + $4, CASE WHEN $3 + $4 > $3 THEN 1 ELSE 0 END, $5
    FROM named
    ON CONFLICT (name, key) DO UPDATE SET
        strikes = b.strikes
            + CASE WHEN b.until <= $3 AND excluded.until > $3 THEN 1 ELSE 0 END,
        reason = CASE WHEN b.until > $3 THEN coalesce(excluded.reason, b.reason)
                      ELSE excluded.reason END,
        until = greatest(b.until, excluded.until),
        forget_at = greatest(b.forget_at, excluded.until)
    RETURNING until";

/// [`BLOCK`] on a cluster, which plans no CTE with a row lock beside a
/// write of a distributed table: the definition locked first
/// ([`LOCK_DEFINITION`]), then the block written in the row of the key's
/// extra column value `$6` (docs/blocks.md, "Citus").
const BLOCK_ON_CLUSTER: &str = "
    INSERT INTO rate_limiter.blocks AS b (name, key, until, strikes, reason, dkey)
    VALUES ($1, $2, $3 + $4, CASE WHEN $3 + $4 > $3 THEN 1 ELSE 0 END, $5, $6)
    ON CONFLICT (name, key, dkey) DO UPDATE SET
        strikes = b.strikes
            + CASE WHEN b.until <= $3 AND excluded.until > $3 THEN 1 ELSE 0 END,
        reason = CASE WHEN b.until > $3 THEN coalesce(excluded.reason, b.reason)
                      ELSE excluded.reason END,
        until = greatest(b.until, excluded.until),
        forget_at = greatest(b.forget_at, excluded.until)
    RETURNING until";
const LOCK_DEFINITION: &str = "SELECT FROM rate_limiter.definitions WHERE name = $1 FOR SHARE";

/// Deletes the block of (name, key): whether it was in force at `$3`. On
/// a cluster, `$4` is the key's extra column value.
const UNBLOCK_KEY: &str =
    "DELETE FROM rate_limiter.blocks WHERE name = $1 AND key = $2 RETURNING until > $3";
const UNBLOCK_KEY_ON_CLUSTER: &str = "DELETE FROM rate_limiter.blocks \
     WHERE name = $1 AND key = $2 AND dkey = $4 RETURNING until > $3";
/// Deletes the block of the global limit (name): whether it was in force
/// at `$2`. On a cluster, `$3` is its extra column value.
const UNBLOCK_GLOBAL: &str =
    "DELETE FROM rate_limiter.blocks WHERE name = $1 AND key IS NULL RETURNING until > $2";
const UNBLOCK_GLOBAL_ON_CLUSTER: &str = "DELETE FROM rate_limiter.blocks \
     WHERE name = $1 AND key IS NULL AND dkey = $3 RETURNING until > $2";

/// The checks every managing call of blocks makes first: the table of
/// 0.6.0 (55000), a role that may call `define` (42501, naming
/// `function`), a cluster that can keep it (`placement::before_block`:
/// 55000 or 0A000 on Citus), and a defined `name` (42704).
fn managing(function: &'static str, name: &[u8], key: Option<&[u8]>) -> Result<(), CallError> {
    if crate::catalog::objects().blocks == pgrx::pg_sys::InvalidOid {
        return Err(CallError::NeedsUpdate("blocks"));
    }
    if !definitions::may_define() {
        return Err(CallError::ManagingOnly(function));
    }
    crate::placement::before_block(name, key)?;
    if definitions::lookup(name)?.is_none() {
        return Err(CallError::Undefined(name.to_vec()));
    }
    Ok(())
}

/// Microseconds per day and per month, as PostgreSQL compares intervals
/// (`interval_cmp_value`: a month is 30 days).
const MICROS_PER_DAY: i128 = 86_400_000_000;

/// 22023 unless `duration` is finite and not negative (as PostgreSQL
/// orders intervals; PostgreSQL 17's `infinity` has every field at its
/// maximum).
fn checked_duration(duration: Interval) -> Result<Interval, CallError> {
    let infinite = duration.months() == i32::MAX
        && duration.days() == i32::MAX
        && duration.micros() == i64::MAX;
    let total = i128::from(duration.months()) * 30 * MICROS_PER_DAY
        + i128::from(duration.days()) * MICROS_PER_DAY
        + i128::from(duration.micros());
    if infinite || total < 0 {
        return Err(CallError::Limit(LimitError::invalid(
            "duration",
            "duration must be finite and not negative".to_string(),
        )));
    }
    Ok(duration)
}

/// `rate_limiter.block(name, key, duration, reason)`: the end of the key's
/// block. See sql/functions.sql.
///
/// Errors, in this order: 22004 (NULL name or duration); 22023 (a
/// negative or infinite duration); 55000 (tables older than 0.6.0); 42501
/// (a role that may not call `define`); 55000 or 0A000 (a cluster that
/// cannot keep it: docs/blocks.md, "Citus"); 42704 (undefined name); 22008
/// (an end out of range).
#[pg_extern(sql = false)]
fn block(
    name: Option<&[u8]>,
    key: Option<&[u8]>,
    duration: Option<Interval>,
    reason: Option<&str>,
) -> TimestampWithTimeZone {
    let until = (|| {
        let name = required(name, "name")?;
        let duration = checked_duration(required(duration, "duration")?)?;
        managing("rate_limiter.block()", name, key)?;
        let now = timestamp(crate::clock::now())?;
        let extra = crate::placement::blocks_extra(name, key)?;
        let mut arguments: Vec<DatumWithOid<'_>> = vec![
            text_argument(name),
            key.map_or_else(|| Option::<&str>::None.into(), text_argument),
            now.into(),
            duration.into(),
            reason.into(),
        ];
        let on_cluster = extra.is_some();
        arguments.extend(extra);
        let until = crate::security::write_as_owner(c"block()", |client| {
            let table = if on_cluster {
                if client
                    .update(LOCK_DEFINITION, None, &arguments[..1])?
                    .is_empty()
                {
                    return Ok(None);
                }
                client.update(BLOCK_ON_CLUSTER, None, &arguments)?
            } else {
                client.update(BLOCK, None, &arguments)?
            };
            if table.is_empty() {
                return Ok(None);
            }
            table.first().get_one::<TimestampWithTimeZone>()
        })?;
        // No row: undefine() of the limit committed meanwhile.
        until.ok_or_else(|| CallError::Undefined(name.to_vec()))
    })();
    match until {
        Ok(until) => until,
        Err(error) => report(error),
    }
}

/// `rate_limiter.unblock(name, key)`: true when the key was blocked. The
/// key's strikes are forgotten too. See sql/functions.sql. Errors: 22004
/// (NULL name); then as [`block`] (55000, 42501, 0A000, 42704).
#[pg_extern(sql = false)]
fn unblock(name: Option<&[u8]>, key: Option<&[u8]>) -> bool {
    let lifted = (|| {
        let name = required(name, "name")?;
        managing("rate_limiter.unblock()", name, key)?;
        let now = timestamp(crate::clock::now())?;
        let extra = crate::placement::blocks_extra(name, key)?;
        let (statement, mut arguments) = match (key, extra.is_some()) {
            (Some(key), false) => (UNBLOCK_KEY, vec![text_argument(name), text_argument(key)]),
            (Some(key), true) => (
                UNBLOCK_KEY_ON_CLUSTER,
                vec![text_argument(name), text_argument(key)],
            ),
            (None, false) => (UNBLOCK_GLOBAL, vec![text_argument(name)]),
            (None, true) => (UNBLOCK_GLOBAL_ON_CLUSTER, vec![text_argument(name)]),
        };
        arguments.push(now.into());
        arguments.extend(extra);
        crate::security::write_as_owner(c"unblock()", |client| {
            let table = client.update(statement, None, &arguments)?;
            if table.is_empty() {
                return Ok(false);
            }
            Ok(table.first().get_one::<bool>()? == Some(true))
        })
    })();
    match lifted {
        Ok(lifted) => lifted,
        Err(error) => report(error),
    }
}

/// `rate_limiter.blocked(name, key)`: the key's block while it is in
/// force (no row otherwise), read as committed now. See
/// sql/functions.sql. Errors: 22004 (NULL name); 42704 (undefined name).
#[pg_extern(sql = false)]
fn blocked(
    name: Option<&[u8]>,
    key: Option<&[u8]>,
) -> TableIterator<
    'static,
    (
        name!(until, TimestampWithTimeZone),
        name!(strikes, i32),
        name!(reason, Option<String>),
    ),
> {
    let found = (|| {
        let name = required(name, "name")?;
        if definitions::lookup(name)?.is_none() {
            return Err(CallError::Undefined(name.to_vec()));
        }
        let Some(block) = crate::blocks::find_anywhere(name, key)? else {
            return Ok(None);
        };
        if crate::clock::now() >= block.until {
            return Ok(None);
        }
        // (infinity, from a row written by hand, is shown as infinity.)
        let until =
            TimestampWithTimeZone::try_from(block.until).or_else(|_| timestamp(block.until))?;
        Ok(Some((until, block.strikes, block.reason)))
    })();
    match found {
        Ok(Some(row)) => TableIterator::once(row),
        Ok(None) => TableIterator::new(std::iter::empty()),
        Err(error) => report(error),
    }
}
