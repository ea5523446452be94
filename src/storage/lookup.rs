//! Looking rows up through the unique index of opened [`Relations`]: one
//! row, every version of a row a snapshot sees, or every shard of a key;
//! and a stored tuple's `(value, ts)`.

use super::layout::{previous, regime_is, Datums, KEY_COLUMNS, PREVIOUS, REGIME, SHARD, TS, VALUE};
use super::relations::Relations;
use super::scan_keys::scan_keys;
use crate::compat;
use pgrx::pg_sys;
use pgrx::prelude::*;
use rate_limiter_algorithm::State;

impl Relations {
    /// Finds the row of `datums` visible to `snapshot`. Returns its TID,
    /// and `(value, ts)` when `with_state`.
    ///
    /// # Safety
    /// `snapshot` must be valid for the whole scan.
    pub unsafe fn find(
        &self,
        datums: &Datums,
        snapshot: pg_sys::Snapshot,
        with_state: bool,
    ) -> Option<(pg_sys::ItemPointerData, Option<State>)> {
        let mut found = None;
        self.scan(datums, KEY_COLUMNS, snapshot, |slot| {
            let state = with_state
                .then(|| slot_state(slot, datums.regime()))
                .flatten();
            found = Some(((*slot).tts_tid, state));
            false
        });
        found
    }

    /// Calls `visit` with the TID and `(value, ts)` of each version of the
    /// row of `datums` that `snapshot` sees (a dirty snapshot can see two:
    /// the old and new versions of a row being updated), until it returns
    /// false.
    ///
    /// # Safety
    /// `snapshot` must be valid for the whole scan.
    pub unsafe fn each_version(
        &self,
        datums: &Datums,
        snapshot: pg_sys::Snapshot,
        mut visit: impl FnMut(pg_sys::ItemPointerData, Option<State>) -> bool,
    ) {
        self.scan(datums, KEY_COLUMNS, snapshot, |slot| {
            visit((*slot).tts_tid, slot_state(slot, datums.regime()))
        });
    }

    /// The state of every shard of (name, key) of `datums` visible to
    /// `snapshot`, as `(shard, state)` in shard order.
    ///
    /// # Safety
    /// `snapshot` must be valid for the whole scan.
    pub unsafe fn find_shards(
        &self,
        datums: &Datums,
        snapshot: pg_sys::Snapshot,
    ) -> Vec<(i16, State)> {
        let mut shards = Vec::new();
        self.each_shard_version(datums, snapshot, |shard, _, state| {
            if let Some(state) = state {
                shards.push((shard, state));
            }
            true
        });
        shards
    }

    /// Calls `visit` with the shard, TID and `(value, ts)` of each version
    /// of each shard of (name, key) of `datums` that `snapshot` sees, in
    /// shard order, until it returns false.
    ///
    /// # Safety
    /// `snapshot` must be valid for the whole scan.
    pub unsafe fn each_shard_version(
        &self,
        datums: &Datums,
        snapshot: pg_sys::Snapshot,
        mut visit: impl FnMut(i16, pg_sys::ItemPointerData, Option<State>) -> bool,
    ) {
        self.scan(datums, KEY_COLUMNS - 1, snapshot, |slot| {
            let mut is_null = false;
            let shard = pg_sys::slot_getattr(slot, (SHARD + 1) as i32, &mut is_null);
            match i16::from_datum(shard, is_null) {
                Some(shard) => visit(shard, (*slot).tts_tid, slot_state(slot, datums.regime())),
                None => true,
            }
        });
    }

    /// Scans the unique index for the first `keys` key columns of `datums`,
    /// calling `visit` with each tuple visible to `snapshot` until it
    /// returns false.
    unsafe fn scan(
        &self,
        datums: &Datums,
        keys: usize,
        snapshot: pg_sys::Snapshot,
        visit: impl FnMut(*mut pg_sys::TupleTableSlot) -> bool,
    ) {
        let scan = compat::index_beginscan(self.table, self.index, snapshot, keys as i32);
        let slot = pg_sys::table_slot_create(self.table, std::ptr::null_mut());
        self.rescan(scan, slot, datums, keys, snapshot, visit);
        pg_sys::ExecDropSingleTupleTableSlot(slot);
        pg_sys::index_endscan(scan);
    }

    /// Restarts `scan` (begun on these relations for `keys` key columns)
    /// for the first `keys` key columns of `datums` and `snapshot`, as
    /// `ExecReScanIndexScan` restarts the executor's, and calls `visit`
    /// with each tuple visible to `snapshot`, read into `slot`, until it
    /// returns false. The snapshot is set before `index_rescan`: btree's
    /// rescan reads it (whether it may drop its leaf page pin, PostgreSQL
    /// 18).
    ///
    /// # Safety
    /// `scan` and `slot` made for these relations; `snapshot` valid for
    /// the whole scan.
    pub(super) unsafe fn rescan(
        &self,
        scan: pg_sys::IndexScanDesc,
        slot: *mut pg_sys::TupleTableSlot,
        datums: &Datums,
        keys: usize,
        snapshot: pg_sys::Snapshot,
        mut visit: impl FnMut(*mut pg_sys::TupleTableSlot) -> bool,
    ) {
        let mut scan_keys = scan_keys(self.index, datums);
        (*scan).xs_snapshot = snapshot;
        pg_sys::index_rescan(
            scan,
            scan_keys.as_mut_ptr(),
            keys as i32,
            std::ptr::null_mut(),
            0,
        );
        while pg_sys::index_getnext_slot(scan, pg_sys::ScanDirection::ForwardScanDirection, slot) {
            if !visit(slot) {
                break;
            }
        }
    }
}

/// `(value, ts)` of the tuple in `slot`: `slot_getattr` (tuptable.h) of
/// both columns, with one deforming call for the columns read (up to
/// regime, the last of them, when the table has it) instead of one call
/// each. `None` when the tuple's regime is not `expected` (the row was
/// written under another configuration: it reads as missing).
///
/// # Safety
/// `slot` holds a tuple of the state table (ts after value, regime last).
pub(super) unsafe fn slot_state(
    slot: *mut pg_sys::TupleTableSlot,
    expected: Option<i64>,
) -> Option<State> {
    const _: () = assert!(VALUE < TS && TS < REGIME && REGIME < PREVIOUS);
    let columns = (*(*slot).tts_tupleDescriptor).natts as usize;
    let read = if columns > PREVIOUS {
        PREVIOUS + 1
    } else {
        TS + 1
    };
    if ((*slot).tts_nvalid as usize) < read {
        pg_sys::slot_getsomeattrs_int(slot, read as i32);
    }
    let values = std::slice::from_raw_parts((*slot).tts_values, read);
    let nulls = std::slice::from_raw_parts((*slot).tts_isnull, read);
    if !regime_is(values, nulls, columns, expected) {
        return None;
    }
    Some(State {
        value: f64::from_datum(values[VALUE], nulls[VALUE])?,
        ts: i64::from_datum(values[TS], nulls[TS])?,
        previous: previous(values, nulls, columns),
    })
}
