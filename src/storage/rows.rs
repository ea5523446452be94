//! The row primitives of the direct storage path, each standing in for a
//! step of PostgreSQL's executor on one state row (`heapam.c`,
//! `nodeModifyTable.c`, `execIndexing.c`): [`peek`] (look the row up with
//! a dirty snapshot), [`read_committed`] (the committed row, no lock, for
//! a refusal that never waits), [`acquire`] and [`lock`] (find and lock it, as
//! `FOR NO KEY UPDATE` would, with the READ COMMITTED recheck and the
//! 40001 of REPEATABLE READ), [`write_locked`] (update it in place, HOT
//! when it can); `insert.rs` has the speculative insert of `INSERT ... ON
//! CONFLICT`, `committed.rs` the reads without a lock. `consume.rs`,
//! `shards.rs`, `credit.rs` and `all_or_nothing.rs` compose them.

use super::committed::{serialization_failure, uses_transaction_snapshot};
use super::layout::{previous, regime_is, timestamp, Datums, RowId, TS, VALUE};
use super::relations::Relations;
use crate::compat::{self, IndexUpdates};
use crate::errors::CallError;
use pgrx::pg_sys;
use pgrx::prelude::*;
use rate_limiter_algorithm::State;

/// A buffer pinned by `heap_lock_tuple`, released when dropped (after an
/// ERROR the abort releases it instead).
struct Pinned(pg_sys::Buffer);

impl Drop for Pinned {
    fn drop(&mut self) {
        if !std::thread::panicking() && self.0 != pg_sys::InvalidBuffer as pg_sys::Buffer {
            // SAFETY: the pin was taken for this call and is released once.
            unsafe { pg_sys::ReleaseBuffer(self.0) }
        }
    }
}

/// A state row this call holds the row lock of. It holds no buffer pin:
/// the row lock is a mark in the tuple (its xmax), kept until the
/// transaction ends whether or not the page stays pinned, so [`lock`]
/// releases the buffer at once, as `heapam_tuple_lock` does. A call that
/// holds thousands of rows (`rate_limit_all`) therefore pins none of
/// their pages while it waits for the next one. The row's datums point
/// into a copy of the tuple made under the lock (`copy`, freed on drop).
pub(super) struct LockedRow {
    /// Where the locked version is (`t_self`); the tuple data is not kept.
    tid: pg_sys::ItemPointerData,
    copy: pg_sys::HeapTuple,
    datums: Datums,
    /// The stored state, read under the lock; `None` when the row was
    /// written under another regime (it reads as missing: a full limit).
    pub state: Option<State>,
}

impl LockedRow {
    /// A row this transaction has just inserted (so no one else can lock
    /// it), at `tid`, with `datums` (complete) and the `state` stored in it.
    pub(super) fn inserted(tid: pg_sys::ItemPointerData, datums: Datums, state: State) -> Self {
        LockedRow {
            tid,
            copy: std::ptr::null_mut(),
            datums,
            state: Some(state),
        }
    }
}

impl Drop for LockedRow {
    fn drop(&mut self) {
        if !std::thread::panicking() && !self.copy.is_null() {
            // SAFETY: the copy was made by heap_copytuple for this row and
            // nothing points into it once the row is dropped.
            unsafe { pg_sys::heap_freetuple(self.copy) }
        }
    }
}

/// What acquiring a row came to.
pub(super) enum Acquired {
    /// The row exists and this call holds its lock.
    Locked(LockedRow),
    /// No row: the limit is full; writing it means inserting it.
    New,
}

/// Step 1 and 2 of the module documentation, waiting as long as it takes:
/// the row of `row`, locked, or `New` when there is none. Sets `waited`
/// when the call had to wait for another transaction (for its row lock, or
/// for its insert, update or delete of the row); `rate_limiter.stats`
/// counts that as contention for a sharded limit.
///
/// # Safety
/// `relations` opened by [`begin_write`], `command` its command id.
pub(super) unsafe fn acquire(
    relations: &Relations,
    row: RowId<'_>,
    command: pg_sys::CommandId,
    waited: &mut bool,
) -> Result<Acquired, CallError> {
    loop {
        pgrx::check_for_interrupts!();
        let Some(tid) = find_committed(relations, &Datums::of(row, relations.extra()), waited)
        else {
            return Ok(Acquired::New);
        };
        if let Some(locked) = lock_waiting(relations, tid, row.regime, command, waited)? {
            return Ok(Acquired::Locked(locked));
        }
        // READ COMMITTED: the row changed while we waited; look again.
    }
}

