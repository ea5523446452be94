//! Storage of rate-limit state: one row of `rate_limiter.rate_limits` per
//! (name, key, shard), read and written inside the caller's transaction.
//!
//! A consuming call ([`consume`]) works on the heap and the unique index
//! directly, doing what PostgreSQL's own `INSERT ... ON CONFLICT DO UPDATE`
//! does, without building and running a plan each time (the executor's
//! start-up and tear-down cost more than the work itself):
//!
//! 1. Look the row up in the unique index with a dirty snapshot. If a
//!    transaction that is still running inserted, updated or deleted it,
//!    wait for that transaction to end and look again.
//! 2. Row found: lock it (`FOR NO KEY UPDATE`, waiting for other lockers).
//!    If it changed while we waited, look again under READ COMMITTED, and
//!    raise 40001 under REPEATABLE READ or SERIALIZABLE, as also when the
//!    locked row is not visible to the transaction's snapshot. Then decide
//!    on the locked row, with the clock read now, and update it in place
//!    (a HOT update whenever the page has room; otherwise a new index entry).
//!    A refusal writes nothing; the row stays locked until the transaction
//!    ends.
//! 3. No row: decide for a full limit and insert the row speculatively: a
//!    heap tuple marked with a speculative-insertion token, then the index
//!    entry. If a concurrent transaction inserted the same (name, key,
//!    shard) meanwhile, our tuple is killed and we start again at 1, so two
//!    new-key callers never get a unique violation: one inserts, the other
//!    waits and updates (or gets 40001 under REPEATABLE READ).
//!
//! Every write is WAL-logged, counted in `pg_stat_user_tables`, and undone
//! by a rollback, exactly like the statement it replaces. What this skips,
//! by design: triggers and rules on `rate_limiter.rate_limits` (the table
//! is the extension's; nothing else should attach to it) and privilege
//! checks (the caller's EXECUTE on the function is the permission).
//!
//! `rate_check` ([`read`]) looks the row up with the caller's snapshot and
//! takes no lock. `rate_reset` ([`delete`]) runs a kept `DELETE` through
//! SPI; its function has `SET enable_seqscan = off` (sql/functions.sql), so
//! a plan made while the table was empty still uses the index later.

use crate::errors::CallError;
use crate::plans::kept_plan;
use pgrx::pg_sys;
use pgrx::prelude::*;
use pgrx::spi::{SpiClient, SpiResult};
use pgrx::PgOid;
use rate_limiter_algorithm::{Decision, ErrorKind, LimitError, Micros, State};

/// Which state row a call is about.
#[derive(Debug, Clone, Copy)]
pub struct RowId<'a> {
    pub name: &'a str,
    /// `None` is the global limit of `name`.
    pub key: Option<&'a str>,
    /// `0..shards`.
    pub shard: i16,
}

/// Columns of `rate_limiter.rate_limits`, in table order (1-based numbers
/// are these plus one).
const NAME: usize = 0;
const KEY: usize = 1;
const SHARD: usize = 2;
const VALUE: usize = 3;
const TS: usize = 4;
const COLUMNS: usize = 5;
/// The unique index covers the first three columns.
const KEY_COLUMNS: usize = 3;

/// A row as datums: `values[i]` / `nulls[i]` for column `i`.
struct Datums {
    values: [pg_sys::Datum; COLUMNS],
    nulls: [bool; COLUMNS],
}

impl Datums {
    /// The key columns of `row`; value and ts are left for the caller.
    fn of(row: RowId<'_>) -> Self {
        let key = row.key.and_then(IntoDatum::into_datum);
        let mut values = [pg_sys::Datum::from(0); COLUMNS];
        let mut nulls = [false; COLUMNS];
        values[NAME] = row.name.into_datum().unwrap_or(pg_sys::Datum::from(0));
        values[KEY] = key.unwrap_or(pg_sys::Datum::from(0));
        nulls[KEY] = key.is_none();
        values[SHARD] = pg_sys::Datum::from(row.shard);
        Datums { values, nulls }
    }

