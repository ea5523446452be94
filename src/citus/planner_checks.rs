//! The planner checks of a Citus install, in one `create_upper_paths_hook`
//! installed with the other Citus hooks (`super::register`), and only when
//! Citus is loaded: a server without Citus plans every statement without
//! them.
//!
//! The planner calls `create_upper_paths_hook` at the end of planning each
//! query level, on the very `Query` Citus inspects next, already folded
//! (parameters bound to values, constant expressions, subqueries pulled
//! up). For the top level of a `SELECT`, the hook finds the function calls
//! where Citus looks for one (`planned_calls.rs`) and hands each to the two
//! checks:
//!
//! - [`super::shard_split`]: a split of the state table's shards in a mode
//!   that cannot finish (0A000);
//! - [`super::null_distribution_argument`]: a NULL distribution argument
//!   to a delegated internal function (22004), which would crash Citus.

use super::planned_calls::each_call;
use super::{null_distribution_argument, shard_split};
use pgrx::pg_sys;
use pgrx::prelude::*;

static mut PREVIOUS: pg_sys::create_upper_paths_hook_type = None;

/// Called once, from `super::register`: installs the checks on top of
/// whatever hook was there (Citus's, which is loaded first).
pub(super) fn register() {
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
        each_call((*root).parse, |call, site| {
            shard_split::check(call, site);
            null_distribution_argument::check(call, site);
        });
    }
    if let Some(previous) = PREVIOUS {
        previous(root, stage, input, output, extra);
    }
}
