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
//! Statements that do scan (`rate_check`, `rate_reset`) run in functions
//! declared with `SET enable_seqscan = off` (sql/functions.sql).
//!
//! Every statement is prepared once per backend and kept (re-planning on
//! each call would cost more than the call itself). Tables are
//! schema-qualified. Reading the global limit (key NULL) needs its own
//! statement, because `key = NULL` matches nothing and `key IS NOT DISTINCT
//! FROM $2` cannot use the index.

use crate::errors::CallError;
use pgrx::prelude::*;
use pgrx::spi::{OwnedPreparedStatement, SpiClient, SpiResult};
use pgrx::PgOid;
use rate_limiter_algorithm::{evaluate, Config, Decision, LimitError, LimitId, Request, State};
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

const READ_KEYED: &str = "SELECT value, ts FROM rate_limiter.rate_limits \
     WHERE name = $1 AND key = $2 AND shard = $3";
const READ_GLOBAL: &str = "SELECT value, ts FROM rate_limiter.rate_limits \
     WHERE name = $1 AND key IS NULL AND shard = $2";
const CONSUME: &str = "INSERT INTO rate_limiter.rate_limits AS r (name, key, shard, value, ts) \
     VALUES ($1, $2, $3, $4, $5) \
     ON CONFLICT (name, key, shard) DO UPDATE \
     SET value = rate_limiter._new_value(), ts = rate_limiter._new_ts() \
     WHERE rate_limiter._evaluate_locked(r.value, r.ts)";
const DELETE_KEYED: &str = "DELETE FROM rate_limiter.rate_limits WHERE name = $1 AND key = $2";
const DELETE_GLOBAL: &str = "DELETE FROM rate_limiter.rate_limits WHERE name = $1 AND key IS NULL";

fn row_args(row: RowId<'_>) -> Vec<pgrx::datum::DatumWithOid<'static>> {
    match row.key {
        Some(key) => vec![row.name.into(), key.into(), row.shard.into()],
        None => vec![row.name.into(), row.shard.into()],
    }
}

fn state_from(table: pgrx::spi::SpiTupleTable<'_>) -> SpiResult<Option<State>> {
    if table.is_empty() {
        return Ok(None);
    }
    let (value, ts) = table.first().get_two::<f64, TimestampWithTimeZone>()?;
    Ok(match (value, ts) {
        (Some(value), Some(ts)) => Some(State {
            value,
            ts: ts.into_inner(),
        }),
        _ => None,
    })
}

/// Reads the state row without locking it (read-only; works in a
/// read-only transaction and on a standby).
pub fn read(client: &SpiClient<'_>, row: RowId<'_>) -> SpiResult<Option<State>> {
    let plan = match row.key {
        Some(_) => kept_plan(client, READ_KEYED, &[TEXT, TEXT, INT4], false)?,
        None => kept_plan(client, READ_GLOBAL, &[TEXT, INT4], false)?,
    };
    state_from(client.select(plan, Some(1), &row_args(row))?)
}

fn full_args(row: RowId<'_>, state: State) -> Vec<pgrx::datum::DatumWithOid<'static>> {
    let ts = TimestampWithTimeZone::try_from(state.ts).ok();
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
    let result = client.update(plan, None, &full_args(row, fresh_state));
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
    let ts = new_state().ts;
    TimestampWithTimeZone::try_from(ts).unwrap_or_else(|_| {
        crate::errors::report(CallError::Limit(LimitError::out_of_range(
            "ts",
            format!("the new timestamp {ts} is out of range"),
        )))
    })
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
