//! Citus's metadata of the state table, read from its catalogs once per
//! invalidation (the shards' hash ranges and placements), the lock
//! Citus's writes take on a shard's metadata, and the shards placed on
//! this node.

use super::error::Error;
use super::value::{value_for, DistributionValue};
use crate::catalog;
use crate::errors::CallError;
use pgrx::pg_sys;
use pgrx::prelude::*;
use std::cell::RefCell;
use std::ffi::{CStr, CString};
use std::rc::Rc;

/// One shard of the state table: its hash range and where it is placed.
#[derive(Debug, Clone, Copy)]
pub(super) struct Shard {
    pub(super) min: i32,
    pub(super) max: i32,
    pub(super) id: i64,
    /// The shard of `rate_limiter.blocks` colocated with it (the same
    /// hash range, so the same placement), when the blocks are distributed.
    pub(super) blocks: Option<i64>,
    /// The group (node) of its placement; `None` unless it has exactly one
    /// (a copy being made, or none at all: calls fail closed).
    pub(super) group: Option<i32>,
}

/// How Citus distributes the state table, as read from its catalogs.
pub struct Distribution {
    pub(super) colocation_id: u32,
    /// The distribution column's type: `text`, `bigint`, `integer` or
    /// `uuid` (checked).
    pub(super) column_type: pg_sys::Oid,
    /// The distribution column's collation (none for bigint and uuid).
    pub(super) collation: pg_sys::Oid,
    /// Sorted by `min`: a shard's position is its index in Citus's
    /// sorted shard array, which the metadata lock's tag names.
    pub(super) shards: Vec<Shard>,
    /// Whether `rate_limiter.blocks` is distributed colocated with the
    /// state (docs/blocks.md, "Citus"; not on an install distributed
    /// before 0.6.0 until `distribute()` runs again).
    pub(super) blocks: bool,
    /// `pg_dist_local_group.groupid`: 0 on the coordinator (see
    /// [`Distribution::local_group`]).
    this_group: i32,
    /// Why calls must fail closed, when the tables are not distributed as
    /// `distribute()` distributes them.
    pub(super) problem: Option<&'static str>,
}

thread_local! {
    /// The distribution last read, and the catalog generation
    /// (`catalog::generation`) it was read at: it is used only while that
    /// generation lasts (a relcache invalidation, which Citus sends when a
    /// shard moves or splits, starts a new one).
    static DISTRIBUTION: RefCell<Option<(u64, Rc<Distribution>)>> = const { RefCell::new(None) };
}

