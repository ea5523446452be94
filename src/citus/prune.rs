//! `prune()` on a distributed install: every node's shards, from any node.
//!
//! A prune deletes rows by `ctid`, which means something only within one
//! relation, so each node prunes the shards placed on it, each through its
//! own shard relation (`crate::api::prune`). The node `prune()` is called on
//! prunes its own shards, then reaches every other node that holds shards
//! through `rate_limiter._prune_at()`, which Citus delegates to the node
//! holding the shard of its distribution argument (a value found here
//! whose shard is on that node), inside the caller's distributed
//! transaction: a rollback undoes the whole prune, a commit that deleted
//! on several nodes uses 2PC, and every node decides with the calling
//! node's clock (a superuser's `rate_limiter.now_override` travels, as
//! with the other delegated calls).

use super::delegation::one_value_elsewhere;
use super::error::Error;
use super::internal_functions::delegated_entry_points;
use super::internal_functions::{checks, not_here, wrong_dkey, CALLING_CONVENTION};
use super::metadata::{current_distribution, distribution};
use super::two_phase_commit::wrote;
use super::value::DistributionValue;
use crate::errors::CallError;
use crate::local;
use pgrx::datum::DatumWithOid;
use pgrx::fcinfo::pg_getarg;
use pgrx::pg_sys;
use pgrx::prelude::*;

/// Candidate values tried to find one routed to a node; far more than a
/// node holding even one of 1,000 equal shards needs (about 1,000).
const PROBES: u32 = 1_000_000;

/// The statement that prunes the shards of the node holding the shard of
/// `$1`: Citus delegates `_prune_at` by its first argument (called in
/// `FROM`, as `_rate_credit_at`).
const PRUNE_ELSEWHERE: &str = "SELECT deleted FROM rate_limiter._prune_at($1, $2, $3) AS deleted";

/// The hint of `_prune_at`'s refusals.
const PRUNE_AT_HINT: &str =
    "It is internal: call rate_limiter.prune(), which prunes every node's shards.";

/// The candidate distribution value number `number` of the column's type
/// `column_type` (text, bigint, integer or uuid).
fn probe(column_type: pg_sys::Oid, number: u32) -> DistributionValue {
    if column_type == pg_sys::INT8OID {
        DistributionValue::BigInt(i64::from(number))
    } else if column_type == pg_sys::INT4OID {
        DistributionValue::Integer(number as i32)
    } else if column_type == pg_sys::UUIDOID {
        DistributionValue::Uuid(u128::from(number).to_be_bytes())
    } else {
        DistributionValue::Text(format!("prune/{number}").into_bytes())
    }
}

/// The nodes holding shards of the state table (one placement each), in
/// ascending group order, each with a distribution value whose shard is
/// placed there (found by trying values in turn: the shards' hash ranges
/// have no inverse): this node's, if it holds any, and the others.
///
/// Errors: 55000 when the tables are not distributed as `distribute()`
/// distributes them, or no value routed to a node was found.
fn nodes() -> Result<(Option<DistributionValue>, Vec<DistributionValue>), CallError> {
    let distribution = current_distribution()?;
    distribution.check()?;
    let mut groups: Vec<i32> = distribution
        .shards
        .iter()
        .filter_map(|shard| shard.group)
        .collect();
    groups.sort_unstable();
    groups.dedup();
    let mut found: Vec<Option<DistributionValue>> = vec![None; groups.len()];
    let mut missing = groups.len();
    for number in 0..PROBES {
        if missing == 0 {
            break;
        }
        let value = probe(distribution.column_type, number);
        // A shard with other than one placement (a copy under way) has no
        // node to reach: another value is tried.
        let Ok(place) = distribution.place(&value) else {
            continue;
        };
        if let Ok(position) = groups.binary_search(&place.group) {
            if found[position].is_none() {
                found[position] = Some(value);
                missing -= 1;
            }
        }
    }
    let mut here = None;
    let mut others = Vec::with_capacity(groups.len());
    for (group, value) in groups.into_iter().zip(found) {
        let value = value.ok_or_else(|| {
            CallError::from(Error::Unusable(
                format!("prune() found no distribution value routed to node group {group}"),
                "Its shards cover too small a part of the hash range: call rate_limiter.prune() on that node.",
            ))
        })?;
        if group == distribution.local_group() {
            here = Some(value);
        } else {
            others.push(value);
        }
    }
    Ok((here, others))
}

/// `prune()` on a distributed install: this node prunes its own shards
/// (as the extension's owner, [`prune_local_shards`]), then every other node holding shards
/// prunes its own through `_prune_at`, as the calling role, inside this
/// transaction, in ascending group order. Once rows were deleted on more
/// than one node, Citus is told, so the commit uses 2PC (as for a call
/// that consumed on several nodes). How many rows were deleted in all.
///
/// Errors: 55000 as [`nodes`]; those of `prune` on any node.
pub(super) fn prune_everywhere(older_than: Option<Interval>) -> Result<i64, CallError> {
    super::shard_query::usable()?;
    let mut deleted = prune_local_shards(older_than)?;
    let (this_node, others) = nodes()?;
    if deleted > 0 {
        if let Some(dkey) = this_node.as_ref() {
            wrote(Some(dkey))?;
        }
    }
    for dkey in others {
        let there = prune_elsewhere(&dkey, older_than)?;
        if there > 0 {
            wrote(None)?;
        }
        deleted += there;
    }
    Ok(deleted)
}

