//! Reading the stored state of rows wherever they live, without a lock
//! (`status`, `rate_check` of a global limit with several shards):
//! `_rate_state_at` on other nodes.
use super::delegation::row_arguments;
use super::metadata::distribution_value;
use super::site::{here, spread, Spread};
use super::value::DistributionValue;
use crate::errors::CallError;
use pgrx::datum::DatumWithOid;
use pgrx::prelude::*;
use rate_limiter_algorithm::State;

/// The stored state of the shards of the global limit `name` placed on
/// this node (`spread.local`), without locking: `states[i]` is shard `i`
/// of `shards`, `None` for a shard elsewhere or without a row.
pub(super) fn read_local_shards(name: &[u8], spread: &Spread, shards: i16) -> Vec<Option<State>> {
    let mut states = vec![None; shards.max(0) as usize];
    for (number, target, _) in &spread.local {
        if let Some(slot) = states.get_mut(*number as usize) {
            *slot = crate::storage::read(
                crate::storage::RowId {
                    name,
                    key: None,
                    shard: *number,
                    regime: None,
                },
                *target,
            );
        }
    }
    states
}

/// The statement that reads the stored rows of (name, key) on the node
/// holding them: Citus delegates `_rate_state_at` (distributed like
/// `_rate_limit_at`) by its first argument.
pub(super) const STATE_ELSEWHERE: &str =
    "SELECT shard, value, ts FROM rate_limiter._rate_state_at($1, $2, $3, $4)";

/// The stored state of shards `0..shards` of (name, key) on a distributed
/// install, read without locking where the rows live, as
/// `storage::read_shards` reads them on one server: `states[i]` is shard
/// `i`. A row on another node is read there through `_rate_state_at`, as
/// the calling role and inside its transaction (read-only ones too).
///
/// A global limit with several shards: its shards on this node read here,
/// the others on each node that holds some, through `_rate_state_at` with
/// the distribution value of one of them.
///
/// Errors: 55000 as [`super::site`]; 22P02 as [`distribution_value`].
pub fn read_states(
    name: &[u8],
    key: Option<&[u8]>,
    shards: i16,
) -> Result<Vec<Option<State>>, CallError> {
    if shards > 1 && key.is_none() {
        return read_spread_states(name, &spread(name, shards, false)?, shards);
    }
    let dkey = distribution_value(name, key, 0)?;
    if let Some(states) = here(&dkey, false, |target| {
        Ok(crate::storage::read_shards(
            key_rows(name, key, shards),
            target,
        ))
    })? {
        return Ok(states);
    }
    let mut states = vec![None; shards.max(0) as usize];
    read_elsewhere(&dkey, name, key, shards, &mut states)?;
    Ok(states)
}

/// Fills `states` with the stored rows of (name, key) that
/// `_rate_state_at` returns from the node holding the row of `dkey`
/// (`states[i]` is shard `i`; rows beyond it are ignored).
pub(super) fn read_elsewhere(
    dkey: &DistributionValue,
    name: &[u8],
    key: Option<&[u8]>,
    shards: i16,
    states: &mut [Option<State>],
) -> Result<(), CallError> {
    let [dkey, name, key] = row_arguments(dkey, name, key);
    let arguments = [dkey, name, key, DatumWithOid::from(shards)];
    // A sliding window's previous-window count comes in a row of shard
    // -1 - shard (crate::citus::internal_functions::rate_state_at).
    let mut previous: Vec<(usize, f64)> = Vec::new();
    Spi::connect_mut(|client| {
        for row in client.update(STATE_ELSEWHERE, None, &arguments)? {
            if let (Some(shard), Some(value), Some(ts)) = (
                row.get::<i16>(1)?,
                row.get::<f64>(2)?,
                row.get::<TimestampWithTimeZone>(3)?,
            ) {
                if shard < 0 {
                    previous.push(((-1 - i32::from(shard)) as usize, value));
                } else if let Some(slot) = states.get_mut(shard as usize) {
                    *slot = Some(State {
                        value,
                        ts: ts.into_inner(),
                        previous: 0.0,
                    });
                }
            }
        }
        Ok::<_, pgrx::spi::SpiError>(())
    })?;
    for (shard, count) in previous {
        if let Some(Some(state)) = states.get_mut(shard) {
            state.previous = count;
        }
    }
    Ok(())
}

/// The stored state of every shard of the global limit `name` (`shards`
/// shards, placed as `spread` says): this node's read here, the others
/// through `_rate_state_at` on each node that holds some.
pub(super) fn read_spread_states(
    name: &[u8],
    spread: &Spread,
    shards: i16,
) -> Result<Vec<Option<State>>, CallError> {
    let mut states = read_local_shards(name, spread, shards);
    for other in &spread.others {
        read_elsewhere(&other.dkey, name, None, shards, &mut states)?;
    }
    Ok(states)
}

/// The rows of `shards` shards of (name, key), as a node reads them for
/// another that resolved the call: under the regime the key's
/// configuration has here (`definitions::regime_of`; an inline config's
/// is the definition's).
pub(super) fn key_rows<'a>(
    name: &'a [u8],
    key: Option<&'a [u8]>,
    shards: i16,
) -> crate::storage::LimitRows<'a> {
    crate::storage::LimitRows {
        name,
        key,
        shards,
        regime: crate::definitions::regime_of(name, key),
    }
}
