//! `rate_limit_all` on a distributed install (docs/guarantees.md, "Citus",
//! "Transactions across nodes" and "Exactness across nodes"): all or
//! nothing over rows that live on several nodes, inside the caller's
//! distributed transaction.
//!
//! - A request of a global limit with several shards (whose shards spread
//!   over the nodes) is taken as `rate_limit` takes it there
//!   (`consume_spread`): this node's shards first, where the call may wait
//!   for a busy one as on one server, then another node's, never waiting
//!   for a busy shard there. These requests come first, by limit name (a
//!   limit named twice: in request order), so a call waits for such a
//!   shard only while it holds shards of limits named before it; and within
//!   one limit the storage's shard rule (`storage/shards.rs`) keeps calls
//!   from waiting for each other.
//! - The other requests are grouped by their rows' distribution value: one
//!   group's rows are in one shard relation of one node (a limit named
//!   twice, and every shard of a keyed limit, are in one group). The
//!   groups are taken next, in one fixed order, whatever order the
//!   requests come in: by node (`pg_dist_node.groupid`), then shard (hash
//!   range), then distribution value, and inside a group by (name, key,
//!   shard) as on one server (`storage/all_or_nothing.rs`). A call waits
//!   only for a row that comes after every row it holds in that order, so
//!   two calls never wait for each other in a cycle, across nodes either.
//! - A group on this node is decided and written as on one server, in its
//!   shard relation. The groups of another node go there in one call of
//!   `rate_limiter._rate_limit_all_at()`, which Citus delegates by the
//!   distribution value of the first; that node does the same for them.
//! - Each group is all or nothing by itself. When the call has more than
//!   one part (a request of a sharded global limit, a group here, another
//!   node's groups), the parts run in a subtransaction, which is rolled
//!   back unless every request is admitted: Citus rolls back the other
//!   nodes' parts with it (a savepoint on each connection). So a refusal
//!   anywhere consumes nothing anywhere, and holds no row lock afterwards.
//! - Every node decides by its own clock; statistics count on the node
//!   the call was made on.

use super::error::Error;
use super::internal_functions::delegated_entry_points;
use super::internal_functions::CALLING_CONVENTION;
use super::internal_functions::{checks, not_here, wrong_dkey};
use super::metadata::current_distribution;
use super::metadata::distribution_value;
use super::site::here;
use super::two_phase_commit::wrote;
use super::value::DistributionValue;
use crate::call::Call;
use crate::call::{read_requests, Answers, RequestArgument};
use crate::config::required;
use crate::errors::{report, CallError};
use crate::local::all_or_nothing as local;
use crate::result_row;
use crate::subtransaction;
use pgrx::datum::DatumWithOid;
use pgrx::fcinfo::{pg_getarg, pg_getarg_datum};
use pgrx::pg_sys;
use pgrx::prelude::*;
use rate_limiter_algorithm::{Answer, Request};

/// Requests whose rows share one distribution value.
struct Group {
    /// The group (`pg_dist_node.groupid`) of the node holding them.
    node: i32,
    dkey: DistributionValue,
    /// Their positions in the requests, ascending.
    members: Vec<usize>,
}

/// Whether `request` names a global limit with several shards (its
/// shards spread over the nodes: see [`consume_spread_member`]).
fn spreads(request: &RequestArgument) -> bool {
    request.key.is_none() && request.config.shards > 1
}

/// The groups of the requests that do not [`spreads`], in lock order (see
/// the module documentation), and this node's group.
///
/// Errors: 22P02 a key that is not a bigint or uuid (colocated with such
/// a column); 55000 as `Distribution::place`.
fn groups(requests: &[&RequestArgument]) -> Result<(Vec<Group>, i32), CallError> {
    let distribution = current_distribution()?;
    let mut placed = Vec::with_capacity(requests.len());
    for (position, request) in requests.iter().enumerate() {
        if spreads(request) {
            continue;
        }
        let dkey = distribution_value(&request.name, request.key.as_deref(), 0)?;
        let place = distribution.place(&dkey)?;
        // The lock order: node, shard, distribution value.
        placed.push((place.group, place.index, dkey, position));
    }
    placed.sort();
    let mut groups: Vec<Group> = Vec::new();
    for (node, _, dkey, position) in placed {
        match groups.last_mut() {
            Some(last) if last.dkey == dkey => last.members.push(position),
            _ => groups.push(Group {
                node,
                dkey,
                members: vec![position],
            }),
        }
    }
    Ok((groups, distribution.local_group()))
}

