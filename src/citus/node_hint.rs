//! A hint for the operator who adds a node with `citus_add_node()` to a
//! cluster whose state table is colocated with a table distributed by a
//! column that is not text (`distribute(colocate_with)`): the new node's
//! `rate_limiter.rate_limits`, created by Citus's propagated `CREATE
//! EXTENSION`, has a `text` distribution column, so Citus's metadata sync
//! fails there ("cannot colocate tables rate_limits and ...: Distribution
//! column types don't match") and the coordinator ends with "failure on
//! connection marked as essential: HOST:PORT", neither of which says what
//! to do. `rate_limiter.prepare_node(HOST, PORT)` before `citus_add_node`
//! shapes the node's table (docs/citus.md, "Adding a node"); Citus gives
//! an extension no way to do that inside `citus_add_node` itself, so this
//! says it instead: PostgreSQL's `emit_log_hook` adds a HINT to those two
//! messages (only to them: the first names `rate_limits`, and the second
//! follows it, in a statement that adds a node).

use pgrx::pg_sys;
use std::cell::Cell;
use std::ffi::CStr;

thread_local! {
    /// Whether this transaction reported Citus's refusal to colocate the
    /// state table (so its "failure on connection marked as essential" is
    /// about the node being added).
    static COLOCATION_FAILED: Cell<bool> = const { Cell::new(false) };
    /// The hook this one replaced.
    static PREVIOUS: Cell<pg_sys::emit_log_hook_type> = const { Cell::new(None) };
}

/// Installs the hook (once, at load).
pub(super) fn register() {
    // SAFETY: hooks are installed once, when the library is loaded.
    unsafe {
        PREVIOUS.with(|previous| previous.set(pg_sys::emit_log_hook));
        pg_sys::emit_log_hook = Some(add_hint);
    }
}

/// The hint for the node at `node` ("HOST:PORT"), or for any node.
fn hint(node: Option<(&str, &str)>) -> String {
    let call = match node {
        Some((host, port)) => format!("SELECT rate_limiter.prepare_node('{host}', {port});"),
        None => "SELECT rate_limiter.prepare_node('HOST', PORT);".to_string(),
    };
    format!(
        "If rate_limiter's state table is colocated with a table whose distribution column is not text, \
         a new node needs its table shaped first: run {call} on the coordinator, then citus_add_node() again."
    )
}

/// `HOST:PORT` at the end of Citus's "failure on connection marked as
/// essential: HOST:PORT".
fn essential_node(message: &str) -> Option<(&str, &str)> {
    let node = message.strip_prefix("failure on connection marked as essential: ")?;
    let (host, port) = node.rsplit_once(':')?;
    (!host.contains('\'') && port.chars().all(|c| c.is_ascii_digit())).then_some((host, port))
}

/// Whether the statement running is a call of `citus_add_node` (or
/// `master_add_node`, `citus_activate_node`): the essential connection
/// that failed is then the new node's. (Citus's refusal to colocate, which
/// comes first, has not always set the flag by the time of the error.)
fn adding_a_node() -> bool {
    // SAFETY: the text of the statement the backend is running, or null.
    let statement = unsafe { pg_sys::debug_query_string };
    if statement.is_null() {
        return false;
    }
    // SAFETY: a NUL-terminated string of the backend's.
    let statement = unsafe { CStr::from_ptr(statement) }.to_string_lossy();
    ["citus_add_node", "master_add_node", "citus_activate_node"]
        .iter()
        .any(|function| statement.contains(function))
}

#[pgrx::pg_guard]
unsafe extern "C-unwind" fn add_hint(edata: *mut pg_sys::ErrorData) {
    // SAFETY: PostgreSQL passes the error being reported; the hint is
    // allocated in ErrorContext, where the error's own strings live.
    unsafe {
        if let Some(previous) = PREVIOUS.with(Cell::get) {
            previous(edata);
        }
        if edata.is_null() || (*edata).message.is_null() || !(*edata).hint.is_null() {
            return;
        }
        let Ok(message) = CStr::from_ptr((*edata).message).to_str() else {
            return;
        };
        let text =
            if message.starts_with("cannot colocate tables ") && message.contains("rate_limits") {
                COLOCATION_FAILED.with(|flag| flag.set(true));
                hint(None)
            } else if let Some(node) = essential_node(message)
                .filter(|_| COLOCATION_FAILED.with(|flag| flag.replace(false)) || adding_a_node())
            {
                hint(Some(node))
            } else {
                return;
            };
        if let Ok(text) = std::ffi::CString::new(text) {
            (*edata).hint = pg_sys::MemoryContextStrdup(pg_sys::ErrorContext, text.as_ptr());
        }
    }
}
