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
        // First inside a Citus shard query, then 25006 before the call goes
        // anywhere, after 42704 (see `limit::consume`).
        crate::citus::before_call("rate_credit()")?;
        definitions::resolve(name, inline)?;
        // SAFETY: reads the transaction state; raises an ERROR when read-only.
        unsafe { pgrx::pg_sys::PreventCommandIfReadOnly(c"rate_credit()".as_ptr()) };
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
    credit_on(name, key, count, inline, None)
}

/// [`credit_here`] over some of a global limit's shards on a distributed
/// install (`placed`: the shards on this node with their routes, and the
/// limit's number of shards, which must still be its definition's): the
/// value of those shards afterwards. `None`: every shard.
///
/// Errors: as `rate_credit`; 55000 when the definition changed.
pub fn credit_on(
    name: &[u8],
    key: Option<&[u8]>,
    count: f64,
    inline: Option<Config>,
    placed: Option<(Vec<(i16, crate::citus::Route)>, i16)>,
) -> Result<f64, CallError> {
    definitions::restarting(|| {
        let definition = definitions::resolve(name, inline)?;
        let config = definition.config;
        let places = match &placed {
            Some((shards, count)) => {
                if config.shards != i32::from(*count) {
                    return Err(crate::limit::definition_changed());
                }
                storage::ShardPlaces::Routed(shards.clone())
            }
            None => {
                if config.shards > 1 && key.is_none() && crate::citus::route().is_some() {
                    // Its shards live on several nodes: citus::credit.
                    return Err(crate::limit::definition_changed());
                }
                storage::ShardPlaces::All
            }
        };
        let shard = config.shard();
        let after = storage::credit(name, key, config.shards as i16, places, |stored| {
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
        Ok(match &placed {
            Some((shards, _)) => shards
                .iter()
                .map(|(number, _)| value(*number as usize))
                .sum(),
            None => (0..after.len()).map(value).sum(),
        })
    })
}
