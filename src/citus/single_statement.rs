//! A call that is its transaction's only work: `SELECT ... FROM
//! rate_limiter.rate_limit(...)` (or `rate_check`, or `SELECT
//! rate_limiter.rate_limit(...)`) sent on its own, outside any transaction
//! block, for a row on another node.
//!
//! Citus runs a call it delegates from inside a function in a transaction
//! block on the worker (`citus.function_opens_transaction_block`): `BEGIN`
//! with `assign_distributed_transaction_id`, the call, `COMMIT`, three
//! round trips. The block is what lets a later failure of the caller's
//! transaction undo the consumption. Citus's own one-statement writes (an
//! `INSERT ... ON CONFLICT` routed to one shard, outside a transaction
//! block) take one round trip and commit on the worker as a statement of
//! their own: nothing can come after them in their transaction.
//!
//! When the same holds for a call, it is sent the same way: [`alone`]
//! checks that nothing but the call can happen in the caller's
//! transaction, and [`without_transaction_block`] runs the delegated call
//! with `citus.function_opens_transaction_block` off for its duration,
//! after making the caller's transaction end with its statement (the flag
//! `VACUUM` sets). With the extended protocol that needs the client's
//! Sync to be the next message, already received: a pipeline's later
//! statements would share the implicit transaction, and their failure
//! must undo the call, so a call with anything after it in its pipeline
//! keeps the block.
//! The node holding the row runs it only when told so (`_rate_limit_at`'s
//! `own_transaction`); otherwise a call outside a transaction block is
//! still 55000 there.
//!
//! What the worker committed stays committed if the caller then fails to
//! answer (its connection is lost, a cancel arrives before the result row
//! is sent): as with Citus's own one-statement writes, or with any commit
//! whose reply is lost.

use pgrx::pg_sys;
use std::ffi::CStr;

/// Whether the call now running, of the SQL function `function`
/// (`rate_limit` or `rate_check`), is all its transaction does, so that
/// the node holding its row may commit it as a statement of its own:
///
/// - no transaction block (not after `BEGIN`, not one of several
///   statements of a simple query), no savepoint, no earlier statement of
///   a pipeline in this transaction, and nothing written here yet;
/// - with the extended protocol, the client's next message, already
///   received, is Sync: no later statement of a pipeline can share the
///   transaction (a client that has not sent its Sync yet keeps the
///   block);
/// - the statement running is the client's own (not a cursor or statement
///   a function runs: its text is the one the client sent);
/// - its plan is the call and nothing else: one `SELECT` whose plan is a
///   scan of the function (`SELECT ... FROM f(...)`, output columns only,
///   no filter) or a projection of it over an empty result (`SELECT
///   f(...)`), its arguments constants or parameters (evaluated before
///   the call), no subplan, no CTE, no locking clause.
///
/// Anything else, or anything it cannot read, is `false`: the call then
/// runs in a transaction block on the worker, as every other call does.
pub(super) fn alone(function: pg_sys::Oid) -> bool {
    // SAFETY: reads the transaction state and the active portal, which
    // PostgreSQL keeps valid while the portal's statement runs (this
    // call is part of it); every pointer is checked before it is read.
    unsafe {
        if pg_sys::IsTransactionBlock()
            || pg_sys::GetCurrentTransactionNestLevel() != 1
            || pg_sys::MyXactFlags & pg_sys::XACT_FLAGS_PIPELINING as i32 != 0
            || pg_sys::GetTopTransactionIdIfAny() != pg_sys::InvalidTransactionId
        {
            return false;
        }
        let portal = pg_sys::ActivePortal;
        if portal.is_null()
            || (*portal).status != pg_sys::PortalStatus::PORTAL_ACTIVE
            || (*portal).cursorOptions & pg_sys::CURSOR_OPT_HOLD as i32 != 0
            || !same_text((*portal).sourceText, pg_sys::debug_query_string)
        {
            return false;
        }
        // The extended protocol (its portals are visible in pg_cursors; a
        // simple query's is not, and its one statement is its
        // transaction): every statement until the next Sync shares the
        // implicit transaction, so only a Sync, already received, may
        // come next.
        if (*portal).visible && crate::compat::next_client_message_type() != Some(b'S') {
            return false;
        }
        match only_node((*portal).stmts, pg_sys::NodeTag::T_PlannedStmt) {
            Some(statement) => is_only_the_call(statement.cast(), function),
            None => false,
        }
    }
}

/// Whether both texts are there and equal.
///
/// # Safety
/// Each pointer is NULL or a NUL-terminated string.
unsafe fn same_text(one: *const std::ffi::c_char, other: *const std::ffi::c_char) -> bool {
    !one.is_null() && !other.is_null() && CStr::from_ptr(one) == CStr::from_ptr(other)
}

/// Whether `statement` is a plain `SELECT` of the call of `function`
/// and nothing else (see [`alone`]).
///
/// # Safety
/// `statement` is a statement of the active portal.
unsafe fn is_only_the_call(statement: *mut pg_sys::PlannedStmt, function: pg_sys::Oid) -> bool {
    let statement = &*statement;
    if statement.commandType != pg_sys::CmdType::CMD_SELECT
        || statement.hasModifyingCTE
        || !statement.utilityStmt.is_null()
        || !statement.subplans.is_null()
        || !statement.rowMarks.is_null()
    {
        return false;
    }
    let plan = statement.planTree;
    if is_a(plan.cast(), pg_sys::NodeTag::T_FunctionScan) {
        let scan = &*plan.cast::<pg_sys::FunctionScan>();
        if !plain(&scan.scan.plan) || !only_columns(scan.scan.plan.targetlist) {
            return false;
        }
        return only_node(scan.functions, pg_sys::NodeTag::T_RangeTblFunction).is_some_and(
            |only| {
                is_call_of(
                    (*only.cast::<pg_sys::RangeTblFunction>()).funcexpr,
                    function,
                )
            },
        );
    }
    if is_a(plan.cast(), pg_sys::NodeTag::T_ProjectSet) {
        let projection = &*plan;
        let input = projection.lefttree;
        if !plain_projection(projection) || !is_a(input.cast(), pg_sys::NodeTag::T_Result) {
            return false;
        }
        let result = &*input.cast::<pg_sys::Result>();
        if !plain(&result.plan) || !result.resconstantqual.is_null() {
            return false;
        }
        return only_node(projection.targetlist, pg_sys::NodeTag::T_TargetEntry).is_some_and(
            |only| is_call_of((*only.cast::<pg_sys::TargetEntry>()).expr.cast(), function),
        );
    }
    false
}

