//! The ground floor of storage: which rows a call is about ([`RowId`],
//! [`LimitRows`]), the columns of `rate_limiter.rate_limits`, and a row as
//! the datums written and searched ([`Datums`]).

use crate::errors::CallError;
use pgrx::pg_sys;
use pgrx::prelude::*;
use rate_limiter_algorithm::{ErrorKind, LimitError, Micros};

/// Which state row a call is about.
#[derive(Debug, Clone, Copy)]
pub struct RowId<'a> {
    /// The name, as bytes in the database encoding.
    pub name: &'a [u8],
    /// `None` is the global limit of `name`.
    pub key: Option<&'a [u8]>,
    /// `0..shards`.
    pub shard: i16,
    /// The regime the call's configuration writes and expects (the column
    /// `regime`: `None` for the limit's definition, else the key's
    /// override's, `crate::overrides::regime`). A stored row of another
    /// regime reads as missing, and a write replaces its regime.
    pub regime: Option<i64>,
}

/// The rows of a sharded limit: its name and key (`None`: the global
/// limit) and its number of shards.
#[derive(Debug, Clone, Copy)]
pub struct LimitRows<'a> {
    pub name: &'a [u8],
    pub key: Option<&'a [u8]>,
    /// Number of shards, >= 2.
    pub shards: i16,
    /// As [`RowId::regime`].
    pub regime: Option<i64>,
}

impl<'a> LimitRows<'a> {
    /// The row of shard `shard`.
    pub fn row(&self, shard: i16) -> RowId<'a> {
        RowId {
            name: self.name,
            key: self.key,
            shard,
            regime: self.regime,
        }
    }
}

/// Columns of `rate_limiter.rate_limits`, in table order (1-based numbers
/// are these plus one).
pub(super) const NAME: usize = 0;
pub(super) const KEY: usize = 1;
pub(super) const SHARD: usize = 2;
pub(super) const VALUE: usize = 3;
pub(super) const TS: usize = 4;
/// The extra column (`dkey`, 0.5.0 and later): NULL in the state table's
/// own rows; a stand-in's rows carry their target's value
/// (`target.rs`).
pub(super) const EXTRA: usize = 5;
/// The column `regime` (0.6.0 and later): which configuration the row was
/// written under ([`RowId::regime`]).
pub(super) const REGIME: usize = 6;
/// The column `prev` (0.6.0 and later): a sliding window's count of its
/// previous window ([`rate_limiter_algorithm::State::previous`]), NULL
/// when 0 (always, for the other kinds: a NULL costs no row bytes).
pub(super) const PREVIOUS: usize = 7;
/// Columns of the current version's table; before 0.6.0 the table has
/// the first `COLUMNS - 2` (no regime, no prev), before 0.5.0 the first
/// `COLUMNS - 3` (no extra column either).
pub(super) const COLUMNS: usize = 8;
/// The unique index's columns searched: the first three (a stand-in's
/// index has the extra column as a fourth, a function of these three).
pub(super) const KEY_COLUMNS: usize = 3;

/// A stored tuple's prev, deformed into `values` / `nulls` of a table of
/// `columns` columns: 0 when NULL or when the table has no such column.
pub(super) fn previous(values: &[pg_sys::Datum], nulls: &[bool], columns: usize) -> f64 {
    if columns > PREVIOUS && !nulls[PREVIOUS] {
        // SAFETY: the column is float8 (checked when the table is opened,
        // storage::shape), passed by value.
        unsafe { f64::from_datum(values[PREVIOUS], false) }.unwrap_or(0.0)
    } else {
        0.0
    }
}

/// Whether a stored tuple's regime, deformed into `values` / `nulls` of a
/// table of `columns` columns, is `expected`. A table without the column
/// (before 0.6.0) stores only rows of the definition (`None`).
pub(super) fn regime_is(
    values: &[pg_sys::Datum],
    nulls: &[bool],
    columns: usize,
    expected: Option<i64>,
) -> bool {
    let stored = (columns > REGIME && !nulls[REGIME]).then(|| values[REGIME].value() as i64);
    stored == expected
}

/// A row as datums: `values[i]` / `nulls[i]` for column `i`.
pub(super) struct Datums {
    pub(super) values: [pg_sys::Datum; COLUMNS],
    pub(super) nulls: [bool; COLUMNS],
}

impl Datums {
    /// All zero, nothing NULL: to be filled in.
    pub(super) fn empty() -> Self {
        Datums {
            values: [pg_sys::Datum::from(0); COLUMNS],
            nulls: [false; COLUMNS],
        }
    }

    /// The key columns of `row`, its regime and the extra column's value
    /// (`None`: NULL, the state table's own rows; `Relations::extra` of
    /// the relations written); value and ts are left for the caller.
    pub(super) fn of(row: RowId<'_>, extra: Option<pg_sys::Datum>) -> Self {
        let (name, key) = text_datums(row.name, row.key);
        let Datums {
            mut values,
            mut nulls,
        } = Datums::empty();
        values[NAME] = name;
        values[KEY] = key.unwrap_or(pg_sys::Datum::from(0));
        nulls[KEY] = key.is_none();
        values[SHARD] = pg_sys::Datum::from(row.shard);
        match extra {
            Some(extra) => values[EXTRA] = extra,
            None => nulls[EXTRA] = true,
        }
        nulls[PREVIOUS] = true;
        let mut datums = Datums { values, nulls };
        datums.set_regime(row.regime);
        datums
    }

    /// The regime these datums expect and write.
    pub(super) fn regime(&self) -> Option<i64> {
        (!self.nulls[REGIME]).then(|| self.values[REGIME].value() as i64)
    }

    /// Sets the regime to write ([`RowId::regime`]); int8 is passed by
    /// value.
    pub(super) fn set_regime(&mut self, regime: Option<i64>) {
        self.values[REGIME] = pg_sys::Datum::from(regime.unwrap_or(0));
        self.nulls[REGIME] = regime.is_none();
    }

    /// Sets value, ts and prev (NULL when `previous` is 0; a table of a
    /// version before 0.6.0 has no such column, and its heap_form_tuple
    /// reads only its own columns).
    pub(super) fn set_state(&mut self, value: f64, ts: TimestampWithTimeZone, previous: f64) {
        self.values[VALUE] = value.into_datum().unwrap_or(pg_sys::Datum::from(0));
        self.values[TS] = ts.into_datum().unwrap_or(pg_sys::Datum::from(0));
        self.nulls[VALUE] = false;
        self.nulls[TS] = false;
        self.values[PREVIOUS] = previous.into_datum().unwrap_or(pg_sys::Datum::from(0));
        self.nulls[PREVIOUS] = previous == 0.0;
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
