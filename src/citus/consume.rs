//! `rate_limit` and `rate_check` of rows on other nodes
//! (`_rate_limit_at`), and of a global limit whose shards spread over the
//! nodes.
use super::delegation::{row_arguments, run_elsewhere, verdict_of, BLOCKED};
use super::error::Error;
use super::single_statement;
use super::site::spread;
use super::two_phase_commit::wrote;
use super::value::DistributionValue;
use crate::call::Call;
use crate::errors::CallError;
use crate::local;
use crate::stats::Counted;
use pgrx::datum::DatumWithOid;
use pgrx::prelude::*;
use rate_limiter_algorithm::{Decision, Verdict};

/// Runs `call` on the node holding the row of `dkey`: consumes
/// (`consume`) or checks there, inside this transaction (Citus's
/// distributed transaction: rollback undoes it; a transaction that wrote
/// on several nodes commits with two-phase commit). When `alone` (what
/// [`alone`] said of the call: it is its transaction's only work), as a
/// statement of its own there, in one round trip (see
/// `single_statement`). The decision as answered, and for a consuming
/// call how it is counted (here: statistics count on the node where the
/// function was called).
pub fn elsewhere(
    call: &Call<'_>,
    dkey: &DistributionValue,
    consume: bool,
    alone: bool,
) -> Result<(Decision, Option<Counted>), CallError> {
    let config = match call.config_argument {
        // SAFETY: the argument's datum, of its declared type.
        Some((datum, type_id)) => unsafe { DatumWithOid::new(datum, type_id) },
        None => DatumWithOid::null_oid(crate::catalog::objects().config_type),
    };
    let [dkey, name, key] = row_arguments(dkey, call.name, call.key);
    let arguments = [
        dkey,
        name,
        key,
        DatumWithOid::from(call.request.count),
        DatumWithOid::from(call.request.reserve),
        config,
        DatumWithOid::from(consume),
        crate::clock::override_to_send(),
        DatumWithOid::from(alone),
    ];
    // As the calling role: Citus keys its connections by role, so the
    // call reuses the connection this transaction's own statements on the
    // tenant's colocated rows use (one node, no 2PC), and the node holding
    // the row checks that role's privileges as this one would.
    // Read-only SPI (no transaction id here): the write is the other
    // node's, and a transaction id here would only add a commit record to
    // this node's WAL.
    let run = || Spi::connect(|_| run_elsewhere(&arguments));
    let row = if alone {
        single_statement::without_transaction_block(run)
    } else {
        run()
    }?;
    let (Some(ok), retry_after, Some(remaining), verdict, reserved, near_limit, contended) = row
    else {
        return Err(CallError::from(Error::Unusable(
            "rate_limiter._rate_limit_at() on another node returned no answer".into(),
            "Check that every node runs the same version of rate_limiter.",
        )));
    };
    let decision = Decision {
        ok,
        retry_after,
        remaining,
        new_state: None,
    };
    // Refused by the key's block there: its reason is read there if the
    // refusal's DETAIL needs it (docs/blocks.md, "Citus").
    let blocked = verdict == Some(BLOCKED);
    if blocked {
        crate::blocks::note_refusal_elsewhere(call.name, call.key);
    }
    let counted = verdict.filter(|_| consume).map(|verdict| Counted {
        verdict: verdict_of(verdict),
        count: call.request.count,
        reserved: reserved.unwrap_or(false),
        near_limit: near_limit.unwrap_or(false),
        contended: contended.unwrap_or(false),
        blocked,
    });
    Ok((decision, counted))
}

/// Whether `call` (of `rate_limit` or `rate_check` called by SQL) is its
/// transaction's only work, so that it may reach another node as a
/// statement of its own (see `single_statement::alone`).
pub fn alone(call: &Call<'_>) -> bool {
    call.function.is_some_and(single_statement::alone)
}

/// [`elsewhere`] for a consuming call: the decision and how it counts.
pub fn consume_elsewhere(
    call: &Call<'_>,
    dkey: &DistributionValue,
    alone: bool,
) -> Result<(Decision, Counted), CallError> {
    let (decision, counted) = elsewhere(call, dkey, true, alone)?;
    wrote(None)?;
    counted.map(|counted| (decision, counted)).ok_or_else(|| {
        CallError::from(Error::Unusable(
            "rate_limiter._rate_limit_at() on another node did not say how its decision counts"
                .into(),
            "Check that every node runs the same version of rate_limiter.",
        ))
    })
}

/// `rate_limit` of a global limit with `shards` (>= 2) shards on a
/// distributed install (docs/guarantees.md, "Citus", "Exactness across
/// nodes"): the shards on this node first (as on one server, over those
/// shards only); only when they cannot serve the call, the other nodes',
/// one node after the other in random order, through `_rate_limit_at` with
/// the distribution value of one of its shards, until one admits. There the
/// call uses only that node's shards and never waits for one another
/// transaction holds (it passes over it, or answers as refused), so no two
/// calls wait for each other across nodes. Every node consumes within its
/// own shards' bounds, so the limit never admits more than the unsharded
/// bound. A refusal answers with the soonest `retry_after` of the nodes
/// asked.
///
/// Errors: 55000 as [`super::site`]; those of `rate_limit`.
pub fn consume_spread(call: &Call<'_>, shards: i16) -> Result<(Decision, Counted), CallError> {
    let spread = spread(call.name, shards, true)?;
    let mut best: Option<(Decision, Counted)> = None;
    if let Some((_, _, dkey)) = spread.local.first() {
        let answer = local::consume::consume(call, spread.placed(shards, None))?;
        wrote(Some(dkey))?;
        if answer.1.verdict == Verdict::Admitted {
            return Ok(answer);
        }
        best = Some(answer);
    }
    for other in &spread.others {
        let answer = consume_elsewhere(call, &other.dkey, false)?;
        if answer.1.verdict == Verdict::Admitted {
            return Ok(answer);
        }
        best = Some(match best {
            Some(earlier) if sooner(&earlier.0, &answer.0) => earlier,
            _ => answer,
        });
    }
    best.ok_or_else(|| {
        CallError::from(Error::Unusable(
            "no shard of this limit is placed on any node".into(),
            "Check pg_dist_shard and pg_dist_placement for rate_limiter.rate_limits.",
        ))
    })
}

/// Whether refusal `a` says to retry no later than `b` (no `retry_after`:
/// never).
pub(super) fn sooner(a: &Decision, b: &Decision) -> bool {
    match (a.retry_after, b.retry_after) {
        (Some(a), Some(b)) => a <= b,
        (Some(_), None) => true,
        (None, Some(_)) => false,
        (None, None) => true,
    }
}
