//! A consuming call of a sharded limit (`shards` >= 2): which of its rows
//! the call looks at, locks and writes, so that concurrent transactions
//! spread over the rows instead of queueing on one, and so that no two
//! calls can ever deadlock.
//!
//! The shards are visited in a random order ([`shard_order`]: a random
//! pair first, the power of two choices, then the others). Each is first
//! *peeked* with a dirty snapshot, without waiting:
//!
//! - a row another running transaction is writing (its admitted call has
//!   not committed yet) is *busy*: passed over, as `SKIP LOCKED` would;
//! - a missing row is a full shard, free for this call;
//! - the first two free shards form the pair the math decides on
//!   ([`evaluate_pair`](rate_limiter_algorithm::evaluate_pair)).
//!
//! Only the shards the decision consumes from are locked, and with
//! `LockWaitSkip`: a row someone else has locked meanwhile becomes busy and
//! the next free shard takes its place. Once they are locked the call
//! decides again on the locked states, with the clock read after the
//! locks (the decision on the peeked states only chose the shards). A
//! refusal writes nothing; it locks nothing either, unless the decision on
//! the locked rows is the refusal (another transaction consumed between
//! the peek and the lock): then, as with `rate_limit`'s unsharded row, the
//! rows stay locked until the transaction ends (PostgreSQL cannot give a
//! row lock back).
//!
//! When fewer than two shards are free, the first busy one stands in as a
//! read-only partner: the call may consume only from the free one, but the
//! busy one counts for `retry_after`. If the call is refused but would be
//! admitted were that busy partner free, the call waits for it (as
//! `rate_limit` waits for an unsharded row) and decides again, instead of
//! answering a `retry_after` of a microsecond that would only make
//! `rate_wait` poll. When every shard is busy, the call waits for the
//! first one it drew.
//!
//! **No deadlock.** A call waits for a shard only while every shard it
//! holds (locked, or inserted by it) has a lower number: the rows of all
//! calls are taken in one order, (name, key, shard), as `rate_limit_all`,
//! `rate_credit` and `define` take them. When that is not so (the call
//! locked a higher shard, then lost an insert race or found its locked
//! shard emptied), it does not wait: it answers with the refusal of the
//! pair it looked at.
//!
//! **Which shards.** On one server, and for a keyed limit on a distributed
//! install, every shard of the limit, in one relation. For a global limit
//! on a distributed install, only the shards placed on this node, each in
//! its own shard relation ([`ShardPlaces::Routed`]; the cluster layer decides
//! which and goes to other nodes when these cannot serve the call); with a
//! single such shard, the math decides on that one alone
//! (`evaluate_looked_at`). A call that must not wait at all (one sent on
//! from another node) starts with `held` at the highest shard number, so
//! it passes over busy shards and answers for them instead.
//!
//! **Refusals never wait** (docs/guarantees.md, "Concurrency and
//! exactness"). The peeks above read committed states, so a call refused by
//! the pair it looked at locks nothing and waits for nothing. The call
//! waits only for a busy shard, as said; with `lock_free`, and when the
//! call may use every shard ([`ShardPlaces::All`]), before it would wait it
//! reads every shard as committed (`read_committed_shards`), without a
//! lock, and when that state refuses it (not even the two fullest shards
//! together could serve it, so no shard or pair could) answers that refusal
//! instead of waiting. (Read only then, not on every call: a call that
//! finds a free pair pays nothing for it.)
//!
//! New rows are inserted speculatively, one after the other; if another
//! transaction inserted one of them first, that one is withdrawn, the ones
//! before it are deleted again (other transactions still wait for them
//! until this one ends: they count as held), and the call starts again.

use super::consume::end_write;
use super::places::{Places, ShardPlaces};
use super::rows::{
    acquire, confirm_unwritten, delete_inserted, insert_one, lock, peek, read_committed_shards,
    write_locked, Acquired, Lock, LockedRow, Peek,
};
use super::{timestamp, Datums, LimitRows};
use crate::errors::CallError;
use pgrx::pg_sys;
use pgrx::prelude::*;
use rate_limiter_algorithm::{Candidate, ShardedDecision, State};

/// What this call knows of one shard.
enum Slot {
    /// No row: full, and free to insert.
    New,
    /// Free when peeked, not locked yet.
    Peeked {
        tid: pg_sys::ItemPointerData,
        state: Option<State>,
    },
    /// Locked by this call.
    Locked(LockedRow),
    /// Busy: looked at, never written.
    ReadOnly(Option<State>),
}

