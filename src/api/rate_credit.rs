//! `rate_limiter.rate_credit()`: giving tokens back, for "reserve an
//! estimate, settle the actual cost" (reserve 1,000 LLM tokens, use 612,
//! credit 388). The limit is refilled to now, the tokens added, never above
//! capacity (per shard for a sharded limit, emptiest shard first); a limit
//! without state is full and nothing is written. Locks like `rate_limit`
//! (`crate::placement`; on one server `local::credit`).

use crate::config::{inline_config, required};
use crate::errors::{report, CallError};
use crate::placement;
use crate::stats;
use pgrx::heap_tuple::PgHeapTuple;
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
    // When the rows are stored elsewhere, an inline config may travel to
    // the node holding them, as its SQL value.
    let elsewhere = crate::catalog::objects().elsewhere;
    let (config, config_argument) = match config {
        Some(tuple) if elsewhere => {
            let datum = tuple.into_composite_datum();
            // SAFETY: a composite datum of rate_limiter.config, just made.
            let tuple = datum.map(|datum| unsafe { PgHeapTuple::from_composite_datum(datum) });
            (tuple, datum)
        }
        config => (config, None),
    };
    let inline = inline_config(config)?;
    validate_credit(count)?;
    let value = match placement::credit(name, key, count, inline, config_argument) {
        Ok(value) => {
            // Counted on the node where rate_credit was called.
            stats::credited(name, count);
            value
        }
        // A composite's name (docs/composites.md): every member.
        Err(error @ CallError::Undefined(_)) if inline.is_none() => {
            match crate::composites::instead_of(&error, name)? {
                Some(found) => super::composite::credit(key, count, &found)?,
                None => return Err(error),
            }
        }
        Err(error) => return Err(error),
    };
    Ok(rate_limiter_algorithm::shown(value))
}
