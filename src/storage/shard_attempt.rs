//! One attempt of a consuming call of a sharded limit, in the steps
//! `shards.rs` documents: peek at shards in the drawn order until a pair
//! is free ([`Looked::peek_pair`]); when every shard is busy, wait for one
//! or answer ([`every_shard_busy`]); decide on the pair
//! ([`decide_on_pair`]); lock what the decision consumes from, without
//! waiting ([`lock_consumed`]); decide again on the locked rows and write
//! ([`write_pair`]).

use super::committed::{confirm_unwritten, read_committed_shards};
use super::insert::{delete_inserted, insert_one};
use super::layout::{timestamp, Datums, LimitRows};
use super::rows::{acquire, lock, peek, write_locked, Acquired, Lock, LockedRow, Peek};
use super::shard_places::Places;
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
            Slot::Locked(row) => (row.state, true),
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
pub(super) struct Attempt<'a> {
    /// The highest shard the call holds.
    pub(super) held: &'a mut Option<i16>,
    /// Whether it met a shard another transaction held.
    pub(super) contended: &'a mut bool,
    /// With lock-free refusals, the decision on every shard's committed
    /// state, made before the call would wait for a busy shard.
    pub(super) committed: Option<&'a mut Committed<'a>>,
}

/// The decision on every shard's committed state (`states[i]` is shard
/// `i`).
pub(super) type Committed<'a> =
    dyn FnMut(&[Option<State>]) -> Result<ShardedDecision, CallError> + 'a;

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

/// What every step of an attempt works on: the call's shards, the limit
/// and the command id its writes use.
#[derive(Clone, Copy)]
struct On<'a> {
    places: &'a Places,
    limit: LimitRows<'a>,
    command: pg_sys::CommandId,
}

/// What a step of an attempt came to.
enum Next {
    /// The call's answer.
    Answer(ShardedDecision),
    /// Look at the shards again (a wait ended, a lock was lost).
    Again,
}

/// One attempt (the steps of the module documentation); `None` when a new
/// row it inserted lost a race and the call must start again.
///
/// # Safety
/// `places` opened by [`Places::open`], `command` this transaction's
/// current command id.
pub(super) unsafe fn attempt(
    places: &Places,
    limit: LimitRows<'_>,
    random: [u32; 3],
    command: pg_sys::CommandId,
    state: &mut Attempt<'_>,
    decide: &mut impl FnMut(&[Candidate]) -> Result<ShardedDecision, CallError>,
) -> Result<Option<ShardedDecision>, CallError> {
    let on = On {
        places,
        limit,
        command,
    };
    let mut order = places.order(limit, random);
    // Free shards (at most two, the pair) and the busy ones seen.
    let mut looked = Looked {
        free: Vec::with_capacity(2),
        busy: Vec::with_capacity(2),
    };
    loop {
        pgrx::check_for_interrupts!();
        looked.peek_pair(places, limit, &mut order, state.contended);
        let next = if looked.free.is_empty() {
            every_shard_busy(on, state, &mut looked, decide)?
        } else {
            let decision = match decide_on_pair(on, state, &mut looked, decide)? {
                Ok(admitted) => admitted,
                Err(Next::Answer(refusal)) => return Ok(Some(refusal)),
                Err(Next::Again) => continue,
            };
            if !lock_consumed(on, state, &mut looked, &decision)? {
                continue;
            }
            return write_pair(
                places,
                limit,
                command,
                state.held,
                &mut looked.free,
                decision,
            );
        };
        match next {
            Next::Answer(decision) => return Ok(Some(decision)),
            Next::Again => continue,
        }
    }
}

/// The shards an attempt has looked at: the free ones (at most two, the
/// pair) and the busy ones seen, in the order drawn.
struct Looked {
    free: Vec<Shard>,
    busy: Vec<Shard>,
}

