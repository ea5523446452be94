//! The write of a credit (`rate_credit`): the state rows of (name, key),
//! every shard that has one, locked in ascending shard order (waiting for
//! other lockers, as `rate_limit` waits for an unsharded row), then the new
//! states written. A consuming call never waits while it holds a shard
//! (`shards.rs`), and credits lock in one order, so no two calls deadlock.
//! A shard without a row is full: a credit writes nothing there. `apply`
//! runs once every row is locked; if it fails, nothing is written.

use super::committed::confirm_unwritten;
use super::consume::end_write;
use super::layout::RowId;
use super::rows::{acquire, write_locked, Acquired, LockedRow};
use super::shard_places::{Places, ShardPlaces};
use crate::errors::CallError;
use pgrx::pg_sys;
use rate_limiter_algorithm::State;

/// Locks the existing rows of the shards `places` allows (shards
/// `0..shards` of (name, key), or some of them, on a distributed install),
/// calls `apply` with their states (in shard order) after every lock is
/// held, and writes the states it returns (one per state given). Returns
/// each shard's state afterwards (`0..shards`), `None` where there is no
/// row or the shard is not among `places`.
///
/// Errors: as [`super::consume`] (25006 in a read-only transaction, 40001,
/// timeouts and cancels while waiting).
pub fn credit(
    name: &[u8],
    key: Option<&[u8]>,
    shards: i16,
    regime: Option<i64>,
    places: ShardPlaces,
    apply: impl FnOnce(&[State]) -> Result<Vec<State>, CallError>,
) -> Result<Vec<Option<State>>, CallError> {
    // SAFETY: every step gets the relations opened here and this
    // transaction's command id.
    unsafe {
        let places = Places::open(places, c"rate_credit()");
        let command = pg_sys::GetCurrentCommandId(true);
        let mut locked: Vec<(usize, State, LockedRow)> = Vec::new();
        for shard in places.ascending(shards) {
            let row = RowId {
                name,
                key,
                shard,
                regime,
            };
            // rate_credit counts no contention (it makes no decision).
            let acquired = places.at(shard, |relations| {
                acquire(relations, row, command, &mut false)
            })?;
            // A row of another regime reads as missing: a full limit,
            // which a credit leaves as it is.
            if let Acquired::Locked(locked_row) = acquired {
                if let Some(state) = locked_row.state {
                    locked.push((shard as usize, state, locked_row));
                }
            }
        }
        let stored: Vec<State> = locked.iter().map(|(_, state, _)| *state).collect();
        let credited = apply(&stored)?;
        let mut after = vec![None; shards.max(1) as usize];
        for ((shard, stored, row), state) in locked.iter_mut().zip(credited) {
            let number = *shard as i16;
            if state != *stored {
                places.at(number, |relations| {
                    write_locked(relations, row, state, command)
                })?;
            } else {
                // A row left as it was (already full) was read: confirmed
                // and predicate-locked under REPEATABLE READ /
                // SERIALIZABLE.
                let unchanged = [(
                    RowId {
                        name,
                        key,
                        shard: number,
                        regime,
                    },
                    Some(*stored),
                )];
                places.at(number, |relations| confirm_unwritten(relations, unchanged))?;
            }
            if let Some(slot) = after.get_mut(*shard) {
                *slot = Some(state);
            }
        }
        end_write();
        Ok(after)
    }
}
