//! Citus (SPEC section 10): where a state row lives once
//! `rate_limiter.distribute()` has made `rate_limiter.rate_limits` a
//! distributed table, and running a call on the node that holds its row.
//!
//! - The row of (name, key, shard) has the distribution value `dkey`: the
//!   key, or `name/shard` for a global limit ([`distribution_value`]); of
//!   type `text`, or `bigint` when `distribute(colocate_with)` colocated
//!   the state with a table distributed by a bigint column (the key read
//!   as a decimal integer, `hashtextextended(name/shard, 0)` for a global
//!   limit).
//! - Citus's metadata is read from its catalogs with the catalog snapshot
//!   (fresh under REPEATABLE READ too), once per relcache invalidation
//!   (Citus invalidates the distributed table's relcache entry when a shard
//!   moves or splits): the hash function of the column's type, the sorted
//!   hash ranges of the shards and the group of each shard's placement.
//!   Citus's C functions are not linked to: its library hides them from
//!   PostgreSQL 16 on (docs/citus-design.md §9).
//! - A row on this node: the call takes the lock Citus's executor takes for
//!   a write to that shard (ShareLock on the colocated shards' metadata,
//!   which a shard move takes in ExclusiveLock before it switches the
//!   placement), re-reads the metadata if an invalidation arrived, and then
//!   reads and writes the shard relation `rate_limits_<shardid>` directly,
//!   as on a single server ([`on_shard`] tells `storage` which relation).
//! - A row on another node: the call runs `rate_limiter._rate_limit_at()`
//!   through SPI with the distribution value as a constant; Citus delegates
//!   that function (`force_delegation`) to the node holding the shard,
//!   inside the caller's distributed transaction. There the function checks
//!   that the row is local and in a transaction block, or fails closed.

use crate::catalog;
use crate::errors::{report, CallError};
use crate::limit::{self, Call};
use crate::result_row;
use crate::stats::Counted;
use pgrx::datum::DatumWithOid;
use pgrx::fcinfo::pg_getarg;
use pgrx::heap_tuple::PgHeapTuple;
use pgrx::pg_sys;
use pgrx::prelude::*;
use pgrx::AllocatedByRust;
use rate_limiter_algorithm::{Decision, LimitError, State, Verdict};
use std::cell::{Cell, RefCell};
use std::ffi::{CStr, CString};
use std::rc::Rc;

/// One shard of the state table: its hash range and where it is placed.
#[derive(Debug, Clone, Copy)]
struct Shard {
    min: i32,
    max: i32,
    id: i64,
    /// The group (node) of its placement; `None` unless it has exactly one
    /// (a copy being made, or none at all: calls fail closed).
    group: Option<i32>,
}

/// How Citus distributes the state table, as read from its catalogs.
pub struct Distribution {
    colocation_id: u32,
    /// The distribution column's type: `text` or `bigint` (checked).
    column_type: pg_sys::Oid,
    /// The distribution column's collation (none for bigint).
    collation: pg_sys::Oid,
    /// Sorted by `min`: a shard's position is its index in Citus's
    /// sorted shard array, which the metadata lock's tag names.
    shards: Vec<Shard>,
    /// `pg_dist_local_group.groupid`: 0 on the coordinator.
    local_group: i32,
    /// Why calls must fail closed, when the tables are not distributed as
    /// `distribute()` distributes them.
    problem: Option<&'static str>,
}

thread_local! {
    static DISTRIBUTION: RefCell<Option<Rc<Distribution>>> = const { RefCell::new(None) };
    static ROUTE: Cell<Option<Route>> = const { Cell::new(None) };
}

/// Forgets the metadata read; called on every relcache invalidation.
pub fn forget() {
    DISTRIBUTION.with(|cell| cell.replace(None));
}

/// A value of the distribution column `dkey`, of the column's type
/// (ordered bytewise or numerically: the order `rate_limit_all` takes
/// the shard relations of one node in).
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub enum DistributionValue {
    /// `text COLLATE "C"`: the bytes.
    Text(Vec<u8>),
    /// `bigint`.
    BigInt(i64),
}

impl DistributionValue {
    fn type_oid(&self) -> pg_sys::Oid {
        match self {
            DistributionValue::Text(_) => pg_sys::TEXTOID,
            DistributionValue::BigInt(_) => pg_sys::INT8OID,
        }
    }

    /// As a datum of [`Self::type_oid`] (a text one is allocated in the
    /// current memory context).
    fn datum(&self) -> pg_sys::Datum {
        match self {
            DistributionValue::Text(bytes) => bytes
                .as_slice()
                .into_datum()
                .unwrap_or(pg_sys::Datum::from(0)),
            DistributionValue::BigInt(value) => pg_sys::Datum::from(*value),
        }
    }

    /// As an argument of an SPI statement.
    fn argument(&self) -> DatumWithOid<'_> {
        match self {
            // SAFETY: the bytes of a text value become a varlena of type text.
            DistributionValue::Text(bytes) => unsafe {
                DatumWithOid::new(bytes.as_slice(), pg_sys::TEXTOID)
            },
            DistributionValue::BigInt(value) => DatumWithOid::from(*value),
        }
    }
}

/// Whether `c` is white space to PostgreSQL's `int8in` (C's `isspace`).
fn is_space(c: u8) -> bool {
    matches!(c, b' ' | b'\t' | b'\n' | b'\r' | 0x0b | 0x0c)
}

/// `key` as a bigint distribution value: a decimal integer, with an
/// optional sign and white space around it (what `distribute()` checks
/// with `^[[:space:]]*[+-]?[0-9]+[[:space:]]*$` before `key::bigint`), in
/// range; `None` otherwise.
pub fn parse_bigint(key: &[u8]) -> Option<i64> {
    let start = key.iter().position(|&c| !is_space(c))?;
    let end = key.iter().rposition(|&c| !is_space(c))? + 1;
    let digits = &key[start..end];
    let unsigned = digits
        .strip_prefix(b"+")
        .or_else(|| digits.strip_prefix(b"-"))
        .unwrap_or(digits);
    if unsigned.is_empty() || !unsigned.iter().all(u8::is_ascii_digit) {
        return None;
    }
    std::str::from_utf8(digits).ok()?.parse().ok()
}

/// `hashtextextended(value, 0)`: the bigint distribution value of a global
/// limit's row, as `distribute()` computes it in SQL.
fn hash_text_extended(value: &[u8]) -> i64 {
    // SAFETY: a text datum and seed 0 for hashtextextended(text, bigint),
    // with a deterministic collation (for which it hashes the bytes, as
    // for the column's own).
    unsafe {
        let datum = value.into_datum().unwrap_or(pg_sys::Datum::from(0));
        pg_sys::OidFunctionCall2Coll(
            pg_sys::Oid::from(pg_sys::F_HASHTEXTEXTENDED),
            pg_sys::C_COLLATION_OID,
            datum,
            pg_sys::Datum::from(0i64),
        )
        .value() as i64
    }
}

/// The value of the distribution column `dkey` of the row (name, key,
/// shard): the key, or `name/shard` for a global limit (so the shards of a
/// global limit spread over the nodes). For a bigint column, the key read
/// as a decimal integer (a tenant id: 22P02 otherwise), or
/// `hashtextextended(name/shard, 0)`.
pub fn distribution_value(
    name: &[u8],
    key: Option<&[u8]>,
    shard: i16,
) -> Result<DistributionValue, CallError> {
    let text = match key {
        Some(key) => key.to_vec(),
        None => {
            let mut value = name.to_vec();
            value.extend_from_slice(format!("/{shard}").as_bytes());
            value
        }
    };
    let column_type = distribution().map_or(pg_sys::TEXTOID, |d| d.column_type);
    if column_type != pg_sys::INT8OID {
        return Ok(DistributionValue::Text(text));
    }
    match key {
        Some(key) => parse_bigint(key)
            .map(DistributionValue::BigInt)
            .ok_or_else(|| CallError::KeyNotBigInt(key.to_vec())),
        None => Ok(DistributionValue::BigInt(hash_text_extended(&text))),
    }
}

