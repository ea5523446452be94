//! A concurrency limit's free slot taken directly (docs/concurrency.md):
//! the native `acquire`'s common case. It stands in for the statement
//! the PL/pgSQL both editions share runs first (sql/concurrency.sql,
//! `_take_slot`): `SELECT shard FROM rate_limiter.rate_limits WHERE name
//! = $1 AND key = $2 AND shard < max AND NOT (value > 0 AND ts > now)
//! ORDER BY shard LIMIT 1 FOR UPDATE SKIP LOCKED`, which PostgreSQL's
//! executor runs as an index scan under `ExecLockRows` (`nodeLockRows.c`)
//! trying each row's lock with `LockWaitSkip`. Here:
//!
//! 1. Scan the unique index over (name, key), in shard order, with a dirty
//!    snapshot, and stop at the first shard >= max.
//! 2. Pass over a version another running transaction is inserting,
//!    updating or deleting (the statement's snapshot would not see the
//!    insert, and its lock would skip the others), one of another regime,
//!    and a timed lease that has not ended at `now`.
//! 3. Try the row's lock without waiting ([`lock`] with `LockWaitSkip`):
//!    held by another transaction, or (READ COMMITTED) updated or deleted
//!    since the look: passed over, as `SKIP LOCKED` passes it over (the
//!    statement would follow an update to its newest version and check
//!    it again; here the caller's general path, which runs the statement
//!    itself, does that when no slot was taken). Locked: check the locked
//!    version again, and the slot is taken.
//!
//! Differences, by design: the row lock is `FOR NO KEY UPDATE` (as
//! `rate_limit`'s), not `FOR UPDATE` (both conflict with each other, so
//! a slot is held either way); the table is opened as `rate_limit` opens
//! it (`RowExclusiveLock`, and its fail-closed checks, `shape.rs`). Not
//! taken here, left to the caller's general path: REPEATABLE READ and
//! SERIALIZABLE (the statement's snapshot and predicate locks), read-only
//! transactions (its error), a state table stored elsewhere (Citus).

use super::committed::uses_transaction_snapshot;
use super::consume::{begin_write, end_write};
use super::layout::{Datums, RowId};
use super::rows::{lock, Lock};
use super::target::Target;
use crate::errors::CallError;
use pgrx::pg_sys;
use rate_limiter_algorithm::{Micros, State};

/// The lowest slot of (`name`, `key`) below `max` whose row exists and is
/// free at `now` (microseconds since 2000-01-01, the state rows' `ts`),
/// locked for the rest of the transaction; `None` when no such slot was
/// taken here (every row busy, a slot without a row, or a case this path
/// leaves to the caller: see the module documentation).
///
/// Errors: 55000 when the table is not as the direct path assumes
/// (`shape.rs`); lock and statement timeouts and cancels are not waited
/// for (nothing here waits).
pub fn take_free_slot(
    name: &[u8],
    key: Option<&[u8]>,
    max: i16,
    now: Micros,
) -> Result<Option<i16>, CallError> {
    // SAFETY: reads backend-local state.
    let read_only = unsafe { pg_sys::XactReadOnly };
    if read_only || uses_transaction_snapshot() || crate::catalog::objects().elsewhere {
        return Ok(None);
    }
    // SAFETY: the relations are opened here, the scan's snapshot lives on
    // this frame for the whole scan, and every lock uses this
    // transaction's command id.
    unsafe {
        let (relations, command) = begin_write(c"acquire()", Target::StateTable);
        let row = RowId {
            name,
            key,
            shard: 0,
            regime: None,
        };
        let datums = Datums::of(row, relations.extra());
        let mut dirty: pg_sys::SnapshotData = std::mem::zeroed();
        dirty.snapshot_type = pg_sys::SnapshotType::SNAPSHOT_DIRTY;
        let snapshot: *mut pg_sys::SnapshotData = &mut dirty;
        let mut taken = None;
        let mut failed = None;
        relations.each_shard_version(&datums, snapshot, |shard, tid, state| {
            if shard >= max {
                return false;
            }
            // HeapTupleSatisfiesDirty sets xmin / xmax of the version just
            // returned when a running transaction is writing it (a lock
            // only is not reported: trying the lock tells).
            let written = (*snapshot).xmin != pg_sys::InvalidTransactionId
                || (*snapshot).xmax != pg_sys::InvalidTransactionId;
            if written || !free(state, now) {
                return true;
            }
            match lock(
                &relations,
                tid,
                None,
                command,
                pg_sys::LockWaitPolicy::LockWaitSkip,
            ) {
                Ok(Lock::Locked(locked)) if free(locked.state, now) => {
                    taken = Some(shard);
                    false
                }
                Ok(_) => true,
                Err(error) => {
                    failed = Some(error);
                    false
                }
            }
        });
        end_write();
        match failed {
            Some(error) => Err(error),
            None => Ok(taken),
        }
    }
}

/// Whether a slot row's state leaves the slot free at `now`: not a timed
/// lease (value 1) that ends after `now`. A row of another regime (`None`)
/// is no slot this path takes.
fn free(state: Option<State>, now: Micros) -> bool {
    matches!(state, Some(state) if !(state.value > 0.0 && state.ts > now))
}
