//! The write of a credit (`rate_credit`): the state rows of (name, key),
//! every shard that has one, locked in ascending shard order (waiting for
//! other lockers, as `rate_limit` waits for an unsharded row), then the new
//! states written. A consuming call never waits while it holds a shard
//! (`shards.rs`), and credits lock in one order, so no two calls deadlock.
//! A shard without a row is full: a credit writes nothing there. `apply`
//! runs once every row is locked; if it fails, nothing is written.

use super::consume::{
    acquire, begin_write, confirm_unwritten, end_write, write_locked, Acquired, LockedRow,
};
use super::RowId;
use crate::errors::CallError;
use rate_limiter_algorithm::State;

/// Locks the existing rows of shards `0..shards` of (name, key), calls
/// `apply` with their states (in shard order) after every lock is held, and
/// writes the states it returns (one per state given). Returns each
/// shard's state afterwards, `None` where there is no row.
///
/// Errors: as [`super::consume`] (25006 in a read-only transaction, 40001,
/// timeouts and cancels while waiting).
pub fn credit(
    name: &[u8],
    key: Option<&[u8]>,
    shards: i16,
    apply: impl FnOnce(&[State]) -> Result<Vec<State>, CallError>,
) -> Result<Vec<Option<State>>, CallError> {
    // SAFETY: every step gets the relations opened here and this
    // transaction's command id.
    unsafe {
        let (relations, command) = begin_write(c"rate_credit()");
        let mut locked: Vec<(usize, LockedRow)> = Vec::new();
        for shard in 0..shards.max(1) {
            let row = RowId { name, key, shard };
            // rate_credit counts no contention (it makes no decision).
            if let Acquired::Locked(locked_row) = acquire(&relations, row, command, &mut false)? {
                locked.push((shard as usize, locked_row));
            }
        }
        let stored: Vec<State> = locked.iter().map(|(_, row)| row.state).collect();
        let credited = apply(&stored)?;
        let mut after = vec![None; shards.max(1) as usize];
        let mut unchanged = Vec::new();
        for ((shard, row), state) in locked.iter_mut().zip(credited) {
            if state != row.state {
                write_locked(&relations, row, state, command)?;
            } else {
                unchanged.push((
                    RowId {
                        name,
                        key,
                        shard: *shard as i16,
                    },
                    Some(row.state),
                ));
            }
            after[*shard] = Some(state);
        }
        // A row left as it was (already full) was read: confirmed and
        // predicate-locked under REPEATABLE READ / SERIALIZABLE.
        confirm_unwritten(&relations, unchanged)?;
        end_write();
        Ok(after)
    }
}