/// Calls `visit` with a column reader for each row of the catalog
/// `pg_catalog.<name>` (none when it does not exist), read with the catalog
/// snapshot.
///
/// # Safety
/// In a transaction.
unsafe fn each_row(name: &CStr, mut visit: impl FnMut(&dyn Fn(&CStr) -> Option<pg_sys::Datum>)) {
    let relation_id = pg_sys::get_relname_relid(
        name.as_ptr(),
        pg_sys::Oid::from(pg_sys::PG_CATALOG_NAMESPACE),
    );
    if relation_id == pg_sys::InvalidOid {
        return;
    }
    let relation = pg_sys::table_open(relation_id, pg_sys::AccessShareLock as i32);
    let scan = pg_sys::systable_beginscan(
        relation,
        pg_sys::InvalidOid,
        false,
        std::ptr::null_mut(),
        0,
        std::ptr::null_mut(),
    );
    loop {
        let tuple = pg_sys::systable_getnext(scan);
        if tuple.is_null() {
            break;
        }
        let column = |column: &CStr| {
            let number = pg_sys::get_attnum(relation_id, column.as_ptr());
            if number <= 0 {
                return None;
            }
            let mut is_null = false;
            let datum =
                pg_sys::heap_getattr(tuple, number as i32, (*relation).rd_att, &mut is_null);
            (!is_null).then_some(datum)
        };
        visit(&column);
    }
    pg_sys::systable_endscan(scan);
    pg_sys::table_close(relation, pg_sys::AccessShareLock as i32);
}

/// A `text` datum as a Rust string (lossy: only digits and node strings).
unsafe fn text(datum: pg_sys::Datum) -> String {
    String::from_datum(datum, false).unwrap_or_default()
}

/// Reads how Citus distributes `table` (the state table) and `definitions`;
/// `None` when it distributes neither.
unsafe fn read(table: pg_sys::Oid, definitions: pg_sys::Oid) -> Option<Distribution> {
    let mut state = None;
    let mut definitions_method = None;
    each_row(c"pg_dist_partition", |column| {
        let Some(relation) = column(c"logicalrelid").map(|d| pg_sys::Oid::from_datum(d, false))
        else {
            return;
        };
        let method = column(c"partmethod").map(|d| d.value() as u8);
        if relation == Some(table) {
            let key = column(c"partkey").map(|d| text(d));
            let colocation = column(c"colocationid").map(|d| d.value() as u32);
            let replication = column(c"repmodel").map(|d| d.value() as u8);
            state = Some((method, key, colocation, replication));
        } else if relation == Some(definitions) {
            definitions_method = method;
        }
    });
    if state.is_none() && definitions_method.is_none() {
        return None;
    }
    let mut distribution = Distribution {
        colocation_id: 0,
        column_type: pg_sys::TEXTOID,
        collation: pg_sys::InvalidOid,
        shards: Vec::new(),
        local_group: 0,
        problem: None,
    };
    each_row(c"pg_dist_local_group", |column| {
        if let Some(group) = column(c"groupid") {
            distribution.local_group = group.value() as i32;
        }
    });
    let dkey_column = pg_sys::get_attnum(table, c"dkey".as_ptr());
    let Some((Some(b'h'), Some(key), Some(colocation), Some(b's'))) = state else {
        distribution.problem = Some(if state.is_none() {
            "rate_limiter.definitions is distributed, but rate_limiter.rate_limits is not"
        } else {
            "rate_limiter.rate_limits is not a hash-distributed table with one placement per shard"
        });
        return Some(distribution);
    };
    // partkey is a Var in nodeToString form.
    let Ok(key) = CString::new(key) else {
        distribution.problem =
            Some("rate_limiter.rate_limits has an unreadable distribution column");
        return Some(distribution);
    };
    let var = pg_sys::stringToNode(key.as_ptr()) as *mut pg_sys::Var;
    if var.is_null()
        || (*var).xpr.type_ != pg_sys::NodeTag::T_Var
        || dkey_column <= 0
        || (*var).varattno != dkey_column
        || ((*var).vartype != pg_sys::TEXTOID && (*var).vartype != pg_sys::INT8OID)
    {
        distribution.problem = Some(
            "rate_limiter.rate_limits is distributed by another column than dkey (not by rate_limiter.distribute())",
        );
        return Some(distribution);
    }
    if definitions_method != Some(b'n') {
        distribution.problem = Some("rate_limiter.definitions is not a reference table");
        return Some(distribution);
    }
    distribution.colocation_id = colocation;
    distribution.column_type = (*var).vartype;
    distribution.collation = (*var).varcollid;
    let mut shards = Vec::new();
    each_row(c"pg_dist_shard", |column| {
        if column(c"logicalrelid").and_then(|d| pg_sys::Oid::from_datum(d, false)) != Some(table) {
            return;
        }
        let bound = |name: &CStr| column(name).and_then(|d| text(d).parse::<i32>().ok());
        if let (Some(id), Some(min), Some(max)) = (
            column(c"shardid").map(|d| d.value() as i64),
            bound(c"shardminvalue"),
            bound(c"shardmaxvalue"),
        ) {
            shards.push(Shard {
                min,
                max,
                id,
                group: None,
            });
        }
    });
    let mut placements: Vec<(i64, i32)> = Vec::new();
    each_row(c"pg_dist_placement", |column| {
        if let (Some(shard), Some(group)) = (
            column(c"shardid").map(|d| d.value() as i64),
            column(c"groupid").map(|d| d.value() as i32),
        ) {
            if shards.iter().any(|s| s.id == shard) {
                placements.push((shard, group));
            }
        }
    });
    for shard in &mut shards {
        let mut groups = placements.iter().filter(|(id, _)| *id == shard.id);
        shard.group = match (groups.next(), groups.next()) {
            (Some(&(_, group)), None) => Some(group),
            _ => None,
        };
    }
    shards.sort_by_key(|shard| shard.min);
    if shards.is_empty() {
        distribution.problem = Some("rate_limiter.rate_limits has no shards");
    }
    distribution.shards = shards;
    Some(distribution)
}

/// How Citus distributes the tables, read once per invalidation; `None`
/// when they are local.
pub fn distribution() -> Option<Rc<Distribution>> {
    if let Some(distribution) = DISTRIBUTION.with(|cell| cell.borrow().clone()) {
        return Some(distribution);
    }
    let objects = catalog::objects();
    if !objects.distributed {
        return None;
    }
    // SAFETY: catalog reads in a transaction.
    let distribution = Rc::new(unsafe { read(objects.table, objects.definitions) }?);
    DISTRIBUTION.with(|cell| cell.replace(Some(distribution.clone())));
    Some(distribution)
}

/// The error of a call that storage was asked to make on a distributed
/// install without a route: 55000 if the tables are not distributed as
/// `distribute()` distributes them, else 0A000 (a function that does not
/// run on a distributed install yet). `None` when not distributed.
pub fn unsupported() -> Option<CallError> {
    let distribution = distribution()?;
    Some(match distribution.check() {
        Err(error) => error,
        Ok(()) => CallError::NotOnCluster("this function"),
    })
}

/// Where the row with distribution value `dkey` lives.
#[derive(Debug, Clone, Copy)]
struct Place {
    /// Position in the sorted shard array (the metadata lock's tag).
    index: usize,
    shard: i64,
    group: i32,
}

impl Distribution {
    /// Fails closed (55000) unless the tables are distributed as
    /// `distribute()` distributes them.
    fn check(&self) -> Result<(), CallError> {
        match self.problem {
            None => Ok(()),
            Some(problem) => Err(CallError::Cluster(
                format!("rate_limiter cannot use its tables: {problem}"),
                "Distribute them with rate_limiter.distribute() only: on the coordinator, SELECT rate_limiter.undistribute(); then SELECT rate_limiter.distribute();",
            )),
        }
    }