    fn set_state(&mut self, value: f64, ts: TimestampWithTimeZone) {
        self.values[VALUE] = value.into_datum().unwrap_or(pg_sys::Datum::from(0));
        self.values[TS] = ts.into_datum().unwrap_or(pg_sys::Datum::from(0));
        self.nulls[VALUE] = false;
        self.nulls[TS] = false;
    }
}

/// The state table and its unique index, opened with `lock` and closed at
/// the end of the call (the locks are kept until the transaction ends, as a
/// query keeps them).
struct Relations {
    table: pg_sys::Relation,
    index: pg_sys::Relation,
    /// For writing: the table's other indexes, which writes maintain too
    /// (one a user added, or the copy `REINDEX CONCURRENTLY` builds).
    others: Vec<pg_sys::Relation>,
}

/// Column types of `rate_limiter.rate_limits`, in order.
const COLUMN_TYPES: [u32; COLUMNS] = [
    pg_sys::TEXTOID.to_u32(),
    pg_sys::TEXTOID.to_u32(),
    pg_sys::INT2OID.to_u32(),
    pg_sys::FLOAT8OID.to_u32(),
    pg_sys::TIMESTAMPTZOID.to_u32(),
];

fn altered(what: &str) -> ! {
    ereport!(
        PgLogLevel::ERROR,
        PgSqlErrorCode::ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE,
        format!("rate_limiter.rate_limits has been altered: {what}"),
        "rate_limit() writes the table directly; it needs the columns (name text, key text, shard smallint, value float8, ts timestamptz) and no index on expressions, with a predicate, or deferrable."
    );
    unreachable!("an ERROR report does not return")
}

impl Relations {
    fn open(lock: u32) -> Self {
        let objects = crate::catalog::objects();
        // SAFETY: the OIDs come from the catalog; opening raises an ERROR
        // if a relation has gone.
        unsafe {
            Relations {
                table: pg_sys::table_open(objects.table, lock as i32),
                index: pg_sys::index_open(objects.index, lock as i32),
                others: Vec::new(),
            }
        }
    }

    /// Opens the relations for writing, after checking that the table still
    /// has the shape the writes assume (raises 55000 if not).
    fn open_for_write() -> Self {
        let mut relations = Relations::open(pg_sys::RowExclusiveLock);
        // SAFETY: the table is open and locked; its descriptor and index
        // list are valid while it is.
        unsafe {
            let descriptor = (*relations.table).rd_att;
            if (*descriptor).natts as usize != COLUMNS {
                altered("it does not have 5 columns");
            }
            for (column, expected) in COLUMN_TYPES.iter().enumerate() {
                let attribute = (*descriptor).attrs.as_ptr().add(column);
                if (*attribute).attisdropped || (*attribute).atttypid.to_u32() != *expected {
                    altered("a column has a different type");
                }
            }
            let list = pg_sys::RelationGetIndexList(relations.table);
            for n in 0..pg_sys::list_length(list) {
                let oid = pg_sys::list_nth_oid(list, n);
                if oid == (*relations.index).rd_id {
                    continue;
                }
                let index = pg_sys::index_open(oid, pg_sys::RowExclusiveLock as i32);
                relations.others.push(index);
                if !pg_sys::RelationGetIndexExpressions(index).is_null()
                    || !pg_sys::RelationGetIndexPredicate(index).is_null()
                    || !(*(*index).rd_index).indimmediate
                {
                    altered("it has an index on expressions, with a predicate, or deferrable");
                }
            }
            pg_sys::list_free(list);
        }
        relations
    }

