//! Blocks (table `rate_limiter.blocks`, docs/blocks.md): reading the block
//! of one (name, key). `block()`, `unblock()` and `blocked()` are
//! `crate::api::blocks`; the refusal of a blocked key is decided in
//! `crate::definitions::resolve`, which every call runs.
//!
//! A call reads the table only for names that have blocks (the cached
//! definition says so; any write to the table fires the definitions'
//! statement trigger, whose invalidation refreshes that in every backend).
//! The read is not cached: it is one direct probe of the unique (name, key)
//! index with the latest snapshot (as definitions and overrides are read),
//! so a block committed by another session is seen by the next call
//! whatever its isolation level.
//!
//! On a cluster the blocks of a key live beside its state rows
//! (docs/blocks.md, "Citus"): the [`Keeper`] the cluster installs at load
//! says where this node reads and writes them ([`BlocksAt`]); a call's
//! block is read and written on the node that holds its rows.

use crate::errors::CallError;
use crate::storage::text_argument;
use pgrx::datum::DatumWithOid;
use pgrx::pg_sys;
use pgrx::prelude::*;
use rate_limiter_algorithm::{BlockPolicy, Micros, Strikes};
use std::cell::{Cell, RefCell};

/// One row of `rate_limiter.blocks`.
#[derive(Debug, Clone, PartialEq)]
pub struct Block {
    /// The key is refused until this instant (microseconds since
    /// 2000-01-01 UTC; `infinity` is `i64::MAX`).
    pub until: Micros,
    /// How many blocks the key has had (`blocked()` shows it).
    pub strikes: i32,
    /// What `block()` was told, for the refusal's DETAIL.
    pub reason: Option<String>,
}

/// (name, key, reason) of the last blocked key a call of this backend was
/// refused for: the RL429 DETAIL of a call with `throws => true` says
/// `"blocked": true` and the reason ([`refusal_reason`]). The reason is
/// `None` when another node refused the call: read there if asked for.
type Refused = (Vec<u8>, Option<Vec<u8>>, Option<Option<String>>);

thread_local! {
    static REFUSED: RefCell<Option<Refused>> = const { RefCell::new(None) };
    /// Set while [`strike`] writes a block that no cached definition needs
    /// to know of.
    static QUIET: Cell<bool> = const { Cell::new(false) };
}

/// Where a cluster keeps the blocks, when the state table's rows are
/// stored on it (installed at load, as `crate::placement::install`).
pub trait Keeper {
    /// Where this node reads and writes the blocks of (`name`, `key`).
    fn blocks_at(&self, name: &[u8], key: Option<&[u8]>) -> Result<BlocksAt, CallError>;
    /// The block of (`name`, `key`) that another node holds, read there.
    fn block_elsewhere(&self, name: &[u8], key: Option<&[u8]>) -> Result<Option<Block>, CallError>;
    /// Whether the cluster holds the blocks (each key's beside its rows):
    /// then no node can tell cheaply which names have blocks, and every
    /// call looks for its key's block where its rows are.
    fn holds_blocks(&self) -> bool;
}

thread_local! {
    static KEEPER: Cell<Option<&'static dyn Keeper>> = const { Cell::new(None) };
}

/// Installs `keeper` (once, when the library is loaded).
pub fn install(keeper: &'static dyn Keeper) {
    KEEPER.with(|cell| cell.set(Some(keeper)));
}

/// The keeper, when the state table's rows are stored elsewhere (on one
/// server: `None`).
fn keeper() -> Result<Option<&'static dyn Keeper>, CallError> {
    if !crate::catalog::objects().elsewhere {
        return Ok(None);
    }
    KEEPER
        .with(Cell::get)
        .map(Some)
        .ok_or(CallError::StoredElsewhere)
}