/// Locks the row at `tid` ([`lock`]), waiting for other lockers; `None`
/// when, under READ COMMITTED, it was updated or deleted since it was
/// found (look again). The lock is first tried without waiting
/// (`LockWaitSkip`), and only when that would block taken with
/// `LockWaitBlock` (then `waited` is set), as `ExecLockRows` takes it: the
/// same lock, one failed conditional attempt more under contention.
///
/// # Safety
/// As [`acquire`]; `tid` a version of the row found in `relations`.
pub(super) unsafe fn lock_waiting(
    relations: &Relations,
    tid: pg_sys::ItemPointerData,
    regime: Option<i64>,
    command: pg_sys::CommandId,
    waited: &mut bool,
) -> Result<Option<LockedRow>, CallError> {
    let mut locked = lock(
        relations,
        tid,
        regime,
        command,
        pg_sys::LockWaitPolicy::LockWaitSkip,
    )?;
    if let Lock::WouldBlock = locked {
        *waited = true;
        locked = lock(
            relations,
            tid,
            regime,
            command,
            pg_sys::LockWaitPolicy::LockWaitBlock,
        )?;
    }
    match locked {
        Lock::Locked(locked) => Ok(Some(locked)),
        Lock::Changed => Ok(None),
        Lock::WouldBlock => {
            error!("rate_limiter: a waiting row lock reported that it would block")
        }
    }
}

/// Waits for the transaction that [`peek`] found writing the row of
/// `row` (`Peek::Busy`) to end, without locking anything; the caller then
/// looks at the row again.
///
/// # Safety
/// `relations` open.
pub(super) unsafe fn wait_for_writer(relations: &Relations, row: RowId<'_>) {
    find_committed(relations, &Datums::of(row, relations.extra()), &mut false);
}

/// Step 1: the row of `datums` as a dirty snapshot sees it, after waiting
/// for any transaction still inserting, updating or deleting it (then
/// `waited` is set).
unsafe fn find_committed(
    relations: &Relations,
    datums: &Datums,
    waited: &mut bool,
) -> Option<pg_sys::ItemPointerData> {
    loop {
        let mut dirty: pg_sys::SnapshotData = std::mem::zeroed();
        dirty.snapshot_type = pg_sys::SnapshotType::SNAPSHOT_DIRTY;
        let mut tid = relations.find(datums, &mut dirty, false)?.0;
        // A dirty snapshot reports the transaction that is still running.
        let running = if dirty.xmin != pg_sys::InvalidTransactionId {
            dirty.xmin
        } else {
            dirty.xmax
        };
        if running == pg_sys::InvalidTransactionId {
            return Some(tid);
        }
        *waited = true;
        if dirty.speculativeToken != 0 {
            pg_sys::SpeculativeInsertionWait(dirty.xmin, dirty.speculativeToken);
        } else {
            pg_sys::XactLockTableWait(
                running,
                relations.table,
                &mut tid,
                pg_sys::XLTW_Oper::XLTW_InsertIndex,
            );
        }
    }
}

/// What a look at a row without waiting found.
pub(super) enum Peek {
    /// No row: a full limit.
    Missing,
    /// Committed and not being written by another transaction (it may
    /// still be locked by one: only locking tells).
    Free {
        tid: pg_sys::ItemPointerData,
        state: Option<State>,
    },
    /// Another running transaction is inserting, updating or deleting it.
    /// `state` is its last committed state (`None` while being inserted).
    Busy { state: Option<State> },
}

