//! Where a call runs: the shard relation on this node that storage reads
//! and writes instead of the state table (a `storage::Target::StandIn`,
//! whose extra column is the distribution column `dkey`), or another node
//! ([`site`], [`spread`], [`here`]).

use super::error::Error;
use super::metadata::distribution_value;
use super::metadata::{current_distribution, lock_shard_metadata, Place};
use super::two_phase_commit::wrote;
use super::value::DistributionValue;
use crate::catalog;
use crate::errors::CallError;
use crate::storage::{ShardPlaces, StandIn, Target};
use pgrx::pg_sys;
use std::ffi::CString;

/// Where a call for (name, key) runs.
pub enum Site {
    /// On this node, in the shard relation of the target (its metadata
    /// locked).
    Here(Target),
    /// On another node: through `_rate_limit_at`.
    Elsewhere,
}

/// Times the metadata may change under a call before it gives up.
pub(super) const LOOKUPS: usize = 3;

/// Finds the node of the row with distribution value `dkey`. For a row on
/// this node, takes Citus's metadata lock for a write to its shard (so a
/// move cannot switch the placement until the transaction ends) and
/// re-reads the metadata if it changed meanwhile.
pub fn site(dkey: &DistributionValue, for_write: bool) -> Result<Site, CallError> {
    for _ in 0..LOOKUPS {
        let distribution = current_distribution()?;
        let place = distribution.place(dkey)?;
        if place.group != distribution.local_group() {
            return Ok(Site::Elsewhere);
        }
        let generation = catalog::generation();
        if for_write {
            lock_shard_metadata(distribution.colocation_id, place.index, pg_sys::ShareLock);
        }
        // SAFETY: processes pending invalidations (a move that committed
        // while this call waited for the lock).
        unsafe { pg_sys::AcceptInvalidationMessages() };
        if catalog::generation() != generation {
            continue;
        }
        return Ok(Site::Here(shard_target(place, dkey)?));
    }
    Err(CallError::from(Error::Unusable(
        "Citus's metadata for rate_limiter.rate_limits kept changing during the call".into(),
        "Retry the transaction (a shard move or split was under way).",
    )))
}

/// Where the shards `0..shards` of the global limit `name` live (they
/// spread over the nodes: docs/guarantees.md, "Citus", "Exactness across
/// nodes"), read as [`site`] reads one: the ones on this node, each with
/// its target and distribution value (Citus's metadata lock for a write to
/// its shard taken), and every other node that holds some (the distribution
/// value of one of them, and their numbers), those nodes in random order.
/// Its work grows with `shards` (at most 32767). `for_write`: take the
/// metadata locks (a read takes none, as [`site`]).
///
/// Errors: 55000 as [`site`].
pub fn spread(name: &[u8], shards: i16, for_write: bool) -> Result<Spread, CallError> {
    for _ in 0..LOOKUPS {
        let distribution = current_distribution()?;
        let generation = catalog::generation();
        let mut here = Vec::new();
        let mut others: Vec<Other> = Vec::new();
        for number in 0..shards {
            let dkey = distribution_value(name, None, number)?;
            let place = distribution.place(&dkey)?;
            if place.group == distribution.local_group() {
                here.push((number, place, dkey));
            } else if let Some(other) = others.iter_mut().find(|other| other.group == place.group) {
                other.shards.push(number);
            } else {
                others.push(Other {
                    group: place.group,
                    dkey,
                    shards: vec![number],
                });
            }
        }
        let mut locked: Vec<usize> = Vec::new();
        for (_, place, _) in &here {
            if for_write && !locked.contains(&place.index) {
                lock_shard_metadata(distribution.colocation_id, place.index, pg_sys::ShareLock);
                locked.push(place.index);
            }
        }
        // SAFETY: processes pending invalidations (a move that committed
        // while this call waited for a lock).
        unsafe { pg_sys::AcceptInvalidationMessages() };
        if catalog::generation() != generation {
            continue;
        }
        let mut local = Vec::with_capacity(here.len());
        for (number, place, dkey) in here {
            local.push((number, shard_target(place, &dkey)?, dkey));
        }
        if !others.is_empty() {
            let start = crate::shard_choice::draw()[0] as usize % others.len();
            others.rotate_left(start);
        }
        return Ok(Spread {
            local,
            local_group: distribution.local_group(),
            others,
        });
    }
    Err(CallError::from(Error::Unusable(
        "Citus's metadata for rate_limiter.rate_limits kept changing during the call".into(),
        "Retry the transaction (a shard move or split was under way).",
    )))
}

/// Where a global limit's shards live ([`spread`]).
pub struct Spread {
    /// The shards on this node: number, target, distribution value.
    pub local: Vec<(i16, Target, DistributionValue)>,
    /// This node's group.
    pub local_group: i32,
    /// Every other node holding some, in random order.
    pub others: Vec<Other>,
}

/// Another node holding shards of a global limit ([`Spread`]).
pub struct Other {
    /// Its group (`pg_dist_node.groupid`).
    pub group: i32,
    /// The distribution value of one of its shards.
    pub dkey: DistributionValue,
    /// The numbers of its shards, ascending.
    pub shards: Vec<i16>,
}

impl Spread {
    /// The local shards as storage takes them, for a limit of `count`
    /// shards; `held` as `storage::consume_sharded` takes it.
    pub(super) fn placed(&self, count: i16, held: Option<i16>) -> ShardPlaces {
        let shards = self
            .local
            .iter()
            .map(|(number, target, _)| (*number, *target))
            .collect();
        ShardPlaces::Listed {
            shards,
            count,
            held,
        }
    }
}

/// The shard relation of `place` on this node and its unique index, as
/// storage's target for the rows of `dkey`.
pub(super) fn shard_target(place: Place, dkey: &DistributionValue) -> Result<Target, CallError> {
    let objects = catalog::objects();
    let table_name = CString::new(format!("rate_limits_{}", place.shard)).unwrap_or_default();
    let index_name = CString::new(format!(
        "rate_limits_name_key_shard_dkey_key_{}",
        place.shard
    ))
    .unwrap_or_default();
    // SAFETY: catalog cache lookups.
    let (table, index) = unsafe {
        (
            pg_sys::get_relname_relid(table_name.as_ptr(), objects.schema),
            pg_sys::get_relname_relid(index_name.as_ptr(), objects.schema),
        )
    };
    if table == pg_sys::InvalidOid || index == pg_sys::InvalidOid {
        return Err(CallError::from(Error::Unusable(
            format!(
                "shard {} of rate_limiter.rate_limits is placed on this node, but its table or unique index is missing",
                place.shard
            ),
            "Check the shard with citus_shards and pg_dist_placement.",
        )));
    }
    // A text datum lives in the call's memory context.
    Ok(Target::StandIn(StandIn {
        table,
        index,
        extra: dkey.datum(),
    }))
}

/// Runs `body` with the target of this node's shard of `dkey`, or returns
/// `None` when the row lives on another node (the caller then goes there).
pub fn here<R>(
    dkey: &DistributionValue,
    for_write: bool,
    body: impl FnOnce(Target) -> Result<R, CallError>,
) -> Result<Option<R>, CallError> {
    match site(dkey, for_write)? {
        Site::Here(target) => {
            let answer = body(target)?;
            if for_write {
                wrote(Some(dkey))?;
            }
            Ok(Some(answer))
        }
        Site::Elsewhere => Ok(None),
    }
}
