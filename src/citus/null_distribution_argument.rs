//! No NULL distribution argument ever reaches Citus's function delegation
//! (docs/guarantees.md, "Citus", "Routing and delegation").
//!
//! Citus delegates a call of a distributed function (the internal
//! `_rate_limit_at`, `_rate_state_at`, `_rate_credit_at`,
//! `_rate_limit_all_at` and `_prune_at`) when the statement is `SELECT
//! f(...)` or `SELECT ... FROM f(...)`: after PostgreSQL's planner has
//! folded the statement (parameters bound to values, constant
//! expressions, subqueries pulled up), it hashes the distribution
//! argument to find the shard, without checking for NULL. A NULL there
//! (Citus 13.2.2 and 14.0.1) dereferences a null pointer and takes the
//! whole server down with signal 11. The limiter itself never sends one,
//! but a role with EXECUTE on an internal function (an application role
//! has it on `_rate_limit_at`) could: `SELECT * FROM
//! rate_limiter._rate_limit_at(NULL::text, ...)`.
//!
//! The planner calls `create_upper_paths_hook` at the end of planning each
//! query level, on the very `Query` Citus inspects next, already folded.
//! There, for the top level, this module looks where Citus looks (the one
//! target entry, the one function of the one `FROM` item), and raises
//! 22004 for a call of one of the internal functions whose first argument
//! is a NULL constant, before Citus sees it. The hook is installed when the
//! library is loaded, so `distribute()` requires `rate_limiter` in
//! `shared_preload_libraries` on every node (a session's first statement
//! could otherwise be that call).

use pgrx::pg_sys;
use pgrx::pg_sys::panic::ErrorReport;
use pgrx::prelude::*;
use std::ffi::CStr;

/// The internal functions Citus delegates (their first argument is the
/// distribution argument `dkey`).
const DELEGATED: [&CStr; 5] = [
    c"_rate_limit_at",
    c"_rate_state_at",
    c"_rate_credit_at",
    c"_rate_limit_all_at",
    c"_prune_at",
];

static mut PREVIOUS: pg_sys::create_upper_paths_hook_type = None;

/// Called once when the library is loaded: installs the check on top of
/// whatever hook was there (Citus's, which is loaded first).
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
        if let Some(function) = null_distribution_argument((*root).parse) {
            ErrorReport::new(
                PgSqlErrorCode::ERRCODE_NULL_VALUE_NOT_ALLOWED,
                format!(
                    "the distribution argument dkey of rate_limiter.{}() must not be NULL",
                    function.to_string_lossy()
                ),
                "rate_limiter::citus::null_distribution_argument",
            )
            .set_hint("It is internal: call the public function (rate_limit, status, rate_credit, rate_limit_all, prune), which reaches the node holding the row.")
            .report(PgLogLevel::ERROR);
        }
    }
    if let Some(previous) = PREVIOUS {
        previous(root, stage, input, output, extra);
    }
}

/// The name of the internal function called with a NULL constant first
/// argument where Citus looks for a call to delegate in `query`, if any.
///
/// # Safety
/// `query` is NULL or the query being planned.
unsafe fn null_distribution_argument(query: *mut pg_sys::Query) -> Option<&'static CStr> {
    if query.is_null() || (*query).commandType != pg_sys::CmdType::CMD_SELECT {
        return None;
    }
    let query = &*query;
    // `SELECT f(...)`: the one target entry.
    let in_target = only(query.targetList).map(|entry| {
        (*entry.cast::<pg_sys::TargetEntry>())
            .expr
            .cast::<pg_sys::Node>()
    });
    // `SELECT ... FROM f(...)`: the one function of the one FROM item.
    let in_from = (!query.jointree.is_null())
        .then(|| only((*query.jointree).fromlist))
        .flatten()
        .filter(|&item| (*item).type_ == pg_sys::NodeTag::T_RangeTblRef)
        .and_then(|item| {
            let index = (*item.cast::<pg_sys::RangeTblRef>()).rtindex;
            let entry = pg_sys::list_nth(query.rtable, index - 1).cast::<pg_sys::RangeTblEntry>();
            ((*entry).rtekind == pg_sys::RTEKind::RTE_FUNCTION)
                .then(|| only((*entry).functions))
                .flatten()
        })
        .map(|function| (*function.cast::<pg_sys::RangeTblFunction>()).funcexpr);
    [in_target, in_from]
        .into_iter()
        .flatten()
        .find_map(|node| delegated_with_null_first_argument(node))
}

/// The one element of `list` (a list of pointers), if it has exactly one.
///
/// # Safety
/// `list` is NULL or a `List` of pointers.
unsafe fn only(list: *mut pg_sys::List) -> Option<*mut pg_sys::Node> {
    if list.is_null() || (*list).length != 1 || (*list).type_ != pg_sys::NodeTag::T_List {
        return None;
    }
    let node = (*(*list).elements).ptr_value.cast::<pg_sys::Node>();
    (!node.is_null()).then_some(node)
}

/// The name of the internal function `node` calls, when it is a call of
/// one of [`DELEGATED`] whose first argument, without implicit coercions
/// (as Citus strips them), is a NULL constant.
///
/// # Safety
/// `node` is NULL or an expression node.
unsafe fn delegated_with_null_first_argument(node: *mut pg_sys::Node) -> Option<&'static CStr> {
    if node.is_null() || (*node).type_ != pg_sys::NodeTag::T_FuncExpr {
        return None;
    }
    let call = &*node.cast::<pg_sys::FuncExpr>();
    if call.args.is_null() || (*call.args).length < 1 {
        return None;
    }
    let first = pg_sys::strip_implicit_coercions((*(*call.args).elements).ptr_value.cast());
    if first.is_null()
        || (*first).type_ != pg_sys::NodeTag::T_Const
        || !(*first.cast::<pg_sys::Const>()).constisnull
    {
        return None;
    }
    // Rare from here on: a NULL constant first argument. Is it ours?
    let namespace = pg_sys::get_func_namespace(call.funcid);
    let schema = pg_sys::get_namespace_name(namespace);
    if schema.is_null() || CStr::from_ptr(schema) != c"rate_limiter" {
        return None;
    }
    let name = pg_sys::get_func_name(call.funcid);
    if name.is_null() {
        return None;
    }
    let name = CStr::from_ptr(name);
    DELEGATED.into_iter().find(|&delegated| delegated == name)
}