/// `rate_limit_all`'s requests on a distributed install: locks, decides
/// and writes where each row lives (see the module documentation); the
/// answers as on one server.
///
/// Errors: those of `rate_limit_all` on one server, and of [`groups`];
/// 55000 when a row moved to another node during the call.
pub(crate) fn consume(requests: &[&RequestArgument], reserve: bool) -> Result<Answers, CallError> {
    decide(requests, reserve, false)
}

/// [`consume`]; `delegated`: the call was delegated to this node, so
/// every row must be here (55000 otherwise).
fn decide(
    requests: &[&RequestArgument],
    reserve: bool,
    delegated: bool,
) -> Result<Answers, CallError> {
    let (groups, local_group) = groups(requests)?;
    // The global limits with several shards, by name (a limit named twice:
    // in request order), taken before the groups.
    let mut spread: Vec<usize> = (0..requests.len())
        .filter(|&at| spreads(requests[at]))
        .collect();
    if delegated && !spread.is_empty() {
        // The calling node takes them itself.
        return Err(internal("a global limit with several shards was passed on"));
    }
    spread.sort_by(|&a, &b| requests[a].name.cmp(&requests[b].name));
    // Each of those is a part; groups here are parts of their own; another
    // node's groups are one.
    let mut parts = spread.len();
    for (at, group) in groups.iter().enumerate() {
        if group.node == local_group || at == 0 || groups[at - 1].node != group.node {
            parts += 1;
        }
    }
    let work = || {
        let mut answers: Vec<Option<Answer>> = vec![None; requests.len()];
        let mut contended = vec![false; requests.len()];
        for &at in &spread {
            let (answer, waited) = consume_spread_member(requests[at], reserve)?;
            answers[at] = Some(answer);
            contended[at] = waited;
        }
        let mut start = 0;
        while start < groups.len() {
            let node = groups[start].node;
            let end = start
                + groups[start..]
                    .iter()
                    .take_while(|group| group.node == node)
                    .count();
            let mut record = |members: &[usize], (got, waited): Answers| {
                for ((&position, answer), waited) in members.iter().zip(got).zip(waited) {
                    answers[position] = Some(answer);
                    contended[position] = waited;
                }
            };
            if node == local_group {
                for group in &groups[start..end] {
                    let members: Vec<&RequestArgument> =
                        group.members.iter().map(|&at| requests[at]).collect();
                    let got = here(&group.dkey, true, |target| {
                        local::consume(&members, reserve, target)
                    })?
                    .ok_or_else(not_here)?;
                    record(&group.members, got);
                }
            } else if delegated {
                return Err(not_here());
            } else {
                let members: Vec<usize> = groups[start..end]
                    .iter()
                    .flat_map(|group| group.members.iter().copied())
                    .collect();
                let got = elsewhere(&groups[start].dkey, &members, requests, reserve)?;
                wrote(None)?;
                record(&members, got);
            }
            start = end;
        }
        let answers = answers
            .into_iter()
            .collect::<Option<Vec<Answer>>>()
            .ok_or_else(|| internal("a request got no answer"))?;
        Ok((answers, contended))
    };
    if parts > 1 {
        subtransaction::kept_if(work, |(answers, _)| answers.iter().all(|answer| answer.ok))
    } else {
        work()
    }
}

