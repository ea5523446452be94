//! Which state table and unique index were last found to have the shape
//! the direct storage path needs (`relations.rs`: the arbiter index that
//! compares as bytes; for writing also the columns, no trigger, rule,
//! CHECK constraint, row-level security, partition, or index the writes
//! cannot maintain), so that the next call does not check again while
//! nothing changed.
//!
//! Everything those checks read comes from the relation cache, which
//! PostgreSQL changes only when it processes an invalidation; each
//! processed invalidation advances `crate::catalog::generation()` (the
//! relcache callback in `definitions.rs`). An answer remembered at one
//! generation is therefore still true at the same generation: `Relations`
//! asks after it has locked the relations, when every invalidation sent
//! before the lock was granted has been processed. Any other generation,
//! table, index or route checks again.

use pgrx::pg_sys;
use std::cell::RefCell;

/// One remembered check: which relations, at which generation, and for
/// writing the table's other indexes (`None`: checked for reading only).
struct Checked {
    generation: u64,
    table: pg_sys::Oid,
    index: pg_sys::Oid,
    routed: bool,
    others: Option<Vec<pg_sys::Oid>>,
}

thread_local! {
    /// The last check that passed in this backend.
    static CHECKED: RefCell<Option<Checked>> = const { RefCell::new(None) };
}

/// Whether `table` and `index` (`routed`: a cluster's shard relation)
/// passed the check for reading at the current generation.
pub fn for_reading(table: pg_sys::Oid, index: pg_sys::Oid, routed: bool) -> bool {
    let generation = crate::catalog::generation();
    CHECKED.with(|checked| {
        checked.borrow().as_ref().is_some_and(|c| {
            c.generation == generation && c.table == table && c.index == index && c.routed == routed
        })
    })
}

/// The other indexes of `table` when it passed the check for writing at
/// the current generation; `None` when it must be checked.
pub fn for_writing(
    table: pg_sys::Oid,
    index: pg_sys::Oid,
    routed: bool,
) -> Option<Vec<pg_sys::Oid>> {
    if !for_reading(table, index, routed) {
        return None;
    }
    CHECKED.with(|checked| checked.borrow().as_ref().and_then(|c| c.others.clone()))
}

/// Remembers that `table` and `index` passed the check for reading on
/// what the relation cache held at `generation`, read before the check
/// began (an invalidation processed during the check makes the next call
/// check again). Keeps a passed check for writing of the same relations.
pub fn passed_reading(generation: u64, table: pg_sys::Oid, index: pg_sys::Oid, routed: bool) {
    if for_reading(table, index, routed) {
        return;
    }
    remember(generation, table, index, routed, None);
}

/// Remembers that `table` and `index` passed the check for writing at
/// `generation` (as [`passed_reading`]), with `others`, the table's other
/// indexes.
pub fn passed_writing(
    generation: u64,
    table: pg_sys::Oid,
    index: pg_sys::Oid,
    routed: bool,
    others: Vec<pg_sys::Oid>,
) {
    remember(generation, table, index, routed, Some(others));
}

fn remember(
    generation: u64,
    table: pg_sys::Oid,
    index: pg_sys::Oid,
    routed: bool,
    others: Option<Vec<pg_sys::Oid>>,
) {
    CHECKED.with(|checked| {
        *checked.borrow_mut() = Some(Checked {
            generation,
            table,
            index,
            routed,
            others,
        })
    });
}