    /// The shard of `dkey`, as Citus finds it: the hash of the value (the
    /// type's hash function, with the column's collation) falls in one
    /// shard's [min, max] range.
    fn place(&self, dkey: &DistributionValue) -> Result<Place, CallError> {
        self.check()?;
        if dkey.type_oid() != self.column_type {
            return Err(CallError::Cluster(
                "rate_limiter.rate_limits's distribution column changed type during the call"
                    .into(),
                "Retry the transaction.",
            ));
        }
        // SAFETY: the type cache entry lives for the backend; the datum is
        // of the column's type.
        let hash = unsafe {
            let entry = pg_sys::lookup_type_cache(
                self.column_type,
                pg_sys::TYPECACHE_HASH_PROC_FINFO as i32,
            );
            let datum = dkey.datum();
            pg_sys::FunctionCall1Coll(&mut (*entry).hash_proc_finfo, self.collation, datum).value()
                as i32
        };
        let index = self
            .shards
            .iter()
            .position(|shard| shard.min <= hash && hash <= shard.max)
            .ok_or_else(|| {
                CallError::Cluster(
                    "rate_limiter.rate_limits has no shard for a hash value (its shards do not cover every value)".into(),
                    "Check pg_dist_shard for rate_limiter.rate_limits: a split or move may be unfinished.",
                )
            })?;
        let shard = self.shards[index];
        let group = shard.group.ok_or_else(|| {
            CallError::Cluster(
                format!("shard {} of rate_limiter.rate_limits does not have exactly one placement", shard.id),
                "A shard copy or move may be unfinished (citus_rebalance_status(), pg_dist_placement); the limiter needs one placement per shard.",
            )
        })?;
        Ok(Place {
            index,
            shard: shard.id,
            group,
        })
    }
}

/// The relation a storage call reads and writes instead of the state
/// table: a shard of it on this node, and the row's distribution value.
#[derive(Debug, Clone, Copy)]
pub struct Route {
    pub table: pg_sys::Oid,
    pub index: pg_sys::Oid,
    /// The `dkey` datum (of the column's type) of the rows written.
    pub dkey: pg_sys::Datum,
}

/// The route set by [`on_shard`] for the storage calls it runs, if any.
pub fn route() -> Option<Route> {
    ROUTE.with(Cell::get)
}

/// Runs `body` with storage reading and writing `route`'s shard.
pub fn on_shard<R>(route: Route, body: impl FnOnce() -> R) -> R {
    struct Restore(Option<Route>);
    impl Drop for Restore {
        fn drop(&mut self) {
            ROUTE.with(|cell| cell.set(self.0));
        }
    }
    let _restore = Restore(ROUTE.with(|cell| cell.replace(Some(route))));
    body()
}

/// Citus's lock on the metadata of the colocated shards at `index`
/// (`LockShardDistributionMetadata`: an advisory lock tag with class 8),
/// in `mode`, until the transaction ends.
fn lock_shard_metadata(colocation_id: u32, index: usize, mode: u32) {
    // SAFETY: a lock tag filled as Citus's SET_LOCKTAG_COLOCATED_SHARDS_METADATA_RESOURCE.
    unsafe {
        let tag = pg_sys::LOCKTAG {
            locktag_field1: pg_sys::MyDatabaseId.to_u32(),
            locktag_field2: index as u32,
            locktag_field3: colocation_id,
            locktag_field4: 8,
            locktag_type: pg_sys::LockTagType::LOCKTAG_ADVISORY as u8,
            locktag_lockmethodid: pg_sys::USER_LOCKMETHOD as u8,
        };
        pg_sys::LockAcquire(&tag, mode as i32, false, false);
    }
}

/// Where a call for (name, key) runs.
pub enum Site {
    /// On this node, in the shard `Route` names (its metadata locked).
    Here(Route),
    /// On another node: through `_rate_limit_at`.
    Elsewhere,
}

/// Times the metadata may change under a call before it gives up.
const LOOKUPS: usize = 3;

/// Finds the node of the row with distribution value `dkey`. For a row on
/// this node, takes Citus's metadata lock for a write to its shard (so a
/// move cannot switch the placement until the transaction ends) and
/// re-reads the metadata if it changed meanwhile.
pub fn site(dkey: &DistributionValue, for_write: bool) -> Result<Site, CallError> {
    for _ in 0..LOOKUPS {
        let Some(distribution) = distribution() else {
            return Err(CallError::Cluster(
                "rate_limiter.rate_limits is no longer distributed".into(),
                "Retry the call.",
            ));
        };
        let place = distribution.place(dkey)?;
        if place.group != distribution.local_group {
            return Ok(Site::Elsewhere);
        }
        let generation = catalog::generation();
        if for_write {
            lock_shard_metadata(distribution.colocation_id, place.index, pg_sys::ShareLock);
        }
        // SAFETY: processes pending invalidations (a move that committed
        // while this call waited for the lock).
        unsafe { pg_sys::AcceptInvalidationMessages() };
        if catalog::generation() != generation {
            continue;
        }
        return Ok(Site::Here(shard_route(place, dkey)?));
    }
    Err(CallError::Cluster(
        "Citus's metadata for rate_limiter.rate_limits kept changing during the call".into(),
        "Retry the transaction (a shard move or split was under way).",
    ))
}

/// Where the shards `0..shards` of the global limit `name` live (SPEC
/// §10: they spread over the nodes), read as [`site`] reads one: the ones
/// on this node, each with its route and distribution value (Citus's
/// metadata lock for a write to its shard taken), and every other node
/// that holds some (the distribution value of one of them, and their
/// numbers), those nodes in random order. Its work grows with `shards` (at most 32767).
/// `for_write`: take the metadata locks (a read takes none, as
/// [`site`]).
///
/// Errors: 55000 as [`site`].
pub fn spread(name: &[u8], shards: i16, for_write: bool) -> Result<Spread, CallError> {
    for _ in 0..LOOKUPS {
        let Some(distribution) = distribution() else {
            return Err(CallError::Cluster(
                "rate_limiter.rate_limits is no longer distributed".into(),
                "Retry the call.",
            ));
        };
        let generation = catalog::generation();
        let mut here = Vec::new();
        let mut others: Vec<Other> = Vec::new();
        for number in 0..shards {
            let dkey = distribution_value(name, None, number)?;
            let place = distribution.place(&dkey)?;
            if place.group == distribution.local_group {
                here.push((number, place, dkey));
            } else if let Some(other) = others.iter_mut().find(|other| other.group == place.group) {
                other.shards.push(number);
            } else {
                others.push(Other {
                    group: place.group,
                    dkey,
                    shards: vec![number],
                });
            }
        }
        let mut locked: Vec<usize> = Vec::new();
        for (_, place, _) in &here {
            if for_write && !locked.contains(&place.index) {
                lock_shard_metadata(distribution.colocation_id, place.index, pg_sys::ShareLock);
                locked.push(place.index);
            }
        }
        // SAFETY: processes pending invalidations (a move that committed
        // while this call waited for a lock).
        unsafe { pg_sys::AcceptInvalidationMessages() };
        if catalog::generation() != generation {
            continue;
        }
        let mut local = Vec::with_capacity(here.len());
        for (number, place, dkey) in here {
            local.push((number, shard_route(place, &dkey)?, dkey));
        }
        if !others.is_empty() {
            let start = crate::shard_choice::draw()[0] as usize % others.len();
            others.rotate_left(start);
        }
        return Ok(Spread {
            local,
            local_group: distribution.local_group,
            others,
        });
    }
    Err(CallError::Cluster(
        "Citus's metadata for rate_limiter.rate_limits kept changing during the call".into(),
        "Retry the transaction (a shard move or split was under way).",
    ))
}

/// Where a global limit's shards live ([`spread`]).
pub struct Spread {
    /// The shards on this node: number, route, distribution value.
    pub local: Vec<(i16, Route, DistributionValue)>,
    /// This node's group.
    pub local_group: i32,
    /// Every other node holding some, in random order.
    pub others: Vec<Other>,
}

/// Another node holding shards of a global limit ([`Spread`]).
pub struct Other {
    /// Its group (`pg_dist_node.groupid`).
    pub group: i32,
    /// The distribution value of one of its shards.
    pub dkey: DistributionValue,
    /// The numbers of its shards, ascending.
    pub shards: Vec<i16>,
}

impl Spread {
    /// The local shards with their routes, and the limit's number of
    /// shards `count`.
    fn placed_shards(&self, count: i16) -> (Vec<(i16, Route)>, i16) {
        let shards = self
            .local
            .iter()
            .map(|(number, route, _)| (*number, *route))
            .collect();
        (shards, count)
    }

