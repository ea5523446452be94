//! Storage of rate-limit state: one row of `rate_limiter.rate_limits` per
//! (name, key, shard), read and written through SPI inside the caller's
//! transaction.
//!
//! Consuming is ONE statement, an `INSERT ... ON CONFLICT DO UPDATE`:
//! - no row yet: it inserts the state computed for a full limit;
//! - a row exists: PostgreSQL locks it (waiting for concurrent writers, and
//!   raising 40001 under REPEATABLE READ / SERIALIZABLE when the row changed
//!   after the snapshot), then evaluates the `WHERE` clause,
//!   `rate_limiter._evaluate_locked(value, ts)`, which runs the math on the
//!   locked row with the clock read *now*, keeps the decision in
//!   [`PENDING`], and answers whether to write. A refusal writes nothing
//!   (the row stays locked until the transaction ends); an admission sets
//!   `value` and `ts` from `_new_value()` / `_new_ts()`.
//!
//! The arbiter index finds the row, so there is no scan for the planner to
//! get wrong: a `SELECT ... FOR UPDATE` plan made while the table was empty
//! (after a TRUNCATE, say) stays a sequential scan as the table grows.
//! `rate_check` reads the row through the unique index directly, without
//! SPI or the planner; `rate_reset`, whose `DELETE` does scan, runs with
//! `SET enable_seqscan = off` (sql/functions.sql).
//!
//! Every statement is prepared once per backend and kept (re-planning on
//! each call would cost more than the call itself). Tables are
//! schema-qualified. Deleting the state of the global limit (key NULL)
//! needs its own statement, because `key = NULL` matches nothing and `key IS
//! NOT DISTINCT FROM $2` cannot use the index.

use crate::errors::CallError;
use pgrx::prelude::*;
use pgrx::spi::{OwnedPreparedStatement, SpiClient, SpiResult};
use pgrx::PgOid;
use rate_limiter_algorithm::{
    evaluate, Config, Decision, ErrorKind, LimitError, LimitId, Micros, Request, State,
};
use std::cell::RefCell;
use std::collections::HashMap;

/// Which state row a call is about.
#[derive(Debug, Clone, Copy)]
pub struct RowId<'a> {
    pub name: &'a str,
    /// `None` is the global limit of `name`.
    pub key: Option<&'a str>,
    /// `0..shards`.
    pub shard: i32,
}

thread_local! {
    /// Kept plans, by the address of their (static) SQL text.
    static PLANS: RefCell<HashMap<usize, &'static OwnedPreparedStatement>> = RefCell::new(HashMap::new());
}

/// The kept plan of `sql`, preparing it on first use in this backend.
/// `mutating` plans take a fresh snapshot per execution (READ COMMITTED) and
/// may lock and write; the others run read-only.
pub fn kept_plan(
    client: &SpiClient<'_>,
    sql: &'static str,
    arg_types: &[PgOid],
    mutating: bool,
) -> SpiResult<&'static OwnedPreparedStatement> {
    let slot = sql.as_ptr() as usize;
    if let Some(plan) = PLANS.with(|plans| plans.borrow().get(&slot).copied()) {
        return Ok(plan);
    }
    let prepared = if mutating {
        client.prepare_mut(sql, arg_types)?
    } else {
        client.prepare(sql, arg_types)?
    };
    // Plans live as long as the backend: leak the handle on purpose.
    let plan: &'static OwnedPreparedStatement = Box::leak(Box::new(prepared.keep()));
    PLANS.with(|plans| plans.borrow_mut().insert(slot, plan));
    Ok(plan)
}

const TEXT: PgOid = PgOid::BuiltIn(pg_sys::PgBuiltInOids::TEXTOID);
const INT4: PgOid = PgOid::BuiltIn(pg_sys::PgBuiltInOids::INT4OID);
const FLOAT8: PgOid = PgOid::BuiltIn(pg_sys::PgBuiltInOids::FLOAT8OID);
const TIMESTAMPTZ: PgOid = PgOid::BuiltIn(pg_sys::PgBuiltInOids::TIMESTAMPTZOID);