    /// Equality scan keys on (name, key, shard) for `datums`, with the
    /// index's collations (a NULL key searches for the NULL entry).
    fn scan_keys(&self, datums: &Datums) -> [pg_sys::ScanKeyData; KEY_COLUMNS] {
        const EQUAL: [u32; KEY_COLUMNS] = [pg_sys::F_TEXTEQ, pg_sys::F_TEXTEQ, pg_sys::F_INT2EQ];
        // SAFETY: ScanKeyData is plain data; the index has KEY_COLUMNS
        // columns of these types (sql/schema.sql).
        unsafe {
            let mut keys: [pg_sys::ScanKeyData; KEY_COLUMNS] = std::mem::zeroed();
            for (column, key) in keys.iter_mut().enumerate() {
                let attribute = (column + 1) as i16;
                if datums.nulls[column] {
                    pg_sys::ScanKeyEntryInitialize(
                        key,
                        (pg_sys::SK_ISNULL | pg_sys::SK_SEARCHNULL) as i32,
                        attribute,
                        0,
                        pg_sys::InvalidOid,
                        pg_sys::InvalidOid,
                        pg_sys::InvalidOid,
                        pg_sys::Datum::from(0),
                    );
                } else {
                    pg_sys::ScanKeyEntryInitialize(
                        key,
                        0,
                        attribute,
                        pg_sys::BTEqualStrategyNumber as u16,
                        pg_sys::InvalidOid,
                        *(*self.index).rd_indcollation.add(column),
                        pg_sys::Oid::from(EQUAL[column]),
                        datums.values[column],
                    );
                }
            }
            keys
        }
    }

    /// Finds the row of `datums` visible to `snapshot`. Returns its TID,
    /// and `(value, ts)` when `with_state`.
    ///
    /// # Safety
    /// `snapshot` must be valid for the whole scan.
    unsafe fn find(
        &self,
        datums: &Datums,
        snapshot: pg_sys::Snapshot,
        with_state: bool,
    ) -> Option<(pg_sys::ItemPointerData, Option<State>)> {
        let mut keys = self.scan_keys(datums);
        let scan = pg_sys::index_beginscan(self.table, self.index, snapshot, KEY_COLUMNS as i32, 0);
        pg_sys::index_rescan(scan, keys.as_mut_ptr(), KEY_COLUMNS as i32, std::ptr::null_mut(), 0);
        let slot = pg_sys::table_slot_create(self.table, std::ptr::null_mut());
        let found = pg_sys::index_getnext_slot(scan, pg_sys::ScanDirection::ForwardScanDirection, slot)
            .then(|| {
                let state = with_state.then(|| slot_state(slot)).flatten();
                ((*slot).tts_tid, state)
            });
        pg_sys::ExecDropSingleTupleTableSlot(slot);
        pg_sys::index_endscan(scan);
        found
    }
}

impl Drop for Relations {
    fn drop(&mut self) {
        // When unwinding from an ERROR the abort releases them.
        if !std::thread::panicking() {
            // SAFETY: opened in `open`, closed once.
            unsafe {
                for index in &self.others {
                    pg_sys::index_close(*index, pg_sys::NoLock as i32);
                }
                pg_sys::index_close(self.index, pg_sys::NoLock as i32);
                pg_sys::table_close(self.table, pg_sys::NoLock as i32);
            }
        }
    }
}

/// `(value, ts)` of the tuple in `slot`.
unsafe fn slot_state(slot: *mut pg_sys::TupleTableSlot) -> Option<State> {
    let (mut value_null, mut ts_null) = (false, false);
    let value = pg_sys::slot_getattr(slot, (VALUE + 1) as i32, &mut value_null);
    let ts = pg_sys::slot_getattr(slot, (TS + 1) as i32, &mut ts_null);
    Some(State {
        value: f64::from_datum(value, value_null)?,
        ts: i64::from_datum(ts, ts_null)?,
    })
}

/// Reads the state row without locking it, with the active snapshot: a
/// direct scan of the unique index (no SPI, no planner), so it costs about
/// as much as the index lookup itself and works in read-only transactions
/// and on standbys. The caller has EXECUTE on `rate_check`; like the other
/// functions it reads the table with the extension's rights.
pub fn read(row: RowId<'_>) -> Option<State> {
    let relations = Relations::open(pg_sys::AccessShareLock);
    let datums = Datums::of(row);
    // SAFETY: the active snapshot outlives the scan.
    unsafe { relations.find(&datums, pg_sys::GetActiveSnapshot(), true) }
        .and_then(|(_, state)| state)
}

/// `ts` as a `timestamptz`; `22008` when it is outside PostgreSQL's range
/// (a fixed window anchored near the end of time, say).
pub fn timestamp(ts: Micros) -> Result<TimestampWithTimeZone, CallError> {
    TimestampWithTimeZone::try_from(ts)
        .ok()
        .filter(TimestampWithTimeZone::is_finite)
        .ok_or_else(|| {
            CallError::Limit(LimitError {
                kind: ErrorKind::TimestampOutOfRange,
                parameter: "ts",
                message: "the limit's new timestamp is out of range for timestamptz".to_string(),
            })
        })
}

