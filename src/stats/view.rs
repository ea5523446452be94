//! What SQL sees of the statistics: the rows of the view
//! `rate_limiter.stats` (`rate_limiter._stats()`), the server-wide counts
//! of `rate_limiter.stats_info` (`rate_limiter._stats_info()`) and
//! `rate_limiter.stats_reset(name)`.
//!
//! **How a name is shown.** Every row's name is a distinct value that a
//! client in any encoding can read (docs/guarantees.md, "Statistics and
//! shadow mode"; "Input and errors" for encodings):
//! - its bytes as [`crate::names::for_view`] shows them (in a UTF8
//!   database as they are; in another, characters with no UTF-8
//!   equivalent as `\xNN` and `\` as `\\`);
//! - a name longer than the [`shared::MAX_STORED_NAME`] bytes an entry keeps is
//!   shown as its first bytes followed by [`cut_marker`]: `...[N bytes
//!   #HHHHHHHHHHHHHHHH]`, its whole length and the hash that identifies
//!   its entry. Such a value is longer than any name shown whole, so it
//!   equals no other name, and no two entries share a length and hash.
//!
//! `stats_reset` takes a name as the view shows it (or else as the limit
//! is named).

use super::shared::{self, Entry, EntryKey};
use crate::errors::{report, CallError};
use pgrx::pg_sys;
use pgrx::prelude::*;
use std::collections::HashSet;
use std::sync::atomic::{AtomicU64, Ordering};

/// A copy of an entry, taken under the lock.
struct Row {
    key: EntryKey,
    stored: Vec<u8>,
    calls: u64,
    admitted: u64,
    refused: u64,
    reserved: u64,
    tokens: f64,
    credited: f64,
    near_limit: u64,
    shadow_refused: u64,
    contended: u64,
    blocked: u64,
    reset_at: i64,
}

impl Row {
    fn of(entry: &Entry) -> Row {
        let load = |cell: &AtomicU64| cell.load(Ordering::Relaxed);
        Row {
            key: entry.key,
            stored: entry.stored_name().to_vec(),
            calls: entry.calls(),
            admitted: load(&entry.admitted),
            refused: load(&entry.refused),
            reserved: load(&entry.reserved),
            tokens: f64::from_bits(load(&entry.tokens)),
            credited: f64::from_bits(load(&entry.credited)),
            near_limit: load(&entry.near_limit),
            shadow_refused: load(&entry.shadow_refused),
            contended: load(&entry.contended),
            blocked: load(&entry.blocked),
            reset_at: entry.reset_at.load(Ordering::Relaxed),
        }
    }

    /// The name as the view shows it (see the module documentation).
    fn shown(&self) -> Vec<u8> {
        let mut shown = crate::names::for_view(&self.stored);
        if self.key.length as usize != self.stored.len() {
            shown.extend_from_slice(cut_marker(&self.key).as_bytes());
        }
        shown
    }
}

/// What follows the first bytes of a name cut for storage: its length in
/// bytes and its hash, e.g. `...[300 bytes #00ff00ff00ff00ff]` (ASCII).
pub fn cut_marker(key: &EntryKey) -> String {
    format!("...[{} bytes #{:016x}]", key.length, key.hash)
}

/// The entries of this database, copied under the lock (after publishing
/// this backend's own pending counts).
fn rows() -> Result<Vec<Row>, CallError> {
    if !shared::enabled() {
        return Err(CallError::StatisticsOff);
    }
    super::flush();
    // SAFETY: reads a backend-local value.
    let database = unsafe { pg_sys::MyDatabaseId };
    let mut rows = Vec::new();
    shared::locked(false, || unsafe {
        shared::each_entry(|entry| {
            if entry.key.database == database {
                rows.push(Row::of(entry));
            }
        })
    });
    Ok(rows)
}

/// A count as a `bigint` datum (counts never reach 2^63).
fn bigint(value: u64) -> Option<pg_sys::Datum> {
    i64::try_from(value).unwrap_or(i64::MAX).into_datum()
}

