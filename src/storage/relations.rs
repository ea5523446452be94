//! The state table `rate_limiter.rate_limits` and its indexes, opened for
//! one call: the checks that the table still has the shape the direct
//! writes assume, the lookup of a row through the unique index, and adding
//! index entries for a written tuple.

use super::scan_keys::scan_keys;
use super::{Datums, COLUMNS, DKEY, KEY, KEY_COLUMNS, NAME, SHARD, TS, VALUE};
use crate::compat;
use pgrx::pg_sys;
use pgrx::pg_sys::panic::ErrorReport;
use pgrx::prelude::*;
use rate_limiter_algorithm::State;
use std::cell::Cell;

/// The state table and its unique index, opened with `lock` and closed at
/// the end of the call (the locks are kept until the transaction ends, as a
/// query keeps them).
pub struct Relations {
    pub table: pg_sys::Relation,
    pub index: pg_sys::Relation,
    /// For writing: the table's other indexes, which writes maintain too
    /// (one a user added, or the copy `REINDEX CONCURRENTLY` builds).
    others: Vec<pg_sys::Relation>,
    /// For writing: the `IndexInfo` of `index`, then of each of `others`
    /// (null until the first index entry is written: most calls write
    /// none), built once per call as `ExecOpenIndices` builds them. An
    /// access method may keep state in it between inserts (BRIN keeps
    /// revmap buffers pinned from PostgreSQL 17 on), released on drop with
    /// `index_insert_cleanup`, as `ExecCloseIndices` does. Empty when
    /// opened for reading.
    infos: Vec<Cell<*mut pg_sys::IndexInfo>>,
}

/// `heap` (`pg_am`): the only table access method the direct writes handle.
const HEAP_TABLE_ACCESS_METHOD: u32 = 2;

/// Column types of `rate_limiter.rate_limits`, in order.
const COLUMN_TYPES: [u32; COLUMNS] = [
    pg_sys::TEXTOID.to_u32(),
    pg_sys::TEXTOID.to_u32(),
    pg_sys::INT2OID.to_u32(),
    pg_sys::FLOAT8OID.to_u32(),
    pg_sys::TIMESTAMPTZOID.to_u32(),
    pg_sys::TEXTOID.to_u32(),
];

fn altered(what: &str) -> ! {
    ereport!(
        PgLogLevel::ERROR,
        PgSqlErrorCode::ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE,
        format!("rate_limiter.rate_limits has been altered: {what}"),
        "rate_limit() writes the table directly, as INSERT ... ON CONFLICT (name, key, shard) DO UPDATE would, but without firing triggers or rules, checking constraints or applying row-level security; it needs the columns (name text, key text, shard smallint, value float8, ts timestamptz, dkey text, bigint or uuid), its unique index on (name, key, shard), and nothing else that a write would have to do."
    );
    unreachable!("an ERROR report does not return")
}

/// Fails closed: the state table is distributed by Citus, and this call
/// was not routed to a shard on this node (`route.rs`).
fn not_routed() -> ! {
    if let Some(problem) = super::route::unrouted() {
        crate::errors::report(problem);
    }
    ErrorReport::new(
        PgSqlErrorCode::ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE,
        "rate_limiter.rate_limits is distributed by Citus, and this call was not routed to one of its shards",
        "rate_limiter",
    )
    .set_detail("The call would read and write the table on this node, which holds no state once it is distributed.")
    .set_hint("Distribute the tables with rate_limiter.distribute() only (on the coordinator: SELECT rate_limiter.undistribute(); SELECT rate_limiter.distribute();), and retry the transaction.")
    .report(PgLogLevel::ERROR);
    unreachable!("an ERROR report does not return")
}

