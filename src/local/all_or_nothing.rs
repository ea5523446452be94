//! `rate_limit_all` on this node's rows: every row of every limit locked
//! in one fixed order (`storage::consume_all_or_nothing`), the clock read
//! once, the math (`rate_limiter_algorithm::evaluate_all_or_nothing`: the
//! requests in the order given, a limit named twice charged twice), and
//! every new state written or none. On a distributed install the cluster
//! layer runs [`consume`] once per node, inside the shard relation there.

use crate::call::{Answers, RequestArgument};
use crate::clock;
use crate::definitions::{self, Definition};
use crate::errors::CallError;
use crate::settings;
use crate::storage::{self, RowId, Target};
use rate_limiter_algorithm::{
    evaluate_all_or_nothing, uses_up, Answer, Limit, LimitError, LimitId, Member, Request, State,
    Verdict,
};
use std::collections::HashMap;

/// What [`group`] makes of the requests: the limits, the members and
/// each limit's regime.
type Grouped<'a> = (Vec<Limit<'a>>, Vec<Member>, Vec<Option<i64>>);

/// Up to this many requests, a limit is looked for among the others in
/// order rather than in a hash map (cheaper for a composite's few members).
const FEW: usize = 8;

/// The limits the requests name, each once (a limit named twice must have
/// the same config both times), each request as a member of them, and the
/// regime of each limit's rows.
fn group<'a>(requests: &[&'a RequestArgument], reserve: bool) -> Result<Grouped<'a>, CallError> {
    let mut limits: Vec<Limit<'a>> = Vec::new();
    let mut regimes = Vec::new();
    // Where each limit is in `limits` (a few are searched for in order).
    let mut seen: HashMap<LimitId<'a>, usize> = HashMap::new();
    let indexed = requests.len() > FEW;
    let mut members = Vec::with_capacity(requests.len());
    for (index, request) in requests.iter().enumerate() {
        request.config.validate_count(request.count, reserve)?;
        let id = LimitId {
            name: &request.name,
            key: request.key.as_deref(),
        };
        let found = if indexed {
            seen.get(&id).copied()
        } else {
            limits.iter().position(|limit| limit.id == id)
        };
        let limit = match found {
            Some(limit)
                if limits[limit].config != request.config
                    || limits[limit].enforce != request.enforce
                    || regimes[limit] != request.regime =>
            {
                return Err(CallError::Limit(LimitError::invalid(
                    "requests",
                    format!(
                        "requests[{}] names the same limit as an earlier request with a different config",
                        index + 1
                    ),
                )));
            }
            Some(limit) => limit,
            None => {
                limits.push(Limit {
                    id,
                    config: request.config,
                    stored: vec![None; request.config.shards.max(1) as usize],
                    enforce: request.enforce,
                    blocked_until: request.blocked_until,
                });
                regimes.push(request.regime);
                if indexed {
                    seen.insert(id, limits.len() - 1);
                }
                limits.len() - 1
            }
        };
        members.push(Member {
            limit,
            request: Request {
                count: request.count,
                reserve,
            },
        });
    }
    Ok((limits, members, regimes))
}

