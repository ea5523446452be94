//! `rate_limiter.rate_credit()`: giving tokens back, for "reserve an
//! estimate, settle the actual cost" (reserve 1,000 LLM tokens, use 612,
//! credit 388). The limit is refilled to now, the tokens added, never above
//! capacity (per shard for a sharded limit, emptiest shard first); a limit
//! without state is full and nothing is written. Locks like `rate_limit`.

use crate::clock;
use crate::config::{inline_config, required};
use crate::definitions;
use crate::errors::{report, CallError};
use crate::stats;
use crate::storage;
use pgrx::prelude::*;
use rate_limiter_algorithm::validate_credit;

/// `rate_limiter.rate_credit(name, key, count, config)`: the limit's value
/// afterwards (tokens, summed over shards). See sql/functions.sql.
#[pg_extern(sql = false)]
fn rate_credit(
    name: Option<&[u8]>,
    key: Option<&[u8]>,
    count: Option<f64>,
    config: Option<pgrx::composite_type!("rate_limiter.config")>,
) -> f64 {
    match credit(name, key, count, config) {
        Ok(value) => value,
        Err(error) => report(error),
    }
}

fn credit(
    name: Option<&[u8]>,
    key: Option<&[u8]>,
    count: Option<f64>,
    config: Option<pgrx::composite_type!("rate_limiter.config")>,
) -> Result<f64, CallError> {
    let name = required(name, "name")?;
    let count = required(count, "count")?;
    let inline = inline_config(config)?;
    validate_credit(count)?;
    definitions::restarting(|| {
        let definition = definitions::resolve(name, inline)?;
        let config = definition.config;
        let shard = config.shard();
        let after = storage::credit(name, key, config.shards as i16, |stored| {
            definitions::recheck(name, inline, &definition)?;
            Ok(rate_limiter_algorithm::credit(
                &shard,
                stored,
                count,
                clock::now(),
            ))
        })?;
        Ok(after
            .iter()
            .map(|state| state.map_or(shard.capacity(), |state| state.value))
            .sum())
    })
    .inspect(|_| stats::credited(name, count))
}
