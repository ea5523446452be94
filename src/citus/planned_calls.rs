//! The top-level function calls of a `SELECT` being planned, where Citus
//! looks for a call to delegate or a split to run, and their constant
//! arguments as Citus reads them (implicit coercions stripped): what the
//! checks of `planner_checks.rs` look at.

use pgrx::pg_sys;

/// Where a top-level function call of a `SELECT` is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Site {
    /// A target entry (`SELECT f(...), ...`); `only`: the one entry.
    Target { only: bool },
    /// The one function of the one `FROM` item (`SELECT ... FROM f(...)`).
    From,
}

/// Calls `visit` with each top-level function call of `query` when it is a
/// `SELECT`: every target entry that is a call, then the one function of
/// the one `FROM` item, if that is all the `FROM` list holds.
///
/// # Safety
/// `query` is NULL or the query being planned.
pub(super) unsafe fn each_call(
    query: *mut pg_sys::Query,
    mut visit: impl FnMut(&pg_sys::FuncExpr, Site),
) {
    if query.is_null() || (*query).commandType != pg_sys::CmdType::CMD_SELECT {
        return;
    }
    let query = &*query;
    let targets = query.targetList;
    if !targets.is_null() {
        let only = (*targets).length == 1;
        for index in 0..(*targets).length {
            let entry = pg_sys::list_nth(targets, index).cast::<pg_sys::TargetEntry>();
            if let Some(call) = as_call((*entry).expr.cast()) {
                visit(call, Site::Target { only });
            }
        }
    }
    let from = (!query.jointree.is_null())
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
        .and_then(|function| as_call((*function.cast::<pg_sys::RangeTblFunction>()).funcexpr));
    if let Some(call) = from {
        visit(call, Site::From);
    }
}

/// `node` as a function call, if it is one.
///
/// # Safety
/// `node` is NULL or an expression node.
unsafe fn as_call<'a>(node: *mut pg_sys::Node) -> Option<&'a pg_sys::FuncExpr> {
    (!node.is_null() && (*node).type_ == pg_sys::NodeTag::T_FuncExpr)
        .then(|| &*node.cast::<pg_sys::FuncExpr>())
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

/// Argument `position` of `call` without implicit coercions (as Citus
/// strips them), when it is a constant: `Some(None)` for a NULL constant.
///
/// # Safety
/// `call` is an expression node of the query being planned.
pub(super) unsafe fn constant_argument(
    call: &pg_sys::FuncExpr,
    position: usize,
) -> Option<Option<pg_sys::Datum>> {
    let arguments = call.args;
    if arguments.is_null() || ((*arguments).length as usize) <= position {
        return None;
    }
    let node =
        pg_sys::strip_implicit_coercions(pg_sys::list_nth(arguments, position as i32).cast());
    if node.is_null() || (*node).type_ != pg_sys::NodeTag::T_Const {
        return None;
    }
    let constant = &*node.cast::<pg_sys::Const>();
    Some((!constant.constisnull).then_some(constant.constvalue))
}
