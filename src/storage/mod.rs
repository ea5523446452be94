//! Storage of rate-limit state: one row of `rate_limiter.rate_limits` per
//! (name, key, shard), read and written inside the caller's transaction.
//!
//! - [`consume`] (`rate_limit`): lock, decide and write one row directly on
//!   the heap and the indexes, as `INSERT ... ON CONFLICT DO UPDATE` would
//!   (`consume.rs` says how);
//! - [`consume_sharded`] (`rate_limit` of a limit with several shards):
//!   which shards to look at, lock and write (`shards.rs` says how);
//! - [`consume_all_or_nothing`] (`rate_limit_all`): every row of several
//!   limits locked in one order, then all consumptions written or none
//!   (`all_or_nothing.rs`);
//! - [`read`], [`read_shards`] (`rate_check`): look the row(s) up with the
//!   caller's snapshot, taking no lock;
//! - [`delete`] (`rate_reset`): a kept `DELETE` through SPI; its function
//!   has `SET enable_seqscan = off` (sql/functions.sql), so a plan made
//!   while the table was empty still uses the index later.
//!
//! `rows.rs` holds the row primitives these compose (peek, lock, update,
//! speculative insert); `relations.rs` opens the table and its indexes and
//! looks rows up; `route.rs` says which relation a call uses instead of
//! the table (a cluster's shard);
//! `crate::compat` holds what differs between PostgreSQL 15, 16, 17 and 18.

mod all_or_nothing;
mod consume;
mod credit;
mod places;
pub mod read_cache;
mod relations;
pub mod route;
mod rows;
mod scan_keys;
mod shards;

pub use all_or_nothing::{consume_all_or_nothing, sort_rows};
pub use consume::consume;
pub use credit::credit;
pub use places::ShardPlaces;
pub use shards::consume_sharded;

use crate::errors::CallError;
use crate::plans::kept_plan;
use pgrx::datum::DatumWithOid;
use pgrx::pg_sys;
use pgrx::prelude::*;
use pgrx::spi::{SpiClient, SpiResult};
use pgrx::PgOid;
use rate_limiter_algorithm::{ErrorKind, LimitError, Micros, State};
use relations::Relations;

/// Which state row a call is about.
#[derive(Debug, Clone, Copy)]
pub struct RowId<'a> {
    /// The name, as bytes in the database encoding.
    pub name: &'a [u8],
    /// `None` is the global limit of `name`.
    pub key: Option<&'a [u8]>,
    /// `0..shards`.
    pub shard: i16,
}

/// The rows of a sharded limit: its name and key (`None`: the global
/// limit) and its number of shards.
#[derive(Debug, Clone, Copy)]
pub struct LimitRows<'a> {
    pub name: &'a [u8],
    pub key: Option<&'a [u8]>,
    /// Number of shards, >= 2.
    pub shards: i16,
}

impl<'a> LimitRows<'a> {
    /// The row of shard `shard`.
    pub fn row(&self, shard: i16) -> RowId<'a> {
        RowId {
            name: self.name,
            key: self.key,
            shard,
        }
    }
}

/// Columns of `rate_limiter.rate_limits`, in table order (1-based numbers
/// are these plus one).
const NAME: usize = 0;
const KEY: usize = 1;
const SHARD: usize = 2;
const VALUE: usize = 3;
const TS: usize = 4;
/// Citus's distribution column (0.5.0 and later): NULL on a single server;
/// on a distributed install, the value the call was routed by (`route.rs`).
const DKEY: usize = 5;
/// Columns of the current version's table; before 0.5.0 the table has
/// the first `COLUMNS - 1` (no `dkey`).
const COLUMNS: usize = 6;
/// The unique index's columns searched: the first three (on a distributed
/// install it has `dkey` as a fourth, a function of these three).
const KEY_COLUMNS: usize = 3;

/// A row as datums: `values[i]` / `nulls[i]` for column `i`.
struct Datums {
    values: [pg_sys::Datum; COLUMNS],
    nulls: [bool; COLUMNS],
}

impl Datums {
    /// All zero, nothing NULL: to be filled in.
    fn empty() -> Self {
        Datums {
            values: [pg_sys::Datum::from(0); COLUMNS],
            nulls: [false; COLUMNS],
        }
    }

    /// The key columns of `row`; value and ts are left for the caller.
    fn of(row: RowId<'_>) -> Self {
        let (name, key) = text_datums(row.name, row.key);
        let Datums {
            mut values,
            mut nulls,
        } = Datums::empty();
        values[NAME] = name;
        values[KEY] = key.unwrap_or(pg_sys::Datum::from(0));
        nulls[KEY] = key.is_none();
        values[SHARD] = pg_sys::Datum::from(row.shard);
        match route::route() {
            Some(route) => values[DKEY] = route.dkey,
            None => nulls[DKEY] = true,
        }
        Datums { values, nulls }
    }

    fn set_state(&mut self, value: f64, ts: TimestampWithTimeZone) {
        self.values[VALUE] = value.into_datum().unwrap_or(pg_sys::Datum::from(0));
        self.values[TS] = ts.into_datum().unwrap_or(pg_sys::Datum::from(0));
        self.nulls[VALUE] = false;
        self.nulls[TS] = false;
    }
}

