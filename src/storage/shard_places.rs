//! Where the shards a call may use are stored: every shard of the limit in
//! one relation (its [`Target`]: the state table, or on a cluster the
//! stand-in holding the limit's key), or only some shards, each in the
//! relation given with it (a global limit whose shards the cluster layer
//! placed in several relations). `shards.rs` and `credit.rs` read and
//! write each shard through [`Places::at`].

use super::consume::begin_write;
use super::layout::LimitRows;
use super::relations::Relations;
use super::target::Target;
use pgrx::pg_sys;
use pgrx::prelude::*;
use rate_limiter_algorithm::shard_order;
use std::ffi::CStr;

/// Which of a limit's shards a call may use, and where each is stored.
#[derive(Debug, Clone)]
pub enum ShardPlaces {
    /// Every shard `0..shards`, in the one relation of the target.
    In(Target),
    /// Only `shards` (at least one, each once), each in the relation of
    /// its target.
    Listed {
        /// Shard number and target, each shard once.
        shards: Vec<(i16, Target)>,
        /// The limit's number of shards when they were placed: a call
        /// whose definition now says otherwise must not use them.
        count: i16,
        /// The highest shard the call already holds (`Some(i16::MAX)`:
        /// the call must not wait for any; see `shards.rs`).
        held: Option<i16>,
    },
}

impl ShardPlaces {
    /// Every shard, in the state table: the places of a call on one server.
    pub const STATE_TABLE: ShardPlaces = ShardPlaces::In(Target::StateTable);

    /// The highest shard the call already holds, if any.
    pub fn held(&self) -> Option<i16> {
        match self {
            ShardPlaces::In(_) => None,
            ShardPlaces::Listed { held, .. } => *held,
        }
    }

    /// Whether these places hold the shards a call of the limit (name,
    /// `key`; `None`: the global limit) of `shards` shards uses: the state
    /// table holds them all; a stand-in holds every shard of a key, but a
    /// global limit's only when it has one (several may be in several
    /// stand-ins, and must be listed); listed shards fit a limit of as
    /// many shards as they were placed for. A call whose places do not fit
    /// fails with `CallError::PlacesChanged`.
    pub fn fit(&self, shards: i32, key: Option<&[u8]>) -> bool {
        match self {
            ShardPlaces::In(Target::StateTable) => true,
            ShardPlaces::In(Target::StandIn(_)) => shards <= 1 || key.is_some(),
            ShardPlaces::Listed { count, .. } => i32::from(*count) == shards,
        }
    }
}

/// The relations a call reads and writes its shards in.
pub(super) struct Places {
    /// Opened for writing: one for `ShardPlaces::In`, one per relation for
    /// `ShardPlaces::Listed`.
    relations: Vec<Relations>,
    /// For `ShardPlaces::Listed`: each usable shard, the index of its
    /// relations and its target's extra column value (one relation may
    /// hold several shards, each written with its own). Empty for
    /// `ShardPlaces::In`.
    listed: Vec<(i16, usize, Option<pg_sys::Datum>)>,
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
            ShardPlaces::In(target) => Places {
                relations: vec![begin_write(function, target).0],
                listed: Vec::new(),
            },
            ShardPlaces::Listed { shards, .. } if shards.is_empty() => {
                error!("rate_limiter: a sharded call was given no shard to use")
            }
            ShardPlaces::Listed { shards, .. } => {
                let mut relations: Vec<Relations> = Vec::new();
                let mut tables: Vec<pg_sys::Oid> = Vec::new();
                let mut listed = Vec::with_capacity(shards.len());
                for (number, target) in shards {
                    let table = match target {
                        Target::StandIn(stand_in) => stand_in.table,
                        Target::StateTable => pg_sys::InvalidOid,
                    };
                    let index = match tables.iter().position(|known| *known == table) {
                        Some(index) => index,
                        None => {
                            relations.push(if relations.is_empty() {
                                begin_write(function, target).0
                            } else {
                                Relations::open_for_write(target)
                            });
                            tables.push(table);
                            relations.len() - 1
                        }
                    };
                    listed.push((number, index, target.extra()));
                }
                Places { relations, listed }
            }
        }
    }

    /// The shards the call may use, in ascending order (`shards`: the
    /// limit's number of shards, for `ShardPlaces::In`).
    pub(super) fn ascending(&self, shards: i16) -> Vec<i16> {
        if self.listed.is_empty() {
            return (0..shards.max(1)).collect();
        }
        let mut numbers: Vec<i16> = self.listed.iter().map(|(number, ..)| *number).collect();
        numbers.sort_unstable();
        numbers
    }

    /// How many shards the call may use.
    pub(super) fn count(&self, limit: LimitRows<'_>) -> i16 {
        if self.listed.is_empty() {
            limit.shards
        } else {
            self.listed.len() as i16
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
            .map(move |index| match self.listed.get(index as usize) {
                Some((number, ..)) => *number,
                None => index,
            })
    }

    /// Runs `body` on the relations of shard `number`, which write its
    /// rows with its target's extra column value.
    pub(super) fn at<R>(&self, number: i16, body: impl FnOnce(&Relations) -> R) -> R {
        if self.listed.is_empty() {
            return body(&self.relations[0]);
        }
        match self.listed.iter().find(|(shard, ..)| *shard == number) {
            Some((_, index, extra)) => {
                let relations = &self.relations[*index];
                relations.extra.set(*extra);
                body(relations)
            }
            None => error!("rate_limiter: shard {number} is not among the shards of this call"),
        }
    }
}
