//! Blocks on a distributed install (docs/blocks.md, "Citus"):
//! `rate_limiter.blocks` is distributed by `dkey` and colocated with the
//! state, so the block of (name, key) lives in the shard beside the key's
//! state rows (a global limit's beside its shard 0), on the same node.
//!
//! - A call reads and writes its key's block where its rows are: on this
//!   node through the colocated shard relation ([`blocks_at`]: the probe of
//!   `crate::blocks::find`, the automatic block of `crate::blocks::strike`
//!   inside the call's shard site, whose metadata lock covers the colocated
//!   shards), on another node inside `_rate_limit_at` there. Colocated
//!   calls stay on one node.
//! - `block`, `unblock` write through Citus (a statement on the
//!   distributed table naming the row's `dkey`, which Citus sends to that
//!   one shard), as the extension's owner; `status`, `http_headers`,
//!   `blocked` and a refusal's DETAIL read a block held elsewhere through
//!   `_rate_block_at`, which Citus delegates to that node, as the calling
//!   role ([`block_elsewhere`]: in a transaction block where that role's
//!   calls wrote there, Citus refuses another role's query on the same
//!   placements).
//! - A global limit whose shards spread over the nodes cannot be blocked
//!   (0A000): its calls run on several nodes, and its block would live on
//!   one ([`before_block`]).

use super::delegation::row_arguments;
use super::error::Error;
use super::internal_functions::{delegated, delegated_entry_points, not_here, CALLING_CONVENTION};
use super::metadata::{current_distribution, distribution, distribution_value};
use super::shard_query::usable;
use super::value::DistributionValue;
use crate::blocks::{Block, BlocksAt, BlocksStandIn, Keeper};
use crate::errors::CallError;
use pgrx::fcinfo::pg_getarg;
use pgrx::pg_sys;
use pgrx::prelude::*;
use std::ffi::CString;

/// The error of a block or automatic blocks on an install whose blocks
/// table is not distributed (distributed before 0.6.0, updated since):
/// 55000.
pub(super) fn not_distributed() -> CallError {
    CallError::from(Error::Unusable(
        "rate_limiter.blocks is not distributed with the state: a block written now would reach no other node's calls".into(),
        "Call SELECT rate_limiter.distribute(); on the coordinator once more (after ALTER EXTENSION rate_limiter UPDATE it distributes the blocks), then retry.",
    ))
}

/// What `block`, `unblock` (`global`: the name, for a block of its global
/// limit) and a config with automatic blocks check first: the cluster is
/// usable, holds the blocks (55000), and a global limit does not spread
/// over the nodes (0A000).
pub(super) fn before_block(global: Option<&[u8]>) -> Result<(), CallError> {
    usable()?;
    if !current_distribution()?.blocks {
        return Err(not_distributed());
    }
    if let Some(name) = global {
        if crate::definitions::lookup(name)?.is_some_and(|named| named.config.shards > 1) {
            return Err(spread_blocks());
        }
    }
    Ok(())
}

/// The 0A000 of blocks of a global limit with several shards.
pub(super) fn spread_blocks() -> CallError {
    CallError::from(Error::NotOnCluster(
        "a block of a global limit with several shards (blocking it, or automatic blocks)",
    ))
}

/// Whether the blocks are distributed with the state.
pub(super) fn holds_blocks() -> bool {
    distribution().is_some_and(|distribution| distribution.blocks)
}

/// The `dkey` of the block of (`name`, `key`): its state's, shard 0's.
pub(super) fn blocks_extra(
    name: &[u8],
    key: Option<&[u8]>,
) -> Result<(pg_sys::Datum, pg_sys::Oid), CallError> {
    let dkey = distribution_value(name, key, 0)?;
    Ok((dkey.datum(), dkey.type_oid()))
}

/// Where this node reads and writes the block of (`name`, `key`): the
/// colocated shard relation when its state is placed here, else another
/// node; nowhere when the blocks are not distributed (no block exists:
/// writing one is refused, [`before_block`]).
///
/// Errors: 55000 as the state's placement, or when the shard's relation
/// is missing.
pub(super) fn blocks_at(name: &[u8], key: Option<&[u8]>) -> Result<BlocksAt, CallError> {
    let distribution = current_distribution()?;
    if !distribution.blocks {
        return Ok(BlocksAt::Nowhere);
    }
    let dkey = distribution_value(name, key, 0)?;
    let place = distribution.place(&dkey)?;
    if place.group != distribution.local_group() {
        return Ok(BlocksAt::Elsewhere);
    }
    let missing = |shard: String| {
        CallError::from(Error::Unusable(
            format!("the shard of rate_limiter.blocks colocated with shard {} of rate_limiter.rate_limits is {shard}", place.shard),
            "Check the shards with citus_shards and pg_dist_placement (a move or split may be unfinished).",
        ))
    };
    let shard = distribution.shards[place.index]
        .blocks
        .ok_or_else(|| missing("missing from Citus's metadata".into()))?;
    let table_name = format!("blocks_{shard}");
    let index_name = format!("blocks_name_key_dkey_key_{shard}");
    let objects = crate::catalog::objects();
    // SAFETY: catalog cache lookups.
    let (table, index) = unsafe {
        let table = CString::new(table_name.as_str()).unwrap_or_default();
        let index = CString::new(index_name).unwrap_or_default();
        (
            pg_sys::get_relname_relid(table.as_ptr(), objects.schema),
            pg_sys::get_relname_relid(index.as_ptr(), objects.schema),
        )
    };
    if table == pg_sys::InvalidOid || index == pg_sys::InvalidOid {
        return Err(missing(format!(
            "placed on this node, but its table or unique index is missing (shard {shard})"
        )));
    }
    Ok(BlocksAt::StandIn(BlocksStandIn {
        table,
        index,
        qualified: format!("rate_limiter.{table_name}"),
        extra: dkey.datum(),
        extra_type: dkey.type_oid(),
    }))
}

