//! Calls of a composite limit's name (docs/composites.md): `rate_limit`,
//! `rate_check`, `rate_wait`, `rate_credit`, `status` and `http_headers`
//! of a name made with `define_all()` act on its members with the call's
//! key and count. A consuming call is one `rate_limit_all` of the members
//! (`crate::placement::consume_all`: all or nothing, every row locked in
//! one fixed order, on a cluster where the rows live); its answer is
//! combined by `rate_limiter_algorithm::composite::combine`.
//!
//! A call reaches this file only when its name has no definition and no
//! inline config was given ([`of`], [`instead`]): a call of a defined
//! limit looks nothing up here.

use super::rate_limit_all::counted;
use crate::call::{Call, RequestArgument};
use crate::composites::{self, Composite};
use crate::definitions::{self, Definition};
use crate::errors::{CallError, Refusal};
use crate::placement;
use crate::stats::{self, Counted};
use pgrx::pg_sys;
use pgrx::prelude::*;
use rate_limiter_algorithm::composite::combine;
use rate_limiter_algorithm::{Answer, Decision, Verdict};
use std::rc::Rc;

/// The composite a call of `call.name` that failed with `error` is a call
/// of: when the error is the name's 42704, no inline config was given and
/// the name is a composite.
pub fn instead(call: &Call<'_>, error: &CallError) -> Result<Option<Rc<Composite>>, CallError> {
    if call.config.is_some() {
        return Ok(None);
    }
    composites::instead_of(error, call.name)
}

/// The composite a call of `call.name` is a call of, found before the
/// call is tried as a limit's: when no inline config was given, the name
/// is known to have no definition (`definitions::known_undefined`: the
/// call as a limit's would fail with 42704 and be a call of the
/// composite, [`instead`]) and it is a composite. `None` otherwise, and
/// the call is tried as a limit's.
pub fn known(call: &Call<'_>) -> Result<Option<Rc<Composite>>, CallError> {
    if call.config.is_some() || !definitions::known_undefined(call.name) {
        return Ok(None);
    }
    composites::find(call.name)
}

/// The composite `name` names when it has no definition (`inline`: the
/// call's inline config; with one, no name is a composite).
pub fn of(name: &[u8], inline: bool) -> Result<Option<Rc<Composite>>, CallError> {
    if inline || definitions::lookup(name)?.is_some() {
        return Ok(None);
    }
    composites::find(name)
}

/// What a consuming call of a composite answers: the decision, how each
/// member's answer counts in `rate_limiter.stats` (by member name), and,
/// when it is refused, the refusal naming the member that refused
/// longest, ready to raise.
pub struct Answered {
    pub decision: Decision,
    pub counts: Vec<(Vec<u8>, Counted)>,
    pub refusal: Option<Refusal>,
}

impl Answered {
    /// Counts the call's answers in `rate_limiter.stats`.
    pub fn count(&self) {
        for (name, counted) in &self.counts {
            stats::count(name, *counted);
        }
    }
}

/// A request of `member` for `call`'s key and count, its definition
/// resolved (42704 when the member is gone).
fn request(member: &[u8], call: &Call<'_>) -> Result<RequestArgument, CallError> {
    let key = call.key;
    let definition = definitions::resolve(member, key, None)?;
    Ok(RequestArgument {
        name: member.to_vec(),
        key: key.map(<[u8]>::to_vec),
        count: call.request.count,
        inline: None,
        config: definition.config,
        enforce: definition.enforce,
        regime: definition.regime,
        blocked_until: definition.blocked_until,
        // SAFETY: builds a datum of the request type in the call's memory.
        element: unsafe { element(member, key, call.request.count) },
    })
}

/// The request as a `rate_limiter.request` datum, which a cluster passes
/// on to another node; on one server nothing reads it (a zero datum).
///
/// # Safety
/// Inside a call, with the extension's objects looked up.
unsafe fn element(name: &[u8], key: Option<&[u8]>, count: f64) -> pg_sys::Datum {
    let objects = crate::catalog::objects();
    if !objects.elsewhere {
        return pg_sys::Datum::from(0);
    }
    let descriptor = pg_sys::lookup_rowtype_tupdesc(objects.request_type, -1);
    let mut values = [
        name.into_datum().unwrap_or(pg_sys::Datum::from(0)),
        key.and_then(IntoDatum::into_datum)
            .unwrap_or(pg_sys::Datum::from(0)),
        count.into_datum().unwrap_or(pg_sys::Datum::from(0)),
        pg_sys::Datum::from(0),
    ];
    let mut nulls = [false, key.is_none(), false, true];
    let tuple = pg_sys::heap_form_tuple(descriptor, values.as_mut_ptr(), nulls.as_mut_ptr());
    let datum = pg_sys::heap_copy_tuple_as_datum(tuple, descriptor);
    pg_sys::DecrTupleDescRefCount(descriptor);
    datum
}

