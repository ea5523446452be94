//! `rate_credit` on this node's rows: the limit refilled to now, the
//! tokens added, never above capacity (per shard, emptiest shard first);
//! locks like `rate_limit` (`storage::credit`).

use crate::clock;
use crate::definitions;
use crate::errors::CallError;
use crate::storage::{self, ShardPlaces};
use rate_limiter_algorithm::Config;

/// The credit on the shards `places` holds (every shard, in the state
/// table or a stand-in; or the listed ones of a global limit, each in its
/// relation): the value of those shards afterwards (tokens, summed).
///
/// Errors: as `rate_credit`, after the checks of its arguments; 55000
/// (`CallError::PlacesChanged`) when `places` do not hold the limit's
/// shards under its definition ([`ShardPlaces::fit`]).
pub fn credit(
    name: &[u8],
    key: Option<&[u8]>,
    count: f64,
    inline: Option<Config>,
    places: ShardPlaces,
) -> Result<f64, CallError> {
    definitions::restarting(|| {
        let definition = definitions::resolve(name, key, inline)?;
        let config = definition.config;
        if !places.fit(config.shards, key) {
            // Its shards are in several relations, or no longer these.
            return Err(CallError::PlacesChanged);
        }
        let shard = config.shard();
        let shards = config.shards as i16;
        // The instant of the credit, once every row is held: what the
        // value afterwards is read at too.
        let mut now = clock::now();
        let after = storage::credit(
            name,
            key,
            shards,
            definition.regime,
            places.clone(),
            |stored| {
                definitions::recheck(name, key, inline, &definition, true)?;
                now = clock::now();
                Ok(rate_limiter_algorithm::credit(&shard, stored, count, now))
            },
        )?;
        let value = |number: usize| {
            after
                .get(number)
                .copied()
                .flatten()
                .map_or(shard.capacity(), |state| {
                    rate_limiter_algorithm::tokens_at(&shard, state, now)
                })
        };
        Ok(match &places {
            ShardPlaces::Listed { shards, .. } => shards
                .iter()
                .map(|(number, _)| value(*number as usize))
                .sum(),
            ShardPlaces::In(_) => (0..after.len()).map(value).sum(),
        })
    })
}
