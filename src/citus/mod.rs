//! Citus (docs/guarantees.md, "Citus"): where a state row lives once
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
//!   that the row is local and in a transaction block, or fails closed. A
//!   call that is its transaction's only work goes as a statement of its
//!   own instead, in one round trip ([`single_statement`]).

mod all_or_nothing;
mod blocks;
mod cluster;
mod consume;
mod credit;
mod define;
mod delegation;
mod error;
mod internal_functions;
mod metadata;
mod node_hint;
mod null_distribution_argument;
mod planned_calls;
mod planner_checks;
mod prune;
mod read;
mod shard_query;
mod shard_split;
mod single_statement;
mod site;
mod two_phase_commit;
mod value;

use pgrx::pg_sys;

/// Called once when the library is loaded, and the one place that
/// installs what a Citus install needs, all of it only when Citus is
/// loaded ([`citus_loaded`]): the transaction callbacks of two-phase
/// commit, the planner checks that keep a NULL distribution argument from
/// Citus's function delegation and a split of the state table's shards
/// from hanging (one planner hook), the hint that names `prepare_node()`
/// when `citus_add_node()` fails for want of it, and the cluster behind
/// `crate::placement`. Without Citus no table can be distributed, and a
/// server's statements run without any of these hooks.
pub fn register() {
    if !citus_loaded() {
        return;
    }
    // SAFETY: a flag PostgreSQL sets while it loads preloaded libraries.
    let preloaded = unsafe { pg_sys::process_shared_preload_libraries_in_progress };
    PRELOADED.with(|flag| flag.set(preloaded));
    two_phase_commit::register();
    planner_checks::register();
    node_hint::register();
    crate::placement::install(&cluster::Citus);
    crate::blocks::install(&blocks::CitusBlocks);
    crate::storage::target::explain_elsewhere_with(not_routed);
}

/// The error of a call that reached the state table itself while Citus
/// distributes it (storage fails closed on it): a function that does not
/// run on a distributed install yet (0A000) or tables not distributed as
/// `distribute()` does (55000), as [`metadata::unsupported`] says; else
/// 55000, the call was not routed to one of its shards.
fn not_routed() -> crate::errors::CallError {
    metadata::unsupported().unwrap_or_else(|| error::Error::NotRouted.into())
}

/// Whether Citus is loaded in this server: `shared_preload_libraries`
/// names it (Citus loads only from there, and refuses to load otherwise,
/// so a server without it in the list has no distributed table). An entry
/// is a library name or path, with or without `.so`, as PostgreSQL's
/// `load_file` accepts it.
fn citus_loaded() -> bool {
    // SAFETY: reads a string setting; NULL when it does not exist.
    let setting =
        unsafe { pg_sys::GetConfigOption(c"shared_preload_libraries".as_ptr(), true, false) };
    if setting.is_null() {
        return false;
    }
    // SAFETY: a setting's value is a NUL-terminated string.
    let setting = unsafe { std::ffi::CStr::from_ptr(setting) }.to_string_lossy();
    setting.split(',').any(|entry| {
        let entry = entry.trim().trim_matches('"');
        let file = entry.rsplit('/').next().unwrap_or(entry);
        file.strip_suffix(".so").unwrap_or(file) == "citus"
    })
}

thread_local! {
    /// Whether the library was loaded at server start
    /// (`shared_preload_libraries`): on a distributed install calls fail
    /// closed without it (the planner check of
    /// `null_distribution_argument` must be there before a session's
    /// first statement).
    static PRELOADED: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
}

/// Whether the library was loaded at server start.
pub(crate) fn preloaded() -> bool {
    PRELOADED.with(std::cell::Cell::get)
}
