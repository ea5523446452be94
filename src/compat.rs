//! The differences between PostgreSQL 15, 16, 17 and 18 that the extension
//! meets, in one place. Each function here stands for one server function,
//! macro or convention whose signature or layout changed; everything else
//! calls these instead of `#[cfg]`-ing itself.
//!
//! | what | 15 | 16, 17 | 18 |
//! |---|---|---|---|
//! | memory for a GUC check hook's "extra" value | `malloc` (freed with `free`) | `guc_malloc` (the GUC memory context) | as 16 |
//! | `heap_update` | decides HOT; the new tuple says whether it is heap-only | also reports which indexes need entries (`TU_UpdateIndexes`: none, all, or only summarizing ones such as BRIN) | as 16 |
//! | `index_beginscan` | `(heap, index, snapshot, nkeys, norderbys)` | as 15 | takes an `IndexScanInstrumentation` pointer too |
//! | a tuple descriptor's attributes | the array `attrs` | as 15 | after `compact_attrs` (`TupleDescAttr`) |
//! | may a role execute a function | `pg_proc_aclcheck` | `object_aclcheck(ProcedureRelationId, ...)` | as 16 |
//! | after inserting index entries | nothing to release | 16: as 15; 17: `index_insert_cleanup` (BRIN keeps buffers pinned in the `IndexInfo`) | as 17 |
//! | is client input already received (`pqcomm.c`) | `pq_buffer_has_data()` (bool) | 16: as 15; 17: `pq_buffer_remaining_data()` (a byte count) | as 17 |

use pgrx::pg_sys;
use std::ffi::c_void;

/// Allocates `size` bytes for a GUC check hook's "extra" value, the way
/// the server frees it; null when out of memory (the hook then fails).
///
/// # Safety
/// Only for a check hook's `*extra`.
pub unsafe fn guc_extra(size: usize) -> *mut c_void {
    #[cfg(feature = "pg15")]
    {
        libc::malloc(size)
    }
    #[cfg(any(feature = "pg16", feature = "pg17", feature = "pg18"))]
    {
        pg_sys::guc_malloc(pg_sys::LOG as i32, size)
    }
}

/// Which index entries a non-key update needs (what `ExecUpdate` passes to
/// `ExecInsertIndexTuples`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum IndexUpdates {
    /// A HOT update: no index entries.
    None,
    /// Entries in every index.
    All,
    /// A HOT update that still needs entries in summarizing indexes (BRIN);
    /// PostgreSQL 16 and later.
    Summarizing,
}

/// `heap_update(relation, otid, newtup, cid, NULL, true, failure,
/// lockmode)` and the index entries the new version needs.
///
/// # Safety
/// As `heap_update`: `relation` open and locked, `otid` a tuple this
/// transaction holds the lock of, `newtup` formed for `relation`.
pub unsafe fn heap_update(
    relation: pg_sys::Relation,
    otid: pg_sys::ItemPointer,
    newtup: pg_sys::HeapTuple,
    cid: pg_sys::CommandId,
    failure: *mut pg_sys::TM_FailureData,
    lockmode: *mut pg_sys::LockTupleMode::Type,
) -> (pg_sys::TM_Result::Type, IndexUpdates) {
    #[cfg(feature = "pg15")]
    {
        let result = pg_sys::heap_update(
            relation,
            otid,
            newtup,
            cid,
            std::ptr::null_mut(),
            true,
            failure,
            lockmode,
        );
        let heap_only = (*(*newtup).t_data).t_infomask2 as u32 & pg_sys::HEAP_ONLY_TUPLE != 0;
        let updates = if heap_only {
            IndexUpdates::None
        } else {
            IndexUpdates::All
        };
        (result, updates)
    }
    #[cfg(any(feature = "pg16", feature = "pg17", feature = "pg18"))]
    {
        let mut update_indexes: pg_sys::TU_UpdateIndexes::Type = pg_sys::TU_UpdateIndexes::TU_None;
        let result = pg_sys::heap_update(
            relation,
            otid,
            newtup,
            cid,
            std::ptr::null_mut(),
            true,
            failure,
            lockmode,
            &mut update_indexes,
        );
        let updates = match update_indexes {
            pg_sys::TU_UpdateIndexes::TU_None => IndexUpdates::None,
            pg_sys::TU_UpdateIndexes::TU_Summarizing => IndexUpdates::Summarizing,
            _ => IndexUpdates::All,
        };
        (result, updates)
    }
}

/// Whether `index` is a summarizing index (BRIN), which PostgreSQL 16 and
/// later update even on a HOT update. (15 has none: a HOT update there
/// needs no index entry at all.)
///
/// # Safety
/// `index` open.
pub unsafe fn is_summarizing(index: pg_sys::Relation) -> bool {
    #[cfg(feature = "pg15")]
    {
        let _ = index;
        false
    }
    #[cfg(any(feature = "pg16", feature = "pg17", feature = "pg18"))]
    {
        (*(*index).rd_indam).amsummarizing
    }
}

