//! Calls that Citus evaluates inside its own per-shard queries
//! (docs/guarantees.md, "Citus", "Call shapes and node states";
//! docs/citus-design.md §3). In `SELECT rate_limiter.rate_limit('l',
//! tenant_id::text) FROM app.orders`, a multi-shard query over a table
//! colocated with the state, Citus pushes the call down into the query it
//! sends each worker for each shard, where it runs in a Citus-internal
//! backend: outside a transaction block each of those commits on its own (a
//! statement that fails keeps part of its consumption), and inside one a
//! transaction that consumed on two workers would commit without two-phase
//! commit. So a call that writes refuses to run in a Citus-internal backend
//! (0A000), unless it runs inside one of the limiter's own delegated
//! functions (`_rate_limit_at` and the others, which Citus runs inside the
//! caller's distributed transaction).
//!
//! The same module knows whether a call may read and write this node's
//! shards directly ([`local_execution`]).

use super::error::Error;
use crate::errors::CallError;
use pgrx::pg_sys;
use std::cell::Cell;
use std::ffi::CStr;

thread_local! {
    /// How many of the limiter's delegated functions are running.
    static DELEGATED: Cell<u32> = const { Cell::new(0) };
}

/// Runs `body` as the body of a delegated internal function: calls made
/// inside it may write in a Citus-internal backend.
pub(super) fn delegated<R>(body: impl FnOnce() -> R) -> R {
    struct Leave;
    impl Drop for Leave {
        fn drop(&mut self) {
            DELEGATED.with(|depth| depth.set(depth.get().saturating_sub(1)));
        }
    }
    DELEGATED.with(|depth| depth.set(depth.get() + 1));
    let _leave = Leave;
    body()
}

/// The prefix of the `application_name` Citus gives its internal
/// connections (`CITUS_APPLICATION_NAME_PREFIX`, Citus 11 and later).
const INTERNAL: &[u8] = b"citus_internal gpid=";

/// Whether this backend serves one of Citus's internal connections.
fn internal_backend() -> bool {
    // SAFETY: application_name is a GUC string (NULL or NUL-terminated).
    unsafe {
        let name = pg_sys::application_name;
        !name.is_null() && CStr::from_ptr(name).to_bytes().starts_with(INTERNAL)
    }
}

/// Fails with 0A000 when a call that writes (`function`, e.g.
/// `rate_limit()`) runs inside one of Citus's per-shard queries: in a
/// Citus-internal backend, outside the limiter's delegated functions.
pub fn refuse_inside_shard_query(function: &'static str) -> Result<(), CallError> {
    if DELEGATED.with(Cell::get) > 0 || !internal_backend() {
        return Ok(());
    }
    Err(CallError::from(Error::InsideShardQuery(function)))
}

/// What a call on a distributed install checks before anything else
/// (before reading a definition, which on a node without Citus's metadata
/// would read this node's own, empty table): [`refuse_inside_shard_query`],
/// then that the tables are distributed as `distribute()` distributes them
/// and this node can route (55000 otherwise: no metadata, not preloaded).
pub fn before_call(function: &'static str) -> Result<(), CallError> {
    refuse_inside_shard_query(function)?;
    usable()
}

/// Whether a call may read and write this node's shards directly: unless
/// `citus.enable_local_execution` is off, outside the limiter's delegated
/// functions (which Citus runs where the shard is, through the connection
/// that holds what the transaction did there).
pub(super) fn local_execution() -> bool {
    if DELEGATED.with(Cell::get) > 0 {
        return true;
    }
    // SAFETY: reads a GUC's value (NULL when Citus is not loaded).
    unsafe {
        let value = pg_sys::GetConfigOption(c"citus.enable_local_execution".as_ptr(), true, false);
        value.is_null() || CStr::from_ptr(value).to_bytes() != b"off"
    }
}

/// For a call on a distributed install, before it reads anything (a
/// definition read on a node without Citus's metadata would be this
/// node's own, empty table): 55000 unless the tables are distributed as
/// `distribute()` distributes them and this node can route (its metadata
/// there, the library preloaded).
///
/// With `citus.enable_local_execution = off` (outside the limiter's
/// delegated functions) also 55000: Citus then does the transaction's
/// work on this node's shards through a connection of its own, whose
/// locks and uncommitted writes a call writing those shards directly
/// would wait for, or not see (before: a distributed deadlock after about
/// 1.6 s); the call fails at once instead, with the setting in the hint.
pub(super) fn usable() -> Result<(), CallError> {
    super::metadata::current_distribution()?.check()?;
    if !local_execution() {
        return Err(CallError::from(Error::Unusable(
            "rate_limiter cannot run with citus.enable_local_execution = off: Citus would run this transaction's work on this node's shards through a connection of its own, which the limiter's direct reads and writes of those shards would wait for or not see".into(),
            "SET citus.enable_local_execution = on (the default) for the transactions that call the limiter.",
        )));
    }
    Ok(())
}
