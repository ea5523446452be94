//! Sharded limits: one limit split over `shards` rows so that concurrent
//! callers do not all queue on one row.
//!
//! Each shard is a limit of its own with `rate / shards`, `capacity /
//! shards` and `max_reserved / shards` ([`Config::shard`]), so the shards
//! together can never admit more than the unsharded limit would. A call
//! looks at two distinct shards (the power of two choices) and:
//!
//! 1. serves the whole count from one shard when one can: the fuller one
//!    when both can (ties: the first of the pair);
//! 2. otherwise, when both together can, takes from both, leaving them at
//!    the same level `(value_a + value_b - count) / 2`;
//! 3. otherwise refuses, writing nothing.
//!
//! A shard the caller could not lock (another running transaction holds
//! it) is *read-only*: it is never consumed from, but it still counts for
//! `retry_after` and `remaining`. Which shards are looked at, and which are
//! writable, is the storage layer's business; this module only does the
//! math.

use crate::config::Config;
use crate::decision::{allowed_debt, initial_state, refill, retry_after, settle, take, tokens};
use crate::error::LimitError;
use crate::state::{LimitId, Request, State};
use crate::time::Micros;

/// One of the two shards a call looks at.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Candidate {
    /// Its stored state; `None` (no row yet) is a full shard.
    pub stored: Option<State>,
    /// Whether the call may consume from it: the caller holds its row lock,
    /// or the row does not exist yet. A read-only candidate is only looked at.
    pub writable: bool,
}

/// The outcome of one call of a sharded limit.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct ShardedDecision {
    /// Whether the request is admitted (possibly as a reservation).
    pub ok: bool,
    /// As [`crate::Decision::retry_after`]: microseconds from `now`,
    /// rounded up. Refused: the earliest time at which the two shards
    /// looked at could serve the same call if nothing else consumed (and
    /// both were free). Reserved: when every shard consumed from is out of
    /// debt. `None` when admitted without debt.
    pub retry_after: Option<Micros>,
    /// An estimate of the tokens left in the whole limit: the mean of the
    /// two shards' values (after the call when admitted, refilled and
    /// unchanged when refused) times the number of shards.
    pub remaining: f64,
    /// The state to store for each candidate, in the order given; `None`
    /// means "write nothing" (always `None` for a read-only candidate).
    pub new_states: [Option<State>; 2],
}

/// The order in which a call of a limit with `shards` (>= 2) shards looks
/// at them, from three random numbers: first two distinct shards drawn
/// uniformly (the power of two choices), then every other shard once,
/// starting from a random one. Yields each of `0..shards` exactly once.
pub fn shard_order(shards: i16, random: [u32; 3]) -> impl Iterator<Item = i16> {
    let n = u32::from(shards.max(2) as u16);
    let first = random[0] % n;
    let second = (first + 1 + random[1] % (n - 1)) % n;
    let start = random[2] % n;
    let rest = (0..n)
        .map(move |i| (start + i) % n)
        .filter(move |&shard| shard != first && shard != second);
    [first, second]
        .into_iter()
        .chain(rest)
        .map(|shard| shard as i16)
}

/// How a call is served from two shards with the given refilled values.
#[derive(Debug, Clone, Copy, PartialEq)]
enum Plan {
    /// Wholly from candidate `index`, which is left with `value`.
    Single {
        index: usize,
        value: f64,
    },
    /// From both, each left with `level`.
    Both {
        level: f64,
    },
    Refused,
}

/// The rule of the module documentation, for refilled `values`.
/// `allowed` is the debt one shard may be left with.
fn plan(values: [f64; 2], writable: [bool; 2], count: f64, allowed: f64) -> Plan {
    // The fuller first; on a tie, the first of the pair.
    let by_fullness = if values[1] > values[0] {
        [1, 0]
    } else {
        [0, 1]
    };
    for index in by_fullness {
        let value = values[index] - count;
        if writable[index] && value >= -allowed {
            return Plan::Single { index, value };
        }
    }
    if writable == [true, true] {
        let level = (values[0] + values[1] - count) / 2.0;
        // Taking from both never adds to either: a level above the emptier
        // shard would move tokens into it (and then the fuller one alone
        // would have been enough, unless the emptier one is deep in debt).
        if level >= -allowed && level <= values[0].min(values[1]) {
            return Plan::Both { level };
        }
    }
    Plan::Refused
}

/// The estimate of the whole limit's tokens from the two shards' values.
fn estimate(config: &Config, values: [f64; 2]) -> f64 {
    (values[0] + values[1]) / 2.0 * f64::from(config.shards)
}