    /// The local shards as `limit::Shards::Placed` takes them.
    fn placed(&self, count: i16, held: Option<i16>) -> limit::Shards {
        let (shards, count) = self.placed_shards(count);
        limit::Shards::Placed {
            shards,
            count,
            held,
        }
    }
}

/// The shards of the state table placed on this node, as qualified
/// relation names (for `prune`), each with Citus's metadata lock for a
/// write to it held until the transaction ends (so no move switches them
/// meanwhile). A shard with other than one placement (a copy or move
/// under way) is left out.
///
/// Errors: 55000 when the tables are not distributed as `distribute()`
/// distributes them, when the metadata changed while the locks were
/// taken, or when a shard placed here has no relation here.
pub fn local_shards() -> Result<Vec<String>, CallError> {
    let Some(distribution) = distribution() else {
        return Err(CallError::Cluster(
            "rate_limiter.rate_limits is no longer distributed".into(),
            "Retry the call.",
        ));
    };
    distribution.check()?;
    let generation = catalog::generation();
    let objects = catalog::objects();
    let mut tables = Vec::new();
    for (index, shard) in distribution.shards.iter().enumerate() {
        if shard.group != Some(distribution.local_group) {
            continue;
        }
        lock_shard_metadata(distribution.colocation_id, index, pg_sys::ShareLock);
        let name = format!("rate_limits_{}", shard.id);
        let relation_name = CString::new(name.as_str()).unwrap_or_default();
        // SAFETY: a catalog cache lookup.
        let table = unsafe { pg_sys::get_relname_relid(relation_name.as_ptr(), objects.schema) };
        if table == pg_sys::InvalidOid {
            return Err(CallError::Cluster(
                format!(
                    "shard {} of rate_limiter.rate_limits is placed on this node, but its table is missing",
                    shard.id
                ),
                "Check the shard with citus_shards and pg_dist_placement.",
            ));
        }
        tables.push(format!("rate_limiter.{name}"));
    }
    // SAFETY: processes pending invalidations (a move that committed while
    // this call waited for a lock).
    unsafe { pg_sys::AcceptInvalidationMessages() };
    if catalog::generation() != generation {
        return Err(CallError::Cluster(
            "Citus's metadata for rate_limiter.rate_limits changed during prune()".into(),
            "Retry (a shard move or split was under way).",
        ));
    }
    Ok(tables)
}

/// The shard relation of `place` on this node and its unique index.
fn shard_route(place: Place, dkey: &DistributionValue) -> Result<Route, CallError> {
    let objects = catalog::objects();
    let table_name = CString::new(format!("rate_limits_{}", place.shard)).unwrap_or_default();
    let index_name = CString::new(format!(
        "rate_limits_name_key_shard_dkey_key_{}",
        place.shard
    ))
    .unwrap_or_default();
    // SAFETY: catalog cache lookups.
    let (table, index) = unsafe {
        (
            pg_sys::get_relname_relid(table_name.as_ptr(), objects.schema),
            pg_sys::get_relname_relid(index_name.as_ptr(), objects.schema),
        )
    };
    if table == pg_sys::InvalidOid || index == pg_sys::InvalidOid {
        return Err(CallError::Cluster(
            format!(
                "shard {} of rate_limiter.rate_limits is placed on this node, but its table or unique index is missing",
                place.shard
            ),
            "Check the shard with citus_shards and pg_dist_placement.",
        ));
    }
    // A text datum lives in the call's memory context.
    Ok(Route {
        table,
        index,
        dkey: dkey.datum(),
    })
}

/// Runs `body` on this node's shard of `dkey`, or returns `None` when the
/// row lives on another node (the caller then goes there).
pub fn here<R>(
    dkey: &DistributionValue,
    for_write: bool,
    body: impl FnOnce() -> Result<R, CallError>,
) -> Result<Option<R>, CallError> {
    match site(dkey, for_write)? {
        Site::Here(route) => {
            let answer = on_shard(route, body)?;
            if for_write {
                wrote(Some(dkey))?;
            }
            Ok(Some(answer))
        }
        Site::Elsewhere => Ok(None),
    }
}

/// The statement that runs a call on the node holding its row: Citus
/// delegates `_rate_limit_at` (a distributed function colocated with the
/// state table, `force_delegation`) by its first argument, which planning
/// turns into a constant (never NULL: a NULL crashes Citus 13.2.2).
const ELSEWHERE: &str =
    "SELECT ok, retry_after, remaining, verdict, reserved, near_limit, contended \
     FROM rate_limiter._rate_limit_at($1, $2, $3, $4, $5, $6, $7, $8)";

/// The SPI arguments of a delegated call: `dkey`, then `name` and `key`
/// as text (a NULL key for a global limit).
fn row_arguments<'a>(
    dkey: &'a DistributionValue,
    name: &'a [u8],
    key: Option<&'a [u8]>,
) -> [DatumWithOid<'a>; 3] {
    // SAFETY: the bytes of text values become varlenas of type text.
    unsafe {
        [
            dkey.argument(),
            DatumWithOid::new(name, pg_sys::TEXTOID),
            match key {
                Some(key) => DatumWithOid::new(key, pg_sys::TEXTOID),
                None => DatumWithOid::null_oid(pg_sys::TEXTOID),
            },
        ]
    }
}

/// How a verdict travels between nodes (`_rate_limit_at`'s `verdict`).
fn verdict_number(verdict: Verdict) -> i16 {
    match verdict {
        Verdict::Admitted => 0,
        Verdict::Refused => 1,
        Verdict::ShadowRefused => 2,
    }
}

fn verdict_of(number: i16) -> Verdict {
    match number {
        0 => Verdict::Admitted,
        1 => Verdict::Refused,
        _ => Verdict::ShadowRefused,
    }
}

/// Runs `call` on the node holding the row of `dkey`: consumes
/// (`consume`) or checks there, inside this transaction (Citus's
/// distributed transaction: rollback undoes it; a transaction that wrote
/// on several nodes commits with two-phase commit). The decision as
/// answered, and for a consuming call how it is counted (here: statistics
/// count on the node where the function was called).
pub fn elsewhere(
    call: &Call<'_>,
    dkey: &DistributionValue,
    consume: bool,
) -> Result<(Decision, Option<Counted>), CallError> {
    let config = match call.config_argument {
        // SAFETY: the argument's datum, of its declared type.
        Some((datum, type_id)) => unsafe { DatumWithOid::new(datum, type_id) },
        None => DatumWithOid::null_oid(pgrx::regtypein("rate_limiter.config")),
    };
    let [dkey, name, key] = row_arguments(dkey, call.name, call.key);
    let arguments = [
        dkey,
        name,
        key,
        DatumWithOid::from(call.request.count),
        DatumWithOid::from(call.request.reserve),
        config,
        DatumWithOid::from(consume),
        crate::clock::override_to_send(),
    ];
    // As the calling role: Citus keys its connections by role, so the
    // call reuses the connection this transaction's own statements on the
    // tenant's colocated rows use (one node, no 2PC), and the node holding
    // the row checks that role's privileges as this one would.
    let row = {
        Spi::connect_mut(|client| {
            let table = client.update(ELSEWHERE, Some(1), &arguments)?;
            let row = table.first();
            Ok::<_, pgrx::spi::SpiError>((
                row.get::<bool>(1)?,
                row.get::<i64>(2)?,
                row.get::<f64>(3)?,
                row.get::<i16>(4)?,
                row.get::<bool>(5)?,
                row.get::<bool>(6)?,
                row.get::<bool>(7)?,
            ))
        })
    }?;
    let (Some(ok), retry_after, Some(remaining), verdict, reserved, near_limit, contended) = row
    else {
        return Err(CallError::Cluster(
            "rate_limiter._rate_limit_at() on another node returned no answer".into(),
            "Check that every node runs the same version of rate_limiter.",
        ));
    };
    let decision = Decision {
        ok,
        retry_after,
        remaining,
        new_state: None,
    };
    let counted = verdict.map(|verdict| Counted {
        verdict: verdict_of(verdict),
        count: call.request.count,
        reserved: reserved.unwrap_or(false),
        near_limit: near_limit.unwrap_or(false),
        contended: contended.unwrap_or(false),
    });
    Ok((decision, counted))
}

