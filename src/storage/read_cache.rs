//! One statement's open read of the state table, kept from one
//! `rate_check` call to the next.
//!
//! A statement that calls `rate_check` once per row (a trigger's query, a
//! `LATERAL` join) would otherwise open the table and its index, begin an
//! index scan and make a tuple slot on every call, and close them again:
//! about a fifth of a call (docs/performance.md). PostgreSQL's executor
//! opens them once per statement and only restarts the scan per row
//! (`ExecReScanIndexScan`); this does the same.
//!
//! Lifetime: the open scan belongs to the statement's executor. It is kept
//! for the memory context of the executor's per-query memory (the
//! `ReturnSetInfo`'s `econtext->ecxt_per_query_memory`, what PostgreSQL
//! deletes at `ExecutorEnd`), and closed by a callback when that context
//! goes, as `ExecEndIndexScan` would close it. When the context goes
//! because the (sub)transaction aborts, the callback closes nothing: the
//! abort's resource owner releases the relations, buffer pins and scan, as
//! it does for the executor's own scans (which `ExecEndNode` does not end
//! on abort either).
//!
//! A kept scan is used again only when nothing it depends on moved:
//! - the same executor context (one kept scan per backend: a nested
//!   statement's calls, whose context differs, take the uncached path);
//! - the same resource owner (the one that holds its pins and references);
//! - no relcache invalidation since it was opened (`catalog::generation`):
//!   otherwise it is closed and the relations are opened again, with the
//!   checks of `Relations::open`;
//! - the state table itself (a read of a stand-in, `target.rs`, is not
//!   kept: each call may read another).
//!
//! Each call sets the scan's snapshot to its own (the active one, as
//! `read` uses), restarts the scan with its key and reads at most one row.
//! The relation locks are the transaction's, as before: held until it ends.
//! While a call uses the kept scan it is out of the thread-local slot, so
//! an error in the middle leaves nothing half-used behind.

use super::layout::{Datums, KEY_COLUMNS};
use super::lookup::slot_state;
use super::relations::Relations;
use super::target::Target;
use crate::compat;
use pgrx::pg_sys;
use pgrx::prelude::*;
use rate_limiter_algorithm::State;
use std::cell::Cell;
use std::mem::ManuallyDrop;

/// An open scan of the state table's unique index, kept for `context`.
struct Kept {
    context: pg_sys::MemoryContext,
    owner: pg_sys::ResourceOwner,
    generation: u64,
    relations: ManuallyDrop<Relations>,
    scan: pg_sys::IndexScanDesc,
    slot: *mut pg_sys::TupleTableSlot,
}

thread_local! {
    /// The executor context of the `rate_check` call running now (null
    /// outside one): where a read may keep its scan.
    static CALL_CONTEXT: Cell<pg_sys::MemoryContext> = const { Cell::new(std::ptr::null_mut()) };
    /// The kept scan, if any (taken out while a call uses it).
    static KEPT: Cell<Option<Box<Kept>>> = const { Cell::new(None) };
}

/// Registers, once at load (`_PG_init`), the transaction callback that
/// forgets what a call left set when its transaction ended: the call's
/// context and the kept scan. Nothing should be left by then (`within`
/// restores the context, the executor context's deletion closes the
/// scan); this makes sure that a statement ended in a way that skipped
/// both (an error raised by a longjmp through `within`) leaves nothing
/// that a later call could use: a dangling executor context, or a scan
/// whose relations its resource owner has released.
pub fn register() {
    // SAFETY: adds a callback to the backend's list, once.
    unsafe { pg_sys::RegisterXactCallback(Some(at_transaction_end), std::ptr::null_mut()) }
}

/// Forgets the call's context and the kept scan when a transaction ends
/// (commits, aborts or is prepared). The scan is not closed here: by then
/// its resource owner has released it (an abort), or its executor context
/// is gone and closed it (the usual commit), or the server reports what
/// is still open (a leak, which the suite fails on); using it again could
/// only be worse.
#[pg_guard]
unsafe extern "C-unwind" fn at_transaction_end(
    event: pg_sys::XactEvent::Type,
    _arg: *mut std::ffi::c_void,
) {
    if crate::transaction_end::ends(event) {
        CALL_CONTEXT.with(|cell| cell.set(std::ptr::null_mut()));
        drop(KEPT.with(Cell::take));
    }
}

/// Runs `body` (a `rate_check` call) with reads allowed to keep their scan
/// for the executor context `context` (null: they keep nothing). The
/// previous context is restored afterwards, also when `body` unwinds.
pub fn within<R>(context: pg_sys::MemoryContext, body: impl FnOnce() -> R) -> R {
    struct Restore(pg_sys::MemoryContext);
    impl Drop for Restore {
        fn drop(&mut self) {
            CALL_CONTEXT.with(|cell| cell.set(self.0));
        }
    }
    let _restore = Restore(CALL_CONTEXT.with(|cell| cell.replace(context)));
    body()
}