struct Shard {
    number: i16,
    slot: Slot,
}

impl Shard {
    fn candidate(&self) -> Candidate {
        let (stored, writable) = match &self.slot {
            Slot::New => (None, true),
            Slot::Peeked { state, .. } => (*state, true),
            Slot::Locked(row) => (Some(row.state), true),
            Slot::ReadOnly(state) => (*state, false),
        };
        Candidate { stored, writable }
    }

    /// As a read-only partner (its state as last seen).
    fn into_read_only(self) -> Shard {
        let state = self.candidate().stored;
        Shard {
            number: self.number,
            slot: Slot::ReadOnly(state),
        }
    }
}

/// Consumes from a sharded limit (see the module documentation), using
/// the shards `places` allows, starting with what they say the call
/// already holds ([`ShardPlaces::held`]). `random` gives the three random numbers of each attempt's
/// shard order; `decide` runs the math on the shards looked at (two, or
/// one when the call may use only one shard), reading the clock itself,
/// and may be called more than once; only its last decision is written
/// and returned (`new_states[i]` for the i-th shard given).
///
/// With `lock_free` and [`ShardPlaces::All`], before the call would wait
/// for a busy shard, `committed` decides on the committed state of every
/// shard (`states[i]` is shard `i`); its refusal is the answer (see the
/// module documentation).
///
/// Also says whether the call was *contended*: it passed over or waited
/// for a shard another transaction held (`rate_limiter.stats`).
///
/// Errors: as [`super::consume`].
pub fn consume_sharded(
    limit: LimitRows<'_>,
    places: ShardPlaces,
    lock_free: bool,
    mut committed: impl FnMut(&[Option<State>]) -> Result<ShardedDecision, CallError>,
    mut random: impl FnMut() -> [u32; 3],
    mut decide: impl FnMut(&[Candidate]) -> Result<ShardedDecision, CallError>,
) -> Result<(ShardedDecision, bool), CallError> {
    // SAFETY: every step gets the relations opened here and this
    // transaction's command id.
    unsafe {
        let mut held = places.held();
        let every_shard = matches!(places, ShardPlaces::All);
        let places = Places::open(places, c"rate_limit()");
        let mut contended = false;
        let decision = loop {
            // A failed attempt's undo ends commands: each attempt writes
            // with the current one.
            let command = pg_sys::GetCurrentCommandId(true);
            let mut state = Attempt {
                held: &mut held,
                contended: &mut contended,
                committed: (lock_free && every_shard).then_some(&mut committed as _),
            };
            if let Some(decision) =
                attempt(&places, limit, random(), command, &mut state, &mut decide)?
            {
                break decision;
            }
        };
        end_write();
        Ok((decision, contended))
    }
}

/// Whether the call may wait for shard `number`: it holds no shard, or
/// only lower ones (see the module documentation).
fn may_wait_for(held: Option<i16>, number: i16) -> bool {
    held.is_none_or(|highest| highest < number)
}

/// Records that the call holds shard `number`.
fn hold(held: &mut Option<i16>, number: i16) {
    *held = Some(held.map_or(number, |highest| highest.max(number)));
}

/// Waits for shard `number` (busy) and returns it locked, or new when it
/// turned out to be missing.
unsafe fn wait_for(
    places: &Places,
    limit: LimitRows<'_>,
    number: i16,
    command: pg_sys::CommandId,
    held: &mut Option<i16>,
) -> Result<Shard, CallError> {
    // The shard was busy: the call already counts as contended.
    let acquired = places.at(number, |relations| {
        acquire(relations, limit.row(number), command, &mut false)
    })?;
    let slot = match acquired {
        Acquired::Locked(row) => {
            hold(held, number);
            Slot::Locked(row)
        }
        Acquired::New => Slot::New,
    };
    Ok(Shard { number, slot })
}

/// What a call tracks over its attempts.
struct Attempt<'a> {
    /// The highest shard the call holds.
    held: &'a mut Option<i16>,
    /// Whether it met a shard another transaction held.
    contended: &'a mut bool,
    /// With lock-free refusals, the decision on every shard's committed
    /// state, made before the call would wait for a busy shard.
    committed: Option<&'a mut Committed<'a>>,
}