/// Locks, decides and writes (see the module documentation), in the
/// relation of `target` (the state table, or on a cluster the stand-in
/// holding every request's rows); the answers in
/// request order, and for each request whether it was *contended*: its
/// limit is sharded and the call waited for another transaction to get
/// one of its shards (`rate_limit_all` holds every shard it may use, so it
/// waits for busy ones rather than passing over them).
pub fn consume(
    requests: &[&RequestArgument],
    reserve: bool,
    target: Target,
) -> Result<Answers, CallError> {
    let (mut limits, members, regimes) = group(requests, reserve)?;
    let mut rows: Vec<RowId<'_>> = limits
        .iter()
        .zip(&regimes)
        .flat_map(|(limit, regime)| {
            (0..limit.stored.len()).map(move |shard| RowId {
                name: limit.id.name,
                key: limit.id.key,
                shard: shard as i16,
                regime: *regime,
            })
        })
        .collect();
    storage::sort_rows(&mut rows);
    // Where each (limit, shard) is in the sorted rows.
    let position = |name: &[u8], key: Option<&[u8]>, shard: usize| {
        rows.binary_search_by(|row| (row.name, row.key, row.shard).cmp(&(name, key, shard as i16)))
            .ok()
    };
    let positions: Vec<Vec<Option<usize>>> = limits
        .iter()
        .map(|limit| {
            (0..limit.stored.len())
                .map(|shard| position(limit.id.name, limit.id.key, shard))
                .collect()
        })
        .collect();
    // Missing shards each limit may consume from (see
    // storage::consume_all_or_nothing): two per request naming it.
    let mut missing_held = vec![0; limits.len()];
    for member in &members {
        let held = &mut missing_held[member.limit];
        *held = (*held + 2).min(limits[member.limit].stored.len());
    }
    // The limit of each row (by its place in the sorted rows).
    let mut limit_of = vec![0; rows.len()];
    for (limit, positions) in positions.iter().enumerate() {
        for position in positions.iter().flatten() {
            limit_of[*position] = limit;
        }
    }
    let missing_held = |row: RowId<'_>| {
        position(row.name, row.key, row.shard as usize)
            .map_or(0, |position| missing_held[limit_of[position]])
    };
    storage::consume_all_or_nothing(
        target,
        &rows,
        missing_held,
        settings::lock_free_refusals(),
        |stored: &[Option<State>], waited: &[bool]| {
            let contended: Vec<bool> = members
                .iter()
                .map(|member| {
                    limits[member.limit].stored.len() > 1
                        && positions[member.limit]
                            .iter()
                            .flatten()
                            .any(|&position| waited.get(position).copied().unwrap_or(false))
                })
                .collect();
            // Every definition used is still the one in force (a define may
            // have committed while the call waited for a row).
            for request in requests {
                let used = Definition {
                    config: request.config,
                    enforce: request.enforce,
                    regime: request.regime,
                    blocked_until: request.blocked_until,
                };
                definitions::recheck(
                    &request.name,
                    request.key.as_deref(),
                    request.inline,
                    &used,
                    true,
                )?;
            }
            for (limit, positions) in limits.iter_mut().zip(&positions) {
                for (slot, position) in limit.stored.iter_mut().zip(positions) {
                    *slot = position.and_then(|p| stored.get(p).copied().flatten());
                }
            }
            let outcome = evaluate_all_or_nothing(&limits, &members, clock::now())?;
            let writes = outcome.new_states.map(|new_states| {
                let mut writes = vec![None; stored.len()];
                for (states, positions) in new_states.iter().zip(&positions) {
                    for (state, position) in states.iter().zip(positions) {
                        if let (Some(state), Some(position)) = (state, position) {
                            writes[*position] = Some(*state);
                        }
                    }
                }
                writes
            });
            Ok(((outcome.answers, contended), writes))
        },
    )
}

/// Runs `consume` on the requests, and again, every definition resolved
/// again, when a definition changed under it
/// (`definitions::restarting`).
pub fn restarting(
    requests: &mut [RequestArgument],
    consume: impl Fn(&[&RequestArgument]) -> Result<Answers, CallError>,
) -> Result<Answers, CallError> {
    let mut first = true;
    definitions::restarting(|| {
        // A restart resolves every definition again.
        if !std::mem::take(&mut first) {
            for request in requests.iter_mut() {
                let definition =
                    definitions::resolve(&request.name, request.key.as_deref(), request.inline)?;
                request.config = definition.config;
                request.enforce = definition.enforce;
                request.regime = definition.regime;
                request.blocked_until = definition.blocked_until;
            }
        }
        let requests: Vec<&RequestArgument> = requests.iter().collect();
        consume(&requests)
    })
}

/// After a `rate_limit_all` that was admitted as a whole: each limit with
/// automatic blocks (docs/blocks.md) that its last request used up starts
/// its block, in the caller's transaction (`crate::blocks::strike`).
pub fn strike_used_up(requests: &[RequestArgument], answers: &[Answer]) -> Result<(), CallError> {
    if answers.iter().any(|answer| !answer.ok) {
        return Ok(());
    }
    let now = clock::now();
    for (index, (request, answer)) in requests.iter().zip(answers).enumerate() {
        let Some(policy) = &request.config.block else {
            continue;
        };
        let named_later = requests[index + 1..]
            .iter()
            .any(|later| later.name == request.name && later.key == request.key);
        // (A cluster's other node struck the blocks it holds itself.)
        if !named_later
            && answer.verdict == Verdict::Admitted
            && uses_up(answer.remaining)
            && crate::blocks::held_here(&request.name, request.key.as_deref())?
        {
            let known = definitions::blocks_known(&request.name)?;
            crate::blocks::strike(&request.name, request.key.as_deref(), policy, now, known)?;
        }
    }
    Ok(())
}