/// [`elsewhere`] for a consuming call: the decision and how it counts.
pub fn consume_elsewhere(
    call: &Call<'_>,
    dkey: &DistributionValue,
) -> Result<(Decision, Counted), CallError> {
    let (decision, counted) = elsewhere(call, dkey, true)?;
    wrote(None)?;
    counted.map(|counted| (decision, counted)).ok_or_else(|| {
        CallError::Cluster(
            "rate_limiter._rate_limit_at() on another node did not say how its decision counts"
                .into(),
            "Check that every node runs the same version of rate_limiter.",
        )
    })
}

/// `rate_limit` of a global limit with `shards` (>= 2) shards on a
/// distributed install (SPEC §10): the shards on this node first (as on
/// one server, over those shards only); only when they cannot serve the
/// call, the other nodes', one node after the other in random order,
/// through `_rate_limit_at` with the distribution value of one of its
/// shards, until one admits. There the call uses only that node's shards
/// and never waits for one another transaction holds (it passes over it,
/// or answers as refused), so no two calls wait for each other across
/// nodes. Every node consumes within its own shards' bounds, so the limit
/// never admits more than the unsharded bound. A refusal answers with the
/// soonest `retry_after` of the nodes asked.
///
/// Errors: 55000 as [`site`]; those of `rate_limit`.
pub fn consume_spread(call: &Call<'_>, shards: i16) -> Result<(Decision, Counted), CallError> {
    let spread = spread(call.name, shards, true)?;
    let mut best: Option<(Decision, Counted)> = None;
    if let Some((_, _, dkey)) = spread.local.first() {
        let answer = limit::consume_with(call, spread.placed(shards, None))?;
        wrote(Some(dkey))?;
        if answer.1.verdict == Verdict::Admitted {
            return Ok(answer);
        }
        best = Some(answer);
    }
    for other in &spread.others {
        let answer = consume_elsewhere(call, &other.dkey)?;
        if answer.1.verdict == Verdict::Admitted {
            return Ok(answer);
        }
        best = Some(match best {
            Some(earlier) if sooner(&earlier.0, &answer.0) => earlier,
            _ => answer,
        });
    }
    best.ok_or_else(|| {
        CallError::Cluster(
            "no shard of this limit is placed on any node".into(),
            "Check pg_dist_shard and pg_dist_placement for rate_limiter.rate_limits.",
        )
    })
}

/// Whether refusal `a` says to retry no later than `b` (no `retry_after`:
/// never).
fn sooner(a: &Decision, b: &Decision) -> bool {
    match (a.retry_after, b.retry_after) {
        (Some(a), Some(b)) => a <= b,
        (Some(_), None) => true,
        (None, Some(_)) => false,
        (None, None) => true,
    }
}

/// The body of `_rate_limit_at` for a global limit with `shards` (>= 2)
/// shards: consumes from the shards on this node only, never waiting for
/// one another transaction holds (see [`consume_spread`]). `dkey` must be
/// the distribution value of one of its shards (22023), placed here
/// (55000).
fn spread_at(
    dkey: Option<DistributionValue>,
    call: &Call<'_>,
    consume: bool,
    shards: i16,
) -> Result<(Decision, Option<Counted>), CallError> {
    if !consume {
        return Err(CallError::NotOnCluster(
            "rate_check of a global limit with several shards",
        ));
    }
    let (spread, dkey) = delegated_spread(
        "_rate_limit_at",
        RATE_LIMIT_AT_HINT,
        true,
        dkey,
        call.name,
        shards,
    )?;
    let (decision, counted) = limit::consume_with(call, spread.placed(shards, Some(i16::MAX)))?;
    wrote(Some(&dkey))?;
    Ok((decision, Some(counted)))
}

/// What a delegated internal function called for a global limit with
/// `shards` (>= 2) shards checks: as [`checks`], then where the limit's
/// shards live ([`spread`], the metadata locks taken when `writes`), of
/// which the one of `dkey` must be on this node: 55000 when it is
/// elsewhere, 22023 when `dkey` is none of the limit's shards'. The
/// spread and `dkey`.
fn delegated_spread(
    function: &str,
    hint: &'static str,
    writes: bool,
    dkey: Option<DistributionValue>,
    name: &[u8],
    shards: i16,
) -> Result<(Spread, DistributionValue), CallError> {
    checks(function, hint, writes)?;
    let spread = spread(name, shards, writes)?;
    if let Some(dkey) = dkey.as_ref() {
        if spread.local.iter().any(|(_, _, local)| local == dkey) {
            let dkey = dkey.clone();
            return Ok((spread, dkey));
        }
    }
    // Not one of this node's shards: a wrong dkey (22023), else a shard
    // on another node (55000).
    one_of_the_shards(dkey, name, shards)?;
    Err(not_here())
}

/// `dkey` when it is the distribution value of one of the shards
/// `0..shards` of the global limit `name`, else 22023.
fn one_of_the_shards(
    dkey: Option<DistributionValue>,
    name: &[u8],
    shards: i16,
) -> Result<DistributionValue, CallError> {
    let Some(dkey) = dkey else {
        return Err(wrong_dkey());
    };
    for number in 0..shards {
        if distribution_value(name, None, number)? == dkey {
            return Ok(dkey);
        }
    }
    Err(wrong_dkey())
}

/// The stored state of the shards of the global limit `name` placed on
/// this node (`spread.local`), without locking: `states[i]` is shard `i`
/// of `shards`, `None` for a shard elsewhere or without a row.
fn read_local_shards(name: &[u8], spread: &Spread, shards: i16) -> Vec<Option<State>> {
    let mut states = vec![None; shards.max(0) as usize];
    for (number, route, _) in &spread.local {
        if let Some(slot) = states.get_mut(*number as usize) {
            *slot = on_shard(*route, || {
                crate::storage::read(crate::storage::RowId {
                    name,
                    key: None,
                    shard: *number,
                })
            });
        }
    }
    states
}

/// The error of a `dkey` that is not the one of the row(s) called for.
fn wrong_dkey() -> CallError {
    CallError::Limit(LimitError::invalid(
        "dkey",
        "dkey is not the distribution value of (name, key)".to_string(),
    ))
}

/// What every delegated internal function checks first: the tables are
/// distributed (55000), and a writing call runs inside a transaction
/// block (55000: Citus runs a delegated call inside the caller's
/// distributed transaction, and anything else would commit on its own).
/// `function` is its name; `hint` names the public function to call
/// instead.
fn checks(function: &str, hint: &'static str, writes: bool) -> Result<(), CallError> {
    if !catalog::objects().distributed {
        return Err(CallError::Cluster(
            format!("rate_limiter.{function}() was called, but rate_limiter.rate_limits is not distributed"),
            hint,
        ));
    }
    // SAFETY: reads the transaction state.
    if writes && !unsafe { pg_sys::IsTransactionBlock() } {
        return Err(CallError::Cluster(
            format!("rate_limiter.{function}() writes only inside a transaction block"),
            hint,
        ));
    }
    Ok(())
}

/// What every delegated internal function checks first, and the
/// distribution value of (name, key): the tables are distributed (55000),
/// a writing call runs inside a transaction block (55000: Citus runs a
/// delegated call inside the caller's distributed transaction, and
/// anything else would commit on its own), and `dkey` is that value
/// (22023). `function` is its name; `hint` names the public function to
/// call instead.
fn delegated(
    function: &str,
    hint: &'static str,
    writes: bool,
    dkey: Option<DistributionValue>,
    name: &[u8],
    key: Option<&[u8]>,
) -> Result<DistributionValue, CallError> {
    checks(function, hint, writes)?;
    let expected = distribution_value(name, key, 0)?;
    if dkey.as_ref() != Some(&expected) {
        return Err(wrong_dkey());
    }
    Ok(expected)
}

/// The hint of `_rate_state_at`'s refusals.
const STATE_AT_HINT: &str = "It is internal: call rate_limiter.status().";

/// The hint of `_rate_limit_at`'s refusals.
const RATE_LIMIT_AT_HINT: &str = "It is internal: call rate_limiter.rate_limit(), which reaches the node holding the row inside your transaction.";