/// Where this node reads and writes the blocks of (`name`, `key`): on one
/// server the table itself.
fn blocks_at(name: &[u8], key: Option<&[u8]>) -> Result<BlocksAt, CallError> {
    match keeper()? {
        Some(keeper) => keeper.blocks_at(name, key),
        None => Ok(BlocksAt::Table),
    }
}

/// Whether a cluster holds the blocks ([`Keeper::holds_blocks`]).
pub fn held_by_cluster() -> bool {
    matches!(keeper(), Ok(Some(keeper)) if keeper.holds_blocks())
}

/// Where this node reads and writes the blocks of one (name, key)
/// ([`Keeper::blocks_at`]).
pub enum BlocksAt {
    /// The table `rate_limiter.blocks` itself (one server).
    Table,
    /// A stand-in for the table on this node (a cluster's shard of it).
    StandIn(BlocksStandIn),
    /// Another node: [`find`] answers none there (the call's rows are
    /// there too, and the call decides there); [`find_anywhere`] reads it
    /// there.
    Elsewhere,
    /// Nowhere: no block can exist (a cluster that does not hold the
    /// blocks, where writing one is refused).
    Nowhere,
}

/// A relation standing in for `rate_limiter.blocks` on this node: the
/// table's columns and one more at the end, whose value for the (name,
/// key) is `extra`; its unique index is on (name, key, that column).
pub struct BlocksStandIn {
    pub table: pg_sys::Oid,
    pub index: pg_sys::Oid,
    /// The relation's schema-qualified name, for SQL.
    pub qualified: String,
    /// The extra column's value (a datum of `extra_type`, in the call's
    /// memory context).
    pub extra: pg_sys::Datum,
    pub extra_type: pg_sys::Oid,
}

/// Columns of `rate_limiter.blocks`, 1-based, in table order (the last,
/// `dkey`, is a cluster's: docs/blocks.md, "Citus").
const COLUMNS: usize = 7;
const UNTIL: usize = 3;
const STRIKES: usize = 4;
const REASON: usize = 5;

/// The block of (`name`, `key`) (`key` `None`: the global limit), over or
/// not, or `None`, as this node holds it: none when it lives on another
/// node ([`BlocksAt::Elsewhere`]). No table (a version before 0.6.0):
/// `None`.
///
/// Errors: XX000 when the table does not have the shape this version made;
/// 55000 from a cluster whose metadata is unusable.
pub fn find(name: &[u8], key: Option<&[u8]>) -> Result<Option<Block>, CallError> {
    let objects = crate::catalog::objects();
    if objects.blocks == pg_sys::InvalidOid {
        return Ok(None);
    }
    match blocks_at(name, key)? {
        BlocksAt::Table if objects.blocks_index != pg_sys::InvalidOid => {
            probe(objects.blocks, objects.blocks_index, name, key)
        }
        BlocksAt::StandIn(stand_in) => probe(stand_in.table, stand_in.index, name, key),
        _ => Ok(None),
    }
}

/// [`find`], and on a cluster the block another node holds too (read
/// there: `status`, `http_headers` and `blocked` show it wherever they are
/// called).
pub fn find_anywhere(name: &[u8], key: Option<&[u8]>) -> Result<Option<Block>, CallError> {
    if crate::catalog::objects().blocks == pg_sys::InvalidOid {
        return Ok(None);
    }
    match blocks_at(name, key)? {
        BlocksAt::Elsewhere => match keeper()? {
            Some(keeper) => keeper.block_elsewhere(name, key),
            None => Ok(None),
        },
        _ => find(name, key),
    }
}

