//! `rate_credit` on this node's rows: the limit refilled to now, the
//! tokens added, never above capacity (per shard, emptiest shard first);
//! locks like `rate_limit` (`storage::credit`).

use super::consume::{definition_changed, spread_elsewhere};
use crate::clock;
use crate::definitions;
use crate::errors::CallError;
use crate::storage::{self, ShardPlaces};
use rate_limiter_algorithm::Config;

/// The credit on this node (on a distributed install: in the shard
/// relation of this node that holds the rows): the limit's value
/// afterwards (tokens, summed over shards).
///
/// Errors: as `rate_credit`, after the checks of its arguments.
pub fn credit_here(
    name: &[u8],
    key: Option<&[u8]>,
    count: f64,
    inline: Option<Config>,
) -> Result<f64, CallError> {
    credit_on(name, key, count, inline, ShardPlaces::All)
}

/// [`credit_here`] over the shards `places` allows (some of a global
/// limit's shards on a distributed install, each in its relation): the
/// value of those shards afterwards.
///
/// Errors: as `rate_credit`; 55000 when the limit's number of shards is no
/// longer the one `places` were found for.
pub fn credit_on(
    name: &[u8],
    key: Option<&[u8]>,
    count: f64,
    inline: Option<Config>,
    places: ShardPlaces,
) -> Result<f64, CallError> {
    definitions::restarting(|| {
        let definition = definitions::resolve(name, inline)?;
        let config = definition.config;
        if spread_elsewhere(key, config.shards, &places) || !places.fit(config.shards) {
            // Its shards live on several nodes, or no longer these.
            return Err(definition_changed());
        }
        let shard = config.shard();
        let after = storage::credit(name, key, config.shards as i16, places.clone(), |stored| {
            definitions::recheck(name, inline, &definition)?;
            Ok(rate_limiter_algorithm::credit(
                &shard,
                stored,
                count,
                clock::now(),
            ))
        })?;
        let value = |number: usize| {
            after
                .get(number)
                .copied()
                .flatten()
                .map_or(shard.capacity(), |state| state.value)
        };
        Ok(match &places {
            ShardPlaces::Routed { shards, .. } => shards
                .iter()
                .map(|(number, _)| value(*number as usize))
                .sum(),
            ShardPlaces::All => (0..after.len()).map(value).sum(),
        })
    })
}
