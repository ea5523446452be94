//! A consuming call: `rate_limit`'s lock, decision and write of one state
//! row, inside the caller's transaction. It works on the heap and the
//! indexes directly, doing what PostgreSQL's own `INSERT ... ON CONFLICT DO
//! UPDATE` does, without building and running a plan each time (the
//! executor's start-up and tear-down cost more than the work itself):
//!
//! 1. Look the row up in the unique index with a dirty snapshot. If a
//!    transaction that is still running inserted, updated or deleted it,
//!    wait for that transaction to end and look again.
//! 2. Row found: lock it (`FOR NO KEY UPDATE`, waiting for other lockers).
//!    If it changed while we waited, look again under READ COMMITTED, and
//!    raise 40001 under REPEATABLE READ or SERIALIZABLE, as also when the
//!    locked row is not visible to the transaction's snapshot. Then decide
//!    on the locked row, with the clock read now, and update it in place
//!    (a HOT update whenever the page has room; otherwise a new index entry).
//!    A refusal writes nothing; the row stays locked until the transaction
//!    ends.
//! 3. No row: decide for a full limit and insert the row speculatively: a
//!    heap tuple marked with a speculative-insertion token, then the index
//!    entry. If a concurrent transaction inserted the same (name, key,
//!    shard) meanwhile, our tuple is killed and we start again at 1, so two
//!    new-key callers never get a unique violation: one inserts, the other
//!    waits and updates (or gets 40001 under REPEATABLE READ).
//!
//! 0. When `lock_free` (refusals never wait: docs/guarantees.md,
//!    "Concurrency and exactness"): decide first on the row as committed,
//!    without a lock. A refusal is answered from it at once: nothing
//!    locked, nothing written, no wait for a transaction holding the row.
//!    Anything else goes on to 1 and decides again under the lock. Under
//!    READ COMMITTED the committed state comes from step 1's own look with
//!    the dirty snapshot (`peek`: a version another running transaction is
//!    writing shows its committed state), so the call still descends the
//!    index once; when another transaction is writing the row, the call
//!    waits for it to end without locking and comes back here, to decide on
//!    what it committed (a refusal after the wait takes no lock either).
//!    Under REPEATABLE READ / SERIALIZABLE it is the row the transaction's
//!    snapshot sees ([`read_committed`], with the predicate lock a `SELECT`
//!    takes).
//!
//! Every write is WAL-logged, counted in `pg_stat_user_tables`, and undone
//! by a rollback, exactly like the statement it replaces. What this skips,
//! by design: triggers and rules on `rate_limiter.rate_limits` (the table
//! is the extension's; nothing else should attach to it) and privilege
//! checks (the caller's EXECUTE on the function is the permission).

use super::committed::{confirm_unwritten, read_committed, uses_transaction_snapshot};
use super::insert::insert_new;
use super::layout::{timestamp, Datums, RowId};
use super::relations::Relations;
use super::rows::{
    acquire, lock_waiting, peek, wait_for_writer, write_locked, Acquired, LockedRow, Peek,
};
use super::target::Target;
use crate::errors::CallError;
use pgrx::pg_sys;
use rate_limiter_algorithm::{Decision, LimitError, State};
use std::ffi::CStr;

/// Consumes from the state row of `row` (see the module documentation) and
/// returns the decision. `decide` runs the math: it gets the stored state
/// (`None` for a new row), reads the clock itself, and is called only once
/// the row is locked (or known to be new); with `lock_free`, also once
/// before, on the committed row (step 0), whose refusal is the answer.
/// Its error is returned after everything is released, with nothing
/// written.
///
/// Errors: 25006 in a read-only transaction; 40001 when the row changed
/// after the snapshot of a REPEATABLE READ or SERIALIZABLE transaction;
/// lock and statement timeouts and cancels while waiting for the row lock.
pub fn consume(
    row: RowId<'_>,
    target: Target,
    lock_free: bool,
    mut decide: impl FnMut(Option<State>) -> Result<Decision, CallError>,
) -> Result<Decision, CallError> {
    // SAFETY: each step gets the relations opened here and the command id
    // of this transaction.
    unsafe {
        let (relations, command) = begin_write(c"rate_limit()", target);
        let decision = if lock_free && !uses_transaction_snapshot() {
            consume_looking_first(&relations, row, command, &mut decide)?
        } else {
            if lock_free {
                // REPEATABLE READ / SERIALIZABLE: the snapshot's row, read
                // as a SELECT reads it (with its predicate lock).
                let decision = decide(read_committed(&relations, row))?;
                if !decision.ok {
                    end_write();
                    return Ok(decision);
                }
            }
            consume_locking(&relations, row, command, &mut decide)?
        };
        end_write();
        Ok(decision)
    }
}