/// Step 1 without waiting: the row of `datums` as a dirty snapshot sees
/// it, and whether a running transaction is writing it.
///
/// A row being updated by a running transaction has two versions in the
/// index when the update is not HOT: the old one (its xmax running) and
/// the new one (its xmin running). Every version is looked at, so such a
/// row is `Busy` with its committed state, never taken for a row being
/// inserted (`Busy { state: None }`, a full limit). A committed version
/// nobody is writing wins over a running transaction's speculative insert
/// of the same key (that insert is about to be withdrawn).
///
/// # Safety
/// `relations` open.
pub(super) unsafe fn peek(relations: &Relations, datums: &Datums) -> Peek {
    let mut dirty: pg_sys::SnapshotData = std::mem::zeroed();
    dirty.snapshot_type = pg_sys::SnapshotType::SNAPSHOT_DIRTY;
    let snapshot: *mut pg_sys::SnapshotData = &mut dirty;
    let mut seen = Peek::Missing;
    relations.each_version(datums, snapshot, |tid, state| {
        // HeapTupleSatisfiesDirty sets xmin / xmax for the version just
        // returned.
        let (xmin, xmax) = ((*snapshot).xmin, (*snapshot).xmax);
        let this = if xmin != pg_sys::InvalidTransactionId {
            Peek::Busy { state: None }
        } else if xmax != pg_sys::InvalidTransactionId {
            Peek::Busy { state }
        } else {
            Peek::Free { tid, state }
        };
        let rank = |peek: &Peek| match peek {
            Peek::Missing => 0,
            Peek::Busy { state: None } => 1,
            Peek::Busy { state: Some(_) } => 2,
            Peek::Free { .. } => 3,
        };
        if rank(&this) > rank(&seen) {
            seen = this;
        }
        !matches!(seen, Peek::Free { .. })
    });
    seen
}

/// What trying to lock a row came to.
pub(super) enum Lock {
    Locked(LockedRow),
    /// Another running transaction holds the row (only with `LockWaitSkip`).
    WouldBlock,
    /// READ COMMITTED: the row was updated or deleted since it was found;
    /// find it again.
    Changed,
}

