//! `define` on a distributed install: the statements Citus can plan.

use crate::config::ConfigValues;
use crate::errors::CallError;
use crate::local;
use crate::storage::text_argument;
use pgrx::spi::SpiClient;

/// On a distributed install (Citus): locks the definition (a row of a
/// reference table) and tells whether its kind, period and shards stay.
/// Citus plans no CTE over a distributed table with `FOR UPDATE`, nor an
/// enum cast of a column in a modifying statement, so `define` is three
/// statements there.
const SAME_MEANING: &str = "
    SELECT (kind::text, period, shards) IS NOT DISTINCT FROM ($2::text, $3::interval, $4::int4)
    FROM rate_limiter.definitions WHERE name = $1 FOR UPDATE";

const UPSERT: &str = "
    INSERT INTO rate_limiter.definitions AS d
        (name, kind, rate, period, capacity, max_reserved, shards, start, enforce)
    VALUES ($1, $2::rate_limiter.kind, $3, $4, $5, $6, $7, $8, $9)
    ON CONFLICT (name) DO UPDATE SET
        kind = excluded.kind, rate = excluded.rate, period = excluded.period,
        capacity = excluded.capacity, max_reserved = excluded.max_reserved,
        shards = excluded.shards, start = excluded.start, enforce = excluded.enforce";

/// Deletes a limit's state on every shard (Citus runs it on every node,
/// committing with two-phase commit).
const DISCARD: &str = "DELETE FROM rate_limiter.rate_limits WHERE name = $1";

/// `define` on a distributed install: lock the definition, write it, and
/// delete the state when the kind, period or shards change (the arguments
/// as `local::define::arguments` makes them).
pub(super) fn define_distributed(
    client: &mut SpiClient<'_>,
    name: &[u8],
    values: &ConfigValues,
    enforce: bool,
) -> Result<(), CallError> {
    // A global limit whose shards would spread over the nodes cannot keep
    // its block (docs/blocks.md, "Citus").
    if values.shards > 1 && crate::blocks::find_anywhere(name, None)?.is_some() {
        return Err(super::blocks::spread_blocks());
    }
    let (args, lock_args) = local::define::arguments(name, values, enforce);
    let same = client.update(SAME_MEANING, None, &lock_args)?;
    let discard = match same.first().get::<bool>(1) {
        Ok(Some(same)) => !same,
        _ => false, // a new definition: no state of it has a meaning
    };
    client.update(UPSERT, None, &args)?;
    if discard {
        client.update(DISCARD, None, &[text_argument(name)])?;
    }
    Ok(())
}
