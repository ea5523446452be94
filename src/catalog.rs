//! The extension's own catalog objects, looked up once per backend and
//! forgotten on every relcache invalidation (the extension may have been
//! dropped and created again): the schema, the state table and its unique
//! index, the role that owns them, and whether Citus distributes the table.
//! A generation counter tells callers that locked the relations whether an
//! invalidation arrived meanwhile (look up, lock, re-check).

use pgrx::pg_sys;
use pgrx::prelude::*;
use std::cell::Cell;

/// OIDs of the extension's objects in this database.
#[derive(Clone, Copy)]
pub struct Objects {
    /// The schema `rate_limiter`.
    pub schema: pg_sys::Oid,
    /// `rate_limiter.rate_limits`.
    pub table: pg_sys::Oid,
    /// Its unique index on (name, key, shard) (on (name, key, shard, dkey)
    /// once `rate_limiter.distribute()` made it a distributed table).
    pub index: pg_sys::Oid,
    /// `rate_limiter.definitions` (invalid if missing).
    pub definitions: pg_sys::Oid,
    /// `rate_limiter.overrides` and its primary key (0.6.0 and later;
    /// invalid if missing: then no key has an override).
    pub overrides: pg_sys::Oid,
    pub overrides_index: pg_sys::Oid,
    /// The hash index on `overrides.key`, which a call probes (invalid if
    /// missing: the primary key then).
    pub overrides_key_index: pg_sys::Oid,
    /// `rate_limiter.blocks` and its unique index on (name, key) (0.6.0 and
    /// later; invalid if missing: then no key is blocked).
    pub blocks: pg_sys::Oid,
    pub blocks_index: pg_sys::Oid,
    /// `rate_limiter.composites` (0.6.0 and later; invalid if missing:
    /// then no name is a composite).
    pub composites: pg_sys::Oid,
    /// `rate_limiter.leases`, the timed leases of concurrency limits
    /// (0.6.0 and later; invalid if missing: then there are none).
    pub leases: pg_sys::Oid,
    /// The owner of the table: the role the functions act as.
    pub owner: pg_sys::Oid,
    /// `rate_limiter.define(text, rate_limiter.config, boolean)` (before
    /// 0.4.0: `define(text, rate_limiter.config)`): who may call it may
    /// also override a definition with an inline config.
    pub define: pg_sys::Oid,
    /// Whether `rate_limiter.definitions` has the column `enforce` (0.4.0
    /// and later): until `ALTER EXTENSION rate_limiter UPDATE`, the library
    /// works with an older version's tables, where every limit enforces.
    pub enforce_column: bool,
    /// Whether `rate_limiter.rate_limits` has the column `regime` (0.6.0
    /// and later; see `storage::RowId::regime`).
    pub regime_column: bool,
    /// The composite type `rate_limiter.config` (invalid if missing).
    pub config_type: pg_sys::Oid,
    /// The composite type `rate_limiter.request` (invalid if missing).
    pub request_type: pg_sys::Oid,
    /// Whether the state table's rows are stored elsewhere, in relations
    /// a cluster keeps: Citus lists the state table or the definitions in
    /// `pg_catalog.pg_dist_partition`, or the table carries
    /// [`DISTRIBUTED_MARKER`]. Then calls go where the cluster installed in
    /// `crate::placement` says, and storage fails closed on the table
    /// itself.
    pub elsewhere: bool,
    /// Whether the table carries [`DISTRIBUTED_MARKER`].
    pub marked: bool,
}

/// The name of the constraint `rate_limiter.distribute()` adds to each
/// worker's own copy of the state table (`CHECK (false) NOT VALID`, which
/// no call's direct write would check, so that a call fails closed before
/// it writes there): the table belongs to a distributed table, also when
/// the node has lost Citus's metadata for it (`stop_metadata_sync_to_node`),
/// so a call there fails closed instead of writing the node's own table.
pub const DISTRIBUTED_MARKER: &std::ffi::CStr = c"rate_limits_distributed";

thread_local! {
    static OBJECTS: Cell<Option<Objects>> = const { Cell::new(None) };
    static GENERATION: Cell<u64> = const { Cell::new(0) };
}

/// Forgets the looked-up objects; called on every relcache invalidation.
pub fn forget() {
    OBJECTS.with(|objects| objects.set(None));
    GENERATION.with(|generation| generation.set(generation.get().wrapping_add(1)));
}

/// How many times the objects were forgotten: unchanged across a stretch
/// of code means no invalidation was processed in it.
pub fn generation() -> u64 {
    GENERATION.with(Cell::get)
}