/// Prunes the shards of the node holding the shard of `dkey` through
/// `_prune_at`, inside this transaction: how many rows it deleted.
fn prune_elsewhere(
    dkey: &DistributionValue,
    older_than: Option<Interval>,
) -> Result<i64, CallError> {
    let arguments = [
        dkey.argument(),
        match older_than {
            Some(older_than) => DatumWithOid::from(older_than),
            None => DatumWithOid::null_oid(pg_sys::INTERVALOID),
        },
        crate::clock::override_to_send(),
    ];
    one_value_elsewhere(PRUNE_ELSEWHERE, &arguments, "_prune_at")
}

/// The body of `_prune_at`: prunes this node's shards (see
/// [`prune_local_shards`]), which must hold the shard of `dkey`, inside a
/// transaction block, for a role that may call `prune()`.
///
/// Errors: 55000 (not distributed, outside a transaction block, `dkey`'s
/// shard elsewhere); 22023 a NULL `dkey`; 42501 a role without EXECUTE on
/// `rate_limiter.prune(interval)`; those of `prune`.
fn prune_at(
    dkey: Option<DistributionValue>,
    older_than: Option<Interval>,
) -> Result<i64, CallError> {
    checks("_prune_at", PRUNE_AT_HINT, true)?;
    crate::security::require_execute(
        "rate_limiter.prune(pg_catalog.interval)",
        "rate_limiter.prune()",
    )?;
    let dkey = dkey.ok_or_else(wrong_dkey)?;
    let Some(distribution) = distribution() else {
        return Err(not_here());
    };
    if distribution.place(&dkey)?.group != distribution.local_group() {
        return Err(not_here());
    }
    prune_local_shards(older_than)
}

/// Prunes the shards of the state table placed on this node, each through
/// its own relation, where a ctid means something (`local::prune`),
/// holding Citus's metadata lock for a write to each until the transaction
/// ends ([`local_shards`]): how many rows were deleted.
///
/// Errors: 22023 a bad `older_than`; 25006 in a read-only transaction
/// (also with no shard here); 55000 as `local_shards`.
pub(super) fn prune_local_shards(older_than: Option<Interval>) -> Result<i64, CallError> {
    let older_than = local::prune::older_than_micros(older_than)?;
    let deleted = local::prune::prune_tables(&super::metadata::local_shards()?, older_than)?;
    Ok(deleted + prune_local_blocks()?)
}

/// Deletes the ended blocks whose strikes are forgotten (as `prune()` on
/// one server) from the shards of `rate_limiter.blocks` placed on this
/// node (docs/blocks.md, "Citus": each node prunes the blocks beside its
/// state, in the same statement's transaction): how many. Called after
/// [`local_shards`](super::metadata::local_shards), which holds Citus's
/// metadata locks of the colocated shards.
fn prune_local_blocks() -> Result<i64, CallError> {
    let shards = super::metadata::local_blocks_shards()?;
    if shards.is_empty() {
        return Ok(0);
    }
    let now = crate::storage::timestamp(crate::clock::now())?;
    crate::security::write_as_owner(c"prune()", |client| {
        let mut deleted = 0;
        for shard in shards {
            let statement = format!(
                "DELETE FROM {shard} WHERE until <= $1 AND (forget_at IS NULL OR forget_at <= $1)"
            );
            deleted += client.update(&statement, None, &[now.into()])?.len() as i64;
        }
        Ok(deleted)
    })
}

delegated_entry_points!(
    "_prune_at",
    prune_at_entry,
    Some(2),
    _prune_at_wrapper,
    pg_finfo__prune_at_wrapper,
    _prune_at_bigint_wrapper,
    pg_finfo__prune_at_bigint_wrapper,
    _prune_at_uuid_wrapper,
    pg_finfo__prune_at_uuid_wrapper,
    _prune_at_integer_wrapper,
    pg_finfo__prune_at_integer_wrapper
);

/// The body of the `_prune_at` wrappers.
///
/// # Safety
/// `fcinfo` holds `_prune_at`'s three arguments.
unsafe fn prune_at_entry(
    fcinfo: pg_sys::FunctionCallInfo,
    dkey: Option<DistributionValue>,
) -> pg_sys::Datum {
    match prune_at(dkey, pg_getarg::<Interval>(fcinfo, 1)) {
        Ok(deleted) => pg_sys::Datum::from(deleted),
        Err(error) => crate::errors::report(error),
    }
}
