//! The speculative insert of `INSERT ... ON CONFLICT` for new state rows
//! ([`insert_new`], [`insert_one`]), and taking back rows this call
//! inserted ([`delete_inserted`]).

use super::layout::Datums;
use super::relations::Relations;
use pgrx::pg_sys;
use pgrx::prelude::*;

/// Step 3: inserts new rows (each `Datums` complete, state included), one
/// after the other with [`insert_one`]. Returns false when a concurrent
/// transaction inserted one of the same (name, key, shard) first: that
/// row is withdrawn and the rows inserted before it are deleted again
/// ([`delete_inserted`]), so nothing stays written; the caller then looks
/// again (with a new command id: [`delete_inserted`] ends the command).
///
/// # Safety
/// `relations` opened by [`begin_write`], `command` its command id.
pub(super) unsafe fn insert_new(
    relations: &Relations,
    rows: &mut [Datums],
    command: pg_sys::CommandId,
) -> bool {
    let mut inserted = Vec::with_capacity(rows.len());
    for datums in rows.iter_mut() {
        match insert_one(relations, datums, command) {
            Some(tid) => inserted.push(tid),
            None => {
                delete_inserted(relations, &inserted);
                debug1!(
                    "rate_limiter: another transaction inserted the same state row; looking again"
                );
                return false;
            }
        }
    }
    true
}

/// Inserts one new row (`datums` complete, state included) as `ExecInsert`
/// does for `ON CONFLICT`: a speculative-insertion token, the heap tuple
/// marked with it, the index entries checked without waiting
/// (`UNIQUE_CHECK_PARTIAL`), then the tuple finished
/// (`heap_finish_speculative`) and the token released. Returns the new
/// tuple's id, or `None` when a live or running transaction's row has the
/// same (name, key, shard): ours is then withdrawn
/// (`heap_abort_speculative`), as `ExecInsert` withdraws it.
///
/// Each speculative insertion ends before the next begins, as in the
/// executor: logical decoding keeps only one pending speculative insertion
/// per transaction, and fails ("invalid ordering of speculative insertion
/// changes") on a second one before the first is finished.
///
/// Until the transaction ends, another transaction that looks the row up
/// waits for this one (the row is an uncommitted insert), so a new row is
/// held as a locked one is.
///
/// # Safety
/// `relations` opened by [`begin_write`], `command` its command id.
pub(super) unsafe fn insert_one(
    relations: &Relations,
    datums: &mut Datums,
    command: pg_sys::CommandId,
) -> Option<pg_sys::ItemPointerData> {
    let transaction = pg_sys::GetCurrentTransactionId();
    let token = pg_sys::SpeculativeInsertionLockAcquire(transaction);
    let tuple = pg_sys::heap_form_tuple(
        (*relations.table).rd_att,
        datums.values.as_mut_ptr(),
        datums.nulls.as_mut_ptr(),
    );
    // HeapTupleHeaderSetSpeculativeToken: t_ctid holds the token.
    let ctid = &mut (*(*tuple).t_data).t_ctid;
    ctid.ip_blkid.bi_hi = (token >> 16) as u16;
    ctid.ip_blkid.bi_lo = (token & 0xffff) as u16;
    ctid.ip_posid = pg_sys::SpecTokenOffsetNumber as u16;
    pg_sys::heap_insert(
        relations.table,
        tuple,
        command,
        pg_sys::HEAP_INSERT_SPECULATIVE as i32,
        std::ptr::null_mut(),
    );
    let unique = relations.insert_index_entries(
        datums,
        &mut (*tuple).t_self,
        pg_sys::IndexUniqueCheck::UNIQUE_CHECK_PARTIAL,
        None,
    );
    let tid = (*tuple).t_self;
    if unique {
        pg_sys::heap_finish_speculative(relations.table, &mut (*tuple).t_self);
    } else {
        pg_sys::heap_abort_speculative(relations.table, &mut (*tuple).t_self);
    }
    pg_sys::heap_freetuple(tuple);
    pg_sys::SpeculativeInsertionLockRelease(transaction);
    unique.then_some(tid)
}

/// Deletes rows this call inserted (`tids`, from [`insert_one`]), as
/// `ExecDelete` would (`simple_heap_delete`, after the replica identity
/// check), so that what the call wrote is undone while the transaction
/// goes on. Ends the current command first (a command does not see its
/// own inserts) and after (so the rest of the call, and a REPEATABLE READ
/// snapshot, no longer see the rows). Until the transaction ends, other
/// transactions that look these rows up still wait for it.
///
/// # Safety
/// `relations` opened by [`begin_write`]; `tids` inserted by this call.
pub(super) unsafe fn delete_inserted(relations: &Relations, tids: &[pg_sys::ItemPointerData]) {
    if tids.is_empty() {
        return;
    }
    pg_sys::CheckCmdReplicaIdentity(relations.table, pg_sys::CmdType::CMD_DELETE);
    pg_sys::CommandCounterIncrement();
    for tid in tids {
        let mut tid = *tid;
        pg_sys::simple_heap_delete(relations.table, &mut tid);
    }
    pg_sys::CommandCounterIncrement();
}