/// Calls `visit` with a column reader for each row of the catalog
/// `pg_catalog.<name>` (none when it does not exist), read with the catalog
/// snapshot.
///
/// # Safety
/// In a transaction.
pub(super) unsafe fn each_row(
    name: &CStr,
    mut visit: impl FnMut(&dyn Fn(&CStr) -> Option<pg_sys::Datum>),
) {
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
pub(super) unsafe fn text(datum: pg_sys::Datum) -> String {
    String::from_datum(datum, false).unwrap_or_default()
}

/// The problem of a worker whose own table carries the distributed marker
/// (`catalog::DISTRIBUTED_MARKER`) while its Citus metadata lists neither
/// table.
const NO_METADATA: &str = "this node's rate_limiter.rate_limits belongs to a table that rate_limiter.distribute() distributed, but this node has no Citus metadata for it (was stop_metadata_sync_to_node run for it?)";

/// The problem of a node of a distributed install where the library was
/// not loaded at server start.
const NOT_PRELOADED: &str = "rate_limiter is not in shared_preload_libraries on this node, and a distributed install needs it loaded at server start (its planner check keeps NULL distribution arguments from Citus)";

/// Reads how Citus distributes `table` (the state table), `definitions`
/// and `blocks`; `None` when it distributes neither of the first two.
pub(super) unsafe fn read(
    table: pg_sys::Oid,
    definitions: pg_sys::Oid,
    blocks: pg_sys::Oid,
) -> Option<Distribution> {
    let mut state = None;
    let mut definitions_method = None;
    let mut blocks_colocation = None;
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
        } else if relation == Some(blocks) && blocks != pg_sys::InvalidOid && method == Some(b'h') {
            blocks_colocation = column(c"colocationid").map(|d| d.value() as u32);
        }
    });
    let marked = catalog::objects().marked;
    if state.is_none() && definitions_method.is_none() && !marked {
        return None;
    }
    let mut distribution = Distribution {
        colocation_id: 0,
        column_type: pg_sys::TEXTOID,
        collation: pg_sys::InvalidOid,
        shards: Vec::new(),
        blocks: false,
        this_group: 0,
        problem: None,
    };
    if !super::preloaded() {
        distribution.problem = Some(NOT_PRELOADED);
        return Some(distribution);
    }
    each_row(c"pg_dist_local_group", |column| {
        if let Some(group) = column(c"groupid") {
            distribution.this_group = group.value() as i32;
        }
    });
    let dkey_column = pg_sys::get_attnum(table, c"dkey".as_ptr());
    let Some((Some(b'h'), Some(key), Some(colocation), Some(b's'))) = state else {
        distribution.problem = Some(if state.is_none() && definitions_method.is_none() {
            NO_METADATA
        } else if state.is_none() {
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
        || ((*var).vartype != pg_sys::TEXTOID
            && (*var).vartype != pg_sys::INT8OID
            && (*var).vartype != pg_sys::INT4OID
            && (*var).vartype != pg_sys::UUIDOID)
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
    distribution.blocks = blocks_colocation == Some(colocation);
    let mut shards = Vec::new();
    // (min, id) of each shard of the blocks, when colocated.
    let mut blocks_shards: Vec<(i32, i64)> = Vec::new();
    each_row(c"pg_dist_shard", |column| {
        let relation = column(c"logicalrelid").and_then(|d| pg_sys::Oid::from_datum(d, false));
        if relation != Some(table) && (!distribution.blocks || relation != Some(blocks)) {
            return;
        }
        let bound = |name: &CStr| column(name).and_then(|d| text(d).parse::<i32>().ok());
        if let (Some(id), Some(min), Some(max)) = (
            column(c"shardid").map(|d| d.value() as i64),
            bound(c"shardminvalue"),
            bound(c"shardmaxvalue"),
        ) {
            if relation == Some(blocks) {
                blocks_shards.push((min, id));
                return;
            }
            shards.push(Shard {
                min,
                max,
                id,
                blocks: None,
                group: None,
            });
        }
    });
    for shard in &mut shards {
        shard.blocks = blocks_shards
            .iter()
            .find(|(min, _)| *min == shard.min)
            .map(|(_, id)| *id);
    }
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
    let objects = catalog::objects();
    let generation = catalog::generation();
    let cached = DISTRIBUTION.with(|cell| cell.borrow().clone());
    if let Some((read_at, distribution)) = cached {
        if read_at == generation {
            return Some(distribution);
        }
    }
    if !objects.elsewhere {
        return None;
    }
    // SAFETY: catalog reads in a transaction.
    let distribution =
        Rc::new(unsafe { read(objects.table, objects.definitions, objects.blocks) }?);
    DISTRIBUTION.with(|cell| cell.replace(Some((generation, distribution.clone()))));
    Some(distribution)
}

/// [`distribution`] for a call that found the tables distributed: 55000
/// when they no longer are (an `undistribute()` committed meanwhile).
pub(super) fn current_distribution() -> Result<Rc<Distribution>, CallError> {
    distribution().ok_or_else(|| {
        CallError::from(Error::Unusable(
            "rate_limiter.rate_limits is no longer distributed".into(),
            "Retry the call.",
        ))
    })
}

/// The error of a call that storage was asked to make on a distributed
/// install without a route: 55000 if the tables are not distributed as
/// `distribute()` distributes them, else 0A000 (a function that does not
/// run on a distributed install yet). `None` when not distributed.
pub fn unsupported() -> Option<CallError> {
    let distribution = distribution()?;
    Some(match distribution.check() {
        Err(error) => error,
        Ok(()) => CallError::from(Error::NotOnCluster("this function")),
    })
}

/// Where the row with distribution value `dkey` lives.
#[derive(Debug, Clone, Copy)]
pub(super) struct Place {
    /// Position in the sorted shard array (the metadata lock's tag).
    pub(super) index: usize,
    pub(super) shard: i64,
    pub(super) group: i32,
}

impl Distribution {
    /// The group (node) whose shards a call reads and writes directly:
    /// this node's (`pg_dist_local_group.groupid`, 0 on the coordinator).
    /// (A call with `citus.enable_local_execution = off` fails before it
    /// gets here: see `shard_query::usable`.)
    pub(super) fn local_group(&self) -> i32 {
        self.this_group
    }

    /// Fails closed (55000) unless the tables are distributed as
    /// `distribute()` distributes them.
    pub(super) fn check(&self) -> Result<(), CallError> {
        match self.problem {
            None => Ok(()),
            Some(problem) if problem == NOT_PRELOADED => Err(CallError::from(Error::Unusable(
                format!("rate_limiter cannot use its tables: {problem}"),
                "Set shared_preload_libraries = 'citus,rate_limiter' on this node and restart it (SELECT rate_limiter.prepare_node(...) on the coordinator checks a node before citus_add_node()).",
            ))),
            Some(problem) if problem == NO_METADATA => Err(CallError::from(Error::Unusable(
                format!("rate_limiter cannot use its tables: {problem}"),
                "If rate_limiter.distribute() failed, call it again (or undistribute()) on the coordinator. If this node lost Citus's metadata, call the limiter on the coordinator, or sync it again there: SELECT start_metadata_sync_to_node('<this node>', <port>);",
            ))),
            Some(problem) => Err(CallError::from(Error::Unusable(
                format!("rate_limiter cannot use its tables: {problem}"),
                "Distribute them with rate_limiter.distribute() only: on the coordinator, SELECT rate_limiter.undistribute(); then SELECT rate_limiter.distribute();",
            ))),
        }
    }

    /// The shard of `dkey`, as Citus finds it: the hash of the value (the
    /// type's hash function, with the column's collation) falls in one
    /// shard's [min, max] range.
    pub(super) fn place(&self, dkey: &DistributionValue) -> Result<Place, CallError> {
        self.check()?;
        if dkey.type_oid() != self.column_type {
            return Err(CallError::from(Error::Unusable(
                "rate_limiter.rate_limits's distribution column changed type during the call"
                    .into(),
                "Retry the transaction.",
            )));
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
                CallError::from(Error::Unusable(
                    "rate_limiter.rate_limits has no shard for a hash value (its shards do not cover every value)".into(),
                    "Check pg_dist_shard for rate_limiter.rate_limits: a split or move may be unfinished.",
                ))
            })?;
        let shard = self.shards[index];
        let group = shard.group.ok_or_else(|| {
            CallError::from(Error::Unusable(
                format!("shard {} of rate_limiter.rate_limits does not have exactly one placement", shard.id),
                "A shard copy or move may be unfinished (citus_rebalance_status(), pg_dist_placement); the limiter needs one placement per shard.",
            ))
        })?;
        Ok(Place {
            index,
            shard: shard.id,
            group,
        })
    }
}

/// Citus's lock on the metadata of the colocated shards at `index`
/// (`LockShardDistributionMetadata`: an advisory lock tag with class 8),
/// in `mode`, until the transaction ends.
pub(super) fn lock_shard_metadata(colocation_id: u32, index: usize, mode: u32) {
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
    let distribution = current_distribution()?;
    distribution.check()?;
    let generation = catalog::generation();
    let objects = catalog::objects();
    let mut tables = Vec::new();
    for (index, shard) in distribution.shards.iter().enumerate() {
        if shard.group != Some(distribution.local_group()) {
            continue;
        }
        lock_shard_metadata(distribution.colocation_id, index, pg_sys::ShareLock);
        let name = format!("rate_limits_{}", shard.id);
        let relation_name = CString::new(name.as_str()).unwrap_or_default();
        // SAFETY: a catalog cache lookup.
        let table = unsafe { pg_sys::get_relname_relid(relation_name.as_ptr(), objects.schema) };
        if table == pg_sys::InvalidOid {
            return Err(CallError::from(Error::Unusable(
                format!(
                    "shard {} of rate_limiter.rate_limits is placed on this node, but its table is missing",
                    shard.id
                ),
                "Check the shard with citus_shards and pg_dist_placement.",
            )));
        }
        tables.push(format!("rate_limiter.{name}"));
    }
    // SAFETY: processes pending invalidations (a move that committed while
    // this call waited for a lock).
    unsafe { pg_sys::AcceptInvalidationMessages() };
    if catalog::generation() != generation {
        return Err(CallError::from(Error::Unusable(
            "Citus's metadata for rate_limiter.rate_limits changed during prune()".into(),
            "Retry (a shard move or split was under way).",
        )));
    }
    Ok(tables)
}

/// The shards of `rate_limiter.blocks` placed on this node (when the blocks
/// are distributed), as qualified relation names, for `prune` after
/// [`local_shards`] (whose metadata locks cover them: they are colocated).
///
/// Errors: 55000 as [`local_shards`].
pub fn local_blocks_shards() -> Result<Vec<String>, CallError> {
    let distribution = current_distribution()?;
    if !distribution.blocks {
        return Ok(Vec::new());
    }
    Ok(distribution
        .shards
        .iter()
        .filter(|shard| shard.group == Some(distribution.local_group()))
        .filter_map(|shard| shard.blocks)
        .map(|id| format!("rate_limiter.blocks_{id}"))
        .collect())
}

/// The value of the distribution column `dkey` of the row (name, key,
/// shard), for the column's type as Citus distributes the table now (text
/// when it is not distributed): see [`value_for`].
///
/// Errors: 22P02 for a key the column's type cannot hold.
pub fn distribution_value(
    name: &[u8],
    key: Option<&[u8]>,
    shard: i16,
) -> Result<DistributionValue, CallError> {
    let column_type = distribution().map_or(pg_sys::TEXTOID, |d| d.column_type);
    value_for(column_type, name, key, shard)
}

/// Fails (55000) unless `rate_limiter.overrides` is a reference table:
/// on an install distributed before 0.6.0 and updated since, the table is
/// the coordinator's own until `distribute()` runs again, and an override
/// written there would reach no worker's calls.
pub(super) fn overrides_distributed() -> Result<(), CallError> {
    let distributed = Spi::connect(|client| {
        client
            .select(
                "SELECT EXISTS (SELECT FROM pg_catalog.pg_dist_partition \
                 WHERE logicalrelid = 'rate_limiter.overrides'::pg_catalog.regclass AND partmethod = 'n')",
                Some(1),
                &[],
            )?
            .first()
            .get_one::<bool>()
    })?;
    if distributed == Some(true) {
        return Ok(());
    }
    Err(CallError::from(super::error::Error::Unusable(
        "rate_limiter.overrides is not a reference table of this cluster: an override written now would reach only this node's calls".into(),
        "Call SELECT rate_limiter.distribute(); on the coordinator once more (after ALTER EXTENSION rate_limiter UPDATE it makes the overrides a reference table), then retry.",
    )))
}
