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
//! The planner hook of `planner_checks.rs` hands this module the top-level
//! calls of each `SELECT` as Citus will see them; where Citus looks (the
//! one target entry, the one function of the one `FROM` item), [`check`]
//! raises 22004 for a call of one of the internal functions whose first
//! argument is a NULL constant, before Citus sees it. The hook is installed
//! when the library is loaded, so `distribute()` requires `rate_limiter`
//! in `shared_preload_libraries` on every node (a session's first statement
//! could otherwise be that call).

use super::planned_calls::{constant_argument, Site};
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

/// Raises 22004 when `call`, at a `site` where Citus looks for a call to
/// delegate, calls one of [`DELEGATED`] with a NULL constant first
/// argument.
///
/// # Safety
/// `call` is a node of the query being planned.
pub(super) unsafe fn check(call: &pg_sys::FuncExpr, site: Site) {
    if site == (Site::Target { only: false }) || constant_argument(call, 0) != Some(None) {
        return;
    }
    if let Some(function) = delegated(call) {
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

/// The name of the internal function `call` calls, when it is one of
/// [`DELEGATED`] (rare: only a call with a NULL constant first argument
/// gets here).
///
/// # Safety
/// In a transaction.
unsafe fn delegated(call: &pg_sys::FuncExpr) -> Option<&'static CStr> {
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