/// Evaluates one call of a sharded limit (`config.shards` >= 2, valid) on
/// the two `candidates` it looked at.
///
/// Errors: `InvalidParameter` for a count that no two shards could ever
/// serve ([`Config::validate_count`]); `OutOfRange` when a value or
/// `retry_after` does not fit (extreme configurations only).
pub fn evaluate_pair(
    config: &Config,
    id: LimitId<'_>,
    candidates: [Candidate; 2],
    now: Micros,
    request: Request,
) -> Result<ShardedDecision, LimitError> {
    config.validate_count(request.count, request.reserve)?;
    let shard = config.shard();
    let allowed = allowed_debt(&shard, request.reserve);
    let states = candidates.map(|c| c.stored.unwrap_or_else(|| initial_state(&shard, id, now)));
    let refilled = states.map(|state| refill(&shard, state, now));
    let values = refilled.map(|state| tokens(&shard, state, now));
    let writable = candidates.map(|c| c.writable);
    let mut new_states = [None; 2];
    match plan(values, writable, request.count, allowed) {
        Plan::Single { index, value } => {
            finite(value)?;
            new_states[index] = Some(take(&shard, refilled[index], request.count));
        }
        Plan::Both { level } => {
            let level = finite(level)?;
            for (index, state) in refilled.iter().enumerate() {
                // min: float rounding must never add tokens to a shard.
                new_states[index] = Some(settle(
                    &shard,
                    *state,
                    values[index],
                    level.min(values[index]),
                ));
            }
        }
        Plan::Refused => {
            let wait = pair_retry_after(&shard, states, request.count, allowed, now)?;
            return Ok(ShardedDecision {
                ok: false,
                retry_after: Some(wait),
                remaining: estimate(config, values),
                new_states,
            });
        }
    }
    let mut after = values;
    let mut debt_wait: Option<Micros> = None;
    for (index, new_state) in new_states.iter().enumerate() {
        if let Some(state) = new_state {
            after[index] = tokens(&shard, *state, now);
            if after[index] < 0.0 {
                // Reserved: the work may run once this shard is out of debt.
                let wait = retry_after(&shard, *state, 0.0, 0.0, now)?;
                debt_wait = Some(debt_wait.map_or(wait, |w| w.max(wait)));
            }
        }
    }
    Ok(ShardedDecision {
        ok: true,
        retry_after: debt_wait,
        remaining: estimate(config, after),
        new_states,
    })
}

/// Evaluates one call of a sharded limit (`config.shards` >= 2, valid) that
/// may use only one of its shards: on a Citus cluster, the only shard of
/// the limit placed on the node the call runs on. That shard is a limit of
/// its own ([`Config::shard`]), decided as [`crate::evaluate`] decides an
/// unsharded limit:
///
/// - writable: admitted when it alone can serve the call (its new state in
///   `new_states[0]`), else refused with its own `retry_after`;
/// - read-only (another transaction holds it): refused, with its
///   `retry_after` when it could not serve the call either, else 1
///   microsecond (as [`evaluate_pair`] answers for two read-only shards);
/// - a count one shard can never serve (more than its capacity, plus its
///   `max_reserved` with `reserve`), which two shards could: refused with
///   no `retry_after` (other shards may serve it; this one never will).
///
/// `remaining` estimates the whole limit as the shard's value times the
/// number of shards.
///
/// Errors: `InvalidParameter` for a count that no two shards could ever
/// serve ([`Config::validate_count`]); `OutOfRange` as [`crate::evaluate`].
pub fn evaluate_single(
    config: &Config,
    id: LimitId<'_>,
    candidate: Candidate,
    now: Micros,
    request: Request,
) -> Result<ShardedDecision, LimitError> {
    config.validate_count(request.count, request.reserve)?;
    let shard = config.shard();
    let shards = f64::from(config.shards);
    if shard
        .validate_count(request.count, request.reserve)
        .is_err()
    {
        let state = candidate
            .stored
            .unwrap_or_else(|| initial_state(&shard, id, now));
        return Ok(ShardedDecision {
            ok: false,
            retry_after: None,
            remaining: tokens(&shard, refill(&shard, state, now), now) * shards,
            new_states: [None, None],
        });
    }
    let decision = crate::decision::evaluate(&shard, id, candidate.stored, now, request)?;
    let remaining = decision.remaining * shards;
    if !decision.ok {
        return Ok(ShardedDecision {
            ok: false,
            retry_after: decision.retry_after,
            remaining,
            new_states: [None, None],
        });
    }
    if !candidate.writable {
        let state = candidate
            .stored
            .unwrap_or_else(|| initial_state(&shard, id, now));
        return Ok(ShardedDecision {
            ok: false,
            retry_after: Some(1),
            remaining: tokens(&shard, refill(&shard, state, now), now) * shards,
            new_states: [None, None],
        });
    }
    Ok(ShardedDecision {
        ok: true,
        retry_after: decision.retry_after,
        remaining,
        new_states: [decision.new_state, None],
    })
}