/// The block of (`name`, `key`) in `table` through its unique index on
/// (name, key, ...), with the latest snapshot.
///
/// One probe of the index (no SPI, no planner: a name with blocks pays
/// this in each call), as the overrides are probed (`crate::overrides`).
fn probe(
    table: pg_sys::Oid,
    index: pg_sys::Oid,
    name: &[u8],
    key: Option<&[u8]>,
) -> Result<Option<Block>, CallError> {
    let name_datum = name.into_datum().unwrap_or(pg_sys::Datum::from(0));
    let key_datum = key.and_then(IntoDatum::into_datum);
    // SAFETY: the relations are the extension's, opened and closed here;
    // the scan keys point at text datums that outlive the scan; the tuple
    // is decoded (its reason copied) while the slot holds it.
    unsafe {
        let lock = pg_sys::AccessShareLock as pg_sys::LOCKMODE;
        let relation = pg_sys::table_open(table, lock);
        if (*(*relation).rd_att).natts as usize != COLUMNS {
            pg_sys::table_close(relation, lock);
            pgrx::error!(
                "rate_limiter: rate_limiter.blocks does not have the columns this version made"
            );
        }
        let index = pg_sys::index_open(index, lock);
        let mut keys: [pg_sys::ScanKeyData; 2] = std::mem::zeroed();
        // Equality on the "C" columns (btree's strategy 3); a NULL key
        // searches for the NULL entry (NULLS NOT DISTINCT).
        pg_sys::ScanKeyEntryInitialize(
            &mut keys[0],
            0,
            1,
            pg_sys::BTEqualStrategyNumber as pg_sys::StrategyNumber,
            pg_sys::InvalidOid,
            pg_sys::C_COLLATION_OID,
            pg_sys::regproc::from(pg_sys::Oid::from(pg_sys::F_TEXTEQ)),
            name_datum,
        );
        match key_datum {
            Some(datum) => pg_sys::ScanKeyEntryInitialize(
                &mut keys[1],
                0,
                2,
                pg_sys::BTEqualStrategyNumber as pg_sys::StrategyNumber,
                pg_sys::InvalidOid,
                pg_sys::C_COLLATION_OID,
                pg_sys::regproc::from(pg_sys::Oid::from(pg_sys::F_TEXTEQ)),
                datum,
            ),
            None => {
                keys[1].sk_flags = (pg_sys::SK_ISNULL | pg_sys::SK_SEARCHNULL) as i32;
                keys[1].sk_attno = 2;
            }
        }
        let snapshot = pg_sys::RegisterSnapshot(pg_sys::GetLatestSnapshot());
        let scan = crate::compat::index_beginscan(relation, index, snapshot, 2);
        pg_sys::index_rescan(scan, keys.as_mut_ptr(), 2, std::ptr::null_mut(), 0);
        let slot = pg_sys::table_slot_create(relation, std::ptr::null_mut());
        let mut found = None;
        if pg_sys::index_getnext_slot(scan, pg_sys::ScanDirection::ForwardScanDirection, slot) {
            pg_sys::slot_getsomeattrs_int(slot, REASON as i32);
            let values = std::slice::from_raw_parts((*slot).tts_values, REASON);
            let nulls = std::slice::from_raw_parts((*slot).tts_isnull, REASON);
            let at = |column: usize| (values[column - 1], nulls[column - 1]);
            found = Some(Block {
                // (NOT NULL; a timestamptz datum is its microseconds.)
                until: i64::from_datum(at(UNTIL).0, at(UNTIL).1).unwrap_or(i64::MIN),
                strikes: i32::from_datum(at(STRIKES).0, at(STRIKES).1).unwrap_or(0),
                reason: String::from_datum(at(REASON).0, at(REASON).1),
            });
        }
        pg_sys::ExecDropSingleTupleTableSlot(slot);
        pg_sys::index_endscan(scan);
        pg_sys::UnregisterSnapshot(snapshot);
        pg_sys::index_close(index, lock);
        pg_sys::table_close(relation, lock);
        Ok(found)
    }
}

/// Notes that a call of (`name`, `key`) is refused by a block given for
/// `reason` ([`refusal_reason`]).
pub fn note_refusal(name: &[u8], key: Option<&[u8]>, reason: Option<String>) {
    note(name, key, Some(reason));
}