/// What one attempt at a consuming call came to.
enum Attempt {
    Done(Decision),
    /// The row changed under us (READ COMMITTED): look it up again.
    Again,
}

/// Consumes from the state row of `row` (see the module documentation) and
/// returns the decision. `decide` runs the math: it gets the stored state
/// (`None` for a new row), reads the clock itself, and is called only once
/// the row is locked (or known to be new). Its error is returned after
/// everything is released, with nothing written.
///
/// Errors: 25006 in a read-only transaction; 40001 when the row changed
/// after the snapshot of a REPEATABLE READ or SERIALIZABLE transaction;
/// lock and statement timeouts and cancels while waiting for the row lock.
pub fn consume(
    row: RowId<'_>,
    mut decide: impl FnMut(Option<State>) -> Result<Decision, CallError>,
) -> Result<Decision, CallError> {
    // SAFETY: each pg_sys call below gets the relations opened here, tuples
    // and buffers it pinned itself, and the command id of this transaction.
    unsafe {
        pg_sys::PreventCommandIfReadOnly(c"rate_limit()".as_ptr());
        pg_sys::PreventCommandIfParallelMode(c"rate_limit()".as_ptr());
        let relations = Relations::open_for_write();
        let mut datums = Datums::of(row);
        // See the changes of earlier commands of this transaction, as a new
        // statement would (a second call in the same statement included).
        pg_sys::CommandCounterIncrement();
        let command = pg_sys::GetCurrentCommandId(true);
        let decision = loop {
            pgrx::check_for_interrupts!();
            let attempt = match find_committed(&relations, &datums) {
                Some(tid) => update(&relations, &mut datums, tid, command, &mut decide)?,
                None => insert(&relations, &mut datums, command, &mut decide)?,
            };
            if let Attempt::Done(decision) = attempt {
                break decision;
            }
        };
        // Make the write visible to the rest of the transaction.
        pg_sys::CommandCounterIncrement();
        Ok(decision)
    }
}

