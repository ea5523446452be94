//! The writes of an all-or-nothing call (`rate_limit_all`): every state row
//! of every limit the call names, held in one fixed order, then every
//! consumption written, or none.
//!
//! 0. With `lock_free` (refusals never wait: docs/guarantees.md,
//!    "Concurrency and exactness"): `decide` runs first on every row as
//!    committed, before any lock; a refusal from that state is the
//!    answer, with nothing held or written. Under READ COMMITTED each row
//!    is looked at as `rate_limit` looks at its row (`peek`, a dirty
//!    snapshot), and step 1 starts from what the look found: a free row is
//!    locked at its tid, a missing one inserted at once, so a row's index
//!    is descended once unless the row changed in between (under
//!    REPEATABLE READ / SERIALIZABLE the look is the snapshot's,
//!    `read_committed`, and step 1 looks again). Otherwise:
//! 1. The rows are sorted by (name, key, shard), bytewise, the global limit
//!    (key NULL) before every key, and each is *held* in that order before
//!    the next is looked at:
//!    - a row that exists is locked as `rate_limit` locks its row
//!      (`consume.rs`: wait for the lock);
//!    - a missing row (a full limit) is held by inserting a placeholder
//!      for it ([`insert_one`]): until the transaction ends, a transaction
//!      that looks the row up waits for this one, as for a lock. If
//!      another transaction inserted the row first, the placeholder is
//!      withdrawn and the row looked up again (waiting for that
//!      transaction), still in order.
//!
//!    So a call waits only for a row that sorts after every row it holds,
//!    and two such calls with overlapping limits never wait for each other
//!    in a cycle, whatever order their requests are given in. Every
//!    existing shard of a sharded limit is held (the call may consume from
//!    any of them), and of its missing (full) shards the first `2 m`, for a
//!    limit named by `m` requests: the math takes the fullest shards with
//!    the lowest numbers, so the others are never used, and get no
//!    placeholder.
//!    A missing row must be held too: a call that only noted it as missing
//!    and went on to lock later rows could find it inserted and locked by
//!    another call that then waits for one of those later rows (a deadlock
//!    the concurrency test `all_or_nothing.rs` found).
//! 2. `decide` runs once every row is held (it reads the clock then; or
//!    step 0's decision stands for it: step 5). If it fails, the
//!    placeholders are deleted and nothing is written.
//! 3. Refused: the placeholders are deleted ([`delete_inserted`]) and
//!    nothing else is written (under REPEATABLE READ / SERIALIZABLE the
//!    refusal is then confirmed against the snapshot, as `rate_limit`'s
//!    is). Admitted: the placeholders of rows that are not written are
//!    deleted, and every written row is updated to its new state
//!    (`heap_update`, as `ExecUpdate` would; a placeholder is this
//!    transaction's own insert, updated by a later command). Rows decided
//!    on but not changed (a count of 0, the same window) are confirmed as
//!    reads under REPEATABLE READ / SERIALIZABLE, as a refusal's rows are,
//!    so under SERIALIZABLE they carry predicate locks. A placeholder
//!    is never seen with its placeholder state: other transactions see it
//!    only once committed, and by then it is updated or deleted.
//! 4. The rows at the end of the order that step 0's look found missing
//!    (READ COMMITTED) get no placeholder: step 2 decides with them as
//!    full while the rows before them are held, and an admission inserts
//!    the ones it writes with their new state, as `rate_limit` inserts a
//!    new row (one heap tuple each instead of a placeholder and its
//!    update). Nothing is held after them, so holding them only now keeps
//!    step 1's order. If another transaction inserted one of them
//!    meanwhile, the insert withdraws (nothing of it stays written), they
//!    are held as in step 1 (waiting for that transaction), and step 2
//!    decides again.
//! 5. When step 1 finds every row as step 0 saw it (the same state, or
//!    missing) and waited for nothing, step 2 would decide on the same
//!    states as step 0 did: step 0's decision is used, its clock read
//!    after every look and microseconds before the locks (a row changed
//!    in between is not the same, and is decided on again).

use super::committed::{confirm_unwritten, read_committed, uses_transaction_snapshot};
use super::consume::{begin_write, end_write};
use super::insert::{delete_inserted, insert_new, insert_one};
use super::layout::{timestamp, Datums, RowId};
use super::relations::Relations;
use super::rows::{acquire, lock_waiting, peek, write_locked, Acquired, LockedRow, Peek};
use super::target::Target;
use crate::errors::CallError;
use pgrx::pg_sys;
use rate_limiter_algorithm::State;