/// Reads the block of (name, key) on the node holding it: Citus delegates
/// `_rate_block_at` by its first argument (called in `FROM`, as
/// `_rate_state_at`).
const BLOCK_ELSEWHERE: &str =
    "SELECT until, strikes, reason FROM rate_limiter._rate_block_at($1, $2, $3)";

/// The hint of `_rate_block_at`'s refusals.
const BLOCK_AT_HINT: &str = "It is internal: call rate_limiter.blocked().";

/// The block of (`name`, `key`) held by another node, read there through
/// `_rate_block_at`, as the calling role, inside this transaction.
pub(super) fn block_elsewhere(name: &[u8], key: Option<&[u8]>) -> Result<Option<Block>, CallError> {
    let dkey = distribution_value(name, key, 0)?;
    let arguments = row_arguments(&dkey, name, key);
    Spi::connect(|client| {
        let table = client.select(BLOCK_ELSEWHERE, Some(1), &arguments)?;
        if table.is_empty() {
            return Ok(None);
        }
        let row = table.first();
        Ok(Some(Block {
            until: row
                .get::<TimestampWithTimeZone>(1)?
                .map_or(i64::MIN, TimestampWithTimeZone::into_inner),
            strikes: row.get::<i32>(2)?.unwrap_or(0),
            reason: row.get::<String>(3)?,
        }))
    })
}

/// The body of `_rate_block_at`: the block of (name, key), read on this
/// node, which must hold its rows (55000; 22023 a `dkey` that is not
/// theirs).
fn block_at(
    dkey: Option<DistributionValue>,
    name: Option<&[u8]>,
    key: Option<&[u8]>,
) -> Result<Option<Block>, CallError> {
    let name = crate::config::required(name, "name")?;
    delegated("_rate_block_at", BLOCK_AT_HINT, false, dkey, name, key)?;
    match blocks_at(name, key)? {
        BlocksAt::StandIn(_) => crate::blocks::find(name, key),
        _ => Err(not_here()),
    }
}

delegated_entry_points!(
    "_rate_block_at",
    rate_block_at,
    None,
    _rate_block_at_wrapper,
    pg_finfo__rate_block_at_wrapper,
    _rate_block_at_bigint_wrapper,
    pg_finfo__rate_block_at_bigint_wrapper,
    _rate_block_at_uuid_wrapper,
    pg_finfo__rate_block_at_uuid_wrapper,
    _rate_block_at_integer_wrapper,
    pg_finfo__rate_block_at_integer_wrapper
);

/// The body of the `_rate_block_at` wrappers: one row (until, strikes,
/// reason), or none.
///
/// # Safety
/// `fcinfo` holds `_rate_block_at`'s three arguments.
unsafe fn rate_block_at(
    fcinfo: pg_sys::FunctionCallInfo,
    dkey: Option<DistributionValue>,
) -> pg_sys::Datum {
    let found = block_at(
        dkey,
        pg_getarg::<&[u8]>(fcinfo, 1),
        pg_getarg::<&[u8]>(fcinfo, 2),
    );
    match found {
        // (A timestamptz datum is its microseconds; infinity included.)
        Ok(found) => crate::result_row::put_rows(
            fcinfo,
            found.map(|block| {
                [
                    Some(pg_sys::Datum::from(block.until)),
                    Some(pg_sys::Datum::from(block.strikes)),
                    block.reason.and_then(IntoDatum::into_datum),
                ]
            }),
        ),
        Err(error) => crate::errors::report(error),
    }
}

/// The keeper of the blocks `crate::citus::register` installs
/// (`crate::blocks::install`).
pub(super) struct CitusBlocks;

impl Keeper for CitusBlocks {
    fn blocks_at(&self, name: &[u8], key: Option<&[u8]>) -> Result<BlocksAt, CallError> {
        blocks_at(name, key)
    }

    fn block_elsewhere(&self, name: &[u8], key: Option<&[u8]>) -> Result<Option<Block>, CallError> {
        block_elsewhere(name, key)
    }

    fn holds_blocks(&self) -> bool {
        holds_blocks()
    }
}
