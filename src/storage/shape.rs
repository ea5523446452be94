//! The fail-closed checks of the direct writes (docs/guarantees.md, "What
//! fails closed"): the table and its indexes must still have the shape the
//! direct writes assume, since they stand in for the executor
//! (`nodeModifyTable.c`, `execIndexing.c`), which would fire a trigger,
//! check a constraint or maintain an expression index where they cannot.
//! Each check raises 55000 naming what changed ([`altered`]).

use super::layout::{COLUMNS, EXTRA, KEY, KEY_COLUMNS, NAME, PREVIOUS, REGIME, SHARD};
use super::target::Target;
use crate::compat;
use pgrx::pg_sys;
use pgrx::prelude::*;

/// `heap` (`pg_am`): the only table access method the direct writes handle.
const HEAP_TABLE_ACCESS_METHOD: u32 = 2;

/// Column types of `rate_limiter.rate_limits`, in order.
const COLUMN_TYPES: [u32; COLUMNS] = [
    pg_sys::TEXTOID.to_u32(),
    pg_sys::TEXTOID.to_u32(),
    pg_sys::INT2OID.to_u32(),
    pg_sys::FLOAT8OID.to_u32(),
    pg_sys::TIMESTAMPTZOID.to_u32(),
    pg_sys::TEXTOID.to_u32(),
    pg_sys::INT8OID.to_u32(),
    pg_sys::FLOAT8OID.to_u32(),
];

/// Fails closed (55000): the table no longer has the shape the direct
/// writes assume; `what` says how.
pub(super) fn altered(what: &str) -> ! {
    ereport!(
        PgLogLevel::ERROR,
        PgSqlErrorCode::ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE,
        format!("rate_limiter.rate_limits has been altered: {what}"),
        "rate_limit() writes the table directly, as INSERT ... ON CONFLICT (name, key, shard) DO UPDATE would, but without firing triggers or rules, checking constraints or applying row-level security; it needs the columns (name text, key text, shard smallint, value float8, ts timestamptz, dkey text, bigint or uuid, regime bigint, prev float8), its unique index on (name, key, shard), and nothing else that a write would have to do."
    );
    unreachable!("an ERROR report does not return")
}

/// Whether `index` can arbitrate (name, key, shard) as the state table's
/// unique constraint does: unique with NULLS NOT DISTINCT, not deferrable,
/// on exactly the columns 1, 2, 3 in that order, without expressions or a
/// predicate (what `ON CONFLICT (name, key, shard)` would infer). A
/// stand-in's index has the columns 1, 2, 3, 6 (`target.rs`): the extra
/// column, a function of (name, key, shard), changes no conflict.
///
/// # Safety
/// `index` open.
pub(super) unsafe fn is_arbiter(index: pg_sys::Relation, table: pg_sys::Oid) -> bool {
    let form = (*index).rd_index;
    let columns =
        std::slice::from_raw_parts((*form).indkey.values.as_ptr(), (*form).indnatts as usize);
    (*form).indrelid == table
        && (*form).indisunique
        && (*form).indnullsnotdistinct
        && (*form).indimmediate
        && (columns == [1, 2, 3] || columns == [1, 2, 3, (EXTRA + 1) as i16])
        && (*form).indnkeyatts as usize == columns.len()
        && pg_sys::RelationGetIndexExpressions(index).is_null()
        && pg_sys::RelationGetIndexPredicate(index).is_null()
}

/// Whether the unique (name, key, shard) index `index` compares keys as
/// their bytes, as the direct writes and lookups assume: a btree whose
/// text columns use the default text operators (`text_ops`) with a
/// deterministic collation, and whose shard column uses the integer ones.
/// Another collation or operator class could make two distinct keys equal
/// (a nondeterministic ICU collation does), so a speculative insert would
/// be withdrawn over and over.
///
/// # Safety
/// `index` open.
pub(super) unsafe fn has_bytewise_equality(index: pg_sys::Relation) -> bool {
    const TEXT_BTREE_FAMILY: u32 = 1994; // text_ops
    const INTEGER_BTREE_FAMILY: u32 = 1976; // integer_ops (int2, int4, int8)
    const UUID_BTREE_FAMILY: u32 = 2968; // uuid_ops
    const BTREE: u32 = 403;
    if (*(*index).rd_rel).relam.to_u32() != BTREE {
        return false;
    }
    let count = (*(*index).rd_index).indnkeyatts as usize;
    let families = std::slice::from_raw_parts((*index).rd_opfamily, count);
    let collations = std::slice::from_raw_parts((*index).rd_indcollation, count);
    // "C" (the columns' own collation) is built in and deterministic: no
    // catalog look-up for it (pg_collation.dat).
    let text_bytewise = |column: usize| {
        let collation = collations[column];
        families[column].to_u32() == TEXT_BTREE_FAMILY
            && collation != pg_sys::InvalidOid
            && (collation == pg_sys::C_COLLATION_OID
                || pg_sys::get_collation_isdeterministic(collation))
    };
    // A fourth column is the extra column (is_arbiter): text like name and
    // key, or bigint, or uuid (both compared as their bytes by their btree
    // ops).
    families[SHARD].to_u32() == INTEGER_BTREE_FAMILY
        && text_bytewise(NAME)
        && text_bytewise(KEY)
        && (count == KEY_COLUMNS
            || text_bytewise(KEY_COLUMNS)
            || families[KEY_COLUMNS].to_u32() == INTEGER_BTREE_FAMILY
            || families[KEY_COLUMNS].to_u32() == UUID_BTREE_FAMILY)
}