/// Steps 1 to 3: lock the row (waiting as long as it takes) or insert it,
/// and decide on it.
///
/// # Safety
/// `relations` opened by [`begin_write`], `command` its command id.
unsafe fn consume_locking(
    relations: &Relations,
    row: RowId<'_>,
    command: pg_sys::CommandId,
    decide: &mut impl FnMut(Option<State>) -> Result<Decision, CallError>,
) -> Result<Decision, CallError> {
    loop {
        // An unsharded limit counts no contention.
        match acquire(relations, row, command, &mut false)? {
            Acquired::Locked(mut locked) => {
                return decide_locked(relations, row, &mut locked, command, decide)
            }
            Acquired::New => {
                if let Some(decision) = insert(relations, row, command, decide)? {
                    return Ok(decision);
                }
                // Another transaction inserted the row first: look again.
            }
        }
    }
}

/// Step 0 and then 1 to 3 under READ COMMITTED with lock-free refusals, in
/// one look at the row ([`peek`], a dirty snapshot: the committed state,
/// and whether another transaction is writing the row): decide on the
/// committed state; a refusal is the answer. Otherwise a free row is
/// locked (waiting only for a transaction that merely locked it) and
/// decided on again; a row another transaction is writing is waited for
/// without a lock, then looked at again (so a refusal after the wait takes
/// no lock either); a missing row is inserted.
///
/// # Safety
/// As [`consume_locking`].
unsafe fn consume_looking_first(
    relations: &Relations,
    row: RowId<'_>,
    command: pg_sys::CommandId,
    decide: &mut impl FnMut(Option<State>) -> Result<Decision, CallError>,
) -> Result<Decision, CallError> {
    loop {
        pgrx::check_for_interrupts!();
        let peeked = peek(relations, &Datums::of(row, relations.extra()));
        let committed = match peeked {
            Peek::Missing => None,
            Peek::Busy { state } | Peek::Free { state, .. } => state,
        };
        let decision = decide(committed)?;
        if !decision.ok {
            return Ok(decision);
        }
        match peeked {
            // Nobody writes it: lock it, and decide again under the lock.
            Peek::Free { tid, .. } => {
                // Waiting only for a transaction that merely locked it.
                if let Some(mut locked) =
                    lock_waiting(relations, tid, row.regime, command, &mut false)?
                {
                    return decide_locked(relations, row, &mut locked, command, decide);
                }
                // Changed since the look: look again.
            }
            // Another transaction is writing (or inserting) it: wait for
            // that one to end, then look again.
            Peek::Busy { .. } => wait_for_writer(relations, row),
            Peek::Missing => {
                if let Some(decision) = insert(relations, row, command, decide)? {
                    return Ok(decision);
                }
                // Another transaction inserted it first: look again.
            }
        }
    }
}

/// Step 2's decision on the locked row, and its write (or, for a refusal
/// under the lock, the REPEATABLE READ check that it rests on the
/// snapshot's row).
///
/// # Safety
/// As [`consume_locking`]; `locked` locked by this call.
unsafe fn decide_locked(
    relations: &Relations,
    row: RowId<'_>,
    locked: &mut LockedRow,
    command: pg_sys::CommandId,
    decide: &mut impl FnMut(Option<State>) -> Result<Decision, CallError>,
) -> Result<Decision, CallError> {
    let decision = decide(locked.state)?;
    match decision.new_state {
        Some(state) => write_locked(relations, locked, state, command)?,
        None => confirm_unwritten(relations, [(row, locked.state)])?,
    }
    Ok(decision)
}

/// Step 3: decides for a full limit and inserts the row speculatively;
/// `None` when another transaction inserted it first (nothing written).
///
/// # Safety
/// As [`consume_locking`].
unsafe fn insert(
    relations: &Relations,
    row: RowId<'_>,
    command: pg_sys::CommandId,
    decide: &mut impl FnMut(Option<State>) -> Result<Decision, CallError>,
) -> Result<Option<Decision>, CallError> {
    let decision = decide(None)?;
    let Some(state) = decision.new_state else {
        return Err(CallError::Limit(LimitError::out_of_range(
            "count",
            "a full limit refused the call".to_string(),
        )));
    };
    let mut datums = Datums::of(row, relations.extra());
    datums.set_state(state.value, timestamp(state.ts)?, state.previous);
    Ok(insert_new(relations, &mut [datums], command).then_some(decision))
}

/// Checks that the transaction may write (`function`, e.g. `rate_limit()`,
/// names the call in the 25006 error), opens the relations for writing
/// of `target` and returns them with the command id for the writes. Every consuming
/// call starts here and ends with [`end_write`].
///
/// # Safety
/// Must be called inside a transaction, from a function call.
pub(super) unsafe fn begin_write(
    function: &CStr,
    target: Target,
) -> (Relations, pg_sys::CommandId) {
    pg_sys::PreventCommandIfReadOnly(function.as_ptr());
    pg_sys::PreventCommandIfParallelMode(function.as_ptr());
    let relations = Relations::open_for_write(target);
    // See the changes of earlier commands of this transaction, as a new
    // statement would (a second call in the same statement included).
    pg_sys::CommandCounterIncrement();
    (relations, pg_sys::GetCurrentCommandId(true))
}

/// Makes the writes of a consuming call visible to the rest of the
/// transaction.
///
/// # Safety
/// As [`begin_write`].
pub(super) unsafe fn end_write() {
    pg_sys::CommandCounterIncrement();
}
