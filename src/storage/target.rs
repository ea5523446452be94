//! Where a storage call reads and writes a limit's rows: the state table
//! itself, or a relation of the same shape that stands in for it (the
//! layer that places calls finds it; storage only reads and writes what it
//! is given). Every storage function takes its [`Target`] as an argument.

use crate::errors::CallError;
use pgrx::pg_sys;
use std::cell::Cell;

/// The relation a storage call reads and writes.
#[derive(Debug, Clone, Copy)]
pub enum Target {
    /// `rate_limiter.rate_limits`, looked up in the catalog (cached per
    /// backend); the rows written leave its extra column (the sixth, after
    /// `ts`) NULL. When the table's rows are stored in other relations
    /// (`crate::catalog::Objects::elsewhere`), a call on it fails closed
    /// ([`elsewhere`]).
    StateTable,
    /// A relation standing in for the state table.
    StandIn(StandIn),
}

/// A relation of the state table's shape standing in for it: it holds
/// every row of a key, and of a global limit the shards placed in it (a
/// global limit with several shards may have them in several stand-ins:
/// a call lists them, `super::ShardPlaces::Listed`). While storage uses
/// it, the state table is locked too, as a query on the table would lock
/// it.
#[derive(Debug, Clone, Copy)]
pub struct StandIn {
    /// The relation, with the state table's columns.
    pub table: pg_sys::Oid,
    /// Its unique (name, key, shard) index, with the extra column as a
    /// fourth key column.
    pub index: pg_sys::Oid,
    /// The value of the extra column of every row written (of the
    /// column's type); it must stay valid while the target is in use.
    pub extra: pg_sys::Datum,
}

impl Target {
    /// The value written into the extra column: `None` (NULL) in the
    /// state table.
    pub fn extra(&self) -> Option<pg_sys::Datum> {
        match self {
            Target::StateTable => None,
            Target::StandIn(stand_in) => Some(stand_in.extra),
        }
    }
}

/// What explains a call on the state table when its rows are stored
/// elsewhere ([`explain_elsewhere_with`]).
type Explain = fn() -> CallError;

thread_local! {
    /// Set once at load by the layer that places calls.
    static ELSEWHERE: Cell<Option<Explain>> = const { Cell::new(None) };
}

/// Registers (once, at load) the error of a call that reached the state
/// table itself while its rows are stored in other relations.
pub fn explain_elsewhere_with(explain: Explain) {
    ELSEWHERE.with(|cell| cell.set(Some(explain)));
}

/// The error of a call on the state table whose rows are stored in other
/// relations: the registered one, or 55000.
pub(super) fn elsewhere() -> CallError {
    match ELSEWHERE.with(Cell::get) {
        Some(explain) => explain(),
        None => CallError::StoredElsewhere,
    }
}