/// The row of `datums` as the active snapshot sees it, read through the
/// scan kept for the running call's executor context; `None` when this
/// call cannot keep one (the caller then opens the relations itself).
pub(super) fn find(datums: &Datums) -> Option<Option<State>> {
    let context = CALL_CONTEXT.with(Cell::get);
    if context.is_null() {
        return None;
    }
    // SAFETY: the kept scan is used only under the conditions in the
    // module comment; everything is allocated in the executor context,
    // which outlives it (its callback ends it first).
    unsafe {
        let owner = pg_sys::CurrentResourceOwner;
        let kept = match KEPT.with(Cell::take) {
            Some(kept) if kept.context != context => {
                // Another statement's scan (this call is nested in it).
                KEPT.with(|cell| cell.set(Some(kept)));
                return None;
            }
            Some(kept)
                if kept.owner == owner && kept.generation == crate::catalog::generation() =>
            {
                kept
            }
            Some(kept) => {
                close(kept, owner);
                open(context, owner)
            }
            None => {
                let kept = open(context, owner);
                let callback = pg_sys::MemoryContextAlloc(
                    context,
                    std::mem::size_of::<pg_sys::MemoryContextCallback>(),
                ) as *mut pg_sys::MemoryContextCallback;
                (*callback).func = Some(context_gone);
                (*callback).arg = context as *mut std::ffi::c_void;
                pg_sys::MemoryContextRegisterResetCallback(context, callback);
                kept
            }
        };
        let previous = pg_sys::MemoryContextSwitchTo(context);
        let state = find_again(&kept, datums, pg_sys::GetActiveSnapshot());
        pg_sys::MemoryContextSwitchTo(previous);
        KEPT.with(|cell| cell.set(Some(kept)));
        Some(state)
    }
}

/// Opens the relations and begins a scan for `context`, allocated there.
///
/// # Safety
/// In a transaction; `context` is the running call's executor context.
unsafe fn open(context: pg_sys::MemoryContext, owner: pg_sys::ResourceOwner) -> Box<Kept> {
    let previous = pg_sys::MemoryContextSwitchTo(context);
    let relations = Relations::open(pg_sys::AccessShareLock, Target::StateTable);
    // After the open: it returns relations that no invalidation since this
    // generation has changed.
    let generation = crate::catalog::generation();
    // Each call sets the scan's snapshot to its own (`find_again`).
    let scan = compat::index_beginscan(
        relations.table,
        relations.index,
        pg_sys::GetActiveSnapshot(),
        KEY_COLUMNS as i32,
    );
    let slot = pg_sys::table_slot_create(relations.table, std::ptr::null_mut());
    pg_sys::MemoryContextSwitchTo(previous);
    Box::new(Kept {
        context,
        owner,
        generation,
        relations: ManuallyDrop::new(relations),
        scan,
        slot,
    })
}

/// `Relations::find`'s state through `kept`'s scan, restarted with the key
/// of `datums` and `snapshot` as `ExecReScanIndexScan` restarts the
/// executor's. The slot is cleared (its buffer pin dropped) and the scan
/// forgets the snapshot before this returns.
///
/// # Safety
/// `kept` from [`open`], in the transaction that opened it; `snapshot`
/// valid for the call.
unsafe fn find_again(kept: &Kept, datums: &Datums, snapshot: pg_sys::Snapshot) -> Option<State> {
    let mut state = None;
    kept.relations.rescan(
        kept.scan,
        kept.slot,
        datums,
        KEY_COLUMNS,
        snapshot,
        |slot| {
            state = slot_state(slot, datums.regime());
            false
        },
    );
    pg_sys::ExecClearTuple(kept.slot);
    (*kept.scan).xs_snapshot = std::ptr::null_mut();
    state
}

/// Ends `kept`'s scan and closes its relations when `owner` is the one
/// holding them and the transaction is still running; otherwise leaves
/// them to their resource owner (an abort releases them).
///
/// # Safety
/// `kept` came from [`open`] and is not used afterwards.
unsafe fn close(mut kept: Box<Kept>, owner: pg_sys::ResourceOwner) {
    if kept.owner == owner && pg_sys::IsTransactionState() {
        pg_sys::ExecDropSingleTupleTableSlot(kept.slot);
        pg_sys::index_endscan(kept.scan);
        ManuallyDrop::drop(&mut kept.relations);
    }
}

/// The executor context `arg` is being deleted or reset: close the scan
/// kept for it, if any.
#[pg_guard]
unsafe extern "C-unwind" fn context_gone(arg: *mut std::ffi::c_void) {
    let context = arg as pg_sys::MemoryContext;
    match KEPT.with(Cell::take) {
        Some(kept) if kept.context == context => close(kept, pg_sys::CurrentResourceOwner),
        other => KEPT.with(|cell| cell.set(other)),
    }
}