/// A request of a global limit with several shards, taken as `rate_limit`
/// takes it on a distributed install (`consume_spread`): the shards on
/// this node first, then another node's, never waiting for a busy shard on
/// another node. Its answer, and whether it met a busy shard.
fn consume_spread_member(
    request: &RequestArgument,
    reserve: bool,
) -> Result<(Answer, bool), CallError> {
    let call = Call {
        name: &request.name,
        key: None,
        request: Request {
            count: request.count,
            reserve,
        },
        throws: false,
        config: request.inline,
        // SAFETY: the element is a rate_limiter.request datum valid for
        // this call; its fourth attribute is the inline config.
        config_argument: request
            .inline
            .and_then(|_| unsafe { inline_config_of(request) }),
        function: None,
    };
    let shards = i16::try_from(request.config.shards).unwrap_or(i16::MAX);
    let (decision, counted) = super::consume::consume_spread(&call, shards)?;
    Ok((
        Answer {
            ok: decision.ok,
            retry_after: decision.retry_after,
            remaining: decision.remaining,
            verdict: counted.verdict,
        },
        counted.contended,
    ))
}

/// The inline config of `request` as the SQL value it came as, and its
/// type (what a call passed on to another node carries).
///
/// # Safety
/// `request.element` is a `rate_limiter.request` datum valid for the call.
unsafe fn inline_config_of(request: &RequestArgument) -> Option<(pg_sys::Datum, pg_sys::Oid)> {
    let header =
        pg_sys::pg_detoast_datum(request.element.cast_mut_ptr()) as pg_sys::HeapTupleHeader;
    let mut is_null = false;
    let datum = pg_sys::GetAttributeByNum(header, 4, &mut is_null);
    (!is_null).then(|| (datum, crate::catalog::objects().config_type))
}

fn internal(what: &str) -> CallError {
    CallError::from(Error::Unusable(
        format!("rate_limit_all() on a distributed install: {what}"),
        "Check that every node runs the same version of rate_limiter.",
    ))
}

/// The statement that runs the requests of one node there: Citus
/// delegates `_rate_limit_all_at` by its first argument, the distribution
/// value of the first request's rows (never NULL).
const ELSEWHERE: &str = "SELECT ok, retry_after, remaining, verdict, contended \
     FROM rate_limiter._rate_limit_all_at($1, $2, $3, $4)";

/// Runs `requests[members]` on the node holding the rows of `dkey` (the
/// first member's), as the calling role, inside this transaction.
fn elsewhere(
    dkey: &DistributionValue,
    members: &[usize],
    requests: &[&RequestArgument],
    reserve: bool,
) -> Result<Answers, CallError> {
    // SAFETY: the elements are rate_limiter.request datums valid for this
    // call; construct_array copies them into a new array.
    let array = unsafe {
        let element_type = crate::catalog::objects().request_type;
        let array_type = pg_sys::get_array_type(element_type);
        let (mut length, mut by_value, mut align) = (0i16, false, 0 as std::ffi::c_char);
        pg_sys::get_typlenbyvalalign(element_type, &mut length, &mut by_value, &mut align);
        let mut elements: Vec<pg_sys::Datum> =
            members.iter().map(|&at| requests[at].element).collect();
        let array = pg_sys::construct_array(
            elements.as_mut_ptr(),
            elements.len() as i32,
            element_type,
            i32::from(length),
            by_value,
            align,
        );
        DatumWithOid::new(pg_sys::Datum::from(array), array_type)
    };
    let arguments = [
        dkey.argument(),
        array,
        DatumWithOid::from(reserve),
        crate::clock::override_to_send(),
    ];
    let rows = Spi::connect_mut(|client| {
        let table = client.update(ELSEWHERE, None, &arguments)?;
        let mut rows = Vec::with_capacity(members.len());
        for row in table {
            rows.push((
                row.get::<bool>(1)?,
                row.get::<i64>(2)?,
                row.get::<f64>(3)?,
                row.get::<i16>(4)?,
                row.get::<bool>(5)?,
            ));
        }
        Ok::<_, pgrx::spi::SpiError>(rows)
    })?;
    if rows.len() != members.len() {
        return Err(internal(
            "rate_limiter._rate_limit_all_at() on another node returned a row count other than its requests'",
        ));
    }
    let mut answers = Vec::with_capacity(rows.len());
    let mut contended = Vec::with_capacity(rows.len());
    for (ok, retry_after, remaining, verdict, waited) in rows {
        let (Some(ok), Some(remaining), Some(verdict)) = (ok, remaining, verdict) else {
            return Err(internal(
                "rate_limiter._rate_limit_all_at() on another node returned an incomplete answer",
            ));
        };
        answers.push(Answer {
            ok,
            retry_after,
            remaining,
            verdict: super::delegation::verdict_of(verdict),
        });
        contended.push(waited.unwrap_or(false));
    }
    Ok((answers, contended))
}