impl Looked {
    /// Peeks at the next shards of `order` until two are free or none is
    /// left; a busy one makes the call contended.
    ///
    /// # Safety
    /// As [`attempt`].
    unsafe fn peek_pair(
        &mut self,
        places: &Places,
        limit: LimitRows<'_>,
        order: &mut impl Iterator<Item = i16>,
        contended: &mut bool,
    ) {
        while self.free.len() < 2 {
            let Some(number) = order.next() else { break };
            self.add(peeked(places, limit, number), None, contended);
        }
    }

    /// Adds a shard just peeked: to the busy ones (first when `at` is
    /// given) or to the free ones (at `at`, if given).
    fn add(&mut self, shard: Shard, at: Option<usize>, contended: &mut bool) {
        match (&shard.slot, at) {
            (Slot::ReadOnly(_), None) => {
                *contended = true;
                self.busy.push(shard)
            }
            (Slot::ReadOnly(_), Some(_)) => {
                *contended = true;
                self.busy.insert(0, shard)
            }
            (_, None) => self.free.push(shard),
            (_, Some(index)) => self.free.insert(index, shard),
        }
    }
}

/// Every shard looked at is busy: waits for the first one drawn that the
/// call may wait for (`free` is empty, so it holds none of this attempt's;
/// earlier attempts' may remain), unless the committed state refuses the
/// call first; when waiting could deadlock, answers for the first two
/// drawn.
///
/// # Safety
/// As [`attempt`].
unsafe fn every_shard_busy(
    on: On<'_>,
    state: &mut Attempt<'_>,
    looked: &mut Looked,
    decide: &mut impl FnMut(&[Candidate]) -> Result<ShardedDecision, CallError>,
) -> Result<Next, CallError> {
    let Some(index) = looked
        .busy
        .iter()
        .position(|shard| may_wait_for(*state.held, shard.number))
    else {
        let drawn: Vec<&Shard> = looked.busy.iter().take(2).collect();
        let candidates: Vec<Candidate> = drawn
            .iter()
            .map(|shard| Candidate {
                writable: false,
                ..shard.candidate()
            })
            .collect();
        let decision = decide(&candidates)?;
        confirm_shards(on.places, on.limit, &drawn)?;
        return Ok(Next::Answer(decision));
    };
    wait_for_busy(on, state, looked, index)
}

/// Waits for the busy shard `looked.busy[index]`, which then joins the
/// free ones (locked, or new when it turned out to be missing), and looks
/// again; unless the committed state refuses the call first (refusals
/// never wait): then that refusal is the answer.
///
/// # Safety
/// As [`attempt`].
unsafe fn wait_for_busy(
    on: On<'_>,
    state: &mut Attempt<'_>,
    looked: &mut Looked,
    index: usize,
) -> Result<Next, CallError> {
    if let Some(refusal) = refusal_instead_of_waiting(on.places, on.limit, &mut state.committed)? {
        return Ok(Next::Answer(refusal));
    }
    let number = looked.busy.remove(index).number;
    let shard = wait_for(on.places, on.limit, number, on.command, state.held)?;
    looked.free.push(shard);
    Ok(Next::Again)
}

/// Decides on the pair: the first free shard and a second free one, else
/// the first busy one as a read-only partner (none when the call may use
/// only one shard). An admission is returned to be locked and written; a
/// refusal is the answer, unless the busy partner is what stands in the
/// way (the call would be admitted were it free): then the call waits for
/// it and looks again.
///
/// # Safety
/// As [`attempt`].
unsafe fn decide_on_pair(
    on: On<'_>,
    state: &mut Attempt<'_>,
    looked: &mut Looked,
    decide: &mut impl FnMut(&[Candidate]) -> Result<ShardedDecision, CallError>,
) -> Result<Result<ShardedDecision, Next>, CallError> {
    let partner = if looked.free.len() == 2 {
        Some(&looked.free[1])
    } else {
        looked.busy.first()
    };
    let mut candidates = vec![looked.free[0].candidate()];
    candidates.extend(partner.map(Shard::candidate));
    let decision = decide(&candidates)?;
    if decision.ok {
        return Ok(Ok(decision));
    }
    let busy_partner = partner.filter(|_| looked.free.len() == 1);
    if let Some(partner) = busy_partner {
        if may_wait_for(*state.held, partner.number) {
            let writable = [
                candidates[0],
                Candidate {
                    writable: true,
                    ..candidates[1]
                },
            ];
            if decide(&writable)?.ok {
                return Ok(Err(wait_for_busy(on, state, looked, 0)?));
            }
        }
    }
    let mut seen = vec![&looked.free[0]];
    seen.extend(partner);
    confirm_shards(on.places, on.limit, &seen)?;
    Ok(Err(Next::Answer(decision)))
}

