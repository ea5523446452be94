//! `rate_limiter.prune()` on this node's rows: housekeeping. Deletes the state rows that change
//! no later answer, and optionally old rows of names without a definition.
//!
//! The rows are read through SPI in batches, without locking them; the
//! candidates of a batch are then read again with `FOR UPDATE SKIP LOCKED`
//! and judged again on the locked versions, with the clock read after the
//! locks (as a consuming call reads it: docs/guarantees.md, "Concurrency
//! and exactness"), so no consumption can slip in between the decision and
//! the `DELETE`. Only the rows that go are locked: a prune does not make
//! the callers of live limits wait for its transaction. A row another
//! transaction holds (or changed meanwhile) is in use and left alone. A row
//! of a defined limit (a shard the definition has) goes when
//! `rate_limiter_algorithm::prunable` says so: it is full and a missing row
//! would answer exactly as it does. Any other row (a name without a
//! definition, used with inline configs, or a shard beyond the
//! definition's) goes when `older_than` is given and its `ts` is older than
//! `now - older_than`. `prune` goes through the executor, so it obeys
//! everything attached to the table, and in a read-only transaction it
//! fails with 25006.
//!
//! On a distributed install each node prunes the shards placed on it, each
//! through its own relation (where a ctid means something): the cluster
//! layer gives [`prune_tables`] those relations.

use crate::clock;
use crate::definitions::{self, Definition};
use crate::errors::CallError;
use crate::security::write_as_owner;
use pgrx::datum::DatumWithOid;
use pgrx::pg_sys;
use pgrx::prelude::*;
use pgrx::spi::{SpiClient, SpiTupleTable};
use rate_limiter_algorithm::{period_micros, prunable, LimitError, LimitId, Micros, State};
use std::collections::HashMap;

/// Rows judged per batch.
const BATCH: i64 = 1000;

/// The state table: on a single server the table, on a distributed
/// install each shard of this node in turn.
pub const STATE_TABLE: &str = "rate_limiter.rate_limits";

/// The statements of a prune of `table` (a qualified relation name).
struct Statements {
    select: String,
    lock: String,
    delete: String,
}

impl Statements {
    fn of(table: &str) -> Self {
        // Tables before 0.6.0 have no regime (every row is a definition's)
        // and no prev (no sliding windows).
        let regime = if crate::catalog::objects().regime_column {
            "regime, prev"
        } else {
            "NULL::pg_catalog.int8, NULL::pg_catalog.float8"
        };
        Statements {
            select: format!("SELECT ctid, name, key, shard, value, ts, {regime} FROM {table}"),
            lock: format!(
                "SELECT ctid, name, key, shard, value, ts, {regime} FROM {table} \
                 WHERE ctid = ANY($1) FOR UPDATE SKIP LOCKED"
            ),
            delete: format!("DELETE FROM {table} WHERE ctid = ANY($1)"),
        }
    }
}

/// Prunes each of `tables` (qualified relation names) as the extension's
/// owner: how many rows were deleted.
///
/// Errors: 25006 in a read-only transaction (before anything is read).
pub fn prune_tables(tables: &[String], older_than: Option<Micros>) -> Result<i64, CallError> {
    if tables.is_empty() {
        // SAFETY: reads the transaction state; raises an ERROR when read-only.
        unsafe { pg_sys::PreventCommandIfReadOnly(c"prune()".as_ptr()) };
        return Ok(0);
    }
    write_as_owner(c"prune()", |client| {
        tables.iter().try_fold(0, |deleted, table| {
            Ok(deleted + prune_rows(client, &Statements::of(table), older_than)?)
        })
    })
}

/// `older_than` in microseconds, measured as a period is (`extract(epoch
/// from ...)`: a month is 30 days); `None` when not given. Zero is allowed.
///
/// Errors: 22023 when it is negative or too long.
pub fn older_than_micros(older_than: Option<Interval>) -> Result<Option<Micros>, CallError> {
    let Some(interval) = older_than else {
        return Ok(None);
    };
    if interval.months() == 0 && interval.days() == 0 && interval.micros() == 0 {
        return Ok(Some(0));
    }
    period_micros(interval.months(), interval.days(), interval.micros())
        .map(Some)
        .map_err(|_| {
            CallError::Limit(LimitError::invalid(
                "older_than",
                "older_than must be zero or a positive interval".to_string(),
            ))
        })
}

/// One row as read.
struct Row {
    tid: pg_sys::ItemPointerData,
    name: Vec<u8>,
    key: Option<Vec<u8>>,
    shard: i16,
    state: State,
    regime: Option<i64>,
}