/// Whether `index` can arbitrate (name, key, shard) as the state table's
/// unique constraint does: unique with NULLS NOT DISTINCT, not deferrable,
/// on exactly the columns 1, 2, 3 in that order, without expressions or a
/// predicate (what `ON CONFLICT (name, key, shard)` would infer). On a
/// distributed install (`citus`) the columns are 1, 2, 3, 6: Citus needs
/// the distribution column `dkey` in a unique index, and as a function of
/// (name, key, shard) it changes no conflict.
///
/// # Safety
/// `index` open.
unsafe fn is_arbiter(index: pg_sys::Relation, table: pg_sys::Oid) -> bool {
    let form = (*index).rd_index;
    let columns =
        std::slice::from_raw_parts((*form).indkey.values.as_ptr(), (*form).indnatts as usize);
    (*form).indrelid == table
        && (*form).indisunique
        && (*form).indnullsnotdistinct
        && (*form).indimmediate
        && (columns == [1, 2, 3] || columns == [1, 2, 3, (DKEY + 1) as i16])
        && (*form).indnkeyatts as usize == columns.len()
        && pg_sys::RelationGetIndexExpressions(index).is_null()
        && pg_sys::RelationGetIndexPredicate(index).is_null()
}

/// Whether the unique (name, key, shard) index `index` compares keys as
/// their bytes, as the direct writes and lookups assume: a btree whose
/// text columns use the default text operators (`text_ops`) with a
/// deterministic collation, and whose shard column uses the integer ones.
/// Another collation or operator class could make two distinct keys equal
/// (a nondeterministic ICU collation does), so a speculative insert would
/// be withdrawn over and over.
///
/// # Safety
/// `index` open.
unsafe fn has_bytewise_equality(index: pg_sys::Relation) -> bool {
    const TEXT_BTREE_FAMILY: u32 = 1994; // text_ops
    const INTEGER_BTREE_FAMILY: u32 = 1976; // integer_ops (int2, int4, int8)
    const UUID_BTREE_FAMILY: u32 = 2968; // uuid_ops
    const BTREE: u32 = 403;
    if (*(*index).rd_rel).relam.to_u32() != BTREE {
        return false;
    }
    let count = (*(*index).rd_index).indnkeyatts as usize;
    let families = std::slice::from_raw_parts((*index).rd_opfamily, count);
    let collations = std::slice::from_raw_parts((*index).rd_indcollation, count);
    // "C" (the columns' own collation) is built in and deterministic: no
    // catalog look-up for it (pg_collation.dat).
    let text_bytewise = |column: usize| {
        let collation = collations[column];
        families[column].to_u32() == TEXT_BTREE_FAMILY
            && collation != pg_sys::InvalidOid
            && (collation == pg_sys::C_COLLATION_OID
                || pg_sys::get_collation_isdeterministic(collation))
    };
    // A fourth column is dkey (is_arbiter): text like name and key, or
    // bigint, or uuid (both compared as their bytes by their btree ops).
    families[SHARD].to_u32() == INTEGER_BTREE_FAMILY
        && text_bytewise(NAME)
        && text_bytewise(KEY)
        && (count == KEY_COLUMNS
            || text_bytewise(KEY_COLUMNS)
            || families[KEY_COLUMNS].to_u32() == INTEGER_BTREE_FAMILY
            || families[KEY_COLUMNS].to_u32() == UUID_BTREE_FAMILY)
}