/// The error of a delegated call that reached a node without its rows.
fn not_here() -> CallError {
    CallError::Cluster(
        "the row of this limit is not on this node".into(),
        "Retry the transaction: a shard move may have switched the row to another node meanwhile. If it keeps failing, Citus did not delegate the call to the node holding the row (plan_cache_mode = force_generic_plan, or a session where Citus stopped delegating: reconnect).",
    )
}

/// The body of `_rate_limit_at`: the call as the node holding its row
/// makes it, or an error (see [`delegated`]; 55000 if the row is not
/// here).
fn at(
    dkey: Option<DistributionValue>,
    call: &Call<'_>,
    consume: bool,
) -> Result<(Decision, Option<Counted>), CallError> {
    if let Some(shards) = call.spread_shards()? {
        return spread_at(dkey, call, consume, shards);
    }
    let expected = delegated(
        "_rate_limit_at",
        RATE_LIMIT_AT_HINT,
        consume,
        dkey,
        call.name,
        call.key,
    )?;
    let answer = here(&expected, consume, || {
        if consume {
            limit::consume_here(call).map(|(decision, counted)| (decision, Some(counted)))
        } else {
            limit::check_here(call).map(|decision| (decision, None))
        }
    })?;
    answer.ok_or_else(not_here)
}

/// Version 1 calling convention, for every entry point below.
const CALLING_CONVENTION: pg_sys::Pg_finfo_record = pg_sys::Pg_finfo_record { api_version: 1 };

/// Declares the C entry points of a delegated internal function's two
/// overloads (`dkey text` and `dkey bigint`) and their calling-convention
/// records: each reads its first argument as a [`DistributionValue`] and
/// calls `$body(fcinfo, dkey)` (`unsafe fn(pg_sys::FunctionCallInfo,
/// Option<DistributionValue>) -> pg_sys::Datum`). `$clock`: the position
/// of its `now_override timestamptz` argument (the delegating node's
/// clock, which `$body` then runs with: `clock::with_callers_override`),
/// or `None` for a function that reads no clock.
macro_rules! delegated_entry_points {
    ($function:literal, $body:ident, $clock:expr,
     $text:ident, $text_finfo:ident, $bigint:ident, $bigint_finfo:ident) => {
        #[doc = concat!("`rate_limiter.", $function, "(dkey text, ...)`: see sql/citus.sql.")]
        ///
        /// # Safety
        /// Called by PostgreSQL with the function's arguments.
        #[no_mangle]
        #[pg_guard]
        pub unsafe extern "C-unwind" fn $text(fcinfo: pg_sys::FunctionCallInfo) -> pg_sys::Datum {
            let dkey = pg_getarg::<&[u8]>(fcinfo, 0)
                .map(|bytes| DistributionValue::Text(bytes.to_vec()));
            let callers = $clock.and_then(|position: usize| pg_getarg::<i64>(fcinfo, position));
            match crate::clock::with_callers_override(callers, || $body(fcinfo, dkey)) {
                Ok(datum) => datum,
                Err(error) => crate::errors::report(error),
            }
        }

        #[doc = concat!("`rate_limiter.", $function, "(dkey bigint, ...)`: the same, on a state table distributed by a bigint column.")]
        ///
        /// # Safety
        /// Called by PostgreSQL with the function's arguments.
        #[no_mangle]
        #[pg_guard]
        pub unsafe extern "C-unwind" fn $bigint(fcinfo: pg_sys::FunctionCallInfo) -> pg_sys::Datum {
            let dkey = pg_getarg::<i64>(fcinfo, 0).map(DistributionValue::BigInt);
            let callers = $clock.and_then(|position: usize| pg_getarg::<i64>(fcinfo, position));
            match crate::clock::with_callers_override(callers, || $body(fcinfo, dkey)) {
                Ok(datum) => datum,
                Err(error) => crate::errors::report(error),
            }
        }

        #[no_mangle]
        pub extern "C" fn $text_finfo() -> &'static pg_sys::Pg_finfo_record {
            &CALLING_CONVENTION
        }

        #[no_mangle]
        pub extern "C" fn $bigint_finfo() -> &'static pg_sys::Pg_finfo_record {
            &CALLING_CONVENTION
        }
    };
}

delegated_entry_points!(
    "_rate_limit_at",
    rate_limit_at,
    Some(7),
    _rate_limit_at_wrapper,
    pg_finfo__rate_limit_at_wrapper,
    _rate_limit_at_bigint_wrapper,
    pg_finfo__rate_limit_at_bigint_wrapper
);

delegated_entry_points!(
    "_rate_state_at",
    rate_state_at,
    None,
    _rate_state_at_wrapper,
    pg_finfo__rate_state_at_wrapper,
    _rate_state_at_bigint_wrapper,
    pg_finfo__rate_state_at_bigint_wrapper
);

delegated_entry_points!(
    "_rate_credit_at",
    rate_credit_at,
    Some(5),
    _rate_credit_at_wrapper,
    pg_finfo__rate_credit_at_wrapper,
    _rate_credit_at_bigint_wrapper,
    pg_finfo__rate_credit_at_bigint_wrapper
);

/// The body of both `_rate_limit_at` wrappers, `dkey` their first argument.
///
/// # Safety
/// `fcinfo` holds `_rate_limit_at`'s seven arguments.
unsafe fn rate_limit_at(
    fcinfo: pg_sys::FunctionCallInfo,
    dkey: Option<DistributionValue>,
) -> pg_sys::Datum {
    let consume = pg_getarg::<bool>(fcinfo, 6).unwrap_or(false);
    let call = match Call::new(
        pg_getarg::<&[u8]>(fcinfo, 1),
        pg_getarg::<&[u8]>(fcinfo, 2),
        pg_getarg::<f64>(fcinfo, 3),
        pg_getarg::<bool>(fcinfo, 4),
        Some(false),
        pg_getarg::<PgHeapTuple<'_, AllocatedByRust>>(fcinfo, 5),
    ) {
        Ok(call) => Call {
            config_argument: limit::config_argument(fcinfo, 5),
            ..call
        },
        Err(error) => report(CallError::Limit(error)),
    };
    match at(dkey, &call, consume) {
        Ok((decision, counted)) => result_row::put_rows(
            fcinfo,
            [[
                Some(pg_sys::Datum::from(decision.ok)),
                decision.retry_after.and_then(IntoDatum::into_datum),
                decision.remaining.into_datum(),
                counted.map(|counted| pg_sys::Datum::from(verdict_number(counted.verdict))),
                counted.map(|counted| pg_sys::Datum::from(counted.reserved)),
                counted.map(|counted| pg_sys::Datum::from(counted.near_limit)),
                counted.map(|counted| pg_sys::Datum::from(counted.contended)),
            ]],
        ),
        Err(error) => report(error),
    }
}

/// The statement that reads the stored rows of (name, key) on the node
/// holding them: Citus delegates `_rate_state_at` (distributed like
/// `_rate_limit_at`) by its first argument.
const STATE_ELSEWHERE: &str =
    "SELECT shard, value, ts FROM rate_limiter._rate_state_at($1, $2, $3, $4)";

/// The stored state of shards `0..shards` of (name, key) on a distributed
/// install, read without locking where the rows live, as
/// `storage::read_shards` reads them on one server: `states[i]` is shard
/// `i`. A row on another node is read there through `_rate_state_at`, as
/// the calling role and inside its transaction (read-only ones too).
///
/// A global limit with several shards: its shards on this node read here,
/// the others on each node that holds some, through `_rate_state_at` with
/// the distribution value of one of them.
///
/// Errors: 55000 as [`site`]; 22P02 as [`distribution_value`].
pub fn read_states(
    name: &[u8],
    key: Option<&[u8]>,
    shards: i16,
) -> Result<Vec<Option<State>>, CallError> {
    if shards > 1 && key.is_none() {
        return read_spread_states(name, &spread(name, shards, false)?, shards);
    }
    let dkey = distribution_value(name, key, 0)?;
    if let Some(states) = here(&dkey, false, || {
        Ok(crate::storage::read_shards(name, key, shards))
    })? {
        return Ok(states);
    }
    let mut states = vec![None; shards.max(0) as usize];
    read_elsewhere(&dkey, name, key, shards, &mut states)?;
    Ok(states)
}