/// The hint of `_rate_limit_all_at`'s refusals.
const HINT: &str = "It is internal: call rate_limiter.rate_limit_all(), which reaches the nodes holding the rows inside your transaction.";

/// The body of `_rate_limit_all_at`: the requests, all on this node, as
/// [`consume`] takes them. `dkey` must be the first request's distribution
/// value (22023).
fn at(
    dkey: Option<DistributionValue>,
    requests: Option<pg_sys::Datum>,
    reserve: Option<bool>,
) -> Result<Answers, CallError> {
    checks("_rate_limit_all_at", HINT, true)?;
    let requests = required(requests, "requests")?;
    let reserve = required(reserve, "reserve")?;
    let mut requests = read_requests(requests)?;
    let first = requests
        .first()
        .map(|request| distribution_value(&request.name, request.key.as_deref(), 0))
        .transpose()?;
    if first.is_none() || first != dkey {
        return Err(wrong_dkey());
    }
    let answers = local::restarting(&mut requests, |requests| decide(requests, reserve, true))?;
    // The automatic blocks of the keys held here (docs/blocks.md): in the
    // caller's subtransaction, undone with it when another part refuses.
    local::strike_used_up(&requests, &answers.0)?;
    Ok(answers)
}

delegated_entry_points!(
    "_rate_limit_all_at",
    rate_limit_all_at,
    Some(3),
    _rate_limit_all_at_wrapper,
    pg_finfo__rate_limit_all_at_wrapper,
    _rate_limit_all_at_bigint_wrapper,
    pg_finfo__rate_limit_all_at_bigint_wrapper,
    _rate_limit_all_at_uuid_wrapper,
    pg_finfo__rate_limit_all_at_uuid_wrapper,
    _rate_limit_all_at_integer_wrapper,
    pg_finfo__rate_limit_all_at_integer_wrapper
);

/// The body of both `_rate_limit_all_at` wrappers, `dkey` their first
/// argument: one row per request (ok, retry_after in microseconds,
/// remaining, verdict as `_rate_limit_at` sends it, contended).
///
/// # Safety
/// `fcinfo` holds `_rate_limit_all_at`'s three arguments.
unsafe fn rate_limit_all_at(
    fcinfo: pg_sys::FunctionCallInfo,
    dkey: Option<DistributionValue>,
) -> pg_sys::Datum {
    let outcome = at(
        dkey,
        pg_getarg_datum(fcinfo, 1),
        pg_getarg::<bool>(fcinfo, 2),
    );
    let (answers, contended) = match outcome {
        Ok(answers) => answers,
        Err(error) => report(error),
    };
    let rows = answers.iter().zip(contended).map(|(answer, waited)| {
        [
            Some(pg_sys::Datum::from(answer.ok)),
            answer.retry_after.and_then(IntoDatum::into_datum),
            answer.remaining.into_datum(),
            Some(pg_sys::Datum::from(super::delegation::verdict_number(
                answer.verdict,
            ))),
            Some(pg_sys::Datum::from(waited)),
        ]
    });
    result_row::put_rows(fcinfo, rows)
}