/// Notes that another node refused a call of (`name`, `key`) for the key's
/// block (its reason is read there by [`refusal_reason`]).
pub fn note_refusal_elsewhere(name: &[u8], key: Option<&[u8]>) {
    note(name, key, None);
}

fn note(name: &[u8], key: Option<&[u8]>, reason: Option<Option<String>>) {
    REFUSED.with(|refused| {
        if let Ok(mut refused) = refused.try_borrow_mut() {
            *refused = Some((name.to_vec(), key.map(<[u8]>::to_vec), reason));
        }
    });
}

/// Whether the last refusal noted is of (`name`, `key`) (kept: a node
/// that refused a call for another says so).
pub fn refused_by_block(name: &[u8], key: Option<&[u8]>) -> bool {
    REFUSED.with(|refused| {
        refused.try_borrow().is_ok_and(|refused| {
            refused
                .as_ref()
                .is_some_and(|(blocked_name, blocked_key, _)| {
                    blocked_name == name && blocked_key.as_deref() == key
                })
        })
    })
}

/// When the last call of (`name`, `key`) that a block refused was this
/// backend's last blocked call: the block's reason (`Some(None)`: none
/// given). Taken: asked again, `None`.
pub fn refusal_reason(name: &[u8], key: Option<&[u8]>) -> Option<Option<String>> {
    let noted = REFUSED.with(|refused| {
        let mut refused = refused.try_borrow_mut().ok()?;
        match refused.take() {
            Some((blocked_name, blocked_key, reason))
                if blocked_name == name && blocked_key.as_deref() == key =>
            {
                Some(reason)
            }
            _ => None,
        }
    })?;
    // Refused on another node: the reason is read there (none if that
    // fails, the refusal stands).
    Some(noted.unwrap_or_else(|| {
        find_anywhere(name, key)
            .ok()
            .flatten()
            .and_then(|block| block.reason)
    }))
}

/// Whether this node holds the blocks of (`name`, `key`) (on one server,
/// always): a cluster's other node writes their automatic blocks itself.
pub fn held_here(name: &[u8], key: Option<&[u8]>) -> Result<bool, CallError> {
    Ok(matches!(
        blocks_at(name, key)?,
        BlocksAt::Table | BlocksAt::StandIn(_)
    ))
}

/// Forgets the noted refusal ([`note_refusal`]): a call that raises a
/// refusal runs it first, so that a block noted for an earlier call that
/// did not raise is never reported for it.
pub fn forget_refusal() {
    REFUSED.with(|refused| {
        if let Ok(mut refused) = refused.try_borrow_mut() {
            *refused = None;
        }
    });
}

/// Whether the blocks' statement trigger should invalidate nothing (an
/// automatic block of a name whose cached definitions already say it has
/// blocks, or of an undefined name: see [`strike`]).
pub fn quiet() -> bool {
    QUIET.with(Cell::get)
}

/// Unsets [`QUIET`] when dropped (also when an error unwinds).
struct Quiet;

impl Drop for Quiet {
    fn drop(&mut self) {
        QUIET.with(|quiet| quiet.set(false));
    }
}

/// The first timestamp PostgreSQL cannot store (`END_TIMESTAMP`,
/// 294277-01-01 UTC): an end at or past it is stored as `infinity`.
const END_TIMESTAMP: Micros = 9_223_371_331_200_000_000;

/// `micros` as a timestamptz to store: `infinity` at or past
/// [`END_TIMESTAMP`].
fn stored(micros: Micros) -> TimestampWithTimeZone {
    let micros = if micros >= END_TIMESTAMP {
        i64::MAX
    } else {
        micros
    };
    // SAFETY: a timestamptz datum is its microseconds; `i64::MAX` is
    // PostgreSQL's `infinity` (DT_NOEND).
    unsafe { TimestampWithTimeZone::from_datum(pg_sys::Datum::from(micros), false) }
        .unwrap_or_else(TimestampWithTimeZone::positive_infinity)
}

