//! The equality scan keys of a lookup in the state table's unique index,
//! `(name, key, shard)`: what `ScanKeyEntryInitialize` (PostgreSQL's
//! `access/common/scankey.c`, the same in 15 to 18) makes, built here
//! without calling it.
//!
//! Every call of `rate_limit` and `rate_check` searches the index once,
//! and `ScanKeyEntryInitialize` looks the equality function up again for
//! each key (`fmgr_info`). Here each of the three is looked up once per
//! backend and copied into the key as `fmgr_info_copy` copies one (the
//! copy's `fn_extra` empty, its `fn_mcxt` the current memory context).
//! The functions are built-in (`texteq`, `int2eq`: their OIDs are fixed
//! in PostgreSQL's catalog), so the lookup never changes.

use super::layout::{Datums, KEY_COLUMNS};
use pgrx::pg_sys;
use std::cell::OnceCell;

/// The equality function of each key column: name and key are `text`,
/// shard is `smallint` (sql/schema.sql).
const EQUAL: [u32; KEY_COLUMNS] = [pg_sys::F_TEXTEQ, pg_sys::F_TEXTEQ, pg_sys::F_INT2EQ];

thread_local! {
    /// `EQUAL`'s functions looked up (`fmgr_info`), once per backend.
    static EQUAL_FUNCTIONS: OnceCell<[pg_sys::FmgrInfo; KEY_COLUMNS]> = const { OnceCell::new() };
}

/// `EQUAL`'s functions looked up.
fn look_up_equal_functions() -> [pg_sys::FmgrInfo; KEY_COLUMNS] {
    // SAFETY: FmgrInfo is plain data that fmgr_info_cxt fills in; a
    // built-in function allocates nothing in the context.
    unsafe {
        let mut functions: [pg_sys::FmgrInfo; KEY_COLUMNS] = std::mem::zeroed();
        for (function, oid) in functions.iter_mut().zip(EQUAL) {
            pg_sys::fmgr_info_cxt(pg_sys::Oid::from(oid), function, pg_sys::TopMemoryContext);
        }
        functions
    }
}

/// Equality scan keys on (name, key, shard) for `datums`, with the
/// collations of `index` (the unique index): as `ScanKeyEntryInitialize`
/// makes them with `BTEqualStrategyNumber` and each column's equality
/// function; a NULL key searches for the NULL entry (`SK_ISNULL |
/// SK_SEARCHNULL`, no function). A scan may use the first two only: every
/// shard of (name, key).
///
/// # Safety
/// `index` is the state table's open unique index, whose first
/// `KEY_COLUMNS` columns are name, key and shard.
pub(super) unsafe fn scan_keys(
    index: pg_sys::Relation,
    datums: &Datums,
) -> [pg_sys::ScanKeyData; KEY_COLUMNS] {
    // All zero: what scankey.c leaves in the fields it does not set
    // (sk_subtype InvalidOid, a NULL search's sk_func).
    let mut keys: [pg_sys::ScanKeyData; KEY_COLUMNS] = std::mem::zeroed();
    EQUAL_FUNCTIONS.with(|functions| {
        let functions = functions.get_or_init(look_up_equal_functions);
        for (column, key) in keys.iter_mut().enumerate() {
            key.sk_attno = (column + 1) as pg_sys::AttrNumber;
            if datums.nulls[column] {
                key.sk_flags = (pg_sys::SK_ISNULL | pg_sys::SK_SEARCHNULL) as i32;
                continue;
            }
            key.sk_strategy = pg_sys::BTEqualStrategyNumber as pg_sys::StrategyNumber;
            key.sk_collation = *(*index).rd_indcollation.add(column);
            key.sk_func = functions[column];
            key.sk_func.fn_extra = std::ptr::null_mut();
            key.sk_func.fn_mcxt = pg_sys::CurrentMemoryContext;
            key.sk_argument = datums.values[column];
        }
    });
    keys
}