const CONSUME: &str = "INSERT INTO rate_limiter.rate_limits AS r (name, key, shard, value, ts) \
     VALUES ($1, $2, $3, $4, $5) \
     ON CONFLICT (name, key, shard) DO UPDATE \
     SET value = rate_limiter._new_value(), ts = rate_limiter._new_ts() \
     WHERE rate_limiter._evaluate_locked(r.value, r.ts)";
const DELETE_KEYED: &str = "DELETE FROM rate_limiter.rate_limits WHERE name = $1 AND key = $2";
const DELETE_GLOBAL: &str = "DELETE FROM rate_limiter.rate_limits WHERE name = $1 AND key IS NULL";

/// Reads the state row without locking it, with the active snapshot: a
/// direct scan of the unique index (no SPI, no planner), so it costs about
/// as much as the index lookup itself and works in read-only transactions
/// and on standbys. The caller has EXECUTE on `rate_check`; like the other
/// functions it reads the table with the extension's rights.
pub fn read(row: RowId<'_>) -> Option<State> {
    let relations = crate::catalog::objects();
    let name = row.name.into_datum();
    let key = row.key.and_then(IntoDatum::into_datum);
    // SAFETY: the relations exist (looked up above, locked below); the scan
    // keys match the index's columns (text, text, int4) and collations.
    unsafe {
        let table = pg_sys::table_open(relations.table, pg_sys::AccessShareLock as i32);
        let index = pg_sys::index_open(relations.index, pg_sys::AccessShareLock as i32);
        let collation = |column: usize| *(*index).rd_indcollation.add(column);
        let mut keys: [pg_sys::ScanKeyData; 3] = std::mem::zeroed();
        let equal = pg_sys::BTEqualStrategyNumber as u16;
        pg_sys::ScanKeyEntryInitialize(
            &mut keys[0],
            0,
            1,
            equal,
            pg_sys::InvalidOid,
            collation(0),
            pg_sys::Oid::from(pg_sys::F_TEXTEQ),
            name.unwrap_or(pg_sys::Datum::from(0)),
        );
        match key {
            Some(key) => pg_sys::ScanKeyEntryInitialize(
                &mut keys[1],
                0,
                2,
                equal,
                pg_sys::InvalidOid,
                collation(1),
                pg_sys::Oid::from(pg_sys::F_TEXTEQ),
                key,
            ),
            None => pg_sys::ScanKeyEntryInitialize(
                &mut keys[1],
                (pg_sys::SK_ISNULL | pg_sys::SK_SEARCHNULL) as i32,
                2,
                0,
                pg_sys::InvalidOid,
                pg_sys::InvalidOid,
                pg_sys::InvalidOid,
                pg_sys::Datum::from(0),
            ),
        }
        pg_sys::ScanKeyEntryInitialize(
            &mut keys[2],
            0,
            3,
            equal,
            pg_sys::InvalidOid,
            collation(2),
            pg_sys::Oid::from(pg_sys::F_INT4EQ),
            pg_sys::Datum::from(row.shard),
        );
        let scan = pg_sys::index_beginscan(table, index, pg_sys::GetActiveSnapshot(), 3, 0);
        pg_sys::index_rescan(scan, keys.as_mut_ptr(), 3, std::ptr::null_mut(), 0);
        let slot = pg_sys::table_slot_create(table, std::ptr::null_mut());
        let state = if pg_sys::index_getnext_slot(
            scan,
            pg_sys::ScanDirection::ForwardScanDirection,
            slot,
        ) {
            let (mut value_null, mut ts_null) = (false, false);
            let value = pg_sys::slot_getattr(slot, 4, &mut value_null);
            let ts = pg_sys::slot_getattr(slot, 5, &mut ts_null);
            match (
                f64::from_datum(value, value_null),
                i64::from_datum(ts, ts_null),
            ) {
                (Some(value), Some(ts)) => Some(State { value, ts }),
                _ => None,
            }
        } else {
            None
        };
        pg_sys::ExecDropSingleTupleTableSlot(slot);
        pg_sys::index_endscan(scan);
        // Keep the locks until the transaction ends, as a query would.
        pg_sys::index_close(index, pg_sys::NoLock as i32);
        pg_sys::table_close(table, pg_sys::NoLock as i32);
        state
    }
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

fn full_args(
    row: RowId<'_>,
    state: State,
    ts: TimestampWithTimeZone,
) -> Vec<pgrx::datum::DatumWithOid<'static>> {
    vec![
        row.name.into(),
        row.key.into(),
        row.shard.into(),
        state.value.into(),
        ts.into(),
    ]
}