/// PostgreSQL's "version 1 calling convention" record.
const CALLING_CONVENTION: pg_sys::Pg_finfo_record = pg_sys::Pg_finfo_record { api_version: 1 };

/// `rate_limiter._stats()`: the rows of the view `rate_limiter.stats`, for
/// the current database. See sql/functions.sql.
///
/// Errors: `55000` when the library was not preloaded.
#[no_mangle]
#[pg_guard]
pub unsafe extern "C-unwind" fn stats_wrapper(fcinfo: pg_sys::FunctionCallInfo) -> pg_sys::Datum {
    let rows = match rows() {
        Ok(rows) => rows,
        Err(error) => report(error),
    };
    let rows = rows.iter().map(|row| {
        [
            row.shown().as_slice().into_datum(),
            bigint(row.calls),
            bigint(row.admitted),
            bigint(row.refused),
            bigint(row.reserved),
            row.tokens.into_datum(),
            row.credited.into_datum(),
            bigint(row.near_limit),
            bigint(row.shadow_refused),
            bigint(row.contended),
            Some(pg_sys::Datum::from(row.reset_at)),
            // Last, so that the row type of a version before 0.6.0 (which
            // ends at stats_reset) reads the columns it knows.
            bigint(row.blocked),
        ]
    });
    crate::result_row::put_rows(fcinfo, rows)
}

#[no_mangle]
pub extern "C" fn pg_finfo_stats_wrapper() -> &'static pg_sys::Pg_finfo_record {
    &CALLING_CONVENTION
}

/// `rate_limiter._stats_info()`: the one row of the view
/// `rate_limiter.stats_info`: entries evicted and decisions not counted
/// since the server started, of every database (the table is shared, as
/// `pg_stat_statements_info` counts for the whole server), and the most
/// names counted. See sql/functions.sql.
///
/// Errors: `55000` when the library was not preloaded.
#[no_mangle]
#[pg_guard]
pub unsafe extern "C-unwind" fn stats_info_wrapper(
    fcinfo: pg_sys::FunctionCallInfo,
) -> pg_sys::Datum {
    if !shared::enabled() {
        report(CallError::StatisticsOff);
    }
    super::flush();
    let info = shared::info();
    let row = [
        bigint(info.evicted.load(Ordering::Relaxed)),
        bigint(info.uncounted.load(Ordering::Relaxed)),
        Some(pg_sys::Datum::from(info.since.load(Ordering::Relaxed))),
    ];
    crate::result_row::put_rows(fcinfo, [row])
}

#[no_mangle]
pub extern "C" fn pg_finfo_stats_info_wrapper() -> &'static pg_sys::Pg_finfo_record {
    &CALLING_CONVENTION
}

/// `rate_limiter.stats_reset(name)`: zeroes the counters of the row the
/// view shows as `name` (or else of the limit named `name`; NULL: every
/// row) of the current database and restarts their clock.
///
/// Errors: `55000` when the library was not preloaded.
#[pg_extern(sql = false)]
fn stats_reset(name: Option<&[u8]>) {
    let rows = match rows() {
        Ok(rows) => rows,
        Err(error) => report(error),
    };
    // Which entries, decided outside the lock (showing a name converts it).
    let chosen: HashSet<EntryKey> = match name {
        None => rows.iter().map(|row| row.key).collect(),
        Some(name) => {
            let shown: HashSet<EntryKey> = rows
                .iter()
                .filter(|row| row.shown() == name)
                .map(|row| row.key)
                .collect();
            if shown.is_empty() {
                HashSet::from([shared::key_of(name)])
            } else {
                shown
            }
        }
    };
    // SAFETY: reads the current time; no error.
    let now = unsafe { pg_sys::GetCurrentTimestamp() };
    shared::locked(true, || unsafe {
        shared::each_entry(|entry| {
            if chosen.contains(&entry.key) {
                entry.reset(now);
            }
        })
    });
}
