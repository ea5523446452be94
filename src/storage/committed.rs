//! Reads without a lock and what REPEATABLE READ asks of them: the
//! committed state a refusal decides on without waiting
//! ([`committed_snapshot`], [`read_committed`], [`read_committed_shards`]),
//! and the check that a decision made without writing rests on the
//! transaction snapshot's row ([`confirm_unwritten`], 40001 otherwise).

use super::layout::{Datums, LimitRows, RowId};
use super::read::shard_states;
use super::relations::Relations;
use crate::errors::CallError;
use pgrx::pg_sys;
use rate_limiter_algorithm::State;

/// The snapshot a refusal without a lock decides on (docs/guarantees.md,
/// "Concurrency and exactness"): under READ COMMITTED the latest one (what
/// has committed by now, and this transaction's own earlier writes), as the
/// row lock would read it; under REPEATABLE READ or SERIALIZABLE the
/// transaction's snapshot, so that the refusal is a read of the row as of
/// that snapshot and, under SERIALIZABLE, carries the predicate locks
/// `SELECT` would take (an anomaly that involves it ends in 40001).
///
/// # Safety
/// Inside a transaction; the snapshot is valid until the next call of
/// this function or of `GetTransactionSnapshot`.
pub(super) unsafe fn committed_snapshot() -> pg_sys::Snapshot {
    if uses_transaction_snapshot() {
        pg_sys::GetTransactionSnapshot()
    } else {
        pg_sys::GetLatestSnapshot()
    }
}

/// The state of `row` in the [`committed_snapshot`], without locking or
/// waiting: `None` when there is no row (a full limit). A transaction
/// still writing the row is not waited for: its write is not seen.
///
/// # Safety
/// `relations` open.
pub(super) unsafe fn read_committed(relations: &Relations, row: RowId<'_>) -> Option<State> {
    relations
        .find(
            &Datums::of(row, relations.extra()),
            committed_snapshot(),
            true,
        )
        .and_then(|(_, state)| state)
}

/// The state of every shard of `limit` in the [`committed_snapshot`], as
/// [`read_committed`] reads one row: `states[i]` is shard `i`.
///
/// # Safety
/// `relations` open.
pub(super) unsafe fn read_committed_shards(
    relations: &Relations,
    limit: LimitRows<'_>,
) -> Vec<Option<State>> {
    let found = relations.find_shards(
        &Datums::of(limit.row(0), relations.extra()),
        committed_snapshot(),
    );
    shard_states(found, limit.shards)
}

/// Under REPEATABLE READ or SERIALIZABLE, a decision about a row the call
/// does not write (a refusal, or an admission that leaves the row as it
/// was) must rest on what the transaction's snapshot sees: reads each row
/// of `rows` again through the unique index with the transaction snapshot
/// and raises 40001 when its state is not the one decided on. Under
/// SERIALIZABLE that read takes the predicate locks `SELECT ... FOR
/// UPDATE` would (the index page and the tuple, `PredicateLockPage` /
/// `PredicateLockTID`), so an anomaly that involves the decision ends in
/// 40001 too. (A written row checks for conflicts itself.) Nothing to do
/// under READ COMMITTED.
///
/// # Safety
/// `relations` open.
pub(super) unsafe fn confirm_unwritten<'a>(
    relations: &Relations,
    rows: impl IntoIterator<Item = (RowId<'a>, Option<State>)>,
) -> Result<(), CallError> {
    if !uses_transaction_snapshot() {
        return Ok(());
    }
    let snapshot = pg_sys::GetTransactionSnapshot();
    for (row, decided) in rows {
        let seen = relations
            .find(&Datums::of(row, relations.extra()), snapshot, true)
            .and_then(|(_, state)| state);
        if seen != decided {
            return Err(serialization_failure(false));
        }
    }
    Ok(())
}

pub(super) fn serialization_failure(deleted: bool) -> CallError {
    CallError::SerializationFailure(if deleted {
        "could not serialize access due to concurrent delete"
    } else {
        "could not serialize access due to concurrent update"
    })
}

pub(super) fn uses_transaction_snapshot() -> bool {
    // SAFETY: reading a backend-local setting.
    unsafe { pg_sys::XactIsoLevel >= pg_sys::XACT_REPEATABLE_READ as i32 }
}