/// The decision on every shard's committed state (`states[i]` is shard
/// `i`).
type Committed<'a> = dyn FnMut(&[Option<State>]) -> Result<ShardedDecision, CallError> + 'a;

/// Refusals never wait (docs/guarantees.md, "Concurrency and exactness"):
/// before the call waits for a busy shard, the decision on every shard as
/// committed (`read_committed_shards`), when the call has lock-free
/// refusals; `Some` refusal when that state refuses the call (not even the
/// two fullest shards together could serve it), the answer instead of
/// waiting.
///
/// # Safety
/// `places` opened by [`Places::open`].
unsafe fn refusal_instead_of_waiting(
    places: &Places,
    limit: LimitRows<'_>,
    committed: &mut Option<&mut Committed<'_>>,
) -> Result<Option<ShardedDecision>, CallError> {
    let Some(committed) = committed.as_mut() else {
        return Ok(None);
    };
    let stored = places.at(0, |relations| read_committed_shards(relations, limit));
    let decision = committed(&stored)?;
    Ok((!decision.ok).then_some(decision))
}

/// Checks, under REPEATABLE READ or SERIALIZABLE, that the shards a
/// decision wrote nothing to are as the decision saw them
/// ([`confirm_unwritten`]).
unsafe fn confirm_shards(
    places: &Places,
    limit: LimitRows<'_>,
    shards: &[&Shard],
) -> Result<(), CallError> {
    for shard in shards {
        places.at(shard.number, |relations| {
            confirm_unwritten(
                relations,
                [(limit.row(shard.number), shard.candidate().stored)],
            )
        })?;
    }
    Ok(())
}