/// `rate_limit` (and a try of `rate_wait`) of `composite` for `call`'s
/// key and count: `rate_limit_all` of its members.
///
/// Errors: as `rate_limit_all` (42704 a member undefined since, 22023 a
/// count a member could never admit, 54000 more members than
/// `rate_limiter.max_requests`, 25006 read-only).
pub fn consume(call: &Call<'_>, composite: &Composite) -> Result<Answered, CallError> {
    let most = crate::settings::max_requests();
    if composite.members.len() > most {
        return Err(CallError::TooMuchWork(format!(
            "a call of a composite is a rate_limit_all() of its {} members, more than rate_limiter.max_requests ({most})",
            composite.members.len()
        )));
    }
    let read = || {
        composite
            .members
            .iter()
            .map(|member| request(member, call))
            .collect::<Result<Vec<_>, _>>()
    };
    let (requests, (answers, contended)) =
        placement::consume_all(c"rate_limit()", read, call.request.reserve)?;
    let combined = combine(&answers, composite.enforce);
    // A call refused as a whole consumed nothing: only its refusals count
    // (as rate_limit_all's).
    let refused = answers.iter().any(|answer| !answer.ok);
    let counts = requests
        .iter()
        .zip(&answers)
        .zip(&contended)
        .zip(&combined.verdicts)
        .filter(|(((_, answer), _), _)| !(refused && answer.verdict == Verdict::Admitted))
        .map(|(((request, answer), contended), verdict)| {
            let answer = Answer {
                verdict: *verdict,
                ..*answer
            };
            (request.name.clone(), counted(request, &answer, *contended))
        })
        .collect();
    let refusal = match combined.longest {
        Some(at) if call.throws && !combined.answer.ok => {
            let member = &requests[at];
            let blocked = member.blocked_until.map(|_| {
                crate::blocks::find_anywhere(&member.name, call.key)
                    .ok()
                    .flatten()
                    .and_then(|block| block.reason)
            });
            Some(Refusal::new(
                &member.name,
                call.key,
                combined.answer.retry_after.unwrap_or(0),
                combined.answer.remaining,
                blocked,
            ))
        }
        _ => None,
    };
    Ok(Answered {
        decision: decision(&combined.answer),
        counts,
        refusal,
    })
}

fn decision(answer: &Answer) -> Decision {
    Decision {
        ok: answer.ok,
        retry_after: answer.retry_after,
        remaining: answer.remaining,
        new_state: None,
    }
}

/// `call` for `member` instead of the composite's name.
fn for_member<'a>(call: &Call<'a>, member: &'a [u8]) -> Call<'a> {
    Call {
        name: member,
        key: call.key,
        request: call.request,
        throws: false,
        config: None,
        config_argument: None,
        function: call.function,
    }
}

/// `rate_check` of `composite`: each member's answer without a lock or a
/// write, combined as a consuming call's would be; and the member that
/// refused longest.
pub fn check(
    call: &Call<'_>,
    composite: &Composite,
) -> Result<(Decision, Option<Vec<u8>>), CallError> {
    let mut answers = Vec::with_capacity(composite.members.len());
    for member in &composite.members {
        let decision = placement::check(&for_member(call, member))?;
        answers.push(Answer {
            ok: decision.ok,
            retry_after: decision.retry_after,
            remaining: decision.remaining,
            verdict: if decision.ok {
                Verdict::Admitted
            } else {
                Verdict::Refused
            },
        });
    }
    let combined = combine(&answers, composite.enforce);
    let longest = combined.longest.map(|at| composite.members[at].clone());
    Ok((decision(&combined.answer), longest))
}

/// `rate_check` of `composite` as the SQL function answers it: the
/// refusal, ready to raise, when `call.throws`.
pub fn check_answered(call: &Call<'_>, composite: &Composite) -> Result<Answered, CallError> {
    let (decision, longest) = check(call, composite)?;
    let refusal = match longest {
        Some(member) if call.throws && !decision.ok => {
            let blocked = crate::blocks::refusal_reason(&member, call.key);
            Some(Refusal::new(
                &member,
                call.key,
                decision.retry_after.unwrap_or(0),
                decision.remaining,
                blocked,
            ))
        }
        _ => None,
    };
    Ok(Answered {
        decision,
        counts: Vec::new(),
        refusal,
    })
}

/// `rate_credit` of `composite`: `count` tokens back to every member; the
/// least of their values afterwards.
pub fn credit(key: Option<&[u8]>, count: f64, composite: &Composite) -> Result<f64, CallError> {
    let mut least = f64::INFINITY;
    for member in &composite.members {
        let value = placement::credit(member, key, count, None, None)?;
        stats::credited(member, count);
        least = least.min(value);
    }
    Ok(least)
}

/// Every member of `composite` with its definition for `key`, as
/// `status` and `http_headers` read them (42704 a member undefined).
pub fn members_shown(
    composite: &Composite,
    key: Option<&[u8]>,
) -> Result<Vec<(Vec<u8>, Definition)>, CallError> {
    composite
        .members
        .iter()
        .map(|member| {
            Ok((
                member.clone(),
                definitions::resolve_shown(member, key, None)?,
            ))
        })
        .collect()
}