/// Checks the table of a write: the expected columns (the extra column
/// NULL-able in the state table itself, regime and prev NULL-able), no trigger (foreign keys and
/// constraint triggers included), no rule, no CHECK constraint, no NOT
/// NULL on `key`, no row-level security, the `heap` table access method
/// (the writes are heap page writes), not a partition (its partition
/// constraint would go unchecked).
///
/// # Safety
/// `table` open and locked.
pub(super) unsafe fn check_table(table: pg_sys::Relation, target: Target) {
    let descriptor = (*table).rd_att;
    let columns = (*descriptor).natts as usize;
    // 0.6.0 added regime and prev together.
    if ![COLUMNS - 3, COLUMNS - 2, COLUMNS].contains(&columns) {
        altered("it does not have 8 columns (6 before version 0.6.0, 5 before 0.5.0)");
    }
    for (column, expected) in COLUMN_TYPES.iter().take(columns).enumerate() {
        let attribute = compat::attribute(descriptor, column);
        // The extra column is text, or bigint, integer or uuid (a
        // stand-in's may have any of these types).
        let type_id = (*attribute).atttypid.to_u32();
        let other_extra = column == EXTRA
            && (type_id == pg_sys::INT8OID.to_u32()
                || type_id == pg_sys::INT4OID.to_u32()
                || type_id == pg_sys::UUIDOID.to_u32());
        if (*attribute).attisdropped || (type_id != *expected && !other_extra) {
            altered("a column has a different type");
        }
    }
    if (*compat::attribute(descriptor, KEY)).attnotnull {
        altered("key is NOT NULL, but the global limit's key is NULL");
    }
    if columns > EXTRA
        && matches!(target, Target::StateTable)
        && (*compat::attribute(descriptor, EXTRA)).attnotnull
    {
        altered("dkey is NOT NULL, but it is NULL unless Citus distributes the table");
    }
    if columns > REGIME && (*compat::attribute(descriptor, REGIME)).attnotnull {
        altered("regime is NOT NULL, but it is NULL in the rows of a limit's definition");
    }
    if columns > PREVIOUS && (*compat::attribute(descriptor, PREVIOUS)).attnotnull {
        altered(
            "prev is NOT NULL, but it is NULL in every row whose previous window admitted nothing",
        );
    }
    if !(*table).trigdesc.is_null() {
        altered("it has triggers (or foreign keys), which rate_limit() would not fire");
    }
    if !(*table).rd_rules.is_null() {
        altered("it has rules, which rate_limit() would not apply");
    }
    let constraints = (*descriptor).constr;
    if !constraints.is_null() && (*constraints).num_check > 0 {
        altered("it has CHECK constraints, which rate_limit() would not check");
    }
    if (*(*table).rd_rel).relrowsecurity {
        altered("row-level security is enabled, which rate_limit() would not apply");
    }
    if (*(*table).rd_rel).relam.to_u32() != HEAP_TABLE_ACCESS_METHOD {
        altered("its table access method is not heap, and rate_limit() writes heap pages");
    }
    if (*(*table).rd_rel).relispartition {
        altered("it is a partition of a partitioned table, whose partition constraint rate_limit() would not check");
    }
}

/// Checks an index of the table other than the one the call searches: a
/// further unique (name, key, shard) index that compares them as bytes
/// (it arbitrates like the main one), or a plain column index that is not
/// unique, not an exclusion constraint, not on expressions, without a
/// predicate and not deferrable.
///
/// # Safety
/// `index` and `table` open and locked.
pub(super) unsafe fn check_other_index(index: pg_sys::Relation, table: pg_sys::Relation) {
    let form = (*index).rd_index;
    if is_arbiter(index, (*table).rd_id) {
        if !has_bytewise_equality(index) {
            altered("it has a unique (name, key, shard) index that does not compare them as bytes (another collation, operator class or access method)");
        }
        return;
    }
    if (*form).indisunique || (*form).indisexclusion {
        altered("it has a unique or exclusion index other than on (name, key, shard)");
    }
    if !pg_sys::RelationGetIndexExpressions(index).is_null()
        || !pg_sys::RelationGetIndexPredicate(index).is_null()
        || !(*form).indimmediate
    {
        altered("it has an index on expressions, with a predicate, or deferrable");
    }
}