impl Relations {
    /// Opens the table and its unique index with `lock`: PostgreSQL's
    /// look-up, lock, re-check pattern. The OIDs are cached per backend
    /// (`catalog`); locking processes pending invalidations, and if one
    /// arrived (the extension was dropped and created again, `REINDEX
    /// CONCURRENTLY` swapped the index) the OIDs are looked up again.
    /// Then the index must still be the valid, ready NULLS NOT DISTINCT
    /// (name, key, shard) index of this table, or the call fails closed
    /// with 55000.
    pub fn open(lock: u32) -> Self {
        // SAFETY: the relations are locked before they are opened, and
        // their OIDs re-checked under the lock.
        unsafe {
            let mut looked_up_again = false;
            let (objects, relations) = loop {
                // The generation first: a look-up that itself processed
                // invalidations may have found OIDs that predate them
                // (catalog::objects then does not keep it), and a drop
                // that commits before the locks below is an invalidation
                // they process; so a relation opened here still exists.
                let generation = crate::catalog::generation();
                let objects = crate::catalog::objects();
                // On a distributed install: the shard on this node that
                // the cluster layer routed the call to (the state table itself
                // is locked as a query on it would lock it).
                let route = super::route::route();
                let (table, index) = match route {
                    Some(route) => (route.table, route.index),
                    None => (objects.table, objects.index),
                };
                if route.is_some() {
                    pg_sys::LockRelationOid(objects.table, lock as i32);
                }
                pg_sys::LockRelationOid(table, lock as i32);
                pg_sys::LockRelationOid(index, lock as i32);
                // An invalidation arrived: look the OIDs up again (a route's
                // shard cannot move: its caller holds Citus's metadata lock).
                if crate::catalog::generation() != generation && route.is_none() {
                    pg_sys::UnlockRelationOid(index, lock as i32);
                    pg_sys::UnlockRelationOid(table, lock as i32);
                    continue;
                }
                let relations = Relations {
                    table: pg_sys::table_open(table, pg_sys::NoLock as i32),
                    index: pg_sys::index_open(index, pg_sys::NoLock as i32),
                    others: Vec::new(),
                    infos: Vec::new(),
                };
                let form = (*relations.index).rd_index;
                if is_arbiter(relations.index, table) && (*form).indisvalid && (*form).indisready {
                    if !has_bytewise_equality(relations.index) {
                        altered("its unique index rate_limits_name_key_shard_key does not compare name, key and shard as bytes (another collation, operator class or access method)");
                    }
                    break (objects, relations);
                }
                // REINDEX CONCURRENTLY may have swapped the index after the
                // lookup (the old one stays valid only until the swap): look
                // it up by name once more before failing closed.
                if looked_up_again || route.is_some() {
                    altered("its unique index rate_limits_name_key_shard_key is no longer the valid NULLS NOT DISTINCT (name, key, shard) index of the table");
                }
                looked_up_again = true;
                drop(relations);
                crate::catalog::forget();
            };
            if objects.distributed && super::route::route().is_none() {
                not_routed();
            }
            relations
        }
    }

