//! The relation of a call's [`Target`] and its indexes, opened for one
//! call: PostgreSQL's look-up, lock, re-check pattern, the checks of
//! `shape.rs` for a write, and adding index entries for a written tuple.
//! The index scans that look rows up are in `lookup.rs`.

use super::layout::{Datums, COLUMNS};
use super::shape::{self, altered, has_bytewise_equality, is_arbiter};
use super::target::Target;
use crate::compat;
use pgrx::pg_sys;
use pgrx::prelude::*;
use std::cell::Cell;

/// The relation of a call's [`Target`] and its unique index, opened with
/// `lock` and closed at the end of the call (the locks are kept until the
/// transaction ends, as a query keeps them).
pub struct Relations {
    pub table: pg_sys::Relation,
    pub index: pg_sys::Relation,
    /// The value of the extra column of the rows written: the target's,
    /// or, where one relation holds several listed shards, the shard's
    /// being written (`shard_places.rs`'s `Places::at` sets it).
    pub(super) extra: Cell<Option<pg_sys::Datum>>,
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

impl Relations {
    /// The value of the extra column of the rows written (`None`: NULL).
    pub fn extra(&self) -> Option<pg_sys::Datum> {
        self.extra.get()
    }

    /// Opens the table and its unique index with `lock`: PostgreSQL's
    /// look-up, lock, re-check pattern. The OIDs are cached per backend
    /// (`catalog`); locking processes pending invalidations, and if one
    /// arrived (the extension was dropped and created again, `REINDEX
    /// CONCURRENTLY` swapped the index) the OIDs are looked up again.
    /// Then the index must still be the valid, ready NULLS NOT DISTINCT
    /// (name, key, shard) index of this table, or the call fails closed
    /// with 55000.
    ///
    /// A [`Target::StandIn`] is opened as it is (its caller keeps it from
    /// changing), with the state table locked too; a call on the state
    /// table whose rows are stored elsewhere fails closed
    /// (`target::elsewhere`).
    pub fn open(lock: u32, target: Target) -> Self {
        // SAFETY: the relations are locked before they are opened, and
        // their OIDs re-checked under the lock.
        unsafe {
            let stand_in = match target {
                Target::StandIn(stand_in) => Some(stand_in),
                Target::StateTable => None,
            };
            let mut looked_up_again = false;
            let (objects, relations) = loop {
                // The generation first: a look-up that itself processed
                // invalidations may have found OIDs that predate them
                // (catalog::objects then does not keep it), and a drop
                // that commits before the locks below is an invalidation
                // they process; so a relation opened here still exists.
                let generation = crate::catalog::generation();
                let objects = crate::catalog::objects();
                // A stand-in: the state table itself is locked as a query on
                // it would lock it.
                let (table, index) = match stand_in {
                    Some(stand_in) => (stand_in.table, stand_in.index),
                    None => (objects.table, objects.index),
                };
                if stand_in.is_some() {
                    pg_sys::LockRelationOid(objects.table, lock as i32);
                }
                pg_sys::LockRelationOid(table, lock as i32);
                pg_sys::LockRelationOid(index, lock as i32);
                // An invalidation arrived: look the OIDs up again (a
                // stand-in cannot change: its caller keeps it).
                if crate::catalog::generation() != generation && stand_in.is_none() {
                    pg_sys::UnlockRelationOid(index, lock as i32);
                    pg_sys::UnlockRelationOid(table, lock as i32);
                    continue;
                }
                let relations = Relations {
                    table: pg_sys::table_open(table, pg_sys::NoLock as i32),
                    index: pg_sys::index_open(index, pg_sys::NoLock as i32),
                    extra: Cell::new(target.extra()),
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
                if looked_up_again || stand_in.is_some() {
                    altered("its unique index rate_limits_name_key_shard_key is no longer the valid NULLS NOT DISTINCT (name, key, shard) index of the table");
                }
                looked_up_again = true;
                drop(relations);
                crate::catalog::forget();
            };
            if objects.elsewhere && stand_in.is_none() {
                crate::errors::report(super::target::elsewhere());
            }
            relations
        }
    }

    /// Opens the relations of `target` for writing, after checking that a
    /// direct write does everything PostgreSQL's executor would (raises
    /// 55000 naming the cause if not; `shape.rs`): the table's shape, and
    /// only indexes the writes can maintain: plain column indexes, and
    /// further unique (name, key, shard) indexes that compare them as
    /// bytes, which arbitrate like the main one.
    pub fn open_for_write(target: Target) -> Self {
        let mut relations = Relations::open(pg_sys::RowExclusiveLock, target);
        // SAFETY: the table is open and locked; its descriptor and index
        // list are valid while it is.
        unsafe {
            let table = relations.table;
            shape::check_table(table, target);
            let list = pg_sys::RelationGetIndexList(table);
            for n in 0..pg_sys::list_length(list) {
                let oid = pg_sys::list_nth_oid(list, n);
                if oid == (*relations.index).rd_id {
                    continue;
                }
                let index = pg_sys::index_open(oid, pg_sys::RowExclusiveLock as i32);
                relations.others.push(index);
                shape::check_other_index(index, table);
            }
            pg_sys::list_free(list);
            relations.infos = (0..=relations.others.len())
                .map(|_| Cell::new(std::ptr::null_mut()))
                .collect();
        }
        relations
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