/// One attempt; `None` when a new row it inserted lost a race and the call
/// must start again.
unsafe fn attempt(
    places: &Places,
    limit: LimitRows<'_>,
    random: [u32; 3],
    command: pg_sys::CommandId,
    state: &mut Attempt<'_>,
    decide: &mut impl FnMut(&[Candidate]) -> Result<ShardedDecision, CallError>,
) -> Result<Option<ShardedDecision>, CallError> {
    let held = &mut *state.held;
    let mut order = places.order(limit, random);
    // Free shards (at most two, the pair) and the busy ones seen.
    let mut free: Vec<Shard> = Vec::with_capacity(2);
    let mut busy: Vec<Shard> = Vec::with_capacity(2);
    loop {
        pgrx::check_for_interrupts!();
        while free.len() < 2 {
            let Some(number) = order.next() else { break };
            let shard = peeked(places, limit, number);
            match shard.slot {
                Slot::ReadOnly(_) => {
                    *state.contended = true;
                    busy.push(shard)
                }
                _ => free.push(shard),
            }
        }
        if free.is_empty() {
            // Every shard is busy: wait for the first one drawn that the
            // call may wait for (free is empty, so it holds none of this
            // attempt's; earlier attempts' may remain).
            let Some(index) = busy
                .iter()
                .position(|shard| may_wait_for(*held, shard.number))
            else {
                // Waiting could deadlock: answer for the first two drawn.
                let looked: Vec<&Shard> = busy.iter().take(2).collect();
                let candidates: Vec<Candidate> = looked
                    .iter()
                    .map(|shard| Candidate {
                        writable: false,
                        ..shard.candidate()
                    })
                    .collect();
                let decision = decide(&candidates)?;
                confirm_shards(places, limit, &looked)?;
                return Ok(Some(decision));
            };
            if let Some(refusal) = refusal_instead_of_waiting(places, limit, &mut state.committed)?
            {
                return Ok(Some(refusal));
            }
            let number = busy.remove(index).number;
            free.push(wait_for(places, limit, number, command, held)?);
            continue;
        }
        // The pair: a second free shard, else the first busy one as a
        // read-only partner; none when the call may use only one shard.
        let partner = if free.len() == 2 {
            Some(&free[1])
        } else {
            busy.first()
        };
        let mut candidates = vec![free[0].candidate()];
        candidates.extend(partner.map(Shard::candidate));
        let decision = decide(&candidates)?;
        if !decision.ok {
            // Refused with a busy partner: if the partner is what stands
            // in the way (the call would be admitted were it free), wait
            // for it and decide again.
            if let Some(partner) = partner.filter(|_| free.len() == 1) {
                if may_wait_for(*held, partner.number) {
                    let writable = [
                        candidates[0],
                        Candidate {
                            writable: true,
                            ..candidates[1]
                        },
                    ];
                    if decide(&writable)?.ok {
                        if let Some(refusal) =
                            refusal_instead_of_waiting(places, limit, &mut state.committed)?
                        {
                            return Ok(Some(refusal));
                        }
                        let number = busy.remove(0).number;
                        free.push(wait_for(places, limit, number, command, held)?);
                        continue;
                    }
                }
            }
            let mut looked = vec![&free[0]];
            looked.extend(partner);
            confirm_shards(places, limit, &looked)?;
            return Ok(Some(decision));
        }
        // Lock what the decision consumes from, without waiting, then
        // decide again on the locked rows.
        let mut again = false;
        for index in 0..free.len() {
            if decision.new_states[index].is_none() {
                continue;
            }
            let Slot::Peeked { tid, .. } = free[index].slot else {
                continue;
            };
            let locked = places.at(free[index].number, |relations| {
                lock(
                    relations,
                    tid,
                    command,
                    pg_sys::LockWaitPolicy::LockWaitSkip,
                )
            })?;
            match locked {
                Lock::Locked(row) => {
                    // Decide again on the locked state, with the clock read
                    // now that the lock is held (as rate_limit always does).
                    again = true;
                    hold(held, free[index].number);
                    free[index].slot = Slot::Locked(row);
                }
                Lock::WouldBlock => {
                    *state.contended = true;
                    busy.insert(0, free.remove(index).into_read_only());
                    again = true;
                    break;
                }
                Lock::Changed => {
                    let number = free.remove(index).number;
                    let shard = peeked(places, limit, number);
                    match shard.slot {
                        Slot::ReadOnly(_) => {
                            *state.contended = true;
                            busy.insert(0, shard)
                        }
                        _ => free.insert(index, shard),
                    }
                    again = true;
                    break;
                }
            }
        }
        if again {
            continue;
        }
        // New rows first (speculatively), so that a lost race leaves
        // nothing written; then the locked ones.
        let mut new_rows = Vec::new();
        for (shard, state) in free.iter().zip(decision.new_states) {
            if let (Slot::New, Some(state)) = (&shard.slot, state) {
                let mut datums = places.at(shard.number, |_| Datums::of(limit.row(shard.number)));
                datums.set_state(state.value, timestamp(state.ts)?);
                new_rows.push((shard.number, datums));
            }
        }
        if !new_rows.is_empty() {
            // Inserted rows are held until the transaction ends, also
            // those deleted again after a lost race.
            for (number, _) in &new_rows {
                hold(held, *number);
            }
            if !insert_new_shards(places, &mut new_rows, command) {
                return Ok(None);
            }
        }
        for (shard, state) in free.iter_mut().zip(decision.new_states) {
            if let (Slot::Locked(row), Some(state)) = (&mut shard.slot, state) {
                places.at(shard.number, |relations| {
                    write_locked(relations, row, state, command)
                })?;
            }
        }
        return Ok(Some(decision));
    }
}

/// What `insert_new` does, for rows that may live in different relations:
/// each row is inserted in its shard's ([`insert_one`]); when one loses a
/// race, the ones inserted before it are deleted again
/// ([`delete_inserted`]) and the result is `false`.
unsafe fn insert_new_shards(
    places: &Places,
    rows: &mut [(i16, Datums)],
    command: pg_sys::CommandId,
) -> bool {
    let mut inserted: Vec<(i16, pg_sys::ItemPointerData)> = Vec::with_capacity(rows.len());
    for (number, datums) in rows.iter_mut() {
        match places.at(*number, |relations| insert_one(relations, datums, command)) {
            Some(tid) => inserted.push((*number, tid)),
            None => {
                for (number, tid) in &inserted {
                    places.at(*number, |relations| delete_inserted(relations, &[*tid]));
                }
                debug1!(
                    "rate_limiter: another transaction inserted the same state row; looking again"
                );
                return false;
            }
        }
    }
    true
}

/// Peeks at shard `number` without waiting.
unsafe fn peeked(places: &Places, limit: LimitRows<'_>, number: i16) -> Shard {
    let slot = places.at(number, |relations| {
        match peek(relations, &Datums::of(limit.row(number))) {
            Peek::Missing => Slot::New,
            Peek::Free { tid, state } => Slot::Peeked { tid, state },
            Peek::Busy { state } => Slot::ReadOnly(state),
        }
    });
    Shard { number, slot }
}