/// Fills `states` with the stored rows of (name, key) that
/// `_rate_state_at` returns from the node holding the row of `dkey`
/// (`states[i]` is shard `i`; rows beyond it are ignored).
fn read_elsewhere(
    dkey: &DistributionValue,
    name: &[u8],
    key: Option<&[u8]>,
    shards: i16,
    states: &mut [Option<State>],
) -> Result<(), CallError> {
    let [dkey, name, key] = row_arguments(dkey, name, key);
    let arguments = [dkey, name, key, DatumWithOid::from(shards)];
    Spi::connect_mut(|client| {
        for row in client.update(STATE_ELSEWHERE, None, &arguments)? {
            if let (Some(shard), Some(value), Some(ts)) = (
                row.get::<i16>(1)?,
                row.get::<f64>(2)?,
                row.get::<TimestampWithTimeZone>(3)?,
            ) {
                if let Some(slot) = states.get_mut(shard.max(0) as usize) {
                    *slot = Some(State {
                        value,
                        ts: ts.into_inner(),
                    });
                }
            }
        }
        Ok::<_, pgrx::spi::SpiError>(())
    })?;
    Ok(())
}

/// The stored state of every shard of the global limit `name` (`shards`
/// shards, placed as `spread` says): this node's read here, the others
/// through `_rate_state_at` on each node that holds some.
fn read_spread_states(
    name: &[u8],
    spread: &Spread,
    shards: i16,
) -> Result<Vec<Option<State>>, CallError> {
    let mut states = read_local_shards(name, spread, shards);
    for other in &spread.others {
        read_elsewhere(&other.dkey, name, None, shards, &mut states)?;
    }
    Ok(states)
}

/// The body of `_rate_state_at`: the stored rows of (name, key) on this
/// node, which must hold them (a global limit with several shards: the
/// rows of its shards on this node, which must hold the one of `dkey`).
fn state_at(
    dkey: Option<DistributionValue>,
    name: Option<&[u8]>,
    key: Option<&[u8]>,
    shards: Option<i16>,
) -> Result<Vec<Option<State>>, CallError> {
    let name = crate::config::required(name, "name")?;
    let shards = crate::config::required(shards, "shards")?;
    if shards < 1 {
        return Err(CallError::Limit(LimitError::invalid(
            "shards",
            "shards must be at least 1".to_string(),
        )));
    }
    if key.is_none() && shards > 1 {
        let (spread, _) =
            delegated_spread("_rate_state_at", STATE_AT_HINT, false, dkey, name, shards)?;
        return Ok(read_local_shards(name, &spread, shards));
    }
    let expected = delegated("_rate_state_at", STATE_AT_HINT, false, dkey, name, key)?;
    here(&expected, false, || {
        Ok(crate::storage::read_shards(name, key, shards))
    })?
    .ok_or_else(not_here)
}

/// The body of both `_rate_state_at` wrappers: one result row per stored
/// shard.
///
/// # Safety
/// `fcinfo` holds `_rate_state_at`'s four arguments.
unsafe fn rate_state_at(
    fcinfo: pg_sys::FunctionCallInfo,
    dkey: Option<DistributionValue>,
) -> pg_sys::Datum {
    let rows = state_at(
        dkey,
        pg_getarg::<&[u8]>(fcinfo, 1),
        pg_getarg::<&[u8]>(fcinfo, 2),
        pg_getarg::<i16>(fcinfo, 3),
    )
    .and_then(|states| {
        let mut rows = Vec::new();
        for (shard, state) in states.into_iter().enumerate() {
            if let Some(state) = state {
                rows.push([
                    Some(pg_sys::Datum::from(shard as i16)),
                    state.value.into_datum(),
                    crate::storage::timestamp(state.ts)?.into_datum(),
                ]);
            }
        }
        Ok(rows)
    });
    match rows {
        Ok(rows) => result_row::put_rows(fcinfo, rows),
        Err(error) => report(error),
    }
}

/// The statement that credits (name, key) on the node holding its rows:
/// Citus delegates `_rate_credit_at` by its first argument (called in
/// `FROM`: Citus takes `SELECT f(...)` run through SPI for a PL/pgSQL
/// simple expression and does not delegate it).
const CREDIT_ELSEWHERE: &str =
    "SELECT value FROM rate_limiter._rate_credit_at($1, $2, $3, $4, $5, $6) AS value";

/// `rate_credit` on a distributed install: on this node's shard when it
/// holds the rows (Citus's metadata lock taken as for a consuming call),
/// else through `_rate_credit_at` on the node that does, as the calling
/// role and inside this transaction (2PC as for a consuming call).
/// `config_argument` is the inline config as its SQL value (a composite
/// datum of `rate_limiter.config`). A global limit with several shards:
/// [`credit_spread`]. The limit's value afterwards.
///
/// Errors: 55000 as [`site`]; 22P02 as [`distribution_value`]; the errors
/// of `rate_credit`.
pub fn credit(
    name: &[u8],
    key: Option<&[u8]>,
    count: f64,
    inline: Option<rate_limiter_algorithm::Config>,
    config_argument: Option<pg_sys::Datum>,
) -> Result<f64, CallError> {
    if key.is_none() {
        let shards = crate::definitions::resolve(name, inline)?.config.shards;
        if shards > 1 {
            return credit_spread(name, count, inline, config_argument, shards as i16);
        }
    }
    let dkey = distribution_value(name, key, 0)?;
    if let Some(value) = here(&dkey, true, || {
        crate::credit::credit_here(name, key, count, inline)
    })? {
        return Ok(value);
    }
    credit_elsewhere(&dkey, name, key, count, config_argument)
}

/// `rate_credit` of a global limit with `shards` (>= 2) shards on a
/// distributed install. The count is shared out as on one server (the
/// emptiest shards first, none above its capacity; a shard without a row
/// is full), planned on the shards' stored states read where they live,
/// then each node's share is credited there, the nodes in ascending group
/// order (so two credits never wait for each other in a cycle; a
/// consuming call waits only on its own node). Each node caps its shards
/// at capacity again under its locks, so a share meanwhile consumed
/// elsewhere never overfills a shard. The value afterwards, summed over
/// every shard.
///
/// Errors: as [`credit`].
fn credit_spread(
    name: &[u8],
    count: f64,
    inline: Option<rate_limiter_algorithm::Config>,
    config_argument: Option<pg_sys::Datum>,
    shards: i16,
) -> Result<f64, CallError> {
    let shard = crate::definitions::resolve(name, inline)?.config.shard();
    let spread = spread(name, shards, true)?;
    let stored = read_spread_states(name, &spread, shards)?;
    let existing: Vec<(usize, State)> = stored
        .iter()
        .enumerate()
        .filter_map(|(number, state)| state.map(|state| (number, state)))
        .collect();
    let states: Vec<State> = existing.iter().map(|(_, state)| *state).collect();
    let now = crate::clock::now();
    let before = rate_limiter_algorithm::credit(&shard, &states, 0.0, now);
    let after = rate_limiter_algorithm::credit(&shard, &states, count, now);
    // Each shard's share, and its value as things stand.
    let mut share = vec![0.0; shards as usize];
    let mut value = vec![shard.capacity(); shards as usize];
    for (((number, _), before), after) in existing.iter().zip(&before).zip(&after) {
        share[*number] = after.value - before.value;
        value[*number] = before.value;
    }
    let local: Vec<i16> = spread.local.iter().map(|(number, ..)| *number).collect();
    let mut nodes: Vec<(i32, Option<&Other>, &[i16])> = vec![(spread.local_group, None, &local)];
    nodes.extend(
        spread
            .others
            .iter()
            .map(|other| (other.group, Some(other), other.shards.as_slice())),
    );
    nodes.sort_by_key(|(group, ..)| *group);
    let mut total = 0.0;
    for (_, other, numbers) in nodes {
        let amount: f64 = numbers.iter().map(|number| share[*number as usize]).sum();
        if amount <= 0.0 {
            total += numbers
                .iter()
                .map(|number| value[*number as usize])
                .sum::<f64>();
            continue;
        }
        total += match other {
            Some(other) => credit_elsewhere(&other.dkey, name, None, amount, config_argument)?,
            None => credit_local_shards(name, amount, inline, &spread, shards)?,
        };
    }
    Ok(total)
}

