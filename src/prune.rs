//! `rate_limiter.prune()`: housekeeping. Deletes the state rows that change
//! no later answer, and optionally old rows of names without a definition.
//!
//! The rows are read through SPI with `FOR UPDATE SKIP LOCKED`: each row is
//! locked before it is judged (a row another transaction holds is in use
//! and left alone), so no consumption can slip in between the decision
//! and the `DELETE`. A row of a defined limit (a shard the definition has)
//! goes when `rate_limiter_algorithm::prunable` says so at the current time
//! (§4, read after the rows are locked): it is full and a missing row would
//! answer exactly as it does. Any other row (a name without a definition,
//! used with inline configs, or a shard beyond the definition's) goes when
//! `older_than` is given and its `ts` is older than `now - older_than`.
//! `prune` goes through the executor, so it obeys everything attached to
//! the table, and in a read-only transaction it fails with 25006.

use crate::clock;
use crate::definitions;
use crate::errors::{report, CallError};
use crate::security::as_owner;
use crate::storage;
use pgrx::datum::DatumWithOid;
use pgrx::pg_sys;
use pgrx::prelude::*;
use pgrx::spi::SpiClient;
use rate_limiter_algorithm::{period_micros, prunable, LimitError, LimitId, Micros, State};
use std::collections::HashMap;

/// Rows judged per batch.
const BATCH: i64 = 1000;

const SELECT_ROWS: &str = "SELECT ctid, name, key, shard, value, ts FROM rate_limiter.rate_limits \
                           FOR UPDATE SKIP LOCKED";
const DELETE_ROWS: &str = "DELETE FROM rate_limiter.rate_limits WHERE ctid = ANY($1)";

/// `rate_limiter.prune(older_than)`: how many rows were deleted. See
/// sql/functions.sql.
#[pg_extern(sql = false)]
fn prune(older_than: Option<Interval>) -> i64 {
    let result = older_than
        .map(older_than_micros)
        .transpose()
        .map_err(CallError::Limit)
        .and_then(|older_than| {
            storage::check_writable(c"prune()");
            as_owner(|| Spi::connect_mut(|client| prune_rows(client, older_than)))
        });
    match result {
        Ok(deleted) => deleted,
        Err(error) => report(error),
    }
}

/// `older_than` in microseconds, measured as a period is (`extract(epoch
/// from ...)`: a month is 30 days). Zero is allowed.
///
/// Errors: 22023 when it is negative or too long.
fn older_than_micros(interval: Interval) -> Result<Micros, LimitError> {
    if interval.months() == 0 && interval.days() == 0 && interval.micros() == 0 {
        return Ok(0);
    }
    period_micros(interval.months(), interval.days(), interval.micros()).map_err(|_| {
        LimitError::invalid(
            "older_than",
            "older_than must be zero or a positive interval".to_string(),
        )
    })
}

/// One locked row as read.
struct Row {
    tid: pg_sys::ItemPointerData,
    name: Vec<u8>,
    key: Option<Vec<u8>>,
    shard: i16,
    state: State,
}

fn prune_rows(client: &mut SpiClient<'_>, older_than: Option<Micros>) -> Result<i64, CallError> {
    let mut cursor = client.try_open_cursor_mut(SELECT_ROWS, &[])?;
    let mut configs = HashMap::new();
    let mut deleted = 0;
    loop {
        let mut rows = Vec::new();
        let mut batch = cursor.fetch(BATCH)?;
        if batch.is_empty() {
            break;
        }
        // Step through the batch; `batch.get*` read the current row.
        while batch.next().is_some() {
            // name and key as bytes: the raw text datums (a Vec<u8> copies
            // any varlena), as the rest of the extension reads them.
            // SAFETY: the datums belong to the batch, which is still alive.
            let (name, key) = unsafe {
                (
                    batch
                        .get_datum_by_ordinal(2)?
                        .and_then(|datum| Vec::<u8>::from_datum(datum, false)),
                    batch
                        .get_datum_by_ordinal(3)?
                        .and_then(|datum| Vec::<u8>::from_datum(datum, false)),
                )
            };
            let (Some(tid), Some(name), Some(shard), Some(value), Some(ts)) = (
                batch.get::<pg_sys::ItemPointerData>(1)?,
                name,
                batch.get::<i16>(4)?,
                batch.get::<f64>(5)?,
                batch.get::<TimestampWithTimeZone>(6)?,
            ) else {
                continue;
            };
            let ts: i64 = ts.into_inner();
            rows.push(Row {
                tid,
                name,
                key,
                shard,
                state: State { value, ts },
            });
        }
        // Every row of the batch is locked: read the clock now.
        let now = clock::now();
        let mut doomed = Vec::new();
        for row in &rows {
            let config = match configs.get(&row.name) {
                Some(config) => *config,
                None => {
                    let config = definitions::lookup(&row.name)?;
                    configs.insert(row.name.clone(), config);
                    config
                }
            };
            let id = LimitId {
                name: &row.name,
                key: row.key.as_deref(),
            };
            let goes = match config {
                Some(config) if i32::from(row.shard) < config.shards.max(1) => {
                    prunable(&config.shard(), id, row.state, now)
                }
                _ => older_than
                    .is_some_and(|older_than| row.state.ts < now.saturating_sub(older_than)),
            };
            if goes {
                doomed.push(row.tid);
            }
        }
        if !doomed.is_empty() {
            let tids = doomed.into_datum();
            // SAFETY: a tid[] datum for the tid[] parameter.
            let argument = unsafe { DatumWithOid::new(tids, pg_sys::TIDARRAYOID) };
            deleted += client.update(DELETE_ROWS, None, &[argument])?.len() as i64;
        }
    }
    Ok(deleted)
}