/// Whether Citus distributes `table` or `definitions`: Citus keeps its
/// distributed tables in `pg_catalog.pg_dist_partition`; without that
/// table (no Citus) this is one catalog cache lookup, done once per
/// invalidation.
fn distributed(table: pg_sys::Oid, definitions: pg_sys::Oid) -> bool {
    // SAFETY: a catalog cache lookup.
    let catalog = unsafe {
        pg_sys::get_relname_relid(
            c"pg_dist_partition".as_ptr(),
            pg_sys::Oid::from(pg_sys::PG_CATALOG_NAMESPACE),
        )
    };
    if catalog == pg_sys::InvalidOid {
        return false;
    }
    // Fail closed: if the catalog cannot be read, treat it as distributed.
    // A read-only statement (`Spi::connect` + `select`), as in `function`:
    // `Spi::get_one_with_args` would assign the caller's transaction an id,
    // and on a Citus coordinator a call whose transaction has one is no
    // longer its transaction's only work (see docs/citus-design.md), so the
    // first call after any relcache invalidation reached its worker in a
    // transaction block instead of one round trip.
    Spi::connect(|client| {
        client
            .select(
                "SELECT EXISTS (SELECT FROM pg_catalog.pg_dist_partition WHERE logicalrelid::pg_catalog.oid IN ($1, $2))",
                Some(1),
                &[table.into(), definitions.into()],
            )?
            .first()
            .get_one::<bool>()
    })
    .ok()
    .flatten()
    .unwrap_or(true)
}

/// The OID of `rate_limiter.define(text, rate_limiter.config, boolean)`, or
/// of an older version's `define(text, rate_limiter.config)`; invalid when
/// both are missing (then nobody may override a definition).
fn define_function() -> pg_sys::Oid {
    [
        "rate_limiter.define(pg_catalog.text, rate_limiter.config, pg_catalog.bool)",
        "rate_limiter.define(pg_catalog.text, rate_limiter.config)",
    ]
    .into_iter()
    .map(function)
    .find(|&oid| oid != pg_sys::InvalidOid)
    .unwrap_or(pg_sys::InvalidOid)
}

/// The OID of the function `signature` (a schema-qualified
/// `regprocedure` text), invalid when there is none (or the lookup
/// failed). A read-only statement (`Spi::connect` + `select`):
/// `Spi::get_one` would assign a transaction id, which a hot standby
/// cannot do.
pub fn function(signature: &str) -> pg_sys::Oid {
    Spi::connect(|client| {
        client
            .select(
                "SELECT pg_catalog.to_regprocedure($1)::pg_catalog.oid",
                Some(1),
                &[signature.into()],
            )?
            .first()
            .get_one::<pg_sys::Oid>()
    })
    .ok()
    .flatten()
    .unwrap_or(pg_sys::InvalidOid)
}

/// The OID of the type `name` in the schema `schema` (one catalog cache
/// lookup), invalid if there is none.
fn type_in(name: &std::ffi::CStr, schema: pg_sys::Oid) -> pg_sys::Oid {
    // SAFETY: a catalog cache lookup by (name, namespace).
    unsafe {
        pg_sys::GetSysCacheOid(
            pg_sys::SysCacheIdentifier::TYPENAMENSP as i32,
            pg_sys::Anum_pg_type_oid as pg_sys::AttrNumber,
            pg_sys::Datum::from(name.as_ptr()),
            pg_sys::Datum::from(schema),
            pg_sys::Datum::from(0),
            pg_sys::Datum::from(0),
        )
    }
}

/// Lookups before giving up when the catalog keeps changing under them.
const LOOKUPS: usize = 3;

/// The extension's objects; raises an ERROR if they are missing: 3F000
/// without the schema, 42P01 without the table or its index.
///
/// A look-up can process invalidations itself (opening a catalog, or the
/// table, takes a lock, and a new lock accepts the pending invalidations):
/// then the OIDs found before them may be stale (REINDEX CONCURRENTLY's old
/// index, dropped meanwhile), and the look-up is not kept but made again.
/// If the catalog keeps changing, the last look-up is returned uncached;
/// a caller that read [`generation`] before calling this sees it moved.
pub fn objects() -> Objects {
    if let Some(objects) = OBJECTS.with(Cell::get) {
        return objects;
    }
    let mut objects = look_up();
    for _ in 1..LOOKUPS {
        if OBJECTS.with(Cell::get).is_some() {
            break; // kept: no invalidation arrived while it ran
        }
        objects = look_up();
    }
    objects
}

