//! Internal subtransactions: work that is kept or rolled back as a whole
//! inside the caller's transaction, as a PL/pgSQL `BEGIN ... EXCEPTION`
//! block does. On a distributed install Citus rolls back what the work
//! did on other nodes too (it turns the subtransaction into a savepoint on
//! each connection the work used).

use crate::errors::CallError;
use pgrx::pg_sys;
use pgrx::PgTryBuilder;

/// Runs `body` in an internal subtransaction, which is kept when `body`
/// returns `Ok(answer)` and `keep(&answer)` holds, and rolled back
/// otherwise: when `keep` is false, when `body` returns an error, and when
/// it raises one (which is then raised again, as the caller would have
/// seen it). Row locks taken by a rolled-back subtransaction are released.
pub fn kept_if<T>(
    body: impl FnOnce() -> Result<T, CallError>,
    keep: impl FnOnce(&T) -> bool,
) -> Result<T, CallError> {
    // SAFETY: the subtransaction is begun and ended (released or rolled
    // back) here, on every path, and the memory context and resource
    // owner are restored afterwards, as PL/pgSQL's exec_stmt_block does.
    unsafe {
        let context = pg_sys::CurrentMemoryContext;
        let owner = pg_sys::CurrentResourceOwner;
        pg_sys::BeginInternalSubTransaction(std::ptr::null());
        pg_sys::MemoryContextSwitchTo(context);
        let restore = move || {
            pg_sys::MemoryContextSwitchTo(context);
            pg_sys::CurrentResourceOwner = owner;
        };
        let outcome = PgTryBuilder::new(std::panic::AssertUnwindSafe(body))
            .catch_others(|error| {
                pg_sys::RollbackAndReleaseCurrentSubTransaction();
                restore();
                error.rethrow()
            })
            .execute();
        match &outcome {
            Ok(answer) if keep(answer) => pg_sys::ReleaseCurrentSubTransaction(),
            _ => pg_sys::RollbackAndReleaseCurrentSubTransaction(),
        }
        restore();
        outcome
    }
}
