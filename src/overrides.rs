//! Per-key overrides (table `rate_limiter.overrides`, docs/overrides.md):
//! reading the override of one (name, key), cached per backend, and the
//! regime a configuration writes its state rows under. Which
//! configuration a call uses (inline, override, definition) is decided in
//! `crate::definitions::resolve`; `override()` and `remove_override()`
//! write the table (`crate::api::overrides`).
//!
//! A call reads the table only for names that have overrides (the cached
//! definition says so), and then at most once per (name, key) until an
//! invalidation: one direct probe of the hash index on `key` (no SPI, no
//! planner),
//! with the latest snapshot, as the definitions are read. Any write to the
//! table fires the definitions' statement trigger, whose relcache
//! invalidation empties every backend's caches, so a committed override
//! is used by the next call in every session.

use crate::bounded_cache::BoundedCache;
use crate::errors::CallError;
use pgrx::pg_sys;
use pgrx::prelude::*;
use rate_limiter_algorithm::{Config, Kind, LimitError, Micros};
use std::cell::RefCell;

/// One row of `rate_limiter.overrides`, validated.
#[derive(Debug, Clone, PartialEq)]
pub struct Override {
    /// The key's own configuration (`None` when it names a plan).
    pub config: Option<Config>,
    /// The definition whose configuration applies (`None` for a config).
    pub plan: Option<Vec<u8>>,
    /// Shadow mode for this key; `None`: the plan's, or the limit's.
    pub enforce: Option<bool>,
    /// From this instant on the override is ignored (`None`: never).
    /// Microseconds since 2000-01-01 UTC; `-infinity` and `infinity` are
    /// `i64::MIN` and `i64::MAX`.
    pub expires_at: Option<Micros>,
}

impl Override {
    /// Whether it applies at `now`: `expires_at` NULL or later than `now`.
    pub fn in_force(&self, now: Micros) -> bool {
        self.expires_at.is_none_or(|expires_at| now < expires_at)
    }
}

/// The regime of the state rows written under `config` when the limit's
/// definition is `definition` (the column `rate_limits.regime`): `None`
/// when kind, period and shards are the definition's (the rows mean the
/// same under both, and carry on capped at the capacity, as a `define`
/// that changes only rate or capacity carries on), else a hash of the
/// three: PostgreSQL's `hashtextextended(text, 0)` of
/// `'<kind>/<period in microseconds>/<shards>'`, which the portable
/// edition computes in SQL to the same value. Two different triples with the same
/// 64-bit hash would share rows: the chance is 2^-64 per pair.
pub fn regime(config: &Config, definition: &Config) -> Option<i64> {
    let meaning = |config: &Config| (config.kind, config.period, config.shards);
    if meaning(config) == meaning(definition) {
        return None;
    }
    let text = format!(
        "{}/{}/{}",
        config.kind.label(),
        config.period,
        config.shards
    );
    // SAFETY: hashes the bytes of a Rust string; cannot fail (it is what
    // hashtextextended runs for a deterministic collation).
    let hash = unsafe { hash_bytes_extended(text.as_ptr(), text.len() as i32, 0) };
    Some(hash as i64)
}

extern "C" {
    /// PostgreSQL's `hash_bytes_extended` (common/hashfn.c, the same in 15
    /// to 18), which pgrx does not bind.
    fn hash_bytes_extended(k: *const u8, keylen: i32, seed: u64) -> u64;
}

/// Cached overrides by (name, key) bytes (`None`: the key has none).
type Keys = BoundedCache<(Vec<u8>, Vec<u8>), Option<Override>>;

thread_local! {
    static CACHE: RefCell<Keys> = RefCell::new(Keys::new(MAX_CACHED_KEYS, MAX_CACHED_BYTES));
}

/// The most (name, key) pairs the cache holds, and the most bytes of
/// their names, keys and plans: when full it is emptied, so a backend's
/// memory stays bounded (4 MiB of names, keys and plans, plus the map's
/// 100,000 entries of about 150 bytes) however many keys it calls.
const MAX_CACHED_KEYS: usize = 100_000;
const MAX_CACHED_BYTES: usize = 4 << 20;

