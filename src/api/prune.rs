//! `rate_limiter.prune()`: housekeeping. Deletes the state rows that change
//! no later answer, and optionally old rows of names without a definition
//! (`local::prune` says which and how; on a distributed install every node
//! prunes its own shards), the overrides that have expired, the blocks
//! that have ended and the timed leases that have ended.

use crate::errors::{report, CallError};
use crate::placement;
use crate::storage::timestamp;
use pgrx::prelude::*;

/// Deletes the overrides whose `expires_at` is not after the clock's now
/// (they apply no more).
const PRUNE_OVERRIDES: &str =
    "DELETE FROM rate_limiter.overrides WHERE expires_at <= $1 RETURNING true";

/// `rate_limiter.prune(older_than)`: how many rows were deleted, state
/// rows and expired overrides (a NOTICE says how many of them were
/// overrides). See sql/functions.sql.
#[pg_extern(sql = false)]
fn prune(older_than: Option<Interval>) -> i64 {
    // The ended leases first: on a cluster they are found by reading the
    // state rows as the extension's owner, which Citus refuses once the
    // calling role's delegated prunes have written those shards in this
    // transaction ("modified by a different user"). Which leases have
    // ended does not depend on the rows pruned after.
    let pruned = prune_leases()
        .and_then(|leases| placement::prune(older_than).map(|deleted| (deleted, leases)));
    let pruned = pruned.and_then(|(deleted, leases)| {
        let overrides = prune_overrides()?;
        if overrides > 0 {
            pgrx::notice!("rate_limiter.prune() deleted {overrides} expired overrides");
        }
        let blocks = prune_blocks()?;
        if blocks > 0 {
            pgrx::notice!("rate_limiter.prune() deleted {blocks} ended blocks");
        }
        if leases > 0 {
            pgrx::notice!("rate_limiter.prune() deleted {leases} ended leases");
        }
        Ok(deleted + overrides + blocks + leases)
    });
    match pruned {
        Ok(deleted) => deleted,
        Err(error) => report(error),
    }
}

/// Deletes the blocks that have ended and whose strikes are forgotten
/// (`until`, and `forget_at` when set, not after the clock's now): how
/// many.
fn prune_blocks() -> Result<i64, CallError> {
    const PRUNE_BLOCKS: &str = "DELETE FROM rate_limiter.blocks \
                                WHERE until <= $1 AND (forget_at IS NULL OR forget_at <= $1) RETURNING true";
    // A cluster holding the blocks: every node prunes those beside its
    // state with it (docs/blocks.md, "Citus"; counted there).
    if crate::catalog::objects().blocks == pgrx::pg_sys::InvalidOid
        || crate::blocks::held_by_cluster()
    {
        return Ok(0);
    }
    let now = timestamp(crate::clock::now())?;
    crate::security::write_as_owner(c"prune()", |client| {
        Ok(client.update(PRUNE_BLOCKS, None, &[now.into()])?.len() as i64)
    })
}

/// Deletes the rows of `rate_limiter.leases` whose lease has ended
/// (sql/concurrency.sql's `_prune_leases`, which both editions share): how
/// many.
fn prune_leases() -> Result<i64, CallError> {
    // (On a distributed install the leases are a reference table, and
    // `_prune_leases` reads the slots where they live: docs/citus.md.)
    if crate::catalog::objects().leases == pgrx::pg_sys::InvalidOid {
        return Ok(0);
    }
    crate::security::write_as_owner(c"prune()", |client| {
        Ok(client
            .update("SELECT rate_limiter._prune_leases()", Some(1), &[])?
            .first()
            .get_one::<i64>()?
            .unwrap_or(0))
    })
}

/// Deletes the expired overrides: how many.
fn prune_overrides() -> Result<i64, CallError> {
    if crate::catalog::objects().overrides == pgrx::pg_sys::InvalidOid {
        return Ok(0);
    }
    let now = timestamp(crate::clock::now())?;
    crate::security::write_as_owner(c"prune()", |client| {
        Ok(client.update(PRUNE_OVERRIDES, None, &[now.into()])?.len() as i64)
    })
}