/// Step 1: the row of `datums` as a dirty snapshot sees it, after waiting
/// for any transaction still inserting, updating or deleting it.
unsafe fn find_committed(
    relations: &Relations,
    datums: &Datums,
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

fn serialization_failure(deleted: bool) -> CallError {
    CallError::SerializationFailure(if deleted {
        "could not serialize access due to concurrent delete"
    } else {
        "could not serialize access due to concurrent update"
    })
}

fn uses_transaction_snapshot() -> bool {
    // SAFETY: reading a backend-local setting.
    unsafe { pg_sys::XactIsoLevel >= pg_sys::XACT_REPEATABLE_READ as i32 }
}

/// Step 2: lock the row at `tid`, decide, and update it if admitted.
unsafe fn update(
    relations: &Relations,
    datums: &mut Datums,
    tid: pg_sys::ItemPointerData,
    command: pg_sys::CommandId,
    decide: &mut impl FnMut(Option<State>) -> Result<Decision, CallError>,
) -> Result<Attempt, CallError> {
    let mut tuple: pg_sys::HeapTupleData = std::mem::zeroed();
    tuple.t_self = tid;
    let mut buffer: pg_sys::Buffer = pg_sys::InvalidBuffer as pg_sys::Buffer;
    let mut failure: pg_sys::TM_FailureData = std::mem::zeroed();
    let locked = pg_sys::heap_lock_tuple(
        relations.table,
        &mut tuple,
        command,
        pg_sys::LockTupleMode::LockTupleNoKeyExclusive,
        pg_sys::LockWaitPolicy::LockWaitBlock,
        false,
        &mut buffer,
        &mut failure,
    );
    let release = |buffer: pg_sys::Buffer| {
        if buffer != pg_sys::InvalidBuffer as pg_sys::Buffer {
            pg_sys::ReleaseBuffer(buffer);
        }
    };
    match locked {
        pg_sys::TM_Result::TM_Ok => {}
        pg_sys::TM_Result::TM_Updated | pg_sys::TM_Result::TM_Deleted => {
            release(buffer);
            if uses_transaction_snapshot() {
                return Err(serialization_failure(locked == pg_sys::TM_Result::TM_Deleted));
            }
            return Ok(Attempt::Again);
        }
        other => {
            release(buffer);
            error!("rate_limiter: unexpected result {other} locking a state row");
        }
    }
    // Under REPEATABLE READ the locked row must be the one the snapshot
    // sees, unless this transaction wrote it.
    if uses_transaction_snapshot() {
        pg_sys::LockBuffer(buffer, pg_sys::BUFFER_LOCK_SHARE as i32);
        let visible =
            pg_sys::HeapTupleSatisfiesVisibility(&mut tuple, pg_sys::GetTransactionSnapshot(), buffer);
        pg_sys::LockBuffer(buffer, pg_sys::BUFFER_LOCK_UNLOCK as i32);
        let inserter = (*tuple.t_data).t_choice.t_heap.t_xmin;
        if !visible && !pg_sys::TransactionIdIsCurrentTransactionId(inserter) {
            release(buffer);
            return Err(serialization_failure(false));
        }
    }
    let descriptor = (*relations.table).rd_att;
    pg_sys::heap_deform_tuple(
        &mut tuple,
        descriptor,
        datums.values.as_mut_ptr(),
        datums.nulls.as_mut_ptr(),
    );
    let stored = match (
        f64::from_datum(datums.values[VALUE], datums.nulls[VALUE]),
        i64::from_datum(datums.values[TS], datums.nulls[TS]),
    ) {
        (Some(value), Some(ts)) => State { value, ts },
        _ => {
            release(buffer);
            error!("rate_limiter: a state row has a NULL value or ts");
        }
    };
    let decision = match decide(Some(stored)).and_then(|decision| {
        let ts = decision.new_state.map(|state| timestamp(state.ts)).transpose()?;
        Ok((decision, ts))
    }) {
        Ok(decided) => decided,
        Err(error) => {
            release(buffer);
            return Err(error);
        }
    };
    if let (Decision { new_state: Some(state), .. }, Some(ts)) = decision {
        // name, key and shard are the stored datums (they point into the
        // pinned buffer; heap_form_tuple copies them).
        datums.set_state(state.value, ts);
        pg_sys::CheckCmdReplicaIdentity(relations.table, pg_sys::CmdType::CMD_UPDATE);
        let new = pg_sys::heap_form_tuple(descriptor, datums.values.as_mut_ptr(), datums.nulls.as_mut_ptr());
        let mut lock_mode: pg_sys::LockTupleMode::Type = 0;
        let updated = pg_sys::heap_update(
            relations.table,
            &mut tuple.t_self,
            new,
            command,
            std::ptr::null_mut(),
            true,
            &mut failure,
            &mut lock_mode,
        );
        if updated != pg_sys::TM_Result::TM_Ok {
            release(buffer);
            error!("rate_limiter: unexpected result {updated} updating a locked state row");
        }
        // A HOT update needs no index entry; otherwise add one for the new
        // version (the key columns are unchanged).
        let heap_only = (*(*new).t_data).t_infomask2 as u32 & pg_sys::HEAP_ONLY_TUPLE != 0;
        if !heap_only {
            insert_index_entries(relations, datums, &mut (*new).t_self, pg_sys::IndexUniqueCheck::UNIQUE_CHECK_YES, true);
        }
        pg_sys::heap_freetuple(new);
    }
    release(buffer);
    Ok(Attempt::Done(decision.0))
}

/// Adds the index entries of the heap tuple at `tid` (whose columns are
/// `datums`): to the unique index with `check`, and to every other index
/// that is ready for inserts. Returns false when `check` is
/// `UNIQUE_CHECK_PARTIAL` and another entry may conflict. `unchanged` says
/// that the key columns did not change (an update), a hint for the index.
unsafe fn insert_index_entries(
    relations: &Relations,
    datums: &mut Datums,
    tid: *mut pg_sys::ItemPointerData,
    check: pg_sys::IndexUniqueCheck::Type,
    unchanged: bool,
) -> bool {
    let unique = pg_sys::index_insert(
        relations.index,
        datums.values.as_mut_ptr(),
        datums.nulls.as_mut_ptr(),
        tid,
        relations.table,
        check,
        unchanged,
        pg_sys::BuildIndexInfo(relations.index),
    );
    for &index in &relations.others {
        let form = (*index).rd_index;
        if !(*form).indisready {
            continue;
        }
        // Plain column indexes only (checked when opening): entry i is the
        // table column indkey[i].
        let columns = (*form).indnatts as usize;
        let mut values = vec![pg_sys::Datum::from(0); columns];
        let mut nulls = vec![false; columns];
        for entry in 0..columns {
            let column = *(*form).indkey.values.as_ptr().add(entry) as usize;
            if column == 0 || column > COLUMNS {
                altered("it has an index on a system column");
            }
            values[entry] = datums.values[column - 1];
            nulls[entry] = datums.nulls[column - 1];
        }
        let check = if (*form).indisunique {
            pg_sys::IndexUniqueCheck::UNIQUE_CHECK_YES
        } else {
            pg_sys::IndexUniqueCheck::UNIQUE_CHECK_NO
        };
        pg_sys::index_insert(
            index,
            values.as_mut_ptr(),
            nulls.as_mut_ptr(),
            tid,
            relations.table,
            check,
            unchanged,
            pg_sys::BuildIndexInfo(index),
        );
    }
    unique
}

/// Step 3: decide for a new row and insert it speculatively. `Again` when
/// a concurrent transaction inserted the same row first.
unsafe fn insert(
    relations: &Relations,
    datums: &mut Datums,
    command: pg_sys::CommandId,
    decide: &mut impl FnMut(Option<State>) -> Result<Decision, CallError>,
) -> Result<Attempt, CallError> {
    let decision = decide(None)?;
    let Some(state) = decision.new_state else {
        return Err(CallError::Limit(LimitError::out_of_range(
            "count",
            "a full limit refused the call".to_string(),
        )));
    };
    datums.set_state(state.value, timestamp(state.ts)?);
    let descriptor = (*relations.table).rd_att;
    let tuple = pg_sys::heap_form_tuple(descriptor, datums.values.as_mut_ptr(), datums.nulls.as_mut_ptr());
    let transaction = pg_sys::GetCurrentTransactionId();
    let token = pg_sys::SpeculativeInsertionLockAcquire(transaction);
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
    let unique = insert_index_entries(
        relations,
        datums,
        &mut (*tuple).t_self,
        pg_sys::IndexUniqueCheck::UNIQUE_CHECK_PARTIAL,
        false,
    );
    if unique {
        pg_sys::heap_finish_speculative(relations.table, &mut (*tuple).t_self);
    } else {
        pg_sys::heap_abort_speculative(relations.table, &mut (*tuple).t_self);
        debug1!("rate_limiter: another transaction inserted the same state row; looking again");
    }
    pg_sys::SpeculativeInsertionLockRelease(transaction);
    pg_sys::heap_freetuple(tuple);
    Ok(if unique {
        Attempt::Done(decision)
    } else {
        Attempt::Again
    })
}

const TEXT: PgOid = PgOid::BuiltIn(pg_sys::PgBuiltInOids::TEXTOID);
const DELETE_KEYED: &str = "DELETE FROM rate_limiter.rate_limits WHERE name = $1 AND key = $2";
const DELETE_GLOBAL: &str = "DELETE FROM rate_limiter.rate_limits WHERE name = $1 AND key IS NULL";

/// Deletes the state of (name, key) on every shard. (Deleting the global
/// limit, key NULL, needs its own statement: `key = NULL` matches nothing
/// and `key IS NOT DISTINCT FROM $2` cannot use the index.)
pub fn delete(client: &mut SpiClient<'_>, name: &str, key: Option<&str>) -> SpiResult<()> {
    match key {
        Some(key) => {
            let plan = kept_plan(client, DELETE_KEYED, &[TEXT, TEXT], true)?;
            client.update(plan, None, &[name.into(), key.into()])?;
        }
        None => {
            let plan = kept_plan(client, DELETE_GLOBAL, &[TEXT], true)?;
            client.update(plan, None, &[name.into()])?;
        }
    }
    Ok(())
}
