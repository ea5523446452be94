//! Two-phase commit of a transaction that consumed on several nodes:
//! Citus cannot see the limiter's direct writes, so once a transaction
//! has written directly here and consumed on another node, it runs one
//! statement that tells Citus ([`wrote`]).

use super::value::DistributionValue;
use crate::errors::CallError;
use pgrx::pg_sys;
use pgrx::prelude::*;
use std::cell::RefCell;

/// What this transaction consumed where, for [`wrote`].
#[derive(Default)]
pub(super) struct Writes {
    /// The distribution value of a row written directly on this node.
    pub(super) here: Option<DistributionValue>,
    /// Whether a row on another node was consumed (through Citus).
    pub(super) elsewhere: bool,
    /// Whether Citus was told that this node's writes need 2PC.
    pub(super) told: bool,
}

thread_local! {
    static WRITES: RefCell<Writes> = RefCell::new(Writes::default());
}

/// Forgets what the ending transaction wrote.
#[pg_guard]
pub(super) unsafe extern "C-unwind" fn at_transaction_end(
    event: pg_sys::XactEvent::Type,
    _argument: *mut std::ffi::c_void,
) {
    if matches!(
        event,
        pg_sys::XactEvent::XACT_EVENT_COMMIT
            | pg_sys::XactEvent::XACT_EVENT_ABORT
            | pg_sys::XactEvent::XACT_EVENT_PREPARE
            | pg_sys::XactEvent::XACT_EVENT_PARALLEL_COMMIT
            | pg_sys::XactEvent::XACT_EVENT_PARALLEL_ABORT
    ) {
        WRITES.with(|writes| writes.take());
        crate::clock::forget_callers_override();
    }
}

/// After a subtransaction rolled back: Citus may have been told inside it
/// (its statement is rolled back with it), so the next write tells it
/// again. (Citus 13.2.2 and 14.0.1 keep their note of the local execution
/// through the rollback; the limiter does not rely on it. What was written
/// here and elsewhere is kept as noted: at worst one more 2PC than needed.)
#[pg_guard]
pub(super) unsafe extern "C-unwind" fn at_subtransaction_abort(
    event: pg_sys::SubXactEvent::Type,
    _subtransaction: pg_sys::SubTransactionId,
    _parent: pg_sys::SubTransactionId,
    _argument: *mut std::ffi::c_void,
) {
    if event == pg_sys::SubXactEvent::SUBXACT_EVENT_ABORT_SUB {
        WRITES.with(|writes| writes.borrow_mut().told = false);
    }
}

/// Called once when the library is loaded: forget each transaction's
/// writes at its end, and that Citus was told after a subtransaction
/// rolled back.
pub fn register() {
    // SAFETY: registering callbacks that live as long as the library.
    unsafe {
        pg_sys::RegisterXactCallback(Some(at_transaction_end), std::ptr::null_mut());
        pg_sys::RegisterSubXactCallback(Some(at_subtransaction_abort), std::ptr::null_mut());
    }
}

/// A statement that changes nothing, routed to this node's shard of `$1`:
/// Citus runs it with local execution, which makes a transaction that
/// also wrote on other nodes commit everywhere with two-phase commit.
/// (Citus cannot see the direct writes: without it, the other nodes would
/// commit before this one, each on its own.)
pub(super) const TELL_CITUS: &str =
    "DELETE FROM rate_limiter.rate_limits WHERE dkey = $1 AND shard = -1";

/// Notes a direct write on this node (`dkey` its row's value) or a
/// consumption on another node, and once a transaction has both, runs
/// [`TELL_CITUS`] (once). A transaction that consumed on one node only
/// (a tenant's colocated rows) stays one-phase.
pub(super) fn wrote(here: Option<&DistributionValue>) -> Result<(), CallError> {
    let dkey = WRITES.with(|writes| {
        let mut writes = writes.borrow_mut();
        match here {
            Some(dkey) if writes.here.is_none() => writes.here = Some(dkey.clone()),
            Some(_) => {}
            None => writes.elsewhere = true,
        }
        if writes.told || !writes.elsewhere {
            return None;
        }
        let dkey = writes.here.clone()?;
        writes.told = true;
        Some(dkey)
    });
    if let Some(dkey) = dkey {
        crate::security::as_owner(|| {
            Spi::connect_mut(|client| {
                client
                    .update(TELL_CITUS, None, &[dkey.argument()])
                    .map(|_| ())
            })
        })?;
    }
    Ok(())
}