/// Locks the row at `tid` (`FOR NO KEY UPDATE`) with `policy`
/// (`LockWaitBlock` waits for other lockers, `LockWaitSkip` does not) and
/// reads its state, as `heap_lock_tuple` under `ExecLockRows` /
/// `ExecOnConflictUpdate` would. A row of another regime than `regime`
/// reads as missing, and a write of it stores `regime`.
///
/// Errors: 40001 under REPEATABLE READ or SERIALIZABLE when the row
/// changed after the transaction's snapshot (or is not visible to it).
///
/// # Safety
/// `relations` opened by [`begin_write`], `command` its command id, `tid` a
/// tuple of the table.
pub(super) unsafe fn lock(
    relations: &Relations,
    tid: pg_sys::ItemPointerData,
    regime: Option<i64>,
    command: pg_sys::CommandId,
    policy: pg_sys::LockWaitPolicy::Type,
) -> Result<Lock, CallError> {
    let mut tuple: pg_sys::HeapTupleData = std::mem::zeroed();
    tuple.t_self = tid;
    let mut buffer: pg_sys::Buffer = pg_sys::InvalidBuffer as pg_sys::Buffer;
    let mut failure: pg_sys::TM_FailureData = std::mem::zeroed();
    let locked = pg_sys::heap_lock_tuple(
        relations.table,
        &mut tuple,
        command,
        pg_sys::LockTupleMode::LockTupleNoKeyExclusive,
        policy,
        false,
        &mut buffer,
        &mut failure,
    );
    let buffer = Pinned(buffer);
    match locked {
        pg_sys::TM_Result::TM_Ok => {}
        pg_sys::TM_Result::TM_WouldBlock => return Ok(Lock::WouldBlock),
        pg_sys::TM_Result::TM_Updated | pg_sys::TM_Result::TM_Deleted => {
            if uses_transaction_snapshot() {
                return Err(serialization_failure(
                    locked == pg_sys::TM_Result::TM_Deleted,
                ));
            }
            return Ok(Lock::Changed);
        }
        other => {
            error!("rate_limiter: unexpected result {other} locking a state row");
        }
    }
    // Under REPEATABLE READ the locked row must be the one the snapshot
    // sees, unless this transaction wrote it.
    if uses_transaction_snapshot() {
        pg_sys::LockBuffer(buffer.0, pg_sys::BUFFER_LOCK_SHARE as i32);
        let visible = pg_sys::HeapTupleSatisfiesVisibility(
            &mut tuple,
            pg_sys::GetTransactionSnapshot(),
            buffer.0,
        );
        pg_sys::LockBuffer(buffer.0, pg_sys::BUFFER_LOCK_UNLOCK as i32);
        let inserter = (*tuple.t_data).t_choice.t_heap.t_xmin;
        if !visible && !pg_sys::TransactionIdIsCurrentTransactionId(inserter) {
            return Err(serialization_failure(false));
        }
    }
    // Copy the locked version and let the page go (see `LockedRow`).
    let copy = pg_sys::heap_copytuple(&mut tuple);
    drop(buffer);
    let mut datums = Datums::empty();
    pg_sys::heap_deform_tuple(
        copy,
        (*relations.table).rd_att,
        datums.values.as_mut_ptr(),
        datums.nulls.as_mut_ptr(),
    );
    let columns = (*(*relations.table).rd_att).natts as usize;
    let state = match (
        f64::from_datum(datums.values[VALUE], datums.nulls[VALUE]),
        i64::from_datum(datums.values[TS], datums.nulls[TS]),
    ) {
        (Some(value), Some(ts)) => regime_is(&datums.values, &datums.nulls, columns, regime)
            .then_some(State {
                value,
                ts,
                previous: previous(&datums.values, &datums.nulls, columns),
            }),
        _ => {
            error!("rate_limiter: a state row has a NULL value or ts");
        }
    };
    // A write stores the call's regime (a table without the column has
    // none to store: the call's regime is then None, `overrides.rs`).
    datums.set_regime(regime);
    Ok(Lock::Locked(LockedRow {
        tid: tuple.t_self,
        copy,
        datums,
        state,
    }))
}

/// Stores `state` in the locked row: `heap_update` (HOT whenever the page
/// has room; otherwise new index entries), as `ExecUpdate` would.
///
/// # Safety
/// `locked` locked by this call with `relations` and `command`.
pub(super) unsafe fn write_locked(
    relations: &Relations,
    locked: &mut LockedRow,
    state: State,
    command: pg_sys::CommandId,
) -> Result<(), CallError> {
    let ts = timestamp(state.ts)?;
    // name, key and shard are the stored datums (they point into the
    // row's copy; heap_form_tuple copies them).
    locked.datums.set_state(state.value, ts, state.previous);
    let descriptor = (*relations.table).rd_att;
    pg_sys::CheckCmdReplicaIdentity(relations.table, pg_sys::CmdType::CMD_UPDATE);
    let new = pg_sys::heap_form_tuple(
        descriptor,
        locked.datums.values.as_mut_ptr(),
        locked.datums.nulls.as_mut_ptr(),
    );
    let mut failure: pg_sys::TM_FailureData = std::mem::zeroed();
    let mut lock_mode: pg_sys::LockTupleMode::Type = 0;
    let (updated, index_updates) = compat::heap_update(
        relations.table,
        &mut locked.tid,
        new,
        command,
        &mut failure,
        &mut lock_mode,
    );
    if updated != pg_sys::TM_Result::TM_Ok {
        error!("rate_limiter: unexpected result {updated} updating a locked state row");
    }
    // A HOT update needs no index entry (except in summarizing indexes,
    // from PostgreSQL 16 on); otherwise add one for the new version in
    // every index (the key columns are unchanged).
    if index_updates != IndexUpdates::None {
        relations.insert_index_entries(
            &locked.datums,
            &mut (*new).t_self,
            pg_sys::IndexUniqueCheck::UNIQUE_CHECK_YES,
            Some(index_updates == IndexUpdates::Summarizing),
        );
    }
    pg_sys::heap_freetuple(new);
    Ok(())
}
