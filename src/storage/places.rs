//! Where the shards a call may use are stored: on one server (and for a
//! keyed limit on a distributed install) every shard of the limit in one
//! relation; for a global limit on a distributed install, the shards
//! placed on this node, each in the shard relation that holds it (the
//! cluster layer finds them and gives their [`Route`]s). `shards.rs` and `credit.rs` read and write
//! each shard through [`Places::at`].

use super::consume::begin_write;
use super::relations::Relations;
use super::route::{on_shard, Route};
use super::LimitRows;
use pgrx::pg_sys;
use pgrx::prelude::*;
use rate_limiter_algorithm::shard_order;
use std::ffi::CStr;

/// Which of a limit's shards a call may use, and where each is stored.
#[derive(Debug, Clone)]
pub enum ShardPlaces {
    /// Every shard `0..shards`, in the state table (or, on a distributed
    /// install, in the shard relation the caller routed the call to: a
    /// keyed limit's shards all live with its key).
    All,
    /// Only `shards` (at least one, each once), each in the shard relation
    /// of this node that holds it (its [`Route`]): a global limit's shards
    /// on a distributed install, where they spread over the nodes.
    Routed {
        /// Shard number and route, each shard once.
        shards: Vec<(i16, Route)>,
        /// The limit's number of shards when they were placed: a call
        /// whose definition now says otherwise must not use them.
        count: i16,
        /// The highest shard the call already holds (`Some(i16::MAX)`:
        /// the call must not wait for any; see `shards.rs`).
        held: Option<i16>,
    },
}

impl ShardPlaces {
    /// The highest shard the call already holds, if any.
    pub fn held(&self) -> Option<i16> {
        match self {
            ShardPlaces::All => None,
            ShardPlaces::Routed { held, .. } => *held,
        }
    }

    /// Whether these places belong to a limit of `shards` shards: always
    /// for [`ShardPlaces::All`]; for routed shards, whether the limit had
    /// that many when they were placed.
    pub fn fit(&self, shards: i32) -> bool {
        match self {
            ShardPlaces::All => true,
            ShardPlaces::Routed { count, .. } => i32::from(*count) == shards,
        }
    }
}

/// The relations a call reads and writes its shards in.
pub(super) struct Places {
    /// Opened for writing: one for `ShardPlaces::All`, one per shard
    /// relation for `ShardPlaces::Routed`.
    relations: Vec<Relations>,
    /// For `ShardPlaces::Routed`: each usable shard, the index of its
    /// relations and its route. Empty for `ShardPlaces::All`.
    pub(super) routed: Vec<(i16, usize, Route)>,
}

impl Places {
    /// Opens the relations of `places` for writing (the first with
    /// [`begin_write`]'s checks; `function` names the call in its 25006
    /// error).
    ///
    /// # Safety
    /// As [`begin_write`].
    pub(super) unsafe fn open(places: ShardPlaces, function: &CStr) -> Places {
        match places {
            ShardPlaces::All => Places {
                relations: vec![begin_write(function).0],
                routed: Vec::new(),
            },
            ShardPlaces::Routed { shards, .. } if shards.is_empty() => {
                error!("rate_limiter: a sharded call was given no shard to use")
            }
            ShardPlaces::Routed { shards, .. } => {
                let mut relations: Vec<Relations> = Vec::new();
                let mut tables: Vec<pg_sys::Oid> = Vec::new();
                let mut routed = Vec::with_capacity(shards.len());
                for (number, route) in shards {
                    let index = match tables.iter().position(|table| *table == route.table) {
                        Some(index) => index,
                        None => {
                            let first = relations.is_empty();
                            relations.push(on_shard(route, || {
                                if first {
                                    begin_write(function).0
                                } else {
                                    Relations::open_for_write()
                                }
                            }));
                            tables.push(route.table);
                            relations.len() - 1
                        }
                    };
                    routed.push((number, index, route));
                }
                Places { relations, routed }
            }
        }
    }

    /// The shards the call may use, in ascending order (`shards`: the
    /// limit's number of shards, for `ShardPlaces::All`).
    pub(super) fn ascending(&self, shards: i16) -> Vec<i16> {
        if self.routed.is_empty() {
            return (0..shards.max(1)).collect();
        }
        let mut numbers: Vec<i16> = self.routed.iter().map(|(number, ..)| *number).collect();
        numbers.sort_unstable();
        numbers
    }

    /// How many shards the call may use.
    pub(super) fn count(&self, limit: LimitRows<'_>) -> i16 {
        if self.routed.is_empty() {
            limit.shards
        } else {
            self.routed.len() as i16
        }
    }

    /// The order in which the call looks at the shards it may use
    /// ([`shard_order`] over them).
    pub(super) fn order(
        &self,
        limit: LimitRows<'_>,
        random: [u32; 3],
    ) -> impl Iterator<Item = i16> + '_ {
        let count = self.count(limit);
        shard_order(count, random)
            .filter(move |&index| index < count)
            .map(move |index| match self.routed.get(index as usize) {
                Some((number, ..)) => *number,
                None => index,
            })
    }

    /// Runs `body` on the relations of shard `number`, with storage
    /// writing its distribution value.
    pub(super) fn at<R>(&self, number: i16, body: impl FnOnce(&Relations) -> R) -> R {
        if self.routed.is_empty() {
            return body(&self.relations[0]);
        }
        match self.routed.iter().find(|(shard, ..)| *shard == number) {
            Some((_, index, route)) => on_shard(*route, || body(&self.relations[*index])),
            None => error!("rate_limiter: shard {number} is not among the shards of this call"),
        }
    }
}