/// Credits `count` to the shards of the global limit `name` (of `shards`
/// shards) on this node (`spread.local`, at least one): the value of
/// those shards afterwards.
fn credit_local_shards(
    name: &[u8],
    count: f64,
    inline: Option<rate_limiter_algorithm::Config>,
    spread: &Spread,
    shards: i16,
) -> Result<f64, CallError> {
    let value = crate::credit::credit_on(
        name,
        None,
        count,
        inline,
        Some(spread.placed_shards(shards)),
    )?;
    if let Some((_, _, dkey)) = spread.local.first() {
        wrote(Some(dkey))?;
    }
    Ok(value)
}

/// Credits (name, key) through `_rate_credit_at` on the node holding the
/// row of `dkey`, inside this transaction: the value it answers.
fn credit_elsewhere(
    dkey: &DistributionValue,
    name: &[u8],
    key: Option<&[u8]>,
    count: f64,
    config_argument: Option<pg_sys::Datum>,
) -> Result<f64, CallError> {
    let config_type = pgrx::regtypein("rate_limiter.config");
    let [dkey_argument, name, key] = row_arguments(dkey, name, key);
    let arguments = [
        dkey_argument,
        name,
        key,
        DatumWithOid::from(count),
        match config_argument {
            // SAFETY: the config datum is of its type.
            Some(datum) => unsafe { DatumWithOid::new(datum, config_type) },
            None => DatumWithOid::null_oid(config_type),
        },
        crate::clock::override_to_send(),
    ];
    let value = Spi::connect_mut(|client| {
        client
            .update(CREDIT_ELSEWHERE, Some(1), &arguments)?
            .first()
            .get::<f64>(1)
    })?
    .ok_or_else(|| {
        CallError::Cluster(
            "rate_limiter._rate_credit_at() on another node returned no answer".into(),
            "Check that every node runs the same version of rate_limiter.",
        )
    })?;
    wrote(None)?;
    Ok(value)
}

/// The body of `_rate_credit_at`: the credit on this node, which must hold
/// the rows, inside a transaction block.
fn credit_at(
    dkey: Option<DistributionValue>,
    name: Option<&[u8]>,
    key: Option<&[u8]>,
    count: Option<f64>,
    config: Option<PgHeapTuple<'_, AllocatedByRust>>,
) -> Result<f64, CallError> {
    let name = crate::config::required(name, "name")?;
    let count = crate::config::required(count, "count")?;
    let inline = crate::config::inline_config(config)?;
    rate_limiter_algorithm::validate_credit(count)?;
    const HINT: &str = "It is internal: call rate_limiter.rate_credit(), which reaches the node holding the row inside your transaction.";
    if key.is_none() {
        let shards = crate::definitions::resolve(name, inline)?.config.shards;
        if shards > 1 {
            // A global limit's shards on this node, which must hold the
            // one of dkey.
            let shards = shards as i16;
            let (spread, _) = delegated_spread("_rate_credit_at", HINT, true, dkey, name, shards)?;
            return credit_local_shards(name, count, inline, &spread, shards);
        }
    }
    let expected = delegated("_rate_credit_at", HINT, true, dkey, name, key)?;
    here(&expected, true, || {
        crate::credit::credit_here(name, key, count, inline)
    })?
    .ok_or_else(not_here)
}

/// The body of both `_rate_credit_at` wrappers.
///
/// # Safety
/// `fcinfo` holds `_rate_credit_at`'s five arguments.
unsafe fn rate_credit_at(
    fcinfo: pg_sys::FunctionCallInfo,
    dkey: Option<DistributionValue>,
) -> pg_sys::Datum {
    match credit_at(
        dkey,
        pg_getarg::<&[u8]>(fcinfo, 1),
        pg_getarg::<&[u8]>(fcinfo, 2),
        pg_getarg::<f64>(fcinfo, 3),
        pg_getarg::<PgHeapTuple<'_, AllocatedByRust>>(fcinfo, 4),
    ) {
        Ok(value) => value.into_datum().unwrap_or(pg_sys::Datum::from(0)),
        Err(error) => report(error),
    }
}

/// What this transaction consumed where, for [`two_phase_commit_if_needed`].
#[derive(Default)]
struct Writes {
    /// The distribution value of a row written directly on this node.
    here: Option<DistributionValue>,
    /// Whether a row on another node was consumed (through Citus).
    elsewhere: bool,
    /// Whether Citus was told that this node's writes need 2PC.
    told: bool,
}

thread_local! {
    static WRITES: RefCell<Writes> = RefCell::new(Writes::default());
}

/// Forgets what the ending transaction wrote.
#[pg_guard]
unsafe extern "C-unwind" fn at_transaction_end(
    event: pg_sys::XactEvent::Type,
    _argument: *mut std::ffi::c_void,
) {
    if matches!(
        event,
        pg_sys::XactEvent::XACT_EVENT_COMMIT
            | pg_sys::XactEvent::XACT_EVENT_ABORT
            | pg_sys::XactEvent::XACT_EVENT_PREPARE
            | pg_sys::XactEvent::XACT_EVENT_PARALLEL_COMMIT
            | pg_sys::XactEvent::XACT_EVENT_PARALLEL_ABORT
    ) {
        WRITES.with(|writes| writes.take());
        crate::clock::forget_callers_override();
    }
}

/// After a subtransaction rolled back: Citus may have been told inside it
/// (its statement is rolled back with it), so the next write tells it
/// again. (What was written here and elsewhere is kept as noted: at worst
/// one more 2PC than needed.)
#[pg_guard]
unsafe extern "C-unwind" fn at_subtransaction_abort(
    event: pg_sys::SubXactEvent::Type,
    _subtransaction: pg_sys::SubTransactionId,
    _parent: pg_sys::SubTransactionId,
    _argument: *mut std::ffi::c_void,
) {
    if event == pg_sys::SubXactEvent::SUBXACT_EVENT_ABORT_SUB {
        WRITES.with(|writes| writes.borrow_mut().told = false);
    }
}

/// Called once when the library is loaded: forget each transaction's
/// writes at its end, and that Citus was told after a subtransaction
/// rolled back.
pub fn register() {
    // SAFETY: registering callbacks that live as long as the library.
    unsafe {
        pg_sys::RegisterXactCallback(Some(at_transaction_end), std::ptr::null_mut());
        pg_sys::RegisterSubXactCallback(Some(at_subtransaction_abort), std::ptr::null_mut());
    }
}

/// A statement that changes nothing, routed to this node's shard of `$1`:
/// Citus runs it with local execution, which makes a transaction that
/// also wrote on other nodes commit everywhere with two-phase commit.
/// (Citus cannot see the direct writes: without it, the other nodes would
/// commit before this one, each on its own.)
const TELL_CITUS: &str = "DELETE FROM rate_limiter.rate_limits WHERE dkey = $1 AND shard = -1";

/// Notes a direct write on this node (`dkey` its row's value) or a
/// consumption on another node, and once a transaction has both, runs
/// [`TELL_CITUS`] (once). A transaction that consumed on one node only
/// (a tenant's colocated rows) stays one-phase.
fn wrote(here: Option<&DistributionValue>) -> Result<(), CallError> {
    let dkey = WRITES.with(|writes| {
        let mut writes = writes.borrow_mut();
        match here {
            Some(dkey) if writes.here.is_none() => writes.here = Some(dkey.clone()),
            Some(_) => {}
            None => writes.elsewhere = true,
        }
        if writes.told || !writes.elsewhere {
            return None;
        }
        let dkey = writes.here.clone()?;
        writes.told = true;
        Some(dkey)
    });
    if let Some(dkey) = dkey {
        crate::security::as_owner(|| {
            Spi::connect_mut(|client| {
                client
                    .update(TELL_CITUS, None, &[dkey.argument()])
                    .map(|_| ())
            })
        })?;
    }
    Ok(())
}

// After the macros it uses.
pub mod all_or_nothing;