/// [`evaluate_pair`] for two candidates, [`evaluate_single`] for one.
///
/// Errors: theirs; `InvalidParameter` for another number of candidates.
pub fn evaluate_looked_at(
    config: &Config,
    id: LimitId<'_>,
    candidates: &[Candidate],
    now: Micros,
    request: Request,
) -> Result<ShardedDecision, LimitError> {
    match *candidates {
        [single] => evaluate_single(config, id, single, now, request),
        [first, second] => evaluate_pair(config, id, [first, second], now, request),
        _ => Err(LimitError::invalid(
            "shards",
            format!(
                "a sharded call decides on one or two shards, not {}",
                candidates.len()
            ),
        )),
    }
}

fn finite(value: f64) -> Result<f64, LimitError> {
    if value.is_finite() {
        Ok(value)
    } else {
        Err(LimitError::out_of_range(
            "count",
            format!(
                "the limit's value would be out of range ({})",
                crate::error::show(value)
            ),
        ))
    }
}

/// The smallest delay `t >= 1` microsecond after which the two shards in
/// `states` (both free) serve `count` by the rule of [`plan`]: a binary
/// search with the very test a later call applies, so calling again exactly
/// `t` later succeeds and one microsecond earlier does not. The test is
/// monotone: refills only add tokens as time passes.
fn pair_retry_after(
    shard: &Config,
    states: [State; 2],
    count: f64,
    allowed: f64,
    now: Micros,
) -> Result<Micros, LimitError> {
    let admitted = |delay: Micros| {
        let at = now.saturating_add(delay);
        let values = states.map(|state| tokens(shard, refill(shard, state, at), at));
        plan(values, [true, true], count, allowed) != Plan::Refused
    };
    // Once both shards are full, any valid count is served (validate_count).
    let mut high: Micros = 1;
    for state in states {
        high = high.max(retry_after(shard, state, shard.capacity(), 0.0, now)?);
    }
    if !admitted(high) {
        return Err(LimitError::out_of_range(
            "retry_after",
            "two full shards cannot serve this count".to_string(),
        ));
    }
    let mut low: Micros = 0;
    while high - low > 1 {
        let middle = low + (high - low) / 2;
        if admitted(middle) {
            high = middle;
        } else {
            low = middle;
        }
    }
    Ok(high)
}

/// What `rate_check` answers for a sharded limit, given the stored state
/// of every shard (`stored[i]` is shard `i`; `None` = no row = full): the
/// answer for the two fullest shards (the pair that would serve the call
/// best), with `remaining` the exact sum over all shards, after the call
/// when it would be admitted. `new_states` are for the two fullest shards.
pub fn evaluate_all(
    config: &Config,
    id: LimitId<'_>,
    stored: &[Option<State>],
    now: Micros,
    request: Request,
) -> Result<ShardedDecision, LimitError> {
    evaluate_fullest(config, id, stored, now, request).map(|(decision, _)| decision)
}

/// As [`evaluate_all`], also returning which shards the decision is for:
/// `new_states[i]` belongs to shard `shards[i]`.
pub fn evaluate_fullest(
    config: &Config,
    id: LimitId<'_>,
    stored: &[Option<State>],
    now: Micros,
    request: Request,
) -> Result<(ShardedDecision, [usize; 2]), LimitError> {
    let shard = config.shard();
    let values: Vec<f64> = stored
        .iter()
        .map(|s| {
            let state = refill(
                &shard,
                s.unwrap_or_else(|| initial_state(&shard, id, now)),
                now,
            );
            tokens(&shard, state, now)
        })
        .collect();
    // The two fullest (ties: the lower shard number).
    let mut best = [0usize, 1usize];
    if values.get(1) > values.first() {
        best = [1, 0];
    }
    for (index, value) in values.iter().enumerate().skip(2) {
        if *value > values[best[0]] {
            best = [index, best[0]];
        } else if *value > values[best[1]] {
            best[1] = index;
        }
    }
    let candidates = best.map(|index| Candidate {
        stored: stored.get(index).copied().flatten(),
        writable: true,
    });
    let mut decision = evaluate_pair(config, id, candidates, now, request)?;
    let total: f64 = values.iter().sum();
    decision.remaining = if decision.ok {
        total - request.count
    } else {
        total
    };
    Ok((decision, best))
}

#[cfg(test)]
mod tests;