    /// Opens the relations for writing, after checking that a direct write
    /// does everything PostgreSQL's executor would (raises 55000 naming the
    /// cause if not): the expected columns, no trigger (foreign keys and
    /// constraint triggers included), no rule, no CHECK constraint, no NOT
    /// NULL on `key`, no row-level security, the `heap` table access method
    /// (the writes are heap page writes), not a partition (its partition
    /// constraint would go unchecked), and only indexes the writes can
    /// maintain: plain column indexes, and further unique (name, key,
    /// shard) indexes that compare them as bytes, which arbitrate like the
    /// main one.
    pub fn open_for_write() -> Self {
        let mut relations = Relations::open(pg_sys::RowExclusiveLock);
        // SAFETY: the table is open and locked; its descriptor and index
        // list are valid while it is.
        unsafe {
            let table = relations.table;
            let descriptor = (*table).rd_att;
            let columns = (*descriptor).natts as usize;
            if columns != COLUMNS && columns != COLUMNS - 1 {
                altered("it does not have 6 columns (5 before version 0.5.0)");
            }
            for (column, expected) in COLUMN_TYPES.iter().take(columns).enumerate() {
                let attribute = compat::attribute(descriptor, column);
                // dkey is text, or bigint, integer or uuid on a state table
                // colocated with a table distributed by a column of that type.
                let type_id = (*attribute).atttypid.to_u32();
                let other_dkey = column == DKEY
                    && (type_id == pg_sys::INT8OID.to_u32()
                        || type_id == pg_sys::INT4OID.to_u32()
                        || type_id == pg_sys::UUIDOID.to_u32());
                if (*attribute).attisdropped || (type_id != *expected && !other_dkey) {
                    altered("a column has a different type");
                }
            }
            if (*compat::attribute(descriptor, KEY)).attnotnull {
                altered("key is NOT NULL, but the global limit's key is NULL");
            }
            if columns == COLUMNS
                && super::route::route().is_none()
                && (*compat::attribute(descriptor, DKEY)).attnotnull
            {
                altered("dkey is NOT NULL, but it is NULL unless Citus distributes the table");
            }
            if !(*table).trigdesc.is_null() {
                altered("it has triggers (or foreign keys), which rate_limit() would not fire");
            }
            if !(*table).rd_rules.is_null() {
                altered("it has rules, which rate_limit() would not apply");
            }
            let constraints = (*descriptor).constr;
            if !constraints.is_null() && (*constraints).num_check > 0 {
                altered("it has CHECK constraints, which rate_limit() would not check");
            }
            if (*(*table).rd_rel).relrowsecurity {
                altered("row-level security is enabled, which rate_limit() would not apply");
            }
            if (*(*table).rd_rel).relam.to_u32() != HEAP_TABLE_ACCESS_METHOD {
                altered("its table access method is not heap, and rate_limit() writes heap pages");
            }
            if (*(*table).rd_rel).relispartition {
                altered("it is a partition of a partitioned table, whose partition constraint rate_limit() would not check");
            }
            let list = pg_sys::RelationGetIndexList(table);
            for n in 0..pg_sys::list_length(list) {
                let oid = pg_sys::list_nth_oid(list, n);
                if oid == (*relations.index).rd_id {
                    continue;
                }
                let index = pg_sys::index_open(oid, pg_sys::RowExclusiveLock as i32);
                relations.others.push(index);
                let form = (*index).rd_index;
                if is_arbiter(index, (*table).rd_id) {
                    if !has_bytewise_equality(index) {
                        altered("it has a unique (name, key, shard) index that does not compare them as bytes (another collation, operator class or access method)");
                    }
                    continue;
                }
                if (*form).indisunique || (*form).indisexclusion {
                    altered("it has a unique or exclusion index other than on (name, key, shard)");
                }
                if !pg_sys::RelationGetIndexExpressions(index).is_null()
                    || !pg_sys::RelationGetIndexPredicate(index).is_null()
                    || !(*form).indimmediate
                {
                    altered("it has an index on expressions, with a predicate, or deferrable");
                }
            }
            pg_sys::list_free(list);
            relations.infos = (0..=relations.others.len())
                .map(|_| Cell::new(std::ptr::null_mut()))
                .collect();
        }
        relations
    }

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
            let state = with_state.then(|| slot_state(slot)).flatten();
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
            visit((*slot).tts_tid, slot_state(slot))
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
        self.scan(datums, KEY_COLUMNS - 1, snapshot, |slot| {
            let mut is_null = false;
            let shard = pg_sys::slot_getattr(slot, (SHARD + 1) as i32, &mut is_null);
            if let (Some(shard), Some(state)) = (i16::from_datum(shard, is_null), slot_state(slot))
            {
                shards.push((shard, state));
            }
            true
        });
        shards
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