/// The state a placeholder is inserted with (see the module documentation:
/// it is updated or deleted before anyone else can see it).
const PLACEHOLDER: State = State {
    value: 0.0,
    ts: 0,
    previous: 0.0,
};

/// A row this call holds (or, when missing and not needed, only looked at).
enum Held {
    /// It exists and this call holds its lock.
    Locked(LockedRow),
    /// It was missing; this call's placeholder at `tid` holds it. `datums`
    /// are the row's, complete.
    Placeholder {
        tid: pg_sys::ItemPointerData,
        datums: Datums,
    },
    /// It was missing and the call does not need it: a full shard it will
    /// not consume from (see `missing_held`), neither held nor written.
    Skipped,
    /// It was missing at step 0's look, and so was every row after it: it
    /// is inserted once decided (step 4), or held then if that fails.
    Deferred,
    /// A deferred row, inserted with its new state: written.
    Inserted,
}

impl Held {
    fn is_placeholder(&self) -> bool {
        matches!(self, Held::Placeholder { .. })
    }
}

/// Locks `rows` (sorted and without duplicates: see [`sort_rows`]), all in
/// the relation of `target`, calls
/// `decide` with their stored states (`None` = no row) and, for each row,
/// whether the call had to wait for another transaction to get it, once
/// all are held, and writes the states it returns: `Some(states)` (one per row,
/// `None` = leave alone) means admitted, `None` means refused, write
/// nothing. Returns `decide`'s answer.
///
/// `missing_held(row)` is how many missing rows of `row`'s limit (name,
/// key) the call must hold: missing shards are full, and the math takes
/// the fullest shards with the lowest numbers first, so a limit named by
/// `m` requests consumes from at most the first `2 m` missing shards. The
/// later missing shards are neither held nor written (no placeholder row
/// for a shard the call cannot use); `decide` writing one is an internal
/// error, never a silent write.
///
/// With `lock_free`, `decide` runs first on the committed rows (nothing
/// waited for), and a refusal there is the answer (step 0).
///
/// Errors: as [`super::consume`] (25006 in a read-only transaction, 40001,
/// timeouts and cancels while waiting), and `decide`'s own (returned after
/// the placeholders are deleted: nothing stays written).
pub fn consume_all_or_nothing<T>(
    target: Target,
    rows: &[RowId<'_>],
    missing_held: impl Fn(RowId<'_>) -> usize,
    lock_free: bool,
    mut decide: impl FnMut(
        &[Option<State>],
        &[bool],
    ) -> Result<(T, Option<Vec<Option<State>>>), CallError>,
) -> Result<T, CallError> {
    // SAFETY: every step gets the relations opened here and this
    // transaction's command id.
    unsafe {
        let (relations, command) = begin_write(c"rate_limit_all()", target);
        // Under READ COMMITTED the lock-free look at each row is `peek`'s
        // (as `rate_limit`'s is): what it found is where step 1 starts.
        let mut peeked: Vec<Peek> = Vec::new();
        let mut first = None;
        if lock_free {
            let stored: Vec<Option<State>> = if uses_transaction_snapshot() {
                rows.iter()
                    .map(|row| read_committed(&relations, *row))
                    .collect()
            } else {
                peeked = rows
                    .iter()
                    .map(|row| peek(&relations, &Datums::of(*row, relations.extra())))
                    .collect();
                peeked
                    .iter()
                    .map(|peek| match peek {
                        Peek::Missing => None,
                        Peek::Busy { state } | Peek::Free { state, .. } => *state,
                    })
                    .collect()
            };
            let (answer, writes) = decide(&stored, &vec![false; rows.len()])?;
            let Some(writes) = writes else {
                end_write();
                return Ok(answer);
            };
            first = Some((stored, answer, writes));
        }
        // The rows from here on were all missing at step 0's look: they
        // are inserted only once decided, with their new state (step 4).
        let deferred_from = rows.len()
            - peeked
                .iter()
                .rev()
                .take_while(|peek| matches!(peek, Peek::Missing))
                .count();
        let mut command = command;
        let mut held = Vec::with_capacity(rows.len());
        let mut waited = vec![false; rows.len()];
        let holding = Holding {
            relations: &relations,
            rows,
            missing_held: &missing_held,
        };
        holding.hold_from(0, &peeked, deferred_from, command, &mut held, &mut waited)?;
        let (answer, writes, stored) = loop {
            let stored: Vec<Option<State>> = held
                .iter()
                .map(|held| match held {
                    Held::Locked(locked) => locked.state,
                    _ => None,
                })
                .collect();
            let placeholders: Vec<_> = held
                .iter()
                .filter_map(|held| match held {
                    Held::Placeholder { tid, .. } => Some(*tid),
                    _ => None,
                })
                .collect();
            // Step 0's decision is step 2's when step 1 found every row as
            // step 0 did and waited for nothing: step 2 would decide on the
            // same states (only the clock would be read again).
            let decided = match first.take() {
                Some((seen, answer, writes)) if seen == stored && !waited.contains(&true) => {
                    Ok((answer, Some(writes)))
                }
                _ => decide(&stored, &waited),
            };
            let (answer, writes) = match decided {
                Ok(decided) => decided,
                Err(error) => {
                    // Nothing is written: not even a placeholder (the caller
                    // may start again in the same transaction).
                    delete_inserted(&relations, &placeholders);
                    return Err(error);
                }
            };
            let Some(mut writes) = writes else {
                delete_inserted(&relations, &placeholders);
                confirm_unwritten(&relations, rows.iter().copied().zip(stored))?;
                end_write();
                return Ok(answer);
            };
            let deferred: Vec<usize> = (deferred_from..rows.len())
                .filter(|index| matches!(held[*index], Held::Deferred))
                .collect();
            if deferred.is_empty() {
                break (answer, writes, stored);
            }
            // Step 4: the deferred rows written are inserted with their new
            // state, as `rate_limit` inserts a new row.
            let mut new_rows = Vec::with_capacity(deferred.len());
            for index in &deferred {
                if let Some(state) = writes[*index] {
                    let mut datums = Datums::of(rows[*index], relations.extra());
                    datums.set_state(state.value, timestamp(state.ts)?, state.previous);
                    new_rows.push(datums);
                }
            }
            if insert_new(&relations, &mut new_rows, command) {
                for index in deferred {
                    held[index] = if writes[index].take().is_some() {
                        Held::Inserted
                    } else {
                        Held::Skipped
                    };
                }
                break (answer, writes, stored);
            }
            // Another transaction inserted one of them first (what this
            // call inserted is deleted again): hold them now, waiting for
            // it, and decide again. No row after them is held, so the
            // order of step 1 is kept.
            // (Every row from the first deferred one on is held again: which
            // missing shards the call may hold depends on which exist now.)
            command = pg_sys::GetCurrentCommandId(true);
            holding.hold_from(
                deferred_from,
                &[],
                rows.len(),
                command,
                &mut held,
                &mut waited,
            )?;
        };
        // Placeholders of rows that are not written are deleted (which ends
        // the command, so the written ones can then be updated).
        let unwritten: Vec<_> = held
            .iter()
            .zip(&writes)
            .filter_map(|(held, write)| match (held, write) {
                (Held::Placeholder { tid, .. }, None) => Some(*tid),
                _ => None,
            })
            .collect();
        delete_inserted(&relations, &unwritten);
        // Rows decided on but left as they were are reads: under
        // REPEATABLE READ / SERIALIZABLE they are confirmed against the
        // snapshot (and predicate-locked), as a refusal's are.
        let read_only: Vec<_> = rows
            .iter()
            .zip(&stored)
            .zip(&writes)
            .zip(&held)
            .filter(|(((_, stored), write), held)| {
                !matches!(held, Held::Inserted) && (write.is_none() || **write == **stored)
            })
            .map(|(((row, stored), _), _)| (*row, *stored))
            .collect();
        confirm_unwritten(&relations, read_only)?;
        // A placeholder is updated by a later command than the one that
        // inserted it (heap_update does not see a tuple of its own command).
        let command = if unwritten.len() < held.iter().filter(|h| h.is_placeholder()).count() {
            pg_sys::CommandCounterIncrement();
            pg_sys::GetCurrentCommandId(true)
        } else {
            command
        };
        for (held, write) in held.into_iter().zip(writes) {
            let Some(state) = write else { continue };
            let mut locked = match held {
                Held::Locked(locked) => locked,
                Held::Placeholder { tid, datums } => LockedRow::inserted(tid, datums, PLACEHOLDER),
                Held::Skipped | Held::Deferred | Held::Inserted => {
                    pgrx::error!(
                        "rate_limiter: rate_limit_all() would write a shard it does not hold"
                    )
                }
            };
            if Some(state) != locked.state {
                write_locked(&relations, &mut locked, state, command)?;
            }
        }
        end_write();
        Ok(answer)
    }
}

/// What step 1 needs to hold rows: the call's relations, its rows (in
/// order) and how many missing rows of each limit it may hold.
struct Holding<'a, 'r, M: Fn(RowId<'_>) -> usize> {
    relations: &'a Relations,
    rows: &'a [RowId<'r>],
    missing_held: &'a M,
}

impl<M: Fn(RowId<'_>) -> usize> Holding<'_, '_, M> {
    /// Holds the rows from `from` on, in order, replacing what `held` had
    /// from there: with [`hold`] (given what step 0's look found,
    /// `peeked`), the rows from `deferred_from` on deferred (step 4). A
    /// missing row is held only while fewer than `missing_held` missing
    /// rows of its limit are (the others are `Skipped`).
    ///
    /// # Safety
    /// As [`hold`].
    unsafe fn hold_from(
        &self,
        from: usize,
        peeked: &[Peek],
        deferred_from: usize,
        command: pg_sys::CommandId,
        held: &mut Vec<Held>,
        waited: &mut [bool],
    ) -> Result<(), CallError> {
        held.truncate(from);
        for index in from..self.rows.len() {
            let row = self.rows[index];
            // Missing rows of this limit held so far (rows of one limit
            // are next to each other in the sorted order).
            let placeholders = held
                .iter()
                .zip(self.rows)
                .rev()
                .take_while(|(_, other)| (other.name, other.key) == (row.name, row.key))
                .filter(|(held, _)| matches!(held, Held::Placeholder { .. } | Held::Deferred))
                .count();
            let may_hold_missing = placeholders < (self.missing_held)(row);
            let this = if index < deferred_from {
                hold(
                    self.relations,
                    row,
                    peeked.get(index),
                    command,
                    may_hold_missing,
                    &mut waited[index],
                )?
            } else if may_hold_missing {
                Held::Deferred
            } else {
                Held::Skipped
            };
            held.push(this);
        }
        Ok(())
    }
}

/// Step 1 for one row: lock it, or hold it with a placeholder when it is
/// missing (or, when `may_hold_missing` is false, leave it: `Skipped`),
/// looking again (and waiting) when another transaction inserted it first.
/// Sets `waited` when it waited for another transaction.
///
/// `peeked`, what step 0's look found (READ COMMITTED), saves the second
/// descent of the index: a row found free is locked at its tid (found
/// again only if it changed since), a missing one is inserted at once (a
/// row inserted since makes the insert withdraw, and the row is found
/// again). A row found busy is found again, waiting for its writer.
///
/// # Safety
/// `relations` opened by [`begin_write`], `command` its command id.
unsafe fn hold(
    relations: &Relations,
    row: RowId<'_>,
    peeked: Option<&Peek>,
    command: pg_sys::CommandId,
    may_hold_missing: bool,
    waited: &mut bool,
) -> Result<Held, CallError> {
    let mut look = true;
    match peeked {
        Some(Peek::Free { tid, .. }) => {
            if let Some(locked) = lock_waiting(relations, *tid, row.regime, command, waited)? {
                return Ok(Held::Locked(locked));
            }
        }
        // (A shard the call may not hold is looked for: if it exists now,
        // it must be locked, not skipped.)
        Some(Peek::Missing) => look = !may_hold_missing,
        Some(Peek::Busy { .. }) | None => {}
    }
    loop {
        if std::mem::replace(&mut look, true) {
            if let Acquired::Locked(locked) = acquire(relations, row, command, waited)? {
                return Ok(Held::Locked(locked));
            }
        }
        if !may_hold_missing {
            return Ok(Held::Skipped);
        }
        let mut datums = Datums::of(row, relations.extra());
        datums.set_state(
            PLACEHOLDER.value,
            timestamp(PLACEHOLDER.ts)?,
            PLACEHOLDER.previous,
        );
        if let Some(tid) = insert_one(relations, &mut datums, command) {
            return Ok(Held::Placeholder { tid, datums });
        }
        // Another transaction inserted the row first (ours was withdrawn):
        // look again, which waits for that transaction.
        *waited = true;
    }
}

/// Sorts `rows` into the lock order of [`consume_all_or_nothing`] (name,
/// then key with NULL first, then shard; bytewise) and removes duplicates.
pub fn sort_rows(rows: &mut Vec<RowId<'_>>) {
    rows.sort_by(|a, b| (a.name, a.key, a.shard).cmp(&(b.name, b.key, b.shard)));
    rows.dedup_by(|a, b| (a.name, a.key, a.shard) == (b.name, b.key, b.shard));
}