/// The statements of a strike in `relation` (`rate_limiter.blocks`, or a
/// stand-in with an extra column, `$6`, in its unique index): lock and
/// read the key's row; write a strike over the row read, or over a row
/// that another call of a sharded limit inserted meanwhile, keeping the
/// later end.
fn strike_statements(relation: &str, key: bool, extra: bool) -> (String, String) {
    let read = format!(
        "SELECT until, strikes, forget_at FROM {relation} WHERE name = $1 AND key {} FOR UPDATE",
        if key { "= $2" } else { "IS NULL" }
    );
    let (column, value, conflict) = if extra {
        (", dkey", ", $6", ", dkey")
    } else {
        ("", "", "")
    };
    let write = format!(
        "INSERT INTO {relation} AS b (name, key, until, strikes, reason, forget_at{column})
         VALUES ($1, $2, $3, $4, NULL, $5{value})
         ON CONFLICT (name, key{conflict}) DO UPDATE SET
             until = greatest(b.until, excluded.until),
             strikes = excluded.strikes,
             reason = CASE WHEN b.until > excluded.until THEN b.reason END,
             forget_at = greatest(excluded.forget_at, b.until)"
    );
    (read, write)
}

/// Starts the automatic block of (`name`, `key`) under `policy` at `now`
/// (docs/blocks.md, "Automatic blocks"): the admitted call that used the
/// limit up writes it, in the caller's transaction (it commits with the
/// call's work, and a rollback undoes both), as the extension's owner.
/// The key's stored block, if any, is locked and read first
/// (`BlockPolicy::strike`).
///
/// The table's statement trigger invalidates every backend's cached
/// definitions unless `known` (the caller's cached definitions already say
/// that the name has blocks, or the name has no definition to cache:
/// `crate::definitions::blocks_known`).
///
/// Errors: SPI's; 55000 when this node does not hold the key's blocks
/// (a cluster: the call runs where the key's rows are).
pub fn strike(
    name: &[u8],
    key: Option<&[u8]>,
    policy: &BlockPolicy,
    now: Micros,
    known: bool,
) -> Result<(), CallError> {
    let (relation, extra) = match blocks_at(name, key)? {
        BlocksAt::Table => ("rate_limiter.blocks".to_string(), None),
        BlocksAt::StandIn(stand_in) => (
            stand_in.qualified,
            // SAFETY: a datum of that type, alive for the call.
            Some(unsafe { DatumWithOid::new(stand_in.extra, stand_in.extra_type) }),
        ),
        BlocksAt::Elsewhere | BlocksAt::Nowhere => return Err(CallError::BlocksElsewhere),
    };
    let (read, write) = strike_statements(&relation, key.is_some(), extra.is_some());
    let quiet = known;
    let _reset = Quiet;
    QUIET.with(|cell| cell.set(quiet));
    crate::security::write_as_owner(c"rate_limit()", |client| {
        let found = match key {
            Some(key) => {
                client.update(&read, Some(1), &[text_argument(name), text_argument(key)])?
            }
            None => client.update(&read, Some(1), &[text_argument(name)])?,
        };
        let previous = if found.is_empty() {
            None
        } else {
            let row = found.first();
            Some(Strikes {
                until: row
                    .get::<TimestampWithTimeZone>(1)?
                    .map_or(i64::MIN, TimestampWithTimeZone::into_inner),
                strikes: row.get::<i32>(2)?.unwrap_or(0),
                forget_at: row
                    .get::<TimestampWithTimeZone>(3)?
                    .map(TimestampWithTimeZone::into_inner),
            })
        };
        let next = policy.strike(previous, now);
        let mut arguments = vec![
            text_argument(name),
            key.map_or_else(|| Option::<&str>::None.into(), text_argument),
            stored(next.until).into(),
            next.strikes.into(),
            next.forget_at.map(stored).into(),
        ];
        arguments.extend(extra);
        client.update(&write, None, &arguments)?;
        Ok::<_, CallError>(())
    })
}
