//! The writes of an all-or-nothing call (`rate_limit_all`): every state row
//! of every limit the call names, locked in one fixed order, then every
//! consumption written, or none.
//!
//! 1. The rows are sorted by (name, key, shard), bytewise, the global limit
//!    (key NULL) before every key, and each is acquired in that order as
//!    `rate_limit` acquires its row (`consume.rs`: wait for the lock; a
//!    missing row is a full limit). Two such calls with overlapping limits
//!    therefore never wait for each other in a cycle, whatever order their
//!    requests are given in. Every shard of a sharded limit is locked (the
//!    call may consume from any two of them).
//! 2. `decide` runs once every lock is held (it reads the clock then).
//! 3. Refused: nothing is written (under REPEATABLE READ / SERIALIZABLE the
//!    refusal is confirmed against the snapshot, as `rate_limit`'s is).
//!    Admitted: the missing rows are inserted first, in one speculative
//!    batch; if another transaction inserted one of them meanwhile, the
//!    whole batch is withdrawn and the call starts again at step 1 (it
//!    keeps the locks it holds; the rows it waits for are ones whose
//!    inserter already holds all its locks). Then the locked rows are
//!    updated.

use super::consume::{
    acquire, begin_write, confirm_refusal, end_write, insert_new, write_locked, Acquired,
};
use super::{timestamp, Datums, RowId};
use crate::errors::CallError;
use rate_limiter_algorithm::State;

/// Locks `rows` (sorted and without duplicates: see [`sort_rows`]), calls
/// `decide` with their stored states (`None` = no row) once all are
/// locked, and writes the states it returns: `Some(states)` (one per row,
/// `None` = leave alone) means admitted, `None` means refused, write
/// nothing. Returns `decide`'s answer.
///
/// Errors: as [`super::consume`] (25006 in a read-only transaction, 40001,
/// timeouts and cancels while waiting), and `decide`'s own.
pub fn consume_all_or_nothing<T>(
    rows: &[RowId<'_>],
    mut decide: impl FnMut(&[Option<State>]) -> Result<(T, Option<Vec<Option<State>>>), CallError>,
) -> Result<T, CallError> {
    // SAFETY: every step gets the relations opened here and this
    // transaction's command id.
    unsafe {
        let (relations, command) = begin_write(c"rate_limit_all()");
        let answer = loop {
            let mut acquired = Vec::with_capacity(rows.len());
            for row in rows {
                acquired.push(acquire(&relations, *row, command)?);
            }
            let stored: Vec<Option<State>> = acquired
                .iter()
                .map(|a| match a {
                    Acquired::Locked(locked) => Some(locked.state),
                    Acquired::New => None,
                })
                .collect();
            let (answer, writes) = decide(&stored)?;
            let Some(writes) = writes else {
                confirm_refusal(&relations, rows.iter().copied().zip(stored))?;
                break answer;
            };
            let mut new_rows = Vec::new();
            for ((row, acquired), write) in rows.iter().zip(&acquired).zip(&writes) {
                if let (Acquired::New, Some(state)) = (acquired, write) {
                    let mut datums = Datums::of(*row);
                    datums.set_state(state.value, timestamp(state.ts)?);
                    new_rows.push(datums);
                }
            }
            if !new_rows.is_empty() && !insert_new(&relations, &mut new_rows, command) {
                // Another transaction inserted one of the rows: look again.
                continue;
            }
            for (acquired, write) in acquired.iter_mut().zip(writes) {
                if let (Acquired::Locked(locked), Some(state)) = (acquired, write) {
                    if state != locked.state {
                        write_locked(&relations, locked, state, command)?;
                    }
                }
            }
            break answer;
        };
        end_write();
        Ok(answer)
    }
}

/// Sorts `rows` into the lock order of [`consume_all_or_nothing`] (name,
/// then key with NULL first, then shard; bytewise) and removes duplicates.
pub fn sort_rows(rows: &mut Vec<RowId<'_>>) {
    rows.sort_by(|a, b| (a.name, a.key, a.shard).cmp(&(b.name, b.key, b.shard)));
    rows.dedup_by(|a, b| (a.name, a.key, a.shard) == (b.name, b.key, b.shard));
}
