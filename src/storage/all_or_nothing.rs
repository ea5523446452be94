//! The writes of an all-or-nothing call (`rate_limit_all`): every state row
//! of every limit the call names, held in one fixed order, then every
//! consumption written, or none.
//!
//! 0. With `lock_free` (refusals never wait: docs/guarantees.md,
//!    "Concurrency and exactness"): `decide` runs first on every row as
//!    committed (`read_committed`), before any lock; a refusal from that
//!    state is the answer, with nothing held or written. Otherwise:
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
//! 2. `decide` runs once every row is held (it reads the clock then). If
//!    it fails, the placeholders are deleted and nothing is written.
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

use super::committed::{confirm_unwritten, read_committed};
use super::consume::{begin_write, end_write};
use super::insert::{delete_inserted, insert_one};
use super::layout::{timestamp, Datums, RowId};
use super::relations::Relations;
use super::rows::{acquire, write_locked, Acquired, LockedRow};
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
        if lock_free {
            let stored: Vec<Option<State>> = rows
                .iter()
                .map(|row| read_committed(&relations, *row))
                .collect();
            let (answer, writes) = decide(&stored, &vec![false; rows.len()])?;
            if writes.is_none() {
                end_write();
                return Ok(answer);
            }
        }
        let mut held = Vec::with_capacity(rows.len());
        let mut waited = vec![false; rows.len()];
        // Placeholders held for the limit of the previous row (rows of one
        // limit are next to each other in the sorted order).
        let mut placeholders = 0;
        for (index, row) in rows.iter().enumerate() {
            let same_limit =
                index > 0 && (rows[index - 1].name, rows[index - 1].key) == (row.name, row.key);
            if !same_limit {
                placeholders = 0;
            }
            let may_hold_missing = placeholders < missing_held(*row);
            let this = hold(
                &relations,
                *row,
                command,
                may_hold_missing,
                &mut waited[index],
            )?;
            if this.is_placeholder() {
                placeholders += 1;
            }
            held.push(this);
        }
        let stored: Vec<Option<State>> = held
            .iter()
            .map(|held| match held {
                Held::Locked(locked) => locked.state,
                Held::Placeholder { .. } | Held::Skipped => None,
            })
            .collect();
        let placeholders: Vec<_> = held
            .iter()
            .filter_map(|held| match held {
                Held::Placeholder { tid, .. } => Some(*tid),
                Held::Locked(_) | Held::Skipped => None,
            })
            .collect();
        let (answer, writes) = match decide(&stored, &waited) {
            Ok(decided) => decided,
            Err(error) => {
                // Nothing is written: not even a placeholder (the caller
                // may start again in the same transaction).
                delete_inserted(&relations, &placeholders);
                return Err(error);
            }
        };
        let Some(writes) = writes else {
            delete_inserted(&relations, &placeholders);
            confirm_unwritten(&relations, rows.iter().copied().zip(stored))?;
            end_write();
            return Ok(answer);
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
            .filter(|((_, stored), write)| write.is_none() || **write == **stored)
            .map(|((row, stored), _)| (*row, *stored))
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
                Held::Skipped => {
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

/// Step 1 for one row: lock it, or hold it with a placeholder when it is
/// missing (or, when `may_hold_missing` is false, leave it: `Skipped`),
/// looking again (and waiting) when another transaction inserted it first.
/// Sets `waited` when it waited for another transaction.
///
/// # Safety
/// `relations` opened by [`begin_write`], `command` its command id.
unsafe fn hold(
    relations: &Relations,
    row: RowId<'_>,
    command: pg_sys::CommandId,
    may_hold_missing: bool,
    waited: &mut bool,
) -> Result<Held, CallError> {
    loop {
        if let Acquired::Locked(locked) = acquire(relations, row, command, waited)? {
            return Ok(Held::Locked(locked));
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