/// Locks the free shards `decision` consumes from, without waiting;
/// whether all were locked (the call then decides again on the locked
/// states, with the clock read after the locks). A shard locked by
/// another transaction meanwhile becomes busy, one that changed is peeked
/// again; either way the call looks again (false).
///
/// # Safety
/// As [`attempt`].
unsafe fn lock_consumed(
    on: On<'_>,
    state: &mut Attempt<'_>,
    looked: &mut Looked,
    decision: &ShardedDecision,
) -> Result<bool, CallError> {
    let mut all_locked_already = true;
    for index in 0..looked.free.len() {
        if decision.new_states[index].is_none() {
            continue;
        }
        let Slot::Peeked { tid, .. } = looked.free[index].slot else {
            continue;
        };
        all_locked_already = false;
        let locked = on.places.at(looked.free[index].number, |relations| {
            lock(
                relations,
                tid,
                on.limit.regime,
                on.command,
                pg_sys::LockWaitPolicy::LockWaitSkip,
            )
        })?;
        match locked {
            Lock::Locked(row) => {
                hold(state.held, looked.free[index].number);
                looked.free[index].slot = Slot::Locked(row);
            }
            Lock::WouldBlock => {
                let shard = looked.free.remove(index).into_read_only();
                looked.add(shard, Some(0), state.contended);
                return Ok(false);
            }
            Lock::Changed => {
                let number = looked.free.remove(index).number;
                looked.add(
                    peeked(on.places, on.limit, number),
                    Some(index),
                    state.contended,
                );
                return Ok(false);
            }
        }
    }
    // Decide again on the rows just locked; write when nothing needed a
    // lock (every shard consumed from is locked already, or new).
    Ok(all_locked_already)
}

/// Writes `decision`: new rows first (speculatively), so that a lost race
/// leaves nothing written (`None`: the call starts again); then the locked
/// ones.
///
/// # Safety
/// As [`attempt`]; every shard `decision` consumes from is locked or new.
unsafe fn write_pair(
    places: &Places,
    limit: LimitRows<'_>,
    command: pg_sys::CommandId,
    held: &mut Option<i16>,
    free: &mut [Shard],
    decision: ShardedDecision,
) -> Result<Option<ShardedDecision>, CallError> {
    let mut new_rows = Vec::new();
    for (shard, state) in free.iter().zip(decision.new_states) {
        if let (Slot::New, Some(state)) = (&shard.slot, state) {
            let mut datums = places.at(shard.number, |relations| {
                Datums::of(limit.row(shard.number), relations.extra())
            });
            datums.set_state(state.value, timestamp(state.ts)?, state.previous);
            new_rows.push((shard.number, datums));
        }
    }
    if !new_rows.is_empty() {
        // Inserted rows are held until the transaction ends, also those
        // deleted again after a lost race.
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
    Ok(Some(decision))
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
        match peek(relations, &Datums::of(limit.row(number), relations.extra())) {
            Peek::Missing => Slot::New,
            Peek::Free { tid, state } => Slot::Peeked { tid, state },
            Peek::Busy { state } => Slot::ReadOnly(state),
        }
    });
    Shard { number, slot }
}
