//! Which relation a storage call reads and writes: the state table, or a
//! relation standing in for it (on a Citus cluster, the shard of the state
//! table on this node that holds the call's rows). The layer that places
//! calls (`crate::placement`'s cluster) sets a [`Route`] around the storage
//! calls it makes with [`on_shard`]; storage itself knows only tables.

use crate::errors::CallError;
use pgrx::pg_sys;
use std::cell::Cell;

/// What explains an unrouted call ([`explain_unrouted_with`]).
type Explain = fn() -> Option<CallError>;

thread_local! {
    /// The route set by [`on_shard`].
    static ROUTE: Cell<Option<Route>> = const { Cell::new(None) };
    /// Set once at load by the cluster layer: why a call that reached
    /// storage without a route on a distributed install cannot run.
    static UNROUTED: Cell<Option<Explain>> = const { Cell::new(None) };
}

/// The relation a storage call reads and writes instead of the state
/// table, its unique index, and the distribution value written into the
/// `dkey` column of the rows it writes.
#[derive(Debug, Clone, Copy)]
pub struct Route {
    pub table: pg_sys::Oid,
    pub index: pg_sys::Oid,
    /// The `dkey` datum (of the column's type) of the rows written; it
    /// must stay valid while the route is in use.
    pub dkey: pg_sys::Datum,
}

/// The route set by [`on_shard`] for the storage calls it runs, if any.
pub fn route() -> Option<Route> {
    ROUTE.with(Cell::get)
}

/// Runs `body` with storage reading and writing `route`'s relation (the
/// previous route is restored afterwards, also when `body` unwinds).
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

/// Registers (once, at load) what explains a storage call on a
/// distributed install that no route sent to a relation: the error it
/// returns is raised instead of storage's own 55000.
pub fn explain_unrouted_with(explain: Explain) {
    UNROUTED.with(|cell| cell.set(Some(explain)));
}

/// The registered explanation of an unrouted call, if any.
pub(super) fn unrouted() -> Option<CallError> {
    UNROUTED.with(Cell::get).and_then(|explain| explain())
}