/// A consuming call in progress: what `_evaluate_locked` needs, and the
/// decision it reached.
struct Pending {
    config: Config,
    name: String,
    key: Option<String>,
    request: Request,
    /// The decision so far: for a full limit until `_evaluate_locked` runs
    /// on an existing row (again after each concurrent update, in READ
    /// COMMITTED), then for that row.
    decision: Decision,
}

thread_local! {
    /// The consuming call in progress in this backend (calls never nest).
    static PENDING: RefCell<Option<Pending>> = const { RefCell::new(None) };
}

/// Consumes from the state row (see the module documentation) and returns
/// the decision. `fresh` is the decision for a limit without a row (a full
/// limit at the current time); it must admit, which every valid count does.
pub fn consume(
    client: &mut SpiClient<'_>,
    row: RowId<'_>,
    config: Config,
    request: Request,
    fresh: Decision,
) -> Result<Decision, CallError> {
    let Some(fresh_state) = fresh.new_state else {
        return Err(CallError::Limit(LimitError::out_of_range(
            "count",
            "a full limit refused the call".to_string(),
        )));
    };
    PENDING.with(|pending| {
        *pending.borrow_mut() = Some(Pending {
            config,
            name: row.name.to_string(),
            key: row.key.map(str::to_string),
            request,
            decision: fresh,
        })
    });
    let plan = kept_plan(
        client,
        CONSUME,
        &[TEXT, TEXT, INT4, FLOAT8, TIMESTAMPTZ],
        true,
    )?;
    let ts = timestamp(fresh_state.ts)?;
    let result = client.update(plan, None, &full_args(row, fresh_state, ts));
    let pending = PENDING.with(|pending| pending.borrow_mut().take());
    result?;
    pending.map(|pending| pending.decision).ok_or_else(|| {
        CallError::Limit(LimitError::out_of_range(
            "count",
            "the decision was lost".to_string(),
        ))
    })
}

fn no_pending_call() -> ! {
    crate::errors::report(CallError::Limit(LimitError::invalid(
        "value",
        "rate_limiter._evaluate_locked() is internal to rate_limiter.rate_limit()".to_string(),
    )))
}

/// `rate_limiter._evaluate_locked(value, ts)`: the `WHERE` clause of the
/// consuming upsert, evaluated on the locked row. Runs the math with the
/// clock read now (after the lock), records the decision, and returns
/// whether to write. Internal: not granted to anyone.
#[pg_extern(sql = false)]
fn _evaluate_locked(value: f64, ts: TimestampWithTimeZone) -> bool {
    let now = crate::clock::now();
    let outcome = PENDING.with(|pending| {
        let mut pending = pending.borrow_mut();
        let pending = pending.as_mut()?;
        let id = LimitId {
            name: &pending.name,
            key: pending.key.as_deref(),
        };
        let stored = State {
            value,
            ts: ts.into_inner(),
        };
        Some(
            evaluate(&pending.config, id, Some(stored), now, pending.request).map(|decision| {
                pending.decision = decision;
                decision.new_state.is_some()
            }),
        )
    });
    match outcome {
        Some(Ok(write)) => write,
        Some(Err(error)) => crate::errors::report(CallError::Limit(error)),
        None => no_pending_call(),
    }
}

fn new_state() -> State {
    PENDING
        .with(|pending| {
            pending
                .borrow()
                .as_ref()
                .and_then(|pending| pending.decision.new_state)
        })
        .unwrap_or_else(|| no_pending_call())
}

/// `rate_limiter._new_value()`: the value to write for an admitted call.
#[pg_extern(sql = false)]
fn _new_value() -> f64 {
    new_state().value
}

/// `rate_limiter._new_ts()`: the ts to write for an admitted call.
#[pg_extern(sql = false)]
fn _new_ts() -> TimestampWithTimeZone {
    timestamp(new_state().ts).unwrap_or_else(|error| crate::errors::report(error))
}

/// Deletes the state of (name, key) on every shard.
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
