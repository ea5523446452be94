//! Reading state rows without a lock (`rate_check`, `status`): a direct
//! scan of the unique index with the caller's snapshot.

use super::layout::{Datums, LimitRows, RowId};
use super::read_cache;
use super::relations::Relations;
use super::target::Target;
use pgrx::pg_sys;
use rate_limiter_algorithm::State;

/// Reads the state row without locking it, with the active snapshot: a
/// direct scan of the unique index (no SPI, no planner), so it costs about
/// as much as the index lookup itself and works in read-only transactions
/// and on standbys. The caller has EXECUTE on `rate_check`; like the other
/// functions it reads the table with the extension's rights.
/// `target` is where the row is stored; a read of the state table may use
/// the scan `read_cache` keeps for the statement.
pub fn read(row: RowId<'_>, target: Target) -> Option<State> {
    let datums = Datums::of(row, target.extra());
    if matches!(target, Target::StateTable) {
        if let Some(state) = read_cache::find(&datums) {
            return state;
        }
    }
    let relations = Relations::open(pg_sys::AccessShareLock, target);
    // SAFETY: the active snapshot outlives the scan.
    unsafe { relations.find(&datums, pg_sys::GetActiveSnapshot(), true) }
        .and_then(|(_, state)| state)
}

/// The stored state of every shard of `limit`, without locking, with
/// the active snapshot (as [`read`]): `states[i]` is shard `i`, `None`
/// where there is no row (or a row of another regime). Rows of shards
/// beyond `limit.shards` (left by an inline config with more shards) are
/// ignored.
pub fn read_shards(limit: LimitRows<'_>, target: Target) -> Vec<Option<State>> {
    let relations = Relations::open(pg_sys::AccessShareLock, target);
    let datums = Datums::of(limit.row(0), relations.extra());
    // SAFETY: the active snapshot outlives the scan.
    shard_states(
        unsafe { relations.find_shards(&datums, pg_sys::GetActiveSnapshot()) },
        limit.shards,
    )
}

/// The rows `found` as `(shard, state)`, laid out as the states of a limit
/// of `shards` shards: `states[i]` is shard `i`, `None` where there is no
/// row; rows of shards beyond `shards` are ignored.
pub(super) fn shard_states(found: Vec<(i16, State)>, shards: i16) -> Vec<Option<State>> {
    let mut states = vec![None; shards.max(0) as usize];
    for (shard, state) in found {
        if let Some(slot) = states.get_mut(shard.max(0) as usize) {
            *slot = Some(state);
        }
    }
    states
}