/// Forgets every cached override (on every relcache invalidation, from
/// `crate::definitions`).
pub fn forget() {
    CACHE.with(|cache| {
        if let Ok(mut cache) = cache.try_borrow_mut() {
            cache.clear();
        }
    });
}

/// The override of (`name`, `key`), expired or not, or `None`; cached.
/// The caller has processed pending invalidations (it looked the
/// definition up first).
///
/// Errors: 22023 for a stored override that is not valid (a hand-written
/// row); XX000 when the table does not have the shape this version made.
pub fn find(name: &[u8], key: &[u8]) -> Result<Option<Override>, CallError> {
    let cached = CACHE.with(|cache| cache.borrow().get(&(name.to_vec(), key.to_vec())).cloned());
    if let Some(cached) = cached {
        return Ok(cached);
    }
    let generation = crate::catalog::generation();
    let found = probe(name, key)?;
    if crate::catalog::generation() == generation {
        remember(name, key, found.clone());
    }
    Ok(found)
}

fn remember(name: &[u8], key: &[u8], found: Option<Override>) {
    let plan = found
        .as_ref()
        .and_then(|found| found.plan.as_ref())
        .map_or(0, Vec::len);
    let size = name.len() + key.len() + plan;
    CACHE.with(|cache| {
        cache
            .borrow_mut()
            .insert((name.to_vec(), key.to_vec()), size, found)
    });
}

/// Columns of `rate_limiter.overrides`, 1-based, in table order.
const COLUMNS: usize = 16;
const PLAN: usize = 3;
const KIND: usize = 4;
const RATE: usize = 5;
const PERIOD: usize = 6;
const CAPACITY: usize = 7;
const MAX_RESERVED: usize = 8;
const SHARDS: usize = 9;
const START: usize = 10;
const ENFORCE: usize = 11;
const EXPIRES_AT: usize = 12;
const BLOCK_FOR: usize = 13;
const MAX_BLOCK: usize = 14;
const FORGET_AFTER: usize = 15;
const TIME_ZONE: usize = 16;

/// The override of (name, key) in the table, with the latest snapshot.
/// No table (a version before 0.6.0): no override.
fn probe(name: &[u8], key: &[u8]) -> Result<Option<Override>, CallError> {
    let objects = crate::catalog::objects();
    if objects.overrides == pg_sys::InvalidOid || objects.overrides_index == pg_sys::InvalidOid {
        return Ok(None);
    }
    if objects.elsewhere {
        // On Citus the table is a reference table whose rows are not in
        // the coordinator's own relation: read it through the executor.
        return select(name, key);
    }
    probe_index(objects, name, key)
}

/// [`probe`] through SPI (a kept plan, as the owner, with the latest
/// snapshot, as the definitions are read).
fn select(name: &[u8], key: &[u8]) -> Result<Option<Override>, CallError> {
    const SELECT: &str = "SELECT plan, kind::text, rate, period, capacity, max_reserved, shards, \
                          start, enforce, expires_at, block_for, max_block, forget_after, time_zone \
                          FROM rate_limiter.overrides WHERE name = $1 AND key = $2";
    let text = pgrx::PgOid::BuiltIn(pg_sys::PgBuiltInOids::TEXTOID);
    crate::security::as_owner(|| {
        // SAFETY: pushed and popped around the read; an error pops it in
        // the abort.
        unsafe { pg_sys::PushActiveSnapshot(pg_sys::GetLatestSnapshot()) };
        let found = Spi::connect(|client| {
            let plan = crate::plans::kept_plan(client, SELECT, &[text, text], false)?;
            let table = client.select(
                plan,
                Some(1),
                &[
                    crate::storage::text_argument(name),
                    crate::storage::text_argument(key),
                ],
            )?;
            if table.is_empty() {
                return Ok(None);
            }
            let row = table.first();
            // The plan as bytes: the raw text datum (a Vec<u8> copies any
            // varlena), as names are read everywhere.
            // SAFETY: the datum belongs to the table, which is still alive.
            let plan = unsafe {
                row.get_datum_by_ordinal(1)?
                    .and_then(|datum| Vec::<u8>::from_datum(datum, false))
            };
            let config = match row.get::<String>(2)? {
                None => None,
                Some(label) => {
                    let kind = Kind::from_label(&label)
                        .ok_or_else(|| crate::config::unknown_kind(&label))?;
                    let values = crate::config::ConfigValues {
                        kind,
                        rate: crate::config::required(row.get(3)?, "rate")?,
                        period: crate::config::required(row.get(4)?, "period")?,
                        capacity: row.get(5)?,
                        max_reserved: row.get(6)?,
                        shards: crate::config::required(row.get(7)?, "shards")?,
                        start: row.get(8)?,
                        block_for: row.get(11)?,
                        max_block: row.get(12)?,
                        forget_after: row.get(13)?,
                        time_zone: row
                            .get::<String>(14)?
                            .map(|zone| crate::calendar::zone(&zone))
                            .transpose()?,
                    };
                    Some(values.to_config()?)
                }
            };
            checked(Override {
                config,
                plan,
                enforce: row.get(9)?,
                expires_at: row
                    .get::<TimestampWithTimeZone>(10)?
                    .map(TimestampWithTimeZone::into_inner),
            })
            .map(Some)
        });
        unsafe { pg_sys::PopActiveSnapshot() };
        found
    })
}