/// The most bytes one `palloc` may take (`MaxAllocSize`, utils/memutils.h).
const MAX_ALLOC_SIZE: usize = 0x3fff_ffff;

/// `name` and `key` as `text` datums in the current memory context: what
/// pgrx's `into_datum` makes of each (a 4-byte varlena header, then the
/// bytes), in one `palloc` for the two (the key's at the next maximally
/// aligned offset) rather than one each, since every call makes them. When
/// together they exceed one `palloc`, each gets its own, as before.
fn text_datums(name: &[u8], key: Option<&[u8]>) -> (pg_sys::Datum, Option<pg_sys::Datum>) {
    const HEADER: usize = pg_sys::VARHDRSZ;
    const ALIGN: usize = pg_sys::MAXIMUM_ALIGNOF as usize;
    let key_at = (HEADER + name.len()).next_multiple_of(ALIGN);
    let size = key_at.saturating_add(key.map_or(0, |key| HEADER + key.len()));
    if size > MAX_ALLOC_SIZE {
        let name = name.into_datum().unwrap_or(pg_sys::Datum::from(0));
        return (name, key.and_then(IntoDatum::into_datum));
    }
    // SAFETY: palloc returns `size` bytes (or raises an error); each text
    // is written inside them, header then bytes, at an aligned offset.
    unsafe {
        let start = pg_sys::palloc(size) as *mut u8;
        let write = |at: *mut u8, bytes: &[u8]| {
            pgrx::varlena::set_varsize_4b(
                at as *mut pg_sys::varlena,
                (HEADER + bytes.len()) as i32,
            );
            std::ptr::copy_nonoverlapping(bytes.as_ptr(), at.add(HEADER), bytes.len());
            pg_sys::Datum::from(at)
        };
        let name = write(start, name);
        let key = key.map(|key| write(start.add(key_at), key));
        (name, key)
    }
}

/// Reads the state row without locking it, with the active snapshot: a
/// direct scan of the unique index (no SPI, no planner), so it costs about
/// as much as the index lookup itself and works in read-only transactions
/// and on standbys. The caller has EXECUTE on `rate_check`; like the other
/// functions it reads the table with the extension's rights.
pub fn read(row: RowId<'_>) -> Option<State> {
    let datums = Datums::of(row);
    if let Some(state) = read_cache::find(&datums) {
        return state;
    }
    let relations = Relations::open(pg_sys::AccessShareLock);
    // SAFETY: the active snapshot outlives the scan.
    unsafe { relations.find(&datums, pg_sys::GetActiveSnapshot(), true) }
        .and_then(|(_, state)| state)
}

/// The stored state of every shard of (name, key), without locking, with
/// the active snapshot (as [`read`]): `states[i]` is shard `i`, `None`
/// where there is no row. Rows of shards beyond `shards` (left by an inline
/// config with more shards) are ignored.
pub fn read_shards(name: &[u8], key: Option<&[u8]>, shards: i16) -> Vec<Option<State>> {
    let relations = Relations::open(pg_sys::AccessShareLock);
    let datums = Datums::of(RowId {
        name,
        key,
        shard: 0,
    });
    // SAFETY: the active snapshot outlives the scan.
    shard_states(
        unsafe { relations.find_shards(&datums, pg_sys::GetActiveSnapshot()) },
        shards,
    )
}

/// The rows `found` as `(shard, state)`, laid out as the states of a limit
/// of `shards` shards: `states[i]` is shard `i`, `None` where there is no
/// row; rows of shards beyond `shards` are ignored.
fn shard_states(found: Vec<(i16, State)>, shards: i16) -> Vec<Option<State>> {
    let mut states = vec![None; shards.max(0) as usize];
    for (shard, state) in found {
        if let Some(slot) = states.get_mut(shard.max(0) as usize) {
            *slot = Some(state);
        }
    }
    states
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
                hint: None,
            })
        })
}

const TEXT: PgOid = PgOid::BuiltIn(pg_sys::PgBuiltInOids::TEXTOID);

/// A name or key (bytes) as an SPI argument of type `text`.
pub fn text_argument(bytes: &[u8]) -> DatumWithOid<'_> {
    // SAFETY: the bytes of a text value become a varlena of type text.
    unsafe { DatumWithOid::new(bytes, pg_sys::TEXTOID) }
}
const DELETE_KEYED: &str = "DELETE FROM rate_limiter.rate_limits WHERE name = $1 AND key = $2";
const DELETE_GLOBAL: &str = "DELETE FROM rate_limiter.rate_limits WHERE name = $1 AND key IS NULL";

/// Deletes the state of (name, key) on every shard. (Deleting the global
/// limit, key NULL, needs its own statement: `key = NULL` matches nothing
/// and `key IS NOT DISTINCT FROM $2` cannot use the index.)
pub fn delete(client: &mut SpiClient<'_>, name: &[u8], key: Option<&[u8]>) -> SpiResult<()> {
    match key {
        Some(key) => {
            let plan = kept_plan(client, DELETE_KEYED, &[TEXT, TEXT], true)?;
            client.update(plan, None, &[text_argument(name), text_argument(key)])?;
        }
        None => {
            let plan = kept_plan(client, DELETE_GLOBAL, &[TEXT], true)?;
            client.update(plan, None, &[text_argument(name)])?;
        }
    }
    Ok(())
}