/// One look-up of the objects, kept (cached until the next invalidation)
/// only if no invalidation arrived while it ran.
fn look_up() -> Objects {
    let before = generation();
    // SAFETY: catalog lookups; get_namespace_oid raises an ERROR if the
    // schema is missing, and the other misses are checked.
    let found = unsafe {
        (0..LOOKUPS).find_map(|attempt| {
            if attempt > 0 {
                // A concurrent DROP or CREATE EXTENSION: catch up.
                pg_sys::AcceptInvalidationMessages();
            }
            let schema = pg_sys::get_namespace_oid(c"rate_limiter".as_ptr(), false);
            let table = pg_sys::get_relname_relid(c"rate_limits".as_ptr(), schema);
            let index = [
                c"rate_limits_name_key_shard_key",
                c"rate_limits_name_key_shard_dkey_key",
            ]
            .iter()
            .map(|name| pg_sys::get_relname_relid(name.as_ptr(), schema))
            .find(|&index| index != pg_sys::InvalidOid)
            .unwrap_or(pg_sys::InvalidOid);
            if table == pg_sys::InvalidOid || index == pg_sys::InvalidOid {
                return None;
            }
            let tuple = pg_sys::SearchSysCache1(
                pg_sys::SysCacheIdentifier::RELOID as i32,
                pg_sys::Datum::from(table),
            );
            if tuple.is_null() {
                return None;
            }
            let owner = (*(pg_sys::GETSTRUCT(tuple) as pg_sys::Form_pg_class)).relowner;
            pg_sys::ReleaseSysCache(tuple);
            let definitions = pg_sys::get_relname_relid(c"definitions".as_ptr(), schema);
            let overrides = pg_sys::get_relname_relid(c"overrides".as_ptr(), schema);
            let overrides_index = pg_sys::get_relname_relid(c"overrides_pkey".as_ptr(), schema);
            let overrides_key_index = pg_sys::get_relname_relid(c"overrides_key".as_ptr(), schema);
            let blocks = pg_sys::get_relname_relid(c"blocks".as_ptr(), schema);
            let blocks_index = pg_sys::get_relname_relid(c"blocks_name_key".as_ptr(), schema);
            let composites = pg_sys::get_relname_relid(c"composites".as_ptr(), schema);
            let leases = pg_sys::get_relname_relid(c"leases".as_ptr(), schema);
            let regime_column = pg_sys::get_attnum(table, c"regime".as_ptr()) > 0;
            let enforce_column = definitions != pg_sys::InvalidOid
                && pg_sys::get_attnum(definitions, c"enforce".as_ptr()) > 0;
            // Whether the table carries DISTRIBUTED_MARKER: its relcache
            // entry lists its CHECK constraints (valid or not) by name. The
            // lock is the least a call takes on the table anyway, kept until
            // the transaction ends; a table dropped meanwhile (a concurrent
            // DROP EXTENSION) is looked up again. try_relation_open returns
            // NULL for a relation that is gone.
            let relation =
                pg_sys::try_relation_open(table, pg_sys::AccessShareLock as pg_sys::LOCKMODE);
            if relation.is_null() {
                return None;
            }
            let constraints = (*(*relation).rd_att).constr;
            let marked = !constraints.is_null()
                && (0..usize::from((*constraints).num_check)).any(|index| {
                    let check = (*constraints).check.add(index);
                    !(*check).ccname.is_null()
                        && std::ffi::CStr::from_ptr((*check).ccname) == DISTRIBUTED_MARKER
                });
            pg_sys::relation_close(relation, pg_sys::NoLock as pg_sys::LOCKMODE);
            // The rest (types, define, whether a cluster stores the rows)
            // is looked up below, once the relations are known.
            Some(Objects {
                schema,
                table,
                index,
                definitions,
                overrides,
                overrides_index,
                overrides_key_index,
                blocks,
                blocks_index,
                composites,
                leases,
                owner,
                define: pg_sys::InvalidOid,
                enforce_column,
                regime_column,
                config_type: pg_sys::InvalidOid,
                request_type: pg_sys::InvalidOid,
                elsewhere: marked,
                marked,
            })
        })
    };
    let Some(mut objects) = found else {
        ereport!(
            PgLogLevel::ERROR,
            PgSqlErrorCode::ERRCODE_UNDEFINED_TABLE,
            "rate_limiter.rate_limits or its unique index is missing",
            "Is the extension installed (CREATE EXTENSION rate_limiter)?"
        );
        unreachable!("an ERROR report does not return")
    };
    objects.config_type = type_in(c"config", objects.schema);
    objects.request_type = type_in(c"request", objects.schema);
    objects.define = define_function();
    objects.elsewhere = objects.marked || distributed(objects.table, objects.definitions);
    if generation() == before {
        OBJECTS.with(|cell| cell.set(Some(objects)));
    }
    objects
}