/// Whether the plan node filters nothing and has no input, init plan or
/// parameter change of its own.
fn plain(plan: &pg_sys::Plan) -> bool {
    plan.qual.is_null()
        && plan.lefttree.is_null()
        && plan.righttree.is_null()
        && plan.initPlan.is_null()
}

/// [`plain`] for a projection node, whose input is its left tree.
fn plain_projection(plan: &pg_sys::Plan) -> bool {
    plan.qual.is_null() && plan.righttree.is_null() && plan.initPlan.is_null()
}

/// Whether every entry of the target list `list` is a column (`Var`): an
/// output that cannot fail once the call returned.
///
/// # Safety
/// `list` is NULL or a target list.
unsafe fn only_columns(list: *mut pg_sys::List) -> bool {
    let Some(entries) = nodes(list) else {
        return false;
    };
    entries.iter().all(|&entry| {
        is_a(entry, pg_sys::NodeTag::T_TargetEntry)
            && is_a(
                (*entry.cast::<pg_sys::TargetEntry>()).expr.cast(),
                pg_sys::NodeTag::T_Var,
            )
    })
}

/// Whether `node` is a call of `function` whose arguments are constants
/// or parameters (values known before the call: nothing of the
/// statement's own runs after it returns).
///
/// # Safety
/// `node` is NULL or an expression node.
unsafe fn is_call_of(node: *mut pg_sys::Node, function: pg_sys::Oid) -> bool {
    if !is_a(node, pg_sys::NodeTag::T_FuncExpr) {
        return false;
    }
    let call = &*node.cast::<pg_sys::FuncExpr>();
    if call.funcid != function {
        return false;
    }
    let Some(arguments) = nodes(call.args) else {
        return true; // no arguments (NIL)
    };
    arguments.iter().all(|&argument| {
        is_a(argument, pg_sys::NodeTag::T_Const)
            || (is_a(argument, pg_sys::NodeTag::T_Param)
                && (*argument.cast::<pg_sys::Param>()).paramkind == pg_sys::ParamKind::PARAM_EXTERN)
    })
}

/// The nodes of the list `list` (NIL is an empty list), or `None` for a
/// list that is not a list of pointers (an integer or OID list).
///
/// # Safety
/// `list` is NULL or a `List`.
unsafe fn nodes(list: *mut pg_sys::List) -> Option<Vec<*mut pg_sys::Node>> {
    if list.is_null() {
        return Some(Vec::new());
    }
    let list = &*list;
    if list.type_ != pg_sys::NodeTag::T_List || list.elements.is_null() {
        return None;
    }
    let length = usize::try_from(list.length).ok()?;
    Some(
        (0..length)
            .map(|index| (*list.elements.add(index)).ptr_value.cast())
            .collect(),
    )
}

/// The one node of the list `list` when it has exactly one, of the tag
/// `tag`.
///
/// # Safety
/// `list` is NULL or a `List`.
unsafe fn only_node(list: *mut pg_sys::List, tag: pg_sys::NodeTag) -> Option<*mut pg_sys::Node> {
    match nodes(list)?.as_slice() {
        &[only] if is_a(only, tag) => Some(only),
        _ => None,
    }
}

/// Whether `node` is not NULL and has the tag `tag`.
///
/// # Safety
/// `node` is NULL or a node.
unsafe fn is_a(node: *mut pg_sys::Node, tag: pg_sys::NodeTag) -> bool {
    !node.is_null() && (*node).type_ == tag
}

/// Runs `body` (the SPI statement of a delegated call) so that Citus
/// sends it to the node holding the row as a statement of its own,
/// without a transaction block, after marking this transaction to end
/// with its statement. Only for a call [`alone`] said `true` of.
pub(super) fn without_transaction_block<R>(body: impl FnOnce() -> R) -> R {
    /// Undoes the setting when dropped normally; when unwinding from an
    /// error the abort that follows undoes it.
    struct Restore(i32);
    impl Drop for Restore {
        fn drop(&mut self) {
            if !std::thread::panicking() {
                // SAFETY: pops the GUC nesting level opened below.
                unsafe { pg_sys::AtEOXact_GUC(true, self.0) };
            }
        }
    }
    // SAFETY: sets a flag of the transaction and a setting at a GUC
    // nesting level of its own, as a function's SET clause does.
    let _restore = unsafe {
        pg_sys::MyXactFlags |= pg_sys::XACT_FLAGS_NEEDIMMEDIATECOMMIT as i32;
        let level = pg_sys::NewGUCNestLevel();
        pg_sys::set_config_option(
            c"citus.function_opens_transaction_block".as_ptr(),
            c"off".as_ptr(),
            pg_sys::GucContext::PGC_USERSET,
            pg_sys::GucSource::PGC_S_SESSION,
            pg_sys::GucAction::GUC_ACTION_SAVE,
            true,
            0,
            false,
        );
        Restore(level)
    };
    body()
}
