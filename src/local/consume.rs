//! `rate_limit` and `rate_check` on this node's rows: lock, decide with the
//! clock read after the lock, write (`storage`); or read and decide
//! without a lock. The caller says where the rows are (the state table,
//! or a stand-in a cluster found).

use crate::call::Call;
use crate::clock;
use crate::definitions::{self, Definition};
use crate::errors::CallError;
use crate::settings;
use crate::shard_choice;
use crate::stats::Counted;
use crate::storage::{self, ShardPlaces, Target};
use rate_limiter_algorithm::{
    evaluate, evaluate_all, evaluate_looked_at, near_limit, uses_up, verdict, Decision,
    ShardedDecision, State, Verdict,
};

/// The answer of a sharded limit, as the result row reports it.
pub fn answer(decision: ShardedDecision) -> Decision {
    Decision {
        ok: decision.ok,
        retry_after: decision.retry_after,
        remaining: decision.remaining,
        new_state: None,
    }
}

/// What a consuming call of `definition` answers for `decision` (shadow
/// mode answers a refusal as admitted), and how it is counted in
/// `rate_limiter.stats`. `count` is the tokens asked for; `contended`
/// whether a sharded call passed over or waited for a locked shard.
pub fn answered(
    definition: &Definition,
    count: f64,
    decision: Decision,
    contended: bool,
) -> (Decision, Counted) {
    let blocked = !decision.ok && definition.blocked_until.is_some();
    let (decision, verdict) = verdict::answer(decision, definition.enforce);
    let admitted = verdict == Verdict::Admitted;
    let counted = Counted {
        verdict,
        count,
        reserved: admitted && decision.retry_after.is_some_and(|micros| micros > 0),
        near_limit: admitted && near_limit(&definition.config, decision.remaining),
        contended,
        blocked: blocked && verdict == Verdict::Refused,
    };
    (decision, counted)
}

/// Locks the row, evaluates with the clock read after the lock, and records
/// the consumption (see `storage`), using the shards `places` allows (a
/// sharded limit picks among them as `storage/shards.rs` describes). The
/// decision as the call answers it, and as it is counted (by the caller:
/// `rate_wait` counts only its last try).
///
/// Errors: as `rate_limit`; 55000 (`CallError::PlacesChanged`) when
/// `places` do not hold the limit's shards under its definition
/// ([`ShardPlaces::fit`]).
pub fn consume(call: &Call<'_>, places: ShardPlaces) -> Result<(Decision, Counted), CallError> {
    let (decision, definition, contended) =
        definitions::restarting(|| consume_once(call, places.clone()))?;
    // The admitted call that used the limit up starts its automatic block
    // (docs/blocks.md), in the caller's transaction.
    if let Some(policy) = &definition.config.block {
        if decision.ok && uses_up(decision.remaining) {
            let known = definitions::blocks_known(call.name)?;
            crate::blocks::strike(call.name, call.key, policy, clock::now(), known)?;
        }
    }
    Ok(answered(
        &definition,
        call.request.count,
        decision,
        contended,
    ))
}

/// One try of [`consume`]: fails with `DefinitionChanged` when the
/// definition changed while the call waited for its rows. The decision as
/// made, the definition it was made under, and whether a sharded call met
/// a locked shard.
fn consume_once(
    call: &Call<'_>,
    places: ShardPlaces,
) -> Result<(Decision, Definition, bool), CallError> {
    let definition = call.definition()?;
    let config = definition.config;
    // Check the count against the config before touching the row.
    config.validate_count(call.request.count, call.request.reserve)?;
    // A blocked key is refused without a lock or a write (docs/blocks.md).
    if let Some(refused) = definition.blocked_at(clock::now()) {
        return Ok((refused, definition, false));
    }
    let current =
        |blocks: bool| definitions::recheck(call.name, call.key, call.config, &definition, blocks);
    if !places.fit(config.shards, call.key) {
        return Err(CallError::PlacesChanged);
    }
    if config.shards > 1 {
        let (decision, contended) = storage::consume_sharded(
            call.shards(&definition),
            places,
            settings::lock_free_refusals(),
            |stored| {
                current(true)?;
                Ok(evaluate_all(
                    &config,
                    call.id(),
                    stored,
                    clock::now(),
                    call.request,
                )?)
            },
            shard_choice::draw,
            |candidates| {
                current(true)?;
                Ok(evaluate_looked_at(
                    &config,
                    call.id(),
                    candidates,
                    clock::now(),
                    call.request,
                )?)
            },
        )?;
        return Ok((answer(decision), definition, contended));
    }
    let ShardPlaces::In(target) = places else {
        // Listed shards fit only a limit of several.
        return Err(CallError::PlacesChanged);
    };
    // With lock-free refusals the first decision is made on the row as
    // committed, before the call waited for anything: nothing can have
    // blocked the key since it resolved, so that one does not look for a
    // block again (storage::consume); every later one does.
    let lock_free = settings::lock_free_refusals();
    let mut before_any_wait = lock_free;
    let decision = storage::consume(call.row(&definition), target, lock_free, |stored| {
        current(!std::mem::take(&mut before_any_wait))?;
        Ok(evaluate(
            &config,
            call.id(),
            stored,
            clock::now(),
            call.request,
        )?)
    })?;
    Ok((decision, definition, false))
}

/// Evaluates without locking or writing, on the rows in the relation of
/// `target`, and answers as `rate_limit` would (shadow mode included). A
/// sharded limit reads every shard and answers for the two fullest (see
/// `evaluate_all`).
///
/// Errors: as `rate_check`; 55000 (`CallError::PlacesChanged`) when
/// `target` does not hold every shard of the limit.
pub fn check(call: &Call<'_>, target: Target) -> Result<Decision, CallError> {
    let definition = call.definition()?;
    let config = definition.config;
    if let Some(refused) = definition.blocked_at(clock::now()) {
        config.validate_count(call.request.count, call.request.reserve)?;
        return Ok(verdict::answer(refused, definition.enforce).0);
    }
    if !ShardPlaces::In(target).fit(config.shards, call.key) {
        // Its shards are in several relations: the caller reads them there.
        return Err(CallError::PlacesChanged);
    }
    if config.shards > 1 {
        let stored = storage::read_shards(call.shards(&definition), target);
        return check_shards(call, &definition, &stored);
    }
    let stored = storage::read(call.row(&definition), target);
    let decision = evaluate(&config, call.id(), stored, clock::now(), call.request)?;
    // Answer as rate_limit would: a state it could not store is an error.
    if let Some(state) = decision.new_state {
        storage::timestamp(state.ts)?;
    }
    Ok(verdict::answer(decision, definition.enforce).0)
}

/// [`check`] of a sharded limit, given the stored state of every
/// shard (`stored[i]` is shard `i`): the answer for the two fullest.
pub fn check_shards(
    call: &Call<'_>,
    definition: &Definition,
    stored: &[Option<State>],
) -> Result<Decision, CallError> {
    let config = definition.config;
    if let Some(refused) = definition.blocked_at(clock::now()) {
        config.validate_count(call.request.count, call.request.reserve)?;
        return Ok(verdict::answer(refused, definition.enforce).0);
    }
    let decision = evaluate_all(&config, call.id(), stored, clock::now(), call.request)?;
    for state in decision.new_states.iter().flatten() {
        storage::timestamp(state.ts)?;
    }
    Ok(verdict::answer(answer(decision), definition.enforce).0)
}
