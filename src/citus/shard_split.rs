//! Splits of the limiter's shards only in a mode that works
//! (docs/guarantees.md, "Citus", "Shard moves, splits and new nodes").
//!
//! Citus 13.2.2 and 14.0.1 split a shard group without blocking writes
//! (`citus_split_shard_by_split_points` and `isolate_tenant_to_new_shard`
//! with `shard_transfer_mode` `'auto'` or `'force_logical'`) through
//! logical replication, whose apply worker refuses every change to the
//! new shards of a table with `REPLICA IDENTITY FULL` ("has neither
//! REPLICA IDENTITY index nor PRIMARY KEY") and retries until
//! `citus.logical_replication_timeout` (2 h by default): the split hangs
//! while calls write. The state table has `REPLICA IDENTITY FULL` (its
//! `key` is nullable, so no index can be its identity), which is enough
//! for shard moves. With `'block_writes'` a split and an isolation keep
//! every row and stay exact (writes wait for them).
//!
//! So this check (run by the planner hook of `planner_checks.rs`) refuses (0A000, with the call that works in
//! the hint) a statement that calls either function, in the form Citus's
//! own examples and the README use (`SELECT f(...)` with the arguments as
//! constants once planned), for a shard or a table of the state table's
//! colocation group, in a mode other than `'block_writes'`. A call it
//! cannot see through (inside a function, with arguments it cannot fold)
//! is not refused: docs/citus.md says to use `'block_writes'`.

use super::metadata::each_row;
use super::planned_calls::{constant_argument, Site};
use pgrx::pg_sys;
use pgrx::pg_sys::panic::ErrorReport;
use pgrx::prelude::*;
use std::ffi::CStr;

/// The split functions: name, and whether argument 0, which names the
/// shard group, is a shard id (`isolate_tenant_to_new_shard`'s is a
/// table). Argument 3 of both is `shard_transfer_mode`.
const SPLITS: [(&CStr, bool); 2] = [
    (c"citus_split_shard_by_split_points", true),
    (c"isolate_tenant_to_new_shard", false),
];

/// Raises 0A000 when `call`, a target entry of the query being planned,
/// calls a split function of [`SPLITS`] for the state table's colocation
/// group in a mode other than `'block_writes'`. The function's name is
/// looked up only for a call with constant shard group and mode arguments.
///
/// # Safety
/// `call` is a node of the query being planned.
pub(super) unsafe fn check(call: &pg_sys::FuncExpr, site: Site) {
    if site == Site::From {
        return;
    }
    const MODE_POSITION: usize = 3;
    let (Some(Some(group)), Some(Some(mode))) = (
        constant_argument(call, 0),
        constant_argument(call, MODE_POSITION),
    ) else {
        return;
    };
    let name = pg_sys::get_func_name(call.funcid);
    if name.is_null() {
        return;
    }
    let name = CStr::from_ptr(name);
    let Some(&(function, by_shard)) = SPLITS.iter().find(|(split, _)| *split == name) else {
        return;
    };
    // The mode is an enum value of citus.shard_transfer_mode.
    let label: Option<&CStr> = pgrx::direct_function_call(pg_sys::enum_out, &[Some(mode)]);
    if label == Some(c"block_writes") {
        return;
    }
    let relation = if by_shard {
        relation_of_shard(group.value() as i64)
    } else {
        Some(pg_sys::Oid::from_datum(group, false).unwrap_or(pg_sys::InvalidOid))
    };
    if relation.is_some_and(|relation| in_state_tables_group(relation)) {
        ErrorReport::new(
            PgSqlErrorCode::ERRCODE_FEATURE_NOT_SUPPORTED,
            format!(
                "{}() would split shards of rate_limiter.rate_limits's colocation group without blocking writes, which Citus cannot finish for its table (REPLICA IDENTITY FULL): the split would wait up to citus.logical_replication_timeout",
                function.to_string_lossy()
            ),
            "rate_limiter::citus::shard_split",
        )
        .set_hint("Pass shard_transfer_mode => 'block_writes' (writes to those shards wait for the split, which keeps every row).")
        .report(PgLogLevel::ERROR);
    }
}

/// The distributed table of shard `shard` (`pg_dist_shard`).
///
/// # Safety
/// In a transaction.
unsafe fn relation_of_shard(shard: i64) -> Option<pg_sys::Oid> {
    let mut found = None;
    each_row(c"pg_dist_shard", |column| {
        if column(c"shardid").map(|d| d.value() as i64) == Some(shard) {
            found = column(c"logicalrelid").and_then(|d| pg_sys::Oid::from_datum(d, false));
        }
    });
    found
}

/// Whether `relation` is in the colocation group of `rate_limiter.rate_limits`.
///
/// # Safety
/// In a transaction.
unsafe fn in_state_tables_group(relation: pg_sys::Oid) -> bool {
    let schema = pg_sys::get_namespace_oid(c"rate_limiter".as_ptr(), true);
    if schema == pg_sys::InvalidOid {
        return false;
    }
    let state = pg_sys::get_relname_relid(c"rate_limits".as_ptr(), schema);
    if state == pg_sys::InvalidOid {
        return false;
    }
    let mut groups = (None, None);
    each_row(c"pg_dist_partition", |column| {
        let table = column(c"logicalrelid").and_then(|d| pg_sys::Oid::from_datum(d, false));
        let group = column(c"colocationid").map(|d| d.value() as u32);
        if table == Some(state) {
            groups.0 = group;
        }
        if table == Some(relation) {
            groups.1 = group;
        }
    });
    matches!(groups, (Some(state), Some(other)) if state == other && state != 0)
}