/// `index_insert_cleanup(index, info)`: releases what the access method
/// kept in `info` between inserts (PostgreSQL 17 added it, for BRIN's
/// pinned revmap buffers; without it a transaction that inserted into a
/// BRIN index ends with "resource was not closed" warnings). Nothing to do
/// before 17.
///
/// # Safety
/// `index` open, `info` its `IndexInfo`, used for inserts only until now.
pub unsafe fn index_insert_cleanup(index: pg_sys::Relation, info: *mut pg_sys::IndexInfo) {
    #[cfg(any(feature = "pg15", feature = "pg16"))]
    {
        let _ = (index, info);
    }
    #[cfg(any(feature = "pg17", feature = "pg18"))]
    {
        pg_sys::index_insert_cleanup(index, info);
    }
}

/// `index_beginscan(heap, index, snapshot, nkeys, 0)`, without
/// instrumentation.
///
/// # Safety
/// As `index_beginscan`.
pub unsafe fn index_beginscan(
    heap: pg_sys::Relation,
    index: pg_sys::Relation,
    snapshot: pg_sys::Snapshot,
    keys: i32,
) -> pg_sys::IndexScanDesc {
    #[cfg(any(feature = "pg15", feature = "pg16", feature = "pg17"))]
    {
        pg_sys::index_beginscan(heap, index, snapshot, keys, 0)
    }
    #[cfg(feature = "pg18")]
    {
        pg_sys::index_beginscan(heap, index, snapshot, std::ptr::null_mut(), keys, 0)
    }
}

/// Attribute `column` (0-based) of a tuple descriptor: `TupleDescAttr`.
///
/// # Safety
/// `descriptor` valid, `column < natts`.
pub unsafe fn attribute(
    descriptor: pg_sys::TupleDesc,
    column: usize,
) -> *const pg_sys::FormData_pg_attribute {
    #[cfg(any(feature = "pg15", feature = "pg16", feature = "pg17"))]
    {
        (*descriptor).attrs.as_ptr().add(column)
    }
    #[cfg(feature = "pg18")]
    {
        // The full attributes follow the array of compact ones.
        let natts = (*descriptor).natts as usize;
        let first =
            (*descriptor).compact_attrs.as_ptr().add(natts) as *const pg_sys::FormData_pg_attribute;
        first.add(column)
    }
}

/// Whether `role` may execute the function `function` (EXECUTE granted to
/// it, to a role it is a member of, or to PUBLIC; or it is a superuser).
///
/// # Safety
/// Inside a transaction.
pub unsafe fn may_execute(function: pg_sys::Oid, role: pg_sys::Oid) -> bool {
    let mode = pg_sys::ACL_EXECUTE as pg_sys::AclMode;
    #[cfg(feature = "pg15")]
    let result = pg_sys::pg_proc_aclcheck(function, role, mode);
    #[cfg(any(feature = "pg16", feature = "pg17", feature = "pg18"))]
    let result = pg_sys::object_aclcheck(pg_sys::ProcedureRelationId, function, role, mode);
    result == pg_sys::AclResult::ACLCHECK_OK
}

// pqcomm.c's reading of the client's messages (libpq/libpq.h, which pgrx
// does not bind).
unsafe extern "C-unwind" {
    #[cfg(any(feature = "pg15", feature = "pg16"))]
    fn pq_buffer_has_data() -> bool;
    #[cfg(any(feature = "pg17", feature = "pg18"))]
    fn pq_buffer_remaining_data() -> isize;
    fn pq_is_reading_msg() -> bool;
    fn pq_startmsgread();
    fn pq_peekbyte() -> std::ffi::c_int;
    fn pq_endmsgread();
}

/// The type byte of the client's next message (`b'S'` for Sync, ...) when
/// its first byte has already been received into the backend's input
/// buffer; `None` when nothing is buffered (this never waits for the
/// client, never reads from the socket and consumes nothing), or while a
/// message is being read.
///
/// # Safety
/// In a backend serving a client, between its messages (while one
/// executes).
pub unsafe fn next_client_message_type() -> Option<u8> {
    #[cfg(any(feature = "pg15", feature = "pg16"))]
    let buffered = pq_buffer_has_data();
    #[cfg(any(feature = "pg17", feature = "pg18"))]
    let buffered = pq_buffer_remaining_data() > 0;
    if !buffered || pq_is_reading_msg() {
        return None;
    }
    // pq_peekbyte belongs inside a message read (it asserts so): a read is
    // opened around it and closed again. With a byte buffered it returns
    // it without touching the socket, and cannot fail.
    pg_sys::ffi::pg_guard_ffi_boundary(|| {
        pq_startmsgread();
        let next = pq_peekbyte();
        pq_endmsgread();
        u8::try_from(next).ok()
    })
}
