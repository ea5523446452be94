//! Which events of PostgreSQL's transaction callbacks
//! (`RegisterXactCallback`) end a transaction: commit, abort or prepare,
//! of a transaction or of a parallel worker's part of one. The callbacks
//! that act when a transaction is over (the statistics publish their
//! counts, the kept scan is forgotten) ask this.

use pgrx::pg_sys;

/// Whether `event` ends the transaction (`xact.h`: `XACT_EVENT_COMMIT`,
/// `XACT_EVENT_PARALLEL_COMMIT`, `XACT_EVENT_ABORT`,
/// `XACT_EVENT_PARALLEL_ABORT`, `XACT_EVENT_PREPARE`; not the `PRE_`
/// events, which come before the end and may still fail).
pub fn ends(event: pg_sys::XactEvent::Type) -> bool {
    use pg_sys::XactEvent::*;
    matches!(
        event,
        XACT_EVENT_COMMIT
            | XACT_EVENT_PARALLEL_COMMIT
            | XACT_EVENT_ABORT
            | XACT_EVENT_PARALLEL_ABORT
            | XACT_EVENT_PREPARE
    )
}