    /// Adds the index entries of the heap tuple at `tid` (whose columns are
    /// `datums`) to every index that is ready for inserts: to the unique
    /// (name, key, shard) indexes with `check`, to the others without a
    /// uniqueness check. Returns false when `check` is
    /// `UNIQUE_CHECK_PARTIAL` and another entry of a unique index may
    /// conflict. `update` is `None` for a new row; for a new version of a
    /// row (an update: the key columns did not change, a hint for the
    /// index) `Some(only_summarizing)`, true when a HOT update needs
    /// entries only in summarizing indexes (`ExecInsertIndexTuples`'s
    /// `onlySummarizing`).
    ///
    /// # Safety
    /// `tid` must be a tuple of the table just written by this transaction.
    pub unsafe fn insert_index_entries(
        &self,
        datums: &Datums,
        tid: *mut pg_sys::ItemPointerData,
        check: pg_sys::IndexUniqueCheck::Type,
        update: Option<bool>,
    ) -> bool {
        if self.infos.len() != self.others.len() + 1 {
            error!("rate_limiter: index entries written through relations opened for reading");
        }
        let mut unique = true;
        let only_summarizing = update == Some(true);
        for (&index, info) in std::iter::once(&self.index)
            .chain(&self.others)
            .zip(&self.infos)
        {
            let form = (*index).rd_index;
            if !(*form).indisready || (only_summarizing && !compat::is_summarizing(index)) {
                continue;
            }
            // Plain column indexes only (checked when opening): entry i is
            // the table column indkey[i].
            let mut values = [pg_sys::Datum::from(0); pg_sys::INDEX_MAX_KEYS as usize];
            let mut nulls = [false; pg_sys::INDEX_MAX_KEYS as usize];
            for entry in 0..(*form).indnatts as usize {
                let column = *(*form).indkey.values.as_ptr().add(entry) as usize;
                if column == 0 || column > COLUMNS {
                    altered("it has an index on a system column");
                }
                values[entry] = datums.values[column - 1];
                nulls[entry] = datums.nulls[column - 1];
            }
            // Every unique index is a (name, key, shard) arbiter (checked
            // when opening): each gets the caller's check, so a racing
            // insert is withdrawn instead of raising a unique violation.
            let check = if (*form).indisunique {
                check
            } else {
                pg_sys::IndexUniqueCheck::UNIQUE_CHECK_NO
            };
            let inserted = pg_sys::index_insert(
                index,
                values.as_mut_ptr(),
                nulls.as_mut_ptr(),
                tid,
                self.table,
                check,
                update.is_some(),
                index_info(index, info),
            );
            // (Only unique indexes answer; other access methods return false.)
            if (*form).indisunique {
                unique &= inserted;
            }
        }
        unique
    }
}

impl Drop for Relations {
    fn drop(&mut self) {
        // When unwinding from an ERROR the abort releases them.
        if !std::thread::panicking() {
            // SAFETY: opened in `open`, closed once.
            unsafe {
                for (&index, info) in std::iter::once(&self.index)
                    .chain(&self.others)
                    .zip(&self.infos)
                {
                    if !info.get().is_null() {
                        compat::index_insert_cleanup(index, info.get());
                    }
                }
                for index in &self.others {
                    pg_sys::index_close(*index, pg_sys::NoLock as i32);
                }
                pg_sys::index_close(self.index, pg_sys::NoLock as i32);
                pg_sys::table_close(self.table, pg_sys::NoLock as i32);
            }
        }
    }
}

/// The `IndexInfo` of `index` kept in `info`, built on first use.
///
/// # Safety
/// `index` open; `info` its slot in `Relations::infos`.
unsafe fn index_info(
    index: pg_sys::Relation,
    info: &Cell<*mut pg_sys::IndexInfo>,
) -> *mut pg_sys::IndexInfo {
    if info.get().is_null() {
        info.set(pg_sys::BuildIndexInfo(index));
    }
    info.get()
}

/// `(value, ts)` of the tuple in `slot`: `slot_getattr` (tuptable.h) of
/// both columns, with one deforming call for the two (`slot_getsomeattrs`
/// up to ts, the later of them) instead of one call each.
///
/// # Safety
/// `slot` holds a tuple of the state table (ts after value).
pub(super) unsafe fn slot_state(slot: *mut pg_sys::TupleTableSlot) -> Option<State> {
    const COLUMNS_READ: usize = TS + 1;
    const _: () = assert!(VALUE < TS);
    if ((*slot).tts_nvalid as usize) < COLUMNS_READ {
        pg_sys::slot_getsomeattrs_int(slot, COLUMNS_READ as i32);
    }
    let values = std::slice::from_raw_parts((*slot).tts_values, COLUMNS_READ);
    let nulls = std::slice::from_raw_parts((*slot).tts_isnull, COLUMNS_READ);
    Some(State {
        value: f64::from_datum(values[VALUE], nulls[VALUE])?,
        ts: i64::from_datum(values[TS], nulls[TS])?,
    })
}
