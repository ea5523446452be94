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
//! **Which shards.** Every shard of the limit, in one relation
//! ([`ShardPlaces::In`]: the state table, or the stand-in holding the
//! key); or only the shards the caller lists, each in its relation
//! ([`ShardPlaces::Listed`]: a global limit whose shards a cluster placed
//! in several relations; the caller decides which, and goes elsewhere when
//! these cannot serve the call); with a
//! single such shard, the math decides on that one alone
//! (`evaluate_looked_at`). A call that must not wait at all (one sent on
//! from another node) starts with `held` at the highest shard number, so
//! it passes over busy shards and answers for them instead.
//!
//! **Refusals never wait** (docs/guarantees.md, "Concurrency and
//! exactness"). The peeks above read committed states, so a call refused by
//! the pair it looked at locks nothing and waits for nothing. The call
//! waits only for a busy shard, as said; with `lock_free`, and when the
//! call may use every shard ([`ShardPlaces::In`]), before it would wait it
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
use super::layout::LimitRows;
use super::shard_attempt::{attempt, Attempt};
use super::shard_places::{Places, ShardPlaces};
use crate::errors::CallError;
use pgrx::pg_sys;
use rate_limiter_algorithm::{Candidate, ShardedDecision, State};

/// Consumes from a sharded limit (see the module documentation), using
/// the shards `places` allows, starting with what they say the call
/// already holds ([`ShardPlaces::held`]). `random` gives the three random numbers of each attempt's
/// shard order; `decide` runs the math on the shards looked at (two, or
/// one when the call may use only one shard), reading the clock itself,
/// and may be called more than once; only its last decision is written
/// and returned (`new_states[i]` for the i-th shard given).
///
/// With `lock_free` and [`ShardPlaces::In`], before the call would wait
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
        let every_shard = matches!(places, ShardPlaces::In(_));
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
