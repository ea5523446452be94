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
//! So the planner check here refuses (0A000, with the call that works in
//! the hint) a statement that calls either function, in the form Citus's
//! own examples and the README use (`SELECT f(...)` with the arguments as
//! constants once planned), for a shard or a table of the state table's
//! colocation group, in a mode other than `'block_writes'`. A call it
//! cannot see through (inside a function, with arguments it cannot fold)
//! is not refused: docs/citus.md says to use `'block_writes'`.

use super::metadata::each_row;
use pgrx::pg_sys;
use pgrx::pg_sys::panic::ErrorReport;
use pgrx::prelude::*;
use std::ffi::CStr;

static mut PREVIOUS: pg_sys::create_upper_paths_hook_type = None;

/// Called once when the library is loaded: installs the check on top of
/// whatever hook was there.
pub fn register() {
    // SAFETY: hooks are installed once per process, in `_PG_init`.
    unsafe {
        PREVIOUS = pg_sys::create_upper_paths_hook;
        pg_sys::create_upper_paths_hook = Some(upper_paths);
    }
}

#[pg_guard]
unsafe extern "C-unwind" fn upper_paths(
    root: *mut pg_sys::PlannerInfo,
    stage: pg_sys::UpperRelationKind::Type,
    input: *mut pg_sys::RelOptInfo,
    output: *mut pg_sys::RelOptInfo,
    extra: *mut std::ffi::c_void,
) {
    if stage == pg_sys::UpperRelationKind::UPPERREL_FINAL
        && !root.is_null()
        && (*root).query_level == 1
    {
        check((*root).parse);
    }
    if let Some(previous) = PREVIOUS {
        previous(root, stage, input, output, extra);
    }
}

/// The split functions: name, position of the argument that names the
/// shard group (0: a shard id; `isolate_tenant_to_new_shard`'s 0 is a
/// table), position of `shard_transfer_mode`.
const SPLITS: [(&CStr, bool, usize); 2] = [
    (c"citus_split_shard_by_split_points", true, 3),
    (c"isolate_tenant_to_new_shard", false, 3),
];

/// Raises 0A000 when `query` (top level) calls a split function of
/// [`SPLITS`] in its target list for the state table's colocation group in
/// a mode other than `'block_writes'`.
///
/// # Safety
/// `query` is NULL or the query being planned.
unsafe fn check(query: *mut pg_sys::Query) {
    if query.is_null() || (*query).commandType != pg_sys::CmdType::CMD_SELECT {
        return;
    }
    let targets = (*query).targetList;
    if targets.is_null() {
        return;
    }
    for index in 0..(*targets).length {
        let entry = pg_sys::list_nth(targets, index).cast::<pg_sys::TargetEntry>();
        let node = (*entry).expr.cast::<pg_sys::Node>();
        if node.is_null() || (*node).type_ != pg_sys::NodeTag::T_FuncExpr {
            continue;
        }
        let call = &*node.cast::<pg_sys::FuncExpr>();
        let name = pg_sys::get_func_name(call.funcid);
        if name.is_null() {
            continue;
        }
        let name = CStr::from_ptr(name);
        let Some(&(function, by_shard, mode_position)) =
            SPLITS.iter().find(|(split, _, _)| *split == name)
        else {
            continue;
        };
        let arguments = call.args;
        if arguments.is_null() || ((*arguments).length as usize) <= mode_position {
            continue;
        }
        let argument = |position: usize| {
            let node = pg_sys::strip_implicit_coercions(
                pg_sys::list_nth(arguments, position as i32).cast(),
            );
            (!node.is_null()
                && (*node).type_ == pg_sys::NodeTag::T_Const
                && !(*node.cast::<pg_sys::Const>()).constisnull)
                .then(|| (*node.cast::<pg_sys::Const>()).constvalue)
        };
        let (Some(group), Some(mode)) = (argument(0), argument(mode_position)) else {
            continue;
        };
        // The mode is an enum value of citus.shard_transfer_mode.
        let label: Option<&CStr> = pgrx::direct_function_call(pg_sys::enum_out, &[Some(mode)]);
        if label == Some(c"block_writes") {
            continue;
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
