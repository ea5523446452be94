//! Storage of rate-limit state: one row of `rate_limiter.rate_limits` per
//! (name, key, shard), read and written through SPI inside the caller's
//! transaction.
//!
//! Every statement is prepared once per backend and kept (re-planning on
//! each call would cost more than the call itself). Tables are
//! schema-qualified. The global limit (key NULL) needs its own statements,
//! because `key = NULL` matches nothing and `key IS NOT DISTINCT FROM $2`
//! cannot use the index.

use pgrx::prelude::*;
use pgrx::spi::{OwnedPreparedStatement, SpiClient, SpiResult};
use pgrx::PgOid;
use rate_limiter_algorithm::State;
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

const LOCK_KEYED: &str = "SELECT value, ts FROM rate_limiter.rate_limits \
     WHERE name = $1 AND key = $2 AND shard = $3 FOR UPDATE";
const LOCK_GLOBAL: &str = "SELECT value, ts FROM rate_limiter.rate_limits \
     WHERE name = $1 AND key IS NULL AND shard = $2 FOR UPDATE";
const READ_KEYED: &str = "SELECT value, ts FROM rate_limiter.rate_limits \
     WHERE name = $1 AND key = $2 AND shard = $3";
const READ_GLOBAL: &str = "SELECT value, ts FROM rate_limiter.rate_limits \
     WHERE name = $1 AND key IS NULL AND shard = $2";
const UPDATE_KEYED: &str = "UPDATE rate_limiter.rate_limits SET value = $4, ts = $5 \
     WHERE name = $1 AND key = $2 AND shard = $3";
const UPDATE_GLOBAL: &str = "UPDATE rate_limiter.rate_limits SET value = $4, ts = $5 \
     WHERE name = $1 AND key IS NULL AND shard = $3 AND $2::text IS NULL";
const INSERT: &str = "INSERT INTO rate_limiter.rate_limits (name, key, shard, value, ts) \
     VALUES ($1, $2, $3, $4, $5) ON CONFLICT (name, key, shard) DO NOTHING RETURNING true";
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

/// Locks the state row (`SELECT ... FOR UPDATE`) and returns it; `None`
/// when it does not exist (the limit is full). Under REPEATABLE READ or
/// SERIALIZABLE a row changed by a concurrent transaction raises 40001.
pub fn lock(client: &mut SpiClient<'_>, row: RowId<'_>) -> SpiResult<Option<State>> {
    let plan = match row.key {
        Some(_) => kept_plan(client, LOCK_KEYED, &[TEXT, TEXT, INT4], true)?,
        None => kept_plan(client, LOCK_GLOBAL, &[TEXT, INT4], true)?,
    };
    state_from(client.update(plan, Some(1), &row_args(row))?)
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

/// Overwrites an existing (locked) state row.
pub fn update(client: &mut SpiClient<'_>, row: RowId<'_>, state: State) -> SpiResult<()> {
    let plan = match row.key {
        Some(_) => kept_plan(
            client,
            UPDATE_KEYED,
            &[TEXT, TEXT, INT4, FLOAT8, TIMESTAMPTZ],
            true,
        )?,
        None => kept_plan(
            client,
            UPDATE_GLOBAL,
            &[TEXT, TEXT, INT4, FLOAT8, TIMESTAMPTZ],
            true,
        )?,
    };
    client.update(plan, None, &full_args(row, state))?;
    Ok(())
}

/// Creates the state row. Returns `false`, writing nothing, when a
/// concurrent transaction created it first (the caller then locks the
/// existing row and evaluates again). Under REPEATABLE READ or
/// SERIALIZABLE such a conflict raises 40001 instead.
pub fn insert(client: &mut SpiClient<'_>, row: RowId<'_>, state: State) -> SpiResult<bool> {
    let plan = kept_plan(
        client,
        INSERT,
        &[TEXT, TEXT, INT4, FLOAT8, TIMESTAMPTZ],
        true,
    )?;
    let inserted = client.update(plan, None, &full_args(row, state))?;
    Ok(!inserted.is_empty())
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