/// The rows of `table` (columns as in `SELECT_ROWS`).
fn read_rows(mut table: SpiTupleTable<'_>) -> Result<Vec<Row>, CallError> {
    let mut rows = Vec::with_capacity(table.len());
    // Step through the table; `table.get*` read the current row.
    while table.next().is_some() {
        // name and key as bytes: the raw text datums (a Vec<u8> copies any
        // varlena), as the rest of the extension reads them.
        // SAFETY: the datums belong to the table, which is still alive.
        let (name, key) = unsafe {
            (
                table
                    .get_datum_by_ordinal(2)?
                    .and_then(|datum| Vec::<u8>::from_datum(datum, false)),
                table
                    .get_datum_by_ordinal(3)?
                    .and_then(|datum| Vec::<u8>::from_datum(datum, false)),
            )
        };
        let (Some(tid), Some(name), Some(shard), Some(value), Some(ts)) = (
            table.get::<pg_sys::ItemPointerData>(1)?,
            name,
            table.get::<i16>(4)?,
            table.get::<f64>(5)?,
            table.get::<TimestampWithTimeZone>(6)?,
        ) else {
            continue;
        };
        rows.push(Row {
            tid,
            name,
            key,
            shard,
            state: State {
                value,
                ts: ts.into_inner(),
                previous: table.get::<f64>(8)?.unwrap_or(0.0),
            },
            regime: table.get::<i64>(7)?,
        });
    }
    Ok(rows)
}

/// What a name's rows are: a rate limit's (its definition, if any, and
/// whether it has overrides), or a concurrency limit's slots.
#[derive(Clone, Copy)]
enum Slots {
    Limit(Option<(Definition, bool)>),
    Concurrency,
}

/// The rows among `rows` that change no later answer at `now` (see the
/// module documentation): judged under what applies to the row's key (its
/// override, else the definition); a row of another regime than that one
/// reads as missing, so it goes. Definitions are looked up once per name.
fn doomed(
    rows: &[Row],
    now: Micros,
    older_than: Option<Micros>,
    definitions: &mut HashMap<Vec<u8>, Slots>,
) -> Result<Vec<pg_sys::ItemPointerData>, CallError> {
    let mut doomed = Vec::new();
    for row in rows {
        let named = match definitions.get(&row.name) {
            Some(named) => *named,
            None => {
                let named = match definitions::lookup(&row.name) {
                    Ok(Some(definition)) => {
                        Slots::Limit(Some((definition, definitions::has_overrides(&row.name)?)))
                    }
                    Ok(None) => Slots::Limit(None),
                    Err(CallError::Limit(error)) if crate::config::is_concurrency_kind(&error) => {
                        Slots::Concurrency
                    }
                    Err(error) => return Err(error),
                };
                definitions.insert(row.name.clone(), named);
                named
            }
        };
        // A concurrency limit's slot (docs/concurrency.md): a row not
        // held by a timed lease carries nothing (a transaction lease's row
        // is locked, so the lock below passes over it).
        let named = match named {
            Slots::Concurrency => {
                if !(row.state.value > 0.0 && row.state.ts > now) {
                    doomed.push(row.tid);
                }
                continue;
            }
            Slots::Limit(named) => named,
        };
        let applies = match (named, row.key.as_deref()) {
            (Some((_, true)), Some(key)) => Some(definitions::resolve(&row.name, Some(key), None)?),
            (named, _) => named.map(|(definition, _)| definition),
        };
        let id = LimitId {
            name: &row.name,
            key: row.key.as_deref(),
        };
        let goes = match applies {
            Some(definition) if definition.regime != row.regime => true,
            Some(Definition { config, .. }) if i32::from(row.shard) < config.shards.max(1) => {
                prunable(&config.shard(), id, row.state, now)
            }
            _ => older_than.is_some_and(|older_than| row.state.ts < now.saturating_sub(older_than)),
        };
        if goes {
            doomed.push(row.tid);
        }
    }
    Ok(doomed)
}

/// `tids` as a `tid[]` SPI argument.
fn tid_array(tids: Vec<pg_sys::ItemPointerData>) -> DatumWithOid<'static> {
    // SAFETY: a tid[] datum for a tid[] parameter.
    unsafe { DatumWithOid::new(tids.into_datum(), pg_sys::TIDARRAYOID) }
}

fn prune_rows(
    client: &mut SpiClient<'_>,
    statements: &Statements,
    older_than: Option<Micros>,
) -> Result<i64, CallError> {
    let mut cursor = client.try_open_cursor_mut(statements.select.as_str(), &[])?;
    let mut definitions = HashMap::new();
    let mut deleted = 0;
    loop {
        let batch = cursor.fetch(BATCH)?;
        if batch.is_empty() {
            break;
        }
        // Candidates, judged on the unlocked rows...
        let candidates = doomed(
            &read_rows(batch)?,
            clock::now(),
            older_than,
            &mut definitions,
        )?;
        if candidates.is_empty() {
            continue;
        }
        // ...then locked, read again and judged again, the clock read
        // after the locks.
        let locked =
            read_rows(client.update(statements.lock.as_str(), None, &[tid_array(candidates)])?)?;
        let doomed = doomed(&locked, clock::now(), older_than, &mut definitions)?;
        if !doomed.is_empty() {
            deleted += client
                .update(statements.delete.as_str(), None, &[tid_array(doomed)])?
                .len() as i64;
        }
    }
    Ok(deleted)
}

/// Prunes the state table (on one server): how many rows were deleted.
///
/// Errors: 22023 a bad `older_than`; 25006 in a read-only transaction.
pub fn prune_state_table(older_than: Option<Interval>) -> Result<i64, CallError> {
    let older_than = older_than_micros(older_than)?;
    prune_tables(&[STATE_TABLE.to_string()], older_than)
}