/// `value` when it has exactly one of a config and a plan, else 22023.
fn checked(value: Override) -> Result<Override, CallError> {
    if value.config.is_some() == value.plan.is_some() {
        return Err(CallError::Limit(LimitError::invalid(
            "config",
            "a stored override must have exactly one of a config and a plan".to_string(),
        )));
    }
    Ok(value)
}

/// [`probe`] on one server: one probe of the hash index on `key`
/// (`overrides_key`), the matching name found among the key's entries
/// (one per limit that overrides that key). A hash probe costs the same
/// for 1,000 or 1,000,000 overrides, where the primary key's btree
/// compares the name and the key at every level of its descent
/// (bench/report/overrides.md). A hash index scan is lossy (two keys may
/// share a hash), so each entry's key is compared too, as the executor
/// rechecks it. Without that index (a table altered by hand) the primary
/// key is probed instead.
fn probe_index(
    objects: crate::catalog::Objects,
    name: &[u8],
    key: &[u8],
) -> Result<Option<Override>, CallError> {
    let name_datum = name.into_datum().unwrap_or(pg_sys::Datum::from(0));
    let key_datum = key.into_datum().unwrap_or(pg_sys::Datum::from(0));
    let hashed = objects.overrides_key_index != pg_sys::InvalidOid;
    let searched: Vec<pg_sys::Datum> = if hashed {
        vec![key_datum]
    } else {
        vec![name_datum, key_datum]
    };
    // SAFETY: the relations are the extension's, opened and closed here;
    // the scan keys point at text datums that outlive the scan; each tuple
    // is decoded (and its varlenas copied) while the slot holds it.
    unsafe {
        let lock = pg_sys::AccessShareLock as pg_sys::LOCKMODE;
        let relation = pg_sys::table_open(objects.overrides, lock);
        if (*(*relation).rd_att).natts as usize != COLUMNS {
            pg_sys::table_close(relation, lock);
            pgrx::error!(
                "rate_limiter: rate_limiter.overrides does not have the columns this version made"
            );
        }
        let index = pg_sys::index_open(
            if hashed {
                objects.overrides_key_index
            } else {
                objects.overrides_index
            },
            lock,
        );
        let mut keys: Vec<pg_sys::ScanKeyData> = vec![std::mem::zeroed(); searched.len()];
        // Equality: strategy 1 of hash, 3 of btree (an assertion-enabled
        // server checks it). The index columns are "C" (bytewise).
        let equal = if hashed {
            pg_sys::HTEqualStrategyNumber
        } else {
            pg_sys::BTEqualStrategyNumber
        };
        for (number, (scan_key, datum)) in keys.iter_mut().zip(&searched).enumerate() {
            pg_sys::ScanKeyEntryInitialize(
                scan_key,
                0,
                (number + 1) as pg_sys::AttrNumber,
                equal as pg_sys::StrategyNumber,
                pg_sys::InvalidOid,
                pg_sys::C_COLLATION_OID,
                pg_sys::regproc::from(pg_sys::Oid::from(pg_sys::F_TEXTEQ)),
                *datum,
            );
        }
        let snapshot = pg_sys::RegisterSnapshot(pg_sys::GetLatestSnapshot());
        let scan = crate::compat::index_beginscan(relation, index, snapshot, keys.len() as i32);
        pg_sys::index_rescan(
            scan,
            keys.as_mut_ptr(),
            keys.len() as i32,
            std::ptr::null_mut(),
            0,
        );
        let slot = pg_sys::table_slot_create(relation, std::ptr::null_mut());
        let mut found = Ok(None);
        while pg_sys::index_getnext_slot(scan, pg_sys::ScanDirection::ForwardScanDirection, slot) {
            pg_sys::slot_getsomeattrs_int(slot, COLUMNS as i32);
            let values = std::slice::from_raw_parts((*slot).tts_values, COLUMNS);
            let nulls = std::slice::from_raw_parts((*slot).tts_isnull, COLUMNS);
            let bytes = |column: usize| Vec::<u8>::from_datum(values[column], nulls[column]);
            if bytes(0).as_deref() == Some(name) && bytes(1).as_deref() == Some(key) {
                found = decode(values, nulls).map(Some);
                break;
            }
        }
        pg_sys::ExecDropSingleTupleTableSlot(slot);
        pg_sys::index_endscan(scan);
        pg_sys::UnregisterSnapshot(snapshot);
        pg_sys::index_close(index, lock);
        pg_sys::table_close(relation, lock);
        found
    }
}

