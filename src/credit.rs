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
use pgrx::heap_tuple::PgHeapTuple;
use pgrx::prelude::*;
use rate_limiter_algorithm::{validate_credit, Config};

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
    let distributed = crate::catalog::objects().distributed;
    // On a distributed install an inline config may travel to the node
    // holding the row, as its SQL value.
    let (config, config_argument) = match config {
        Some(tuple) if distributed => {
            let datum = tuple.into_composite_datum();
            // SAFETY: a composite datum of rate_limiter.config, just made.
            let tuple = datum.map(|datum| unsafe { PgHeapTuple::from_composite_datum(datum) });
            (tuple, datum)
        }
        config => (config, None),
    };
    let inline = inline_config(config)?;
    validate_credit(count)?;
    let value = if distributed {
        crate::citus::credit(name, key, count, inline, config_argument)?
    } else {
        credit_here(name, key, count, inline)?
    };
    // Counted on the node where rate_credit was called.
    stats::credited(name, count);
    Ok(value)
}

/// The credit on this node (on a distributed install: in the shard of this
/// node that holds the rows): the limit's value afterwards.
///
/// Errors: as `rate_credit`, after the checks of its arguments.
pub fn credit_here(
    name: &[u8],
    key: Option<&[u8]>,
    count: f64,
    inline: Option<Config>,
) -> Result<f64, CallError> {
    definitions::restarting(|| {
        let definition = definitions::resolve(name, inline)?;
        let config = definition.config;
        if config.shards > 1 && key.is_none() && crate::citus::route().is_some() {
            // Its shards live on several nodes.
            return Err(CallError::NotOnCluster(
                "a global limit with several shards",
            ));
        }
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
}