/// An override from its deformed row (`values[n - 1]` is column `n`).
///
/// # Safety
/// `values` / `nulls` deformed from a tuple of the overrides table whose
/// buffer is still pinned.
unsafe fn decode(values: &[pg_sys::Datum], nulls: &[bool]) -> Result<Override, CallError> {
    let at = |column: usize| (values[column - 1], nulls[column - 1]);
    let plan = {
        let (datum, null) = at(PLAN);
        Vec::<u8>::from_datum(datum, null)
    };
    let config = if nulls[KIND - 1] {
        None
    } else {
        let (kind, _) = at(KIND);
        let (label, _, _) =
            pgrx::enum_helper::lookup_enum_by_oid(pg_sys::Oid::from(kind.value() as u32));
        let kind = Kind::from_label(&label).ok_or_else(|| crate::config::unknown_kind(&label))?;
        let field = |column: usize, name: &'static str| {
            let (datum, null) = at(column);
            crate::config::required((!null).then_some(datum), name)
        };
        let values = crate::config::ConfigValues {
            kind,
            rate: f64::from_datum(field(RATE, "rate")?, false).unwrap_or(0.0),
            period: Interval::from_datum(field(PERIOD, "period")?, false)
                .ok_or_else(|| LimitError::null("period"))?,
            capacity: f64::from_datum(at(CAPACITY).0, at(CAPACITY).1),
            max_reserved: f64::from_datum(at(MAX_RESERVED).0, at(MAX_RESERVED).1),
            shards: i32::from_datum(field(SHARDS, "shards")?, false).unwrap_or(0),
            start: TimestampWithTimeZone::from_datum(at(START).0, at(START).1),
            block_for: Interval::from_datum(at(BLOCK_FOR).0, at(BLOCK_FOR).1),
            max_block: Interval::from_datum(at(MAX_BLOCK).0, at(MAX_BLOCK).1),
            forget_after: Interval::from_datum(at(FORGET_AFTER).0, at(FORGET_AFTER).1),
            time_zone: String::from_datum(at(TIME_ZONE).0, at(TIME_ZONE).1)
                .map(|zone| crate::calendar::zone(&zone))
                .transpose()?,
        };
        Some(values.to_config()?)
    };
    checked(Override {
        config,
        plan,
        enforce: bool::from_datum(at(ENFORCE).0, at(ENFORCE).1),
        expires_at: i64::from_datum(at(EXPIRES_AT).0, at(EXPIRES_AT).1),
    })
}
